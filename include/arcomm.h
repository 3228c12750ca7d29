/* SPDX-License-Identifier: MIT */
/*
 * arcomm — collective communication between the threads, processes and devices of
 * one host.  The public API.  docs/api.md is its reference (every function, its
 * arguments, statuses and semantics); docs/getting-started.md has a complete example.
 */
#ifndef ARCOMM_H
#define ARCOMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; comm_get_version says the library's (the same when built). */
#define ARCOMM_VERSION_MAJOR 0
#define ARCOMM_VERSION_MINOR 2
#define ARCOMM_VERSION_PATCH 0

typedef struct comm comm_t; /* opaque */

typedef enum comm_status {
    COMM_OK = 0,
    COMM_ERR_INVALID = -1, /* bad argument or configuration */
    COMM_ERR_NOMEM = -2,
    COMM_ERR_UNSUPPORTED = -3, /* dtype, op, device or transport not available */
    COMM_ERR_SYSTEM = -4,      /* an OS, driver or runtime call failed */
    COMM_ERR_TIMEOUT = -5,     /* a peer did not arrive within the timeout */
    COMM_ERR_PEER = -6,        /* a peer failed, exited or aborted */
    COMM_ERR_MISMATCH = -7,    /* ranks disagree on count, dtype or op */
    COMM_ERR_ABORTED = -8,     /* comm_abort was called (or an init's or split's abort word) */
} comm_status_t;

typedef enum comm_dtype {
    COMM_F32 = 0,
    COMM_F16 = 1,
    COMM_BF16 = 2,
    COMM_F64 = 3,
    COMM_I32 = 4,
    COMM_I64 = 5,
    COMM_I8 = 6, /* 0.2 */
    COMM_U8 = 7,
    COMM_U32 = 8,
    COMM_U64 = 9,
} comm_dtype_t;

typedef enum comm_op {
    COMM_SUM = 0,
    COMM_MAX = 1,
    COMM_MIN = 2,
    COMM_PROD = 3, /* 0.2 */
    COMM_AVG = 4,  /* 0.2: sum / nranks, float dtypes only */
} comm_op_t;

typedef enum comm_device {
    COMM_DEVICE_HOST = 0,
    COMM_DEVICE_CUDA = 1,
    COMM_DEVICE_HEXAGON = 2,
} comm_device_t;

#define COMM_ID_BYTES 64
typedef struct comm_id {
    char str[COMM_ID_BYTES]; /* NUL-terminated, printable */
} comm_id_t;

typedef struct comm_config {
    size_t size;           /* sizeof(comm_config_t); set by comm_config_init */
    int nranks;            /* >= 1 */
    int rank;              /* 0 .. nranks-1 */
    comm_id_t id;          /* the same on every rank of one communicator */
    comm_device_t device;  /* where the buffers passed to collectives live */
    int device_index;      /* GPU ordinal / HTP session; -1 = derive from local rank */
    const char *transport; /* NULL = automatic; else a transport name ("shm", ...) */
    int timeout_ms;        /* 0 = default (ARCOMM_TIMEOUT_MS, else 120000); < 0 = never */
    /* NULL, or defaults for this communicator's ARCOMM_* knobs in place of arcomm's own:
     * "ARCOMM_BF16_THRESHOLD=off,ARCOMM_COPY_CHUNK_BYTES=1M" (commas, semicolons or
     * blanks between items); the environment still overrides each.  Kept by comm_split's
     * children.  Knobs marked "must agree" must get the same value on every rank. */
    const char *knob_defaults;
    /* NULL, or a word that another thread may set nonzero (an atomic or volatile store)
     * while this rank is in comm_init: comm_init then returns COMM_ERR_ABORTED, and the
     * other ranks' comm_init returns COMM_ERR_PEER at once, as for any init failure.  Read
     * during comm_init (and comm_init_all) only; a live communicator ends with comm_abort. */
    const volatile int *abort_flag;
} comm_config_t;

