/* log.c: the process-wide NCCL logger pointer (see log.h). */
#include "log.h"

static ncclDebugLogger_t g_logger;

void nb_log_set(ncclDebugLogger_t fn) {
  if (fn) __atomic_store_n(&g_logger, fn, __ATOMIC_RELEASE);
}

ncclDebugLogger_t nb_log_get(void) { return __atomic_load_n(&g_logger, __ATOMIC_ACQUIRE); }
