/*
 * coordinator.h: the job-level synchronisation coordinator (wire.h protocol).
 * One small single-threaded TCP server per job; each communicator is a session
 * of nranks connections. It merges each round (maximum latency per pull,
 * missing if any rank misses it), gives every rank the same verdict when the
 * communicator must stop (FREEZE or FAIL after its last completed round: a rank
 * timed out, left or crashed), refuses a whole communicator at once when one of
 * its ranks is refused, and never decides an arm.
 */
#ifndef NCCLBOT_COORDINATOR_H
#define NCCLBOT_COORDINATOR_H

/* Bind host:port (port 0 = ephemeral); returns the listening fd and the bound port. */
int nb_coord_listen(const char *host, int port, int *bound_port);
/* Serve until *stop becomes non-zero. token: the shared secret clients must present. */
int nb_coord_serve(int listen_fd, const char *token, volatile int *stop);

#endif
