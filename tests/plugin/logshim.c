/*
 * logshim.c: a stand-in for NCCL's ncclDebugLog for the ctypes tests. It formats
 * the variadic message (which a ctypes callback cannot) and keeps the lines in
 * a buffer the test reads back with nb_test_log_take(). Like NCCL's library it also exports
 * ncclGetVersion beside the logger (the plugin reads it there, plugin/src/table.c); the
 * version is set by nb_test_set_nccl_version, and 0 (the default) makes it fail, like a
 * host whose version cannot be read.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char g_buf[1 << 20];
static size_t g_len;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

void nb_test_logger(int level, unsigned long flags, const char *file, int line, const char *fmt,
                    ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_mu);
  int n = snprintf(g_buf + g_len, sizeof g_buf - g_len, "%d %lx %s:%d %s\n", level, flags, file,
                   line, msg);
  if (n > 0 && g_len + (size_t)n < sizeof g_buf) g_len += (size_t)n;
  pthread_mutex_unlock(&g_mu);
}

size_t nb_test_log_take(char *out, size_t cap) {
  pthread_mutex_lock(&g_mu);
  size_t n = g_len < cap - 1 ? g_len : cap - 1;
  memcpy(out, g_buf, n);
  out[n] = '\0';
  g_len = 0;
  pthread_mutex_unlock(&g_mu);
  return n;
}

static int g_nccl_version;

void nb_test_set_nccl_version(int version) { __atomic_store_n(&g_nccl_version, version, __ATOMIC_RELAXED); }

int ncclGetVersion(int *version) {
  int v = __atomic_load_n(&g_nccl_version, __ATOMIC_RELAXED);
  if (!version || v <= 0) return 5; /* ncclInvalidUsage */
  *version = v;
  return 0;
}
