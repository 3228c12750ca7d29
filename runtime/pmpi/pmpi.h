/* SPDX-License-Identifier: MIT */
/*
 * libarcomm_pmpi: MPI's blocking collectives of unmodified programs served on arcomm.
 * The pieces share this header: the settings and the log (settings.c), the datatype and
 * op table (types.c), one arcomm communicator per MPI communicator (comms.c), and the
 * intercepted MPI_* entry points (calls.c).  docs/pmpi.md says what is taken over.
 */
#ifndef ARCOMM_PMPI_H
#define ARCOMM_PMPI_H

#include <arcomm.h>
#include <mpi.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The library's thread-locals, read in every intercepted call: initial-exec, one load
 * from the thread pointer instead of a __tls_get_addr call (the library is loaded with
 * the program: LD_PRELOAD or linked before -lmpi, so it sits in the static TLS block). */
#define PMPI_TLS __attribute__((tls_model("initial-exec")))
/* The entry points the program's calls resolve to (the build hides everything else). */
#define PMPI_EXPORT __attribute__((visibility("default")))

/* The intercepted calls, for the counters and the report. */
enum pmpi_call {
    PMPI_CALL_ALLREDUCE = 0,
    PMPI_CALL_REDUCE,
    PMPI_CALL_BCAST,
    PMPI_CALL_ALLGATHER,
    PMPI_CALL_REDUCE_SCATTER_BLOCK,
    PMPI_CALL_ALLTOALL,
    PMPI_CALL_BARRIER,
    PMPI_CALL_COUNT
};

/* Log levels, ARCOMM_LOG_LEVEL's names in arcomm's order. */
enum pmpi_log_level {
    PMPI_LOG_NONE = 0,
    PMPI_LOG_ERROR,
    PMPI_LOG_WARN,
    PMPI_LOG_INFO,
    PMPI_LOG_DEBUG,
};

/* Read once, at the first intercepted call (pmpi_settings_load). */
struct pmpi_settings {
    bool off;      /* ARCOMM_PMPI=off: every call goes to PMPI, nothing is counted */
    int log_level; /* ARCOMM_LOG_LEVEL (default warn) */
    /* Calls of fewer bytes than this (as arbench counts a call's size: the per-rank
     * buffer of allreduce, reduce and bcast, the whole receive buffer of allgather, the
     * whole send buffer of reduce_scatter_block and alltoall) go to PMPI, where Open MPI
     * was measured faster (docs/pmpi.md); ARCOMM_PMPI_MIN_BYTES sets all of them. */
    size_t min_bytes[PMPI_CALL_COUNT];
    /* ARCOMM_TIMEOUT_MS: < 0 (unset, the default) never; the library's own waits for its
     * peers (waits.c) give up after it, as arcomm's do. */
    long timeout_ms;
    /* ARCOMM_PMPI_PROGRESS_US: the period of MPI's progress in a served call's waits. */
    unsigned progress_us;
};
extern struct pmpi_settings pmpi_settings;
/* What the library's communicators default to (the environment still overrides), MPI's
 * semantics where arcomm's own API differs: waits without a timeout (MPI has none;
 * arcomm's API gives up after 120 s): a rank that is late, however late, is waited for, a
 * dead one still ends the wait, and ARCOMM_TIMEOUT_MS in the environment sets a timeout
 * for those who want one.  And no eager broadcast: its root returns before its peers
 * came, the one served call that can end on some ranks and not others, which the handling
 * of split calls cannot allow (waits.c); broadcasts that arcomm would make eager go to MPI
 * (settings.c), whose small broadcasts are as fast; the eager reduce likewise (its
 * non-roots return before the root came). */
#define PMPI_KNOB_DEFAULTS "ARCOMM_BCAST_EAGER=off,ARCOMM_REDUCE_EAGER=off,ARCOMM_TIMEOUT_MS=-1"
/* Broadcasts under this many bytes go to MPI by default: arcomm's broadcast, which has
 * every rank agree first, is slower than Open MPI's there (docs/pmpi.md, "Sizes"). */
#define PMPI_BCAST_MPI_BYTES 512
/* Reduces under this many bytes go to MPI by default: Open MPI's eager small reduce was
 * faster than arcomm's synchronising one (docs/pmpi.md, "Sizes"). */
#define PMPI_REDUCE_MPI_BYTES 512

/* Loads the settings on the first call of any thread (idempotent, thread-safe). */
void pmpi_settings_load(void);
/* One line "arcomm <level>: pmpi: ..." on stderr when level is enabled. */
void pmpi_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "allreduce", ... for the report. */
const char *pmpi_call_name(enum pmpi_call call);

/*
 * The arcomm dtype of an MPI datatype for reductions: true and *dtype when the datatype
 * is a predefined one in the table of docs/pmpi.md, else false.
 */
