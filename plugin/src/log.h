/*
 * log.h: logging through the logger NCCL hands to init.
 *
 * Thread safety: the logger pointer has one writer, the registry (nb_comm_acquire,
 * under the registry lock, at every init); readers load it atomically without a lock.
 * Nothing on the hot path logs above TRACE.
 */
#ifndef NCCLBOT_LOG_H
#define NCCLBOT_LOG_H

#include "nccl_abi.h"

void nb_log_set(ncclDebugLogger_t fn);
ncclDebugLogger_t nb_log_get(void);

/* A symbol of the shared library that holds NCCL's logger (NCCL itself, or a host standing
 * in for it), found without knowing its file name and without loading anything
 * (RTLD_NOLOAD); NULL when the logger is in no shared library or the library lacks it.
 * Init only: it may take the dynamic loader's lock. */
void *nb_logger_symbol(ncclDebugLogger_t logfn, const char *name);

#define NB_LOG(level, flags, ...)                                                  \
  do {                                                                             \
    ncclDebugLogger_t nb_l_ = nb_log_get();                                        \
    if (nb_l_) nb_l_((level), (flags), __FILE__, __LINE__, "NCCLBOT: " __VA_ARGS__); \
  } while (0)

#define NB_WARN(...) NB_LOG(NCCL_LOG_WARN, NCCL_TUNING | NCCL_ENV, __VA_ARGS__)
#define NB_INFO(...) NB_LOG(NCCL_LOG_INFO, NCCL_TUNING, __VA_ARGS__)

/* Private result codes: internal calls return these; entry points map to success. */
typedef enum { NB_OK = 0, NB_ERR_CONFIG, NB_ERR_SYS, NB_ERR_SYNC, NB_ERR_MEM, NB_ERR_FORMAT } nb_result;

#define NB_CHECK(call)                                                           \
  do {                                                                           \
    nb_result nb_r_ = (call);                                                    \
    if (nb_r_ != NB_OK) {                                                        \
      NB_LOG(NCCL_LOG_INFO, NCCL_TUNING, "%s failed (code %d)", #call, (int)nb_r_); \
      return nb_r_;                                                              \
    }                                                                            \
  } while (0)

#endif
