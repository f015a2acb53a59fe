/* log.c: the process-wide NCCL logger pointer, and what lives beside it (see log.h). */
#define _GNU_SOURCE
#include "log.h"

#include <dlfcn.h>

static ncclDebugLogger_t g_logger;

void nb_log_set(ncclDebugLogger_t fn) {
  if (fn) __atomic_store_n(&g_logger, fn, __ATOMIC_RELEASE);
}

ncclDebugLogger_t nb_log_get(void) { return __atomic_load_n(&g_logger, __ATOMIC_ACQUIRE); }

void *nb_logger_symbol(ncclDebugLogger_t logfn, const char *name) {
  Dl_info info;
  void *addr = *(void **)&logfn; /* a function address as data (POSIX dladdr) */
  if (!logfn || !dladdr(addr, &info) || !info.dli_fname) return NULL;
  void *lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return NULL;
  void *sym = dlsym(lib, name);
  dlclose(lib); /* NOLOAD took a reference to a library that stays loaded with its logger */
  return sym;
}
