/* SPDX-License-Identifier: MIT */
/*
 * arcomm's path tables, for programs that want to see them: the rows a backend (the
 * host's, CUDA's, Hexagon's) tries for each call (its defaults, with the measurement
 * behind each, after the rows of ARCOMM_PATHS), and the plan a given call gets.  The
 * library's calls read the same rows; arinfo --paths and arinfo --plan print them through
 * this function.
 * docs/paths.md is the reference.
 */
#ifndef ARCOMM_PATHS_H
#define ARCOMM_PATHS_H

#include <arcomm.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Which ranks a query is about: host ranks (threads or processes: the host table), or,
 * for the device backends' tables, the backend's ranks (one GPU or session each, thread
 * or process ranks alike). */
typedef enum comm_paths_ranks {
    COMM_PATHS_RANKS_DEFAULT = 0, /* the communicator's; without one, host processes */
    COMM_PATHS_THREADS,           /* every rank a thread of one process */
    COMM_PATHS_PROCESSES,         /* ranks in several processes */
    COMM_PATHS_CUDA = 16,         /* GPUs on the host-staged "cuda" transport: its table */
    COMM_PATHS_CUDA_P2P = 17,     /* GPUs on the "cuda-p2p" transport: its table */
    COMM_PATHS_HEXAGON = 18,      /* Hexagon sessions: their table */
} comm_paths_ranks_t;

/* Where the call's buffers lie. */
typedef enum comm_paths_buffers {
    COMM_PATHS_PRIVATE = 0, /* each rank's own memory (malloc, the stack) */
    COMM_PATHS_SHARED,      /* comm_mem_alloc's pools, or every rank's shared heap */
} comm_paths_buffers_t;

#define COMM_PATHS_NO_LIMIT UINT64_MAX /* a row's hi without a limit */
#define COMM_PATHS_ROWS_MAX 40         /* rows a table has at most */

/* One row, as the communicator (or the configuration) has it: bounds concrete. */
typedef struct comm_paths_row {
    char collectives[80]; /* "*" or names joined by ',' ("broadcast,allgather") */
    uint64_t lo, hi;      /* sizes, inclusive: bytes per rank (count x element size) */
    int staged;           /* 1: lo and hi count what a rank stages, bytes per rank times
                           * nranks for reduce_scatter and alltoall (the host's flag rows);
                           * in the CUDA table, the bytes of the allreduce that serves the
                           * call on the kernel path: bytes per rank, times nranks for
                           * allgather and reduce_scatter, nranks^2 for alltoall */
    int min_ranks;        /* rank counts, inclusive */
    int max_ranks;        /* -1: no limit */
    char ranks[12];       /* "any", "threads" or "processes" */
    char path[12];        /* host: "flag", "one-pass", "cma" or "staged"; cuda: "local"
                           * (one rank), "kernel" or "copy"; cuda-p2p: "local", "one-shot",
                           * "two-shot" or "direct"; Hexagon: "session" */
    char tuned[8];        /* "": as written; "bulk": each rank's measured times decide
                           * whether it offers the single copy; "choice": rank 0's
                           * measured choice decides whether the row applies */
    int item;             /* the ARCOMM_PATHS item it comes from, 0 for a default row */
    char why[96];         /* a default row: the measurement that set it */
} comm_paths_row_t;

/* A call to plan. */
typedef struct comm_paths_query {
    const char *collective; /* "allreduce", ...; NULL: the rows only, no plan */
    uint64_t bytes;         /* bytes per rank: count x element size */
    int nranks;             /* 0: the communicator's; without one it must be given */
    comm_paths_ranks_t ranks;
    comm_paths_buffers_t buffers;
} comm_paths_query_t;

/* What the call gets. */
typedef struct comm_paths_plan {
    char path[12];     /* the path it takes: "flag", "one-pass", "cma" or "staged"; a
                        * device table's path as its row names it ("none": the backend has
                        * no path for the collective) */
    char row_path[12]; /* the path its row names (one-pass and cma fall back by buffers) */
    int row;           /* the row's index in the table (-1: none matched: one-pass on the
                        * host, "none" on a device) */
} comm_paths_plan_t;

/*
 * A path table and a plan.  comm: a live communicator of the host, CUDA ("cuda",
 * "cuda-p2p") or Hexagon backend (its table, resolved at comm_init), or NULL: the table a
 * communicator of q->nranks ranks of q->ranks would have here, from the environment's
 * knobs (ARCOMM_PATHS, ARCOMM_FLAG_THRESHOLD, ARCOMM_COPY_THRESHOLD, ...; host: the single
 * copy assumed reachable between processes, a shared heap not); q->ranks COMM_PATHS_CUDA,
 * COMM_PATHS_CUDA_P2P or COMM_PATHS_HEXAGON asks for that backend's table (no GPU
 * needed: the tables are data).  Writes up to cap rows into rows (NULL with cap 0: none)
 * and their number into *nrows (may be more than cap); with q->collective set, the plan
 * into *plan.  COMM_ERR_INVALID for a bad query or ARCOMM_PATHS (comm_last_error(NULL)
 * says which), COMM_ERR_UNSUPPORTED for a communicator of another backend.
 */
comm_status_t comm_paths_query(comm_t *comm, const comm_paths_query_t *q, comm_paths_row_t *rows,
                               size_t cap, size_t *nrows, comm_paths_plan_t *plan);

#ifdef __cplusplus
}
#endif

#endif /* ARCOMM_PATHS_H */