/* Fills *cfg with defaults (nranks 1, rank 0, host device, automatic transport). */
void comm_config_init(comm_config_t *cfg);

/* Makes a fresh communicator id: 128 bits from the OS random source, printable. */
comm_status_t comm_id_new(comm_id_t *id);

/*
 * Joins the communicator named by cfg->id as cfg->rank of cfg->nranks.  Every rank
 * calls it (from its own thread or process); it returns once all ranks have joined,
 * or with COMM_ERR_TIMEOUT after the timeout.  *comm is written only on success.
 */
comm_status_t comm_init(comm_t **comm, const comm_config_t *cfg);

/* comm_init from ARCOMM_RANK, ARCOMM_SIZE, ARCOMM_ID (set by arrun). */
comm_status_t comm_init_env(comm_t **comm);

/*
 * Sums (or takes the max/min of) count elements over all ranks into every rank's
 * recvbuf.  sendbuf == recvbuf is in place.  Host: blocks until done, stream NULL.
 * CUDA: ordered on stream (a cudaStream_t), returns once enqueued.
 */
comm_status_t comm_allreduce(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             comm_dtype_t dtype, comm_op_t op, void *stream);

/*
 * A SUM allreduce whose result on each rank is then increased by that rank's addend:
 * element by element when addend_count == count, else the same row of addend_count
 * elements added to every row (addend_count must divide count).
 */
comm_status_t comm_allreduce_add(comm_t *comm, const void *sendbuf, void *recvbuf,
                                 const void *addend, size_t addend_count, size_t count,
                                 comm_dtype_t dtype, void *stream);

/* Returns once every rank has entered the barrier. */
comm_status_t comm_barrier(comm_t *comm);

/*
 * The collectives beyond allreduce (0.2).  Counts are elements per rank, as in NCCL.
 * Every rank calls them in the same order with the same (count, dtype, op, root); host
 * calls block, CUDA calls are ordered on stream and return once enqueued.  A root out
 * of range, an overlap other than the in-place form named below, or a NULL buffer with
 * count > 0 is COMM_ERR_INVALID (published to the peers); ranks that disagree return
 * COMM_ERR_MISMATCH; in both cases before any byte of any recvbuf is written.
 */

/* root's sendbuf -> every rank's recvbuf (count elements).  sendbuf is read on root only
 * (may be NULL elsewhere); in place when sendbuf == recvbuf on root. */
comm_status_t comm_broadcast(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             comm_dtype_t dtype, int root, void *stream);

/* The reduction of every rank's sendbuf lands in root's recvbuf only (recvbuf may be NULL
 * elsewhere); in place when sendbuf == recvbuf on root. */
comm_status_t comm_reduce(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                          comm_dtype_t dtype, comm_op_t op, int root, void *stream);

/* recvbuf holds nranks * sendcount elements: rank r's sendbuf lands at
 * recvbuf + r * sendcount on every rank.  In place when sendbuf == recvbuf + rank * sendcount. */
comm_status_t comm_allgather(comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                             comm_dtype_t dtype, void *stream);

/* sendbuf holds nranks * recvcount elements; rank r receives the reduction of block r of
 * every rank's sendbuf.  In place when recvbuf == sendbuf + rank * recvcount (the other
 * blocks of sendbuf are left untouched). */
comm_status_t comm_reduce_scatter(comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t recvcount, comm_dtype_t dtype, comm_op_t op, void *stream);

/* sendbuf and recvbuf hold nranks * count elements: block p of rank r's sendbuf lands in
 * block r of rank p's recvbuf.  Out of place only (any overlap is COMM_ERR_INVALID). */
comm_status_t comm_alltoall(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                            comm_dtype_t dtype, void *stream);

/*
 * Communicators from communicators (0.2).  comm_split is collective over comm: ranks
 * passing the same color >= 0 form a new communicator, ordered by (key, parent rank);
 * a color < 0 (COMM_SPLIT_NONE) gets *newcomm = NULL.  The new communicator's id is
 * agreed on through comm; it inherits device, transport choice and timeout, and is
 * independent: it outlives its parent.  comm_dup is comm_split with one color and the
 * parent's order.
 */
