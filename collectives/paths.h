/* SPDX-License-Identifier: MIT */
/*
 * Path selection as data (paths.c): the host backend's table of rows {collectives, size
 * range, rank-count range, kind of ranks, needs, path}, the ARCOMM_PATHS rows that
 * override it, the table resolved for one communicator, and the one function that turns
 * a call into a plan.  The library's calls, arinfo and the tests read the same rows.
 */
#ifndef ARCOMM_COLL_PATHS_H
#define ARCOMM_COLL_PATHS_H

#include "coll.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The paths a host call can take. */
enum coll_path {
    COLL_PATH_NONE = 0,
    COLL_PATH_FLAG,    /* one round trip through the staging slots or arrival lines */
    COLL_PATH_ONEPASS, /* bulk: one pass over the peers' buffers where every rank reaches
                        * every buffer the peers touch, else staged */
    COLL_PATH_CMA,     /* bulk: one-pass where reachable, else the single copy
                        * (process_vm_readv/writev) where every rank offered it, else staged */
    COLL_PATH_STAGED,  /* bulk: through the staging slots, whatever the buffers */
    /* The device backends' paths (paths_device.c): a table holds the paths of its set only. */
    COLL_PATH_LOCAL,   /* CUDA, one rank: a device copy, or the op's end; nothing travels */
    COLL_PATH_KERNEL,  /* cuda: the LL kernel (the collectives beyond allreduce: the
                        * allreduce that serves them) */
    COLL_PATH_COPY,    /* cuda: the copy engines through the pinned segment */
    COLL_PATH_ONESHOT, /* cuda-p2p allreduce: LL rounds pushed into every peer's region */
    COLL_PATH_TWOSHOT, /* cuda-p2p allreduce: reduce-scatter, then all-gather */
    COLL_PATH_DIRECT,  /* cuda-p2p, beyond allreduce: one kernel through the peers' regions */
    COLL_PATH_SESSION, /* Hexagon: the sessions reduce every rank's buffer */
    COLL_PATH_END,
};

/* Which backend a table (and the ARCOMM_PATHS rows it takes) is for. */
enum coll_paths_set {
    COLL_PATHS_HOST = 0, /* the host backend (shm): paths.c */
    COLL_PATHS_CUDA,     /* the host-staged "cuda" transport: paths_device.c */
    COLL_PATHS_CUDA_P2P, /* "cuda-p2p" */
    COLL_PATHS_HEXAGON,  /* the Hexagon sessions */
    COLL_PATHS_SET_END,
};

/* Which ranks a row applies to. */
enum coll_ranks {
    COLL_RANKS_ANY = 0,
    COLL_RANKS_THREADS, /* every rank a thread of one process */
    COLL_RANKS_PROCS,   /* not every rank in one process */
};

/* What a row needs of the communicator (agreed at join; rows whose needs are not met are
 * left out of the communicator's table). */
#define COLL_NEED_CMA      0x1u /* every rank reads its peers through CMA (struct shm_comm.cma) */
#define COLL_NEED_CMA_FAST 0x2u /* and the ranks found the single copy fast (cma_fast) */
#define COLL_NEED_CMA_AUTO 0x4u /* ARCOMM_CMA_THRESHOLD=auto (a size set replaces these rows) */
#define COLL_NEED_CMA_SET  0x8u /* ARCOMM_CMA_THRESHOLD set to a size: lo is that size */

/* How a row's tuner may rewrite it, call by call (paths.c: the tuner layer). */
enum coll_tune {
    COLL_TUNE_NONE = 0,
    COLL_TUNE_BULK,   /* each rank's measured times decide whether it offers CMA */
    COLL_TUNE_CHOICE, /* rank 0's published choice decides whether the row applies at all */
};

/* A size bound no number: the resolved ARCOMM_FLAG_THRESHOLD (in what a rank stages). */
#define COLL_BOUND_FLAG (UINT64_MAX - 1)
#define COLL_BOUND_NONE UINT64_MAX

#define COLL_KIND_BIT(k) (1u << (k))
#define COLL_KINDS_HOST                                                                            \
    (COLL_KIND_BIT(COLL_ALLREDUCE) | COLL_KIND_BIT(COLL_BROADCAST) | COLL_KIND_BIT(COLL_REDUCE) |  \
     COLL_KIND_BIT(COLL_ALLGATHER) | COLL_KIND_BIT(COLL_REDUCE_SCATTER) |                          \
     COLL_KIND_BIT(COLL_ALLTOALL))

/* One row.  A call matches the first row of the table whose collectives, sizes, rank
 * count, kind of ranks and needs it meets. */
