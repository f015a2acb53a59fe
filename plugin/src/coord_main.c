/*
 * coord_main.c: the ncclbot-coordinator executable.
 *   NCCLBOT_SYNC_TOKEN=secret ncclbot-coordinator --listen HOST:PORT
 * The token comes from the environment (never the command line, which other
 * users can read). Prints "listening on HOST:PORT" once bound (PORT 0 = any).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"

static volatile int g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

int main(int argc, char **argv) {
  const char *listen_at = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc)
      listen_at = argv[++i];
    else {
      fprintf(stderr, "usage: NCCLBOT_SYNC_TOKEN=... %s --listen HOST:PORT\n", argv[0]);
      return 2;
    }
  }
  const char *token = getenv("NCCLBOT_SYNC_TOKEN");
  if (!listen_at || !token || !token[0]) {
    fprintf(stderr, "error: need --listen HOST:PORT and NCCLBOT_SYNC_TOKEN in the environment\n");
    return 2;
  }
  char host[256];
  const char *colon = strrchr(listen_at, ':');
  if (!colon || (size_t)(colon - listen_at) >= sizeof host) {
    fprintf(stderr, "error: --listen expects HOST:PORT, got %s\n", listen_at);
    return 2;
  }
  memcpy(host, listen_at, (size_t)(colon - listen_at));
  host[colon - listen_at] = '\0';
  int port = 0, fd = nb_coord_listen(host, atoi(colon + 1), &port);
  if (fd < 0) {
    fprintf(stderr, "error: cannot listen on %s\n", listen_at);
    return 1;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  signal(SIGPIPE, SIG_IGN);
  printf("listening on %s:%d\n", host, port);
  fflush(stdout);
  return nb_coord_serve(fd, token, &g_stop);
}