#define COMM_SPLIT_NONE (-1)
comm_status_t comm_split(comm_t *comm, int color, int key, comm_t **newcomm);
comm_status_t comm_dup(comm_t *comm, comm_t **newcomm);

/*
 * One thread creates the communicators of n thread ranks at once (as ncclCommInitAll):
 * comms[i] is rank i, on device devices[i] (devices NULL: device i) of cfg->device; cfg's
 * nranks, rank and id are ignored (cfg may be NULL: host defaults); n < 1 or a NULL comms
 * is COMM_ERR_INVALID.  On failure no communicator is left and comms is not written.
 */
comm_status_t comm_init_all(comm_t **comms, int n, const int *devices, const comm_config_t *cfg);

/*
 * Threads: a communicator serves one thread at a time (each thread rank has its own).
 * A call entered while another thread is inside a call on the same communicator
 * returns COMM_ERR_INVALID at once with the reason in comm_last_error(NULL), and the
 * communicator breaks at its next call on every rank.  A NULL or dead handle passed to
 * any function that takes one returns COMM_ERR_INVALID with the reason in
 * comm_last_error(NULL).
 */

/*
 * Breaks the communicator: a collective blocked on it (in any thread) returns
 * COMM_ERR_ABORTED, peers return COMM_ERR_PEER.  Safe from any thread at any time
 * until comm_destroy of the communicator returns, also while comm_destroy runs in
 * another thread (the abort then either completes first or finds nothing and returns
 * COMM_ERR_INVALID).  After comm_destroy has returned the handle is dead: comm_abort
 * on it returns COMM_ERR_INVALID, unless the memory has since been reused for a new
 * communicator, which it would then abort.  Not async-signal-safe.
 */
comm_status_t comm_abort(comm_t *comm);

/*
 * The wait hook (0.3): a function that the waits of a call on comm run from the
 * waiting thread while that call waits for its peers: first once the call has waited
 * period_us microseconds, then about every period_us; never on a call whose peers are
 * all there, so it costs such calls nothing.  Layers above arcomm use it to keep their
 * own world moving while a call waits: an MPI interposer drives MPI's progress engine,
 * a Python binding runs the interpreter's signal handlers (Ctrl-C).  A nonzero return
 * stops the call as comm_abort would: this rank returns COMM_ERR_ABORTED (its message
 * names the hook and the value), the communicator is broken on every rank (the peers
 * return COMM_ERR_PEER).  fn must not call arcomm on comm (comm_abort excepted).
 *
 * Local, not collective: each rank sets its own.  Set it while no call runs on comm
 * (COMM_ERR_INVALID otherwise); fn == NULL removes it; comm_split and comm_dup children
 * do not inherit it.  period_us 0 means 1000; more than 1000000 is COMM_ERR_INVALID.
 * Every host-side wait of a call runs it (shared memory, the CUDA backends' host-side
 * waits, Hexagon's fences, the MPI steps of comm_init_mpi's communicators).
 */
typedef int (*comm_wait_hook_fn)(comm_t *comm, void *arg);
comm_status_t comm_set_wait_hook(comm_t *comm, comm_wait_hook_fn fn, void *arg, unsigned period_us);

/*
 * Frees every resource of the communicator, also after an error.  comm may be NULL.
 * Call it once, when no other thread is inside a call on comm: while one is, nothing
 * is freed and COMM_ERR_INVALID is returned (comm_abort it first, let that call
 * return).  A second comm_destroy of the same handle returns COMM_ERR_INVALID.  Any
 * other use of the handle after comm_destroy is a use after free: the calls check a
 * marker in the freed memory and usually return COMM_ERR_INVALID, but cannot promise to.
 */
comm_status_t comm_destroy(comm_t *comm);

/*
 * Memory in the communicator's shared segment: process ranks that allreduce such
 * buffers take the one-pass path too.  64-byte aligned.  Not collective.
 */