struct coll_path_row {
    uint32_t colls;    /* COLL_KIND_BIT of each collective it applies to */
    uint64_t lo, hi;   /* size range, inclusive (hi COLL_BOUND_NONE: no limit) */
    bool staged;       /* sizes count what a rank stages (bytes per rank, times nranks for
                        * reduce_scatter and alltoall), not bytes per rank */
    uint64_t hi_total; /* nonzero: hi is also at most hi_total / nranks^2 */
    int nmin, nmax;    /* rank counts, inclusive */
    enum coll_ranks ranks;
    uint32_t needs; /* COLL_NEED_* */
    enum coll_path path;
    enum coll_tune tune;
    const char *why; /* the measurement that set it (defaults), or NULL */
    int item;        /* ARCOMM_PATHS item number (1-based), 0 for a default row */
};

/* The host backend's default rows (paths.c), in the order they are tried. */
extern const struct coll_path_row coll_host_path_rows[];
extern const size_t coll_host_path_nrows;

#define COLL_PATHS_OVERRIDES_MAX 16
#define COLL_PATHS_MAX           (COLL_PATHS_OVERRIDES_MAX + 24)

/* ARCOMM_PATHS parsed. */
struct coll_paths_overrides {
    struct coll_path_row row[COLL_PATHS_OVERRIDES_MAX];
    int n;
};

/*
 * Parses an ARCOMM_PATHS string (NULL or "": no rows).  On a malformed item returns
 * COMM_ERR_INVALID with the item, what is wrong and the accepted forms in err.
 */
comm_status_t coll_paths_parse(const char *text, struct coll_paths_overrides *out, char *err,
                               size_t errlen);

/* What a communicator (or a configuration without one) is, for resolving the rows. */
struct coll_paths_config {
    int nranks;
    bool threads;             /* every rank a thread of one process */
    bool cma;                 /* every rank reaches its peers through CMA */
    bool cma_fast;            /* and found the single copy fast (2 ranks) */
    const struct rt_knobs *k; /* resolved knobs: flag_threshold, cma_threshold, slot */
};

/* The rows one communicator tries, concrete: overrides first, then the defaults, those
 * whose rank counts, kind of ranks or needs cannot apply left out. */
struct coll_paths {
    struct coll_path_row row[COLL_PATHS_MAX];
    int nrows;
    int nranks;
    uint64_t slot; /* the flag path stages a whole message in one slot: at most this */
    uint64_t room; /* cuda: the kernel path of a collective beyond allreduce serves an
                    * allreduce of at most this many bytes (half the copy ring) */
};

void coll_paths_resolve(const struct coll_paths_config *cfg, const struct coll_paths_overrides *ov,
                        struct coll_paths *out);

/* The kind of call a plan is for. */
struct coll_plan_ask {
    enum coll_kind kind;
    uint64_t bytes; /* bytes per rank: count x element size */
    bool plain;     /* not narrowed to bf16, no addend (the CMA paths have neither) */
};

/* A call's plan: the path, the row that chose it, and the tuner's part in it. */
struct coll_plan {
    enum coll_path path;
    int row;                   /* index in the communicator's table; -1: none matched */
    bool offer_cma;            /* bulk: offer the single copy in the handshake */
    struct coll_choice ch;     /* COLL_TUNE_CHOICE: rank 0's choice, timed on rank 0 */
    struct coll_cma_pick pick; /* COLL_TUNE_BULK: this rank's measured offer */
};

/*
 * The plan of a call: the first row that matches.  c is NULL for a plan without a
 * communicator (introspection): tuned rows then apply as their defaults do (a choice
 * row never, a bulk-tuned row offers CMA).  Every rank computes the same plan: the
 * table is built from agreed knobs and join-time facts, the call's words are agreed, and
 * the only per-rank input, a bulk-tuned CMA offer, is reconciled by the handshake.
 */
void coll_paths_plan(struct comm *c, const struct coll_paths *t, const struct coll_plan_ask *ask,
                     struct coll_plan *plan);

/* "flag", "one-pass", "cma", "staged", and the device paths ("kernel", ...). */
const char *coll_path_name(enum coll_path p);
/* Is p a path of set's tables (one ARCOMM_PATHS may name)?  The names of a set's paths,
 * joined by ", " ("flag, one-pass, cma or staged"), for messages. */
bool coll_path_in_set(enum coll_path p, enum coll_paths_set set);
const char *coll_paths_set_name(enum coll_paths_set set);
const char *coll_paths_set_paths(enum coll_paths_set set);

/*
 * coll_paths_parse for the tables of set: an item naming a path of another backend is
 * COMM_ERR_INVALID, naming the item, the path's backend and the paths set takes
 * (coll_paths_parse is this for COLL_PATHS_HOST).
 */
comm_status_t coll_paths_parse_for(enum coll_paths_set set, const char *text,
                                   struct coll_paths_overrides *out, char *err, size_t errlen);
const char *coll_ranks_name(enum coll_ranks r);

/* The bulk tuner's offer for a call of a tuned row (paths.c). */
struct coll_cma_pick coll_cma_tune_pick(struct comm *c, enum coll_kind kind, size_t bytes_per_rank);

#endif /* ARCOMM_COLL_PATHS_H */