bool pmpi_reduce_dtype(MPI_Datatype type, comm_dtype_t *dtype);
/* The arcomm op of a predefined MPI op (SUM, PROD, MAX, MIN), else false. */
bool pmpi_op(MPI_Op op, comm_op_t *cop);

/*
 * Where the bytes of a datatype lie, for data-movement calls (Bcast, Allgather,
 * Alltoall), which move the bytes of the type signature whatever the handle.
 */
struct pmpi_layout {
    size_t size;     /* bytes of data in one element (MPI_Type_size) */
    MPI_Aint extent; /* from one element to the next */
    MPI_Aint tlb;    /* true lower bound: where an element's first byte lies */
    bool dense;      /* an element's bytes are one run, in type map order, from tlb */
};
/* type's layout; false when MPI would refuse the type (MPI reports it). */
bool pmpi_layout(MPI_Datatype type, struct pmpi_layout *l);
/* count elements' bytes (false when negative or past SIZE_MAX). */
bool pmpi_layout_bytes(const struct pmpi_layout *l, int count, size_t *bytes);
/* Whether count elements from buf are one run of bytes from buf + tlb, in type map
 * order: read and written in place; otherwise packed. */
static inline bool pmpi_layout_run(const struct pmpi_layout *l, size_t count)
{
    return l->dense && (count <= 1 || (size_t)l->extent == l->size);
}
/* MPI_Pack / MPI_Unpack of count elements of type at buf into / from out's bytes
 * (count * l->size), in pieces of at most INT_MAX bytes; an MPI error code. */
int pmpi_pack(const void *buf, size_t count, MPI_Datatype type, const struct pmpi_layout *l,
              void *out);
int pmpi_unpack(const void *in, size_t count, MPI_Datatype type, const struct pmpi_layout *l,
                void *buf);
/* Frees the keyval of the types' cache (MPI_Finalize). */
void pmpi_types_finalize(void);

/* The state kept for one MPI communicator (an attribute of it). */
struct pmpi_line;

struct pmpi_comm {
    /* The two words a stale lookup of another thread may still touch after the state was
     * released (its memory is reused, never freed: life.c): atomics, first. */
    _Atomic uint64_t life;        /* references, and whether freed or finalized */
    _Atomic uint64_t incarnation; /* bumped each time the memory becomes a new state */
    MPI_Comm mpi;                 /* the communicator this is the attribute of */
    comm_t *arc;                  /* NULL: every call on it is handed to PMPI */
    int rank;                     /* in mpi */
    int size;                     /* of mpi */
    void *scratch[2];             /* copies: MPI_IN_PLACE inputs, packed bytes */
    size_t scratch_cap[2];        /* bytes of each */
    /* The calls on it, for splits between arcomm and MPI (waits.c): one thread at a
     * time, as MPI has collectives on one communicator. */
    struct pmpi_line *ledger;         /* every rank's line in shared memory; NULL: none (one rank,
                                       * or ranks on several hosts) */
    uint64_t calls;                   /* intercepted calls entered on it */
    uint64_t unverified;              /* 1 + the first call handed since the last served one that
                                       * this rank may have left before its peers entered it */
    uint64_t current;                 /* the index of the served call in flight */
    bool split;                       /* a call was split: every call goes to MPI from now on */
    uint64_t served[PMPI_CALL_COUNT]; /* calls arcomm served (one thread at a time) */
    uint64_t handed[PMPI_CALL_COUNT]; /* calls handed to PMPI */
    struct pmpi_comm *prev, *next;    /* the live list (finalize kills what is left), or
                                       * the pool of released states */
};

/*
 * The state of comm, with a reference the call drops when it is done with it
 * (pmpi_comm_put, or the pmpi_hand / pmpi_done that end a call): made on comm's first
 * intercepted call (collective over comm, as every rank makes its first intercepted call
 * on comm at the same point).  NULL when the library is off, comm is MPI_COMM_NULL or
 * not a communicator, or MPI_Finalize runs: the caller hands the call on.
 */
struct pmpi_comm *pmpi_comm_get(MPI_Comm comm);
void pmpi_comm_put(struct pmpi_comm *pc);
/* Whether pc->mpi may still be passed to MPI (no MPI_Comm_free or MPI_Finalize of it ran
 * in another thread since the call took pc). */
bool pmpi_comm_mpi_ok(const struct pmpi_comm *pc);
/* Whether MPI_Finalize ran in another thread since the call took pc: no MPI call at all. */
bool pmpi_comm_final(const struct pmpi_comm *pc);

/* Counts a call handed to PMPI: in pc, or (pc NULL: MPI_COMM_NULL, an invalid handle)
 * in the library's totals; nothing when the library is off. */
void pmpi_handed(struct pmpi_comm *pc, enum pmpi_call call);
/* A call handed to PMPI: counted, in the ledger (run_ahead: pmpi_ledger_handed), and pc
 * dropped (the caller then calls PMPI). */