comm_status_t comm_mem_alloc(comm_t *comm, size_t bytes, void **ptr);
comm_status_t comm_mem_free(comm_t *comm, void *ptr);

int comm_rank(const comm_t *comm); /* -1 when comm is NULL */
int comm_size(const comm_t *comm); /* -1 when comm is NULL */
const char *comm_transport_name(const comm_t *comm);
const char *comm_status_string(comm_status_t status);
/*
 * The detail of the last error on comm ("" when none).  With comm == NULL: the
 * reason the calling thread's last comm_init, comm_init_env or comm_id_new failed, or
 * why its last call was refused a handle (NULL, dead, or in use by another thread).
 */
const char *comm_last_error(const comm_t *comm);

/* Additions to api.md. */

/* The most ranks one communicator can have: comm_init refuses a larger nranks. */
#define COMM_MAX_RANKS 256

/* The size in bytes of one element of dtype, or 0 for an unknown dtype. */
size_t comm_dtype_size(comm_dtype_t dtype);

/*
 * The version of the library loaded at run time (ARCOMM_VERSION_* are the header's):
 * writes each part whose pointer is not NULL (any may be NULL), as api.md 0.2 has it.
 */
void comm_get_version(int *major, int *minor, int *patch);

/*
 * Asynchronous calls (0.4).  Each comm_i* call is its blocking call's arguments minus the
 * stream, plus req: it checks what this rank can check alone, queues the call and returns
 * a request in *req; comm_test, comm_wait or comm_wait_all complete it and free it.  Host
 * communicators only (COMM_DEVICE_HOST; others: COMM_ERR_UNSUPPORTED).  docs/async.md
 * teaches them.
 *
 * - The calls of one communicator run one at a time in issue order, by a progress thread
 *   of the communicator (ARCOMM_PROGRESS=thread, the default; started at the first
 *   comm_i* call, joined by comm_destroy) or inside the caller's comm_test and comm_wait
 *   (ARCOMM_PROGRESS=caller).  Every rank issues the same calls in the same order, as
 *   with the blocking calls; a blocking call (comm_split and comm_dup too) made while
 *   requests are pending runs after them.
 * - The buffers belong to the library from the call until the request completes: do not
 *   write sendbuf, nor read or write recvbuf (or addend), before then.
 * - A refusal at issue (a NULL or dead handle, NULL req, bad dtype, op, root, count or
 *   buffers) returns its status with the reason in comm_last_error(NULL), writes no
 *   *req, and (but for COMM_ERR_UNSUPPORTED, which leaves the communicator usable, as the
 *   blocking calls do) breaks the communicator in that call's turn on every rank.  What
 *   the ranks disagree on (COMM_ERR_MISMATCH), a timeout, a peer's failure and comm_abort
 *   (COMM_ERR_ABORTED; the peers COMM_ERR_PEER) come from the wait, the message in
 *   comm_last_error(comm) once the wait has returned.
 * - The waits run the communicator's wait hook from the waiting thread; the progress
 *   thread never runs it.  A wait is bounded: each queued call by the timeout, and once
 *   one fails the rest return at once with the status that broke the communicator.
 * - comm_destroy with requests not yet completed by comm_test, comm_wait or
 *   comm_wait_all frees nothing and returns COMM_ERR_INVALID naming how many.
 */
typedef struct comm_request comm_request_t; /* opaque */

comm_status_t comm_iallreduce(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                              comm_dtype_t dtype, comm_op_t op, comm_request_t **req);
comm_status_t comm_iallreduce_add(comm_t *comm, const void *sendbuf, void *recvbuf,
                                  const void *addend, size_t addend_count, size_t count,
                                  comm_dtype_t dtype, comm_request_t **req);
comm_status_t comm_ibroadcast(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                              comm_dtype_t dtype, int root, comm_request_t **req);
comm_status_t comm_ireduce(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                           comm_dtype_t dtype, comm_op_t op, int root, comm_request_t **req);
comm_status_t comm_iallgather(comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                              comm_dtype_t dtype, comm_request_t **req);
comm_status_t comm_ireduce_scatter(comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t recvcount, comm_dtype_t dtype, comm_op_t op,
                                   comm_request_t **req);
