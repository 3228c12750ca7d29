/* SPDX-License-Identifier: MIT */
/*
 * Multi-rank test harness: run one body on N thread ranks (one process) or N process
 * ranks (forked children), each with its own communicator, and collect per-rank error
 * counts and output bytes so the parent can compare every rank bit for bit.
 */
#ifndef ARCOMM_TEST_HARNESS_H
#define ARCOMM_TEST_HARNESS_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define H_MAX_RANKS 16
#define H_OUT_BYTES (8u << 20) /* per rank: room for one output to compare */

struct h_rank {
    int rank;
    int nranks;
    bool procs; /* process ranks */
    comm_id_t id;
    comm_t *comm; /* initialised by the harness unless job.no_init */
    void *arg;    /* the job's arg */
    long errors;  /* the body adds its failures here */
    char first_error[512];
    uint8_t *out;       /* H_OUT_BYTES to copy an output into, for bit comparison */
    size_t out_len;     /* bytes the body stored in out */
    int status;         /* a comm_status_t the body wants to report */
    volatile int ready; /* set by the harness as the body starts (after comm_init) */
    double elapsed_s;   /* the body may time something */
};

typedef void (*h_body_fn)(struct h_rank *r);

struct h_job {
    int nranks;
    bool procs;
    bool no_init;   /* the body calls comm_init itself */
    int timeout_ms; /* communicator timeout (0 = 60 s) */
    h_body_fn body;
    void *arg;
    int kill_rank;         /* procs: SIGKILL this rank ... (-1 = none) */
    int kill_after_ms;     /* ... this long after the start, */
    bool kill_after_ready; /* ... or after every rank's body started (a loaded host may
                              take longer than kill_after_ms to start the ranks) */
};

/* Runs the job; returns the per-rank results (valid until the next h_run). */
struct h_rank *h_run(const struct h_job *job);

/*
 * Runs a job whose process rank job->kill_rank the harness kills, whose other ranks'
 * bodies store h_now_ms() / 1e3 in elapsed_s once they noticed: fails the test (its
 * message led by what) when one noticed more than limit_ms after the kill.  Returns the
 * results, the killed rank's errors cleared (its own death is no failure).
 */
struct h_rank *h_run_killed(const struct h_job *job, double limit_ms, const char *what);

/* comm_init of r's communicator into r->comm (rank, size and id from r; timeout_ms 0 =
 * 60 s), as the harness does unless job.no_init; false (the failure recorded in r)
 * when it fails. */
bool h_comm_init(struct h_rank *r, int timeout_ms);

/* Records a failure in r (keeps the first message). */
void h_fail(struct h_rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A fresh id, remembered so h_shm_leftovers can look for its segment. */
void h_id_new(comm_id_t *id);

/* Counts segments of the ids the tests made that are still in /dev/shm. */
int h_shm_leftovers(void);
/* Is the segment (or a failure stub) of communicator id in /dev/shm now? */
bool h_segment_exists(const comm_id_t *id);

/* Deterministic random numbers for (seed, rank). */
uint64_t h_rand(uint64_t *state);
/*
 * Random data of any dtype for (seed, rank), never zero: floats of mixed signs and
 * magnitudes in [2^-4, 2^4), integers over their whole range.  h_fill_op with
 * COMM_PROD makes products stay finite and meaningful instead: floats of either sign
 * in [0.75, 1.25), odd integers (their products never become 0); any other op gives
 * h_fill's data.
 */
void h_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed, int rank);
void h_fill_op(void *buf, size_t count, comm_dtype_t dtype, comm_op_t op, uint64_t seed, int rank);
/* Poisons count elements (NaN for floats, a pattern for ints). */
void h_poison(void *buf, size_t count, comm_dtype_t dtype);
/* Are count elements of buf still h_poison's pattern? */
bool h_poisoned(const void *buf, size_t count, comm_dtype_t dtype);
/* Does buf hold exactly h_fill_op(count, dtype, op, seed, rank) (h_fill's data for every
 * op but COMM_PROD)? */
bool h_holds(const void *buf, size_t count, comm_dtype_t dtype, comm_op_t op, uint64_t seed,
             int rank);

/* FNV-1a over n bytes: h_hash from the start, h_hash_more continuing h (ranks compare
 * their outputs' hashes bit for bit). */
uint64_t h_hash(const void *p, size_t n);
uint64_t h_hash_more(uint64_t h, const void *p, size_t n);

/* Element i of buf as a double (exact for every dtype but large 64-bit integers). */
double h_get(const void *buf, size_t i, comm_dtype_t dtype);

/* "f32", "u8", ... and "sum", "avg", ... for messages. */
const char *h_dtype_name(comm_dtype_t dtype);
const char *h_op_name(comm_op_t op);
bool h_dtype_is_int(comm_dtype_t dtype);

/*
 * Checks out[0..count) against the float64 reduction of every rank's h_fill_op data
 * (plus addend, when given: addend_count elements of dtype, row-broadcast), with a
 * bound that fits dtype and op; narrow: inputs were rounded through bf16.  Integers
 * must match exactly (SUM and PROD wrapping in the dtype's width, MAX/MIN signed or
 * unsigned as the dtype is); AVG is the float64 sum divided by nranks.  Returns the
 * number of wrong elements and describes the first in r.
 */
long h_check(struct h_rank *r, const void *out, size_t count, comm_dtype_t dtype, comm_op_t op,
             uint64_t seed, int nranks, const void *addend, size_t addend_count, bool narrow);

/* An f32 sum allreduce of count elements of h_fill(seed) data on r->comm, out of place,
 * every element checked; a failure is recorded in r, its message led by what. */
void h_allreduce_checked(struct h_rank *r, size_t count, uint64_t seed, const char *what);

/* ms since an arbitrary start. */
double h_now_ms(void);

/* The harness runs lighter sweeps in sanitizer builds (ARCOMM_TEST_QUICK=1). */
bool h_quick(void);

/* Sets an environment variable for the test, remembering the old value; h_env_pop
 * restores everything pushed. */
void h_env_push(const char *name, const char *value);
void h_env_pop(void);

#endif /* ARCOMM_TEST_HARNESS_H */