void pmpi_hand(struct pmpi_comm *pc, enum pmpi_call call, bool run_ahead);
/* Before a served call's arcomm call: true to go on; false when the call must go to MPI
 * after all (counted as handed, pc dropped: the caller calls PMPI). */
bool pmpi_serve(struct pmpi_comm *pc, enum pmpi_call call);
/* After a served call's arcomm call returned st: true when it must join MPI's call
 * instead (a peer handed it; counted as handed, pc dropped: the caller calls PMPI). */
bool pmpi_joins(struct pmpi_comm *pc, enum pmpi_call call, comm_status_t st);
/*
 * The end of a served call whose arcomm call returned st: counted when COMM_OK;
 * otherwise logs comm_last_error, then calls comm's MPI error handler with MPI_ERR_OTHER
 * and returns what it returns (MPI_ERR_OTHER when the handler returns).  The caller
 * still holds pc.
 */
int pmpi_done(struct pmpi_comm *pc, enum pmpi_call call, comm_status_t st);
/* Drops the call's reference on pc and returns rc: the last thing a served call does. */
static inline int pmpi_end(struct pmpi_comm *pc, int rc)
{
    pmpi_comm_put(pc);
    return rc;
}
/*
 * A served call that failed on this rank before it reached arcomm (no memory for a copy,
 * MPI_Pack failed): the arcomm communicator is aborted, so that the peers' call fails
 * instead of waiting for this rank, what is logged, and comm's error handler gets rc.
 */
int pmpi_local_fail(struct pmpi_comm *pc, enum pmpi_call call, int rc, const char *what);
/* Too small for arcomm to win (pmpi_settings.min_bytes): a call of bytes as arbench
 * counts them. */
static inline bool pmpi_small(enum pmpi_call call, size_t bytes)
{
    return bytes < pmpi_settings.min_bytes[call];
}
/* Room for bytes in pc's scratch buffer i (0 or 1; grown as needed), NULL when out of
 * memory. */
void *pmpi_scratch(struct pmpi_comm *pc, int i, size_t bytes);
/* Kills every state and logs the report; MPI_Finalize calls it before PMPI_Finalize. */
void pmpi_finalize(void);

/* How often (microseconds, ARCOMM_PMPI_PROGRESS_US) a served call that waits for its peers
 * drives MPI's progress engine by default (the wait hook's period; comm_set_wait_hook
 * takes 1 to 1000000), and how many passes it makes each time (waits.c). */
#define PMPI_PROGRESS_US     100
#define PMPI_PROGRESS_US_MAX 1000000
#define PMPI_PROGRESS_PASSES 16
/* Sets arc's wait hook, which drives MPI's progress while a call on pc waits. */
comm_status_t pmpi_waits_init(struct pmpi_comm *pc, comm_t *arc);

/* Whether arcomm serves calls on pc at all: a communicator arcomm joined, where no
 * call was split between arcomm and MPI. */
static inline bool pmpi_serves(const struct pmpi_comm *pc)
{
    return pc != NULL && pc->arc != NULL && !pc->split;
}
/*
 * The ends of a call's decision, besides counting (pmpi_hand, pmpi_serve, pmpi_joins):
 * the ledger of the calls (waits.c).  handed: a call handed to MPI; run_ahead when this
 * rank may leave it before its peers entered it (a rooted call, an argument MPI
 * rejects).  serve: before arcomm's call, false when it must go to MPI after all (a peer
 * served a call this rank handed).  joins: after arcomm's call failed, true when it must
 * go to MPI (a peer handed it).  create / open / close: the shared memory, made by rank 0
 * under a fresh name that the others open.
 */
void pmpi_ledger_handed(struct pmpi_comm *pc, bool run_ahead);
bool pmpi_ledger_serve(struct pmpi_comm *pc);
bool pmpi_ledger_joins(struct pmpi_comm *pc);
bool pmpi_ledger_create(int nranks, char *name, size_t len);
bool pmpi_ledger_open(struct pmpi_comm *pc, const char *name);
void pmpi_ledger_close(struct pmpi_comm *pc);

/* Between the pieces (comms.c makes states, life.c keeps them). */
bool pmpi_comm_inside_init(void);
struct pmpi_comm *pmpi_comm_lookup(MPI_Comm comm); /* with a reference, or made */
bool pmpi_comm_take(struct pmpi_comm *pc);         /* a reference, if alive */
void pmpi_comm_detach(struct pmpi_comm *pc);       /* deletes the attribute: kills pc */
void pmpi_comm_finalize(void);                     /* frees the keyval */
struct pmpi_comm *pmpi_state_alloc(void);          /* dead, zeroed */
void pmpi_state_publish(struct pmpi_comm *pc);     /* alive, with one reference */
void pmpi_state_discard(struct pmpi_comm *pc);     /* back to the pool, never published */
void pmpi_state_kill(struct pmpi_comm *pc);
bool pmpi_finalizing(void);

#endif /* ARCOMM_PMPI_H */