comm_status_t comm_ialltoall(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             comm_dtype_t dtype, comm_request_t **req);
comm_status_t comm_ibarrier(comm_t *comm, comm_request_t **req);

/* Done: *done = 1, returns the call's status, frees *req and sets it NULL.  Not done:
 * *done = 0, returns COMM_OK.  With ARCOMM_PROGRESS=caller it first runs the queued
 * calls up to this one (each waiting for its peers). */
comm_status_t comm_test(comm_request_t **req, int *done);
/* Waits for the request: returns the call's status, frees *req and sets it NULL. */
comm_status_t comm_wait(comm_request_t **req);
/* Waits for every request of reqs (NULL entries are skipped), frees each and sets it
 * NULL; returns the first failure in array order, else COMM_OK. */
comm_status_t comm_wait_all(int n, comm_request_t **reqs);

/*
 * Point-to-point (0.4).  comm_send sends count elements of buf to rank peer; comm_recv
 * receives them from rank peer into buf.  Sends and receives between one ordered pair
 * of ranks are matched in the order they were made; a send and its receive must agree
 * on count and dtype, else both return COMM_ERR_MISMATCH before a byte of the receive
 * buffer is written (the message is consumed; the communicator stays usable).  Outside a
 * group both block: comm_send until its receiver has matched the message and the data
 * has left buf (small messages are copied through the shared segment, large ones copied
 * once by the receiver straight from buf where it can reach it), comm_recv until the
 * data is in buf.  A peer out of range, peer == own rank outside a group, or a NULL buf
 * with count > 0 is COMM_ERR_INVALID.  Waits are bounded by the communicator's timeout,
 * run the wait hook, end on comm_abort (COMM_ERR_ABORTED) and on a peer that failed or
 * died (COMM_ERR_PEER); those failures break the communicator on every rank, as a
 * collective's do.  Host: stream NULL.  CUDA: device buffers, staged through host memory
 * after the work on stream, blocking as on host.  Hexagon returns COMM_ERR_UNSUPPORTED
 * and stays usable.
 */
comm_status_t comm_send(comm_t *comm, const void *buf, size_t count, comm_dtype_t dtype, int peer,
                        void *stream);
comm_status_t comm_recv(comm_t *comm, void *buf, size_t count, comm_dtype_t dtype, int peer,
                        void *stream);

/*
 * Groups, as NCCL's: per calling thread, nesting.  Between comm_group_start and the
 * outermost comm_group_end, comm_send and comm_recv only check their arguments and post
 * the call; comm_group_end runs every posted call together (so two ranks that each send
 * to and receive from the other, or a ring of sends and receives, cannot deadlock) and
 * returns the first failure.  Within a group a rank may send to itself: each such send
 * is matched, in order, with a receive from itself of the same group.  One thread may
 * post calls on several communicators in one group.
 */
comm_status_t comm_group_start(void);
comm_status_t comm_group_end(void);

/*
 * comm_send and comm_recv as asynchronous calls (host communicators, as the comm_i*
 * collectives above: queued in issue order with them, completed by comm_test, comm_wait
 * or comm_wait_all).  A stretch of consecutive comm_isend/comm_irecv calls runs as one
 * group (comm_group_start/end), so an isend and an irecv to and from the same peer,
 * issued so on both ranks, cannot deadlock.  A peer out of range, a bad dtype or a NULL
 * buf with count > 0 is refused at issue (COMM_ERR_INVALID, nothing queued).
 */
comm_status_t comm_isend(comm_t *comm, const void *buf, size_t count, comm_dtype_t dtype, int peer,
                         comm_request_t **req);
comm_status_t comm_irecv(comm_t *comm, void *buf, size_t count, comm_dtype_t dtype, int peer,
                         comm_request_t **req);

#ifdef __cplusplus
}
#endif

#endif /* ARCOMM_H */
