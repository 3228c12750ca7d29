/* SPDX-License-Identifier: MIT */
/*
 * A failed rendezvous (rendezvous.c): the init failure record in the segment header,
 * the one-page stub that carries a failure where there is no segment, and who removes
 * the name.  Internal to the shm transport (segment.c).
 */
#ifndef ARCOMM_SHM_RENDEZVOUS_H
#define ARCOMM_SHM_RENDEZVOUS_H

#include "shm.h"
#include "topo.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Backs off from 20 us to 1 ms between polls. */
static inline void shm_nap(unsigned *us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)*us * 1000};
    nanosleep(&ts, NULL);
    if (*us < 1000)
        *us *= 2;
}

static inline bool shm_past(uint64_t deadline)
{
    return rt_passed(deadline, rt_now_ns());
}

/* Records the failure (status, msg of rank) in h; true for the first writer, the
 * reporter, who must then remove the name (shm_init_leave). */
bool shm_init_failure_record(struct shm_header *h, int rank, comm_status_t status, const char *msg);

/* When h holds a failure another rank recorded: sets c's error (COMM_ERR_MISMATCH for a
 * mismatch, else COMM_ERR_PEER, with the rank's message) and returns it; else COMM_OK. */
comm_status_t shm_init_failure_learn(struct comm *c, struct shm_header *h);

/* This rank (-1: under no number) leaves a failed rendezvous; see rendezvous.c. */
void shm_init_leave(struct shm_header *h, const struct shm_rank *ranks, const char *name, int rank,
                    bool reporter, uint64_t linger);

/* The reporter's deadline for the others to learn: soon, and never past deadline. */
uint64_t shm_init_linger(uint64_t deadline);

/* Maps the header and rank records of an open segment file (less if the file is
 * smaller); NULL on failure.  *len: the bytes mapped. */
struct shm_header *shm_front_map(int fd, size_t file_bytes, size_t *len);
/* The rank records in a front mapping, when it holds them all (never for a stub). */
const struct shm_rank *shm_front_ranks(const struct shm_header *h, size_t len);

/* Waits until deadline for the segment's magic; false on timeout. */
bool shm_wait_magic(struct shm_header *h, uint64_t deadline);

/* Makes fd (just created by this rank) a one-page stub carrying the failure. */
bool shm_stub_write(int fd, int nranks, int rank, comm_status_t status, const char *msg);
/* The stub's reporter waits for the others to learn, then removes the name. */
void shm_stub_linger(int fd, const char *name, int rank, uint64_t linger);

#endif /* ARCOMM_SHM_RENDEZVOUS_H */
