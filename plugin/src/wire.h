/*
 * wire.h: the coordinator protocol (TCP, little-endian, fixed 32-byte header).
 *
 *   client -> coordinator  HELLO   payload nb_hello + token bytes + why bytes (a rank that
 *                                  cannot learn says why: the coordinator refuses the
 *                                  communicator at once, naming the rank and the reason)
 *   coordinator -> client  START   all ranks joined with one fingerprint
 *                          REJECT  payload: reason text (the plugin goes AUTO)
 *   client -> coordinator  SUBMIT  round r (its m pulls, from 0); a = checksum of the
 *                                  round's (context, arm) sequence; payload m floats
 *   coordinator -> client  RESULT  round = r; payload m floats (max over ranks, <0 missing);
 *                                  rounds complete in order, up to lag + 1 merging at once
 *   client -> coordinator  FREEZE  this rank timed out (freeze mode): stop the communicator
 *                          FAIL    the same in fail mode
 *   coordinator -> client  FREEZE  verdict, round = L, the last completed round: stop after
 *                                  round L (after a rank's BYE, or asked by a freeze-mode rank)
 *                          FAIL    verdict, round = L: as FREEZE, but fail mode fails (a rank
 *                                  crashed, timed out in fail mode, or logged other pulls)
 *                          REJECT  also at once to every rank of a communicator one of whose
 *                                  ranks was refused (bad token, other settings, cannot learn)
 *   client -> coordinator  BYE     clean end (finalize)
 */
#ifndef NCCLBOT_WIRE_H
#define NCCLBOT_WIRE_H

#include <stdint.h>

#define NB_WIRE_MAGIC 0x544f424eu /* "NBOT" */
#define NB_WIRE_VERSION 3

enum { NB_MSG_HELLO = 1, NB_MSG_START, NB_MSG_REJECT, NB_MSG_SUBMIT, NB_MSG_RESULT,
       NB_MSG_FREEZE, NB_MSG_BYE, NB_MSG_FAIL };

typedef struct {
  uint32_t magic;
  uint32_t type;
  int64_t round;
  uint64_t a;
  uint32_t len; /* payload bytes */
  uint32_t version;
} nb_wire_hdr;

typedef struct {
  uint64_t comm_id;
  uint64_t fingerprint; /* config + loaded state; every rank must agree */
  uint32_t nranks;
  uint32_t rank;
  uint32_t m;
  uint32_t can_learn; /* 0: this rank cannot learn (e.g. no profiler); all go AUTO */
  uint32_t token_len;
  uint32_t lag;     /* NCCLBOT_SYNC_LAG: rounds that may be in flight at once is lag + 1 */
  uint32_t why_len; /* can_learn 0: why, after the token (the coordinator tells every rank) */
  uint32_t pad;
} nb_hello;

_Static_assert(sizeof(nb_wire_hdr) == 32, "header is 32 bytes");
_Static_assert(sizeof(nb_hello) == 48, "hello is 48 bytes");

#define NB_WIRE_MAX_PAYLOAD (4096 * 4 + 512)

#endif
