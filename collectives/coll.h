/* SPDX-License-Identifier: MIT */
/*
 * The collective algorithms.  The runtime validates a call and hands it to the
 * backend (backend.h); the host paths are built on the shm segment's primitives, and
 * every backend's calls start with the segment's arrival handshake.
 */
#ifndef ARCOMM_COLL_H
#define ARCOMM_COLL_H

#include "comm_base.h"
#include "knobs.h"
#include "shm/shm.h"
#include "wire.h"

#include <stdbool.h>
#include <stddef.h>

/* Which collective a call is (published in its arrival word: peers compare it). */
enum coll_kind {
    COLL_ALLREDUCE = 1, /* also comm_allreduce_add (addend set) */
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLGATHER,
    COLL_REDUCE_SCATTER,
    COLL_ALLTOALL,
    COLL_BARRIER,
    COLL_SPLIT,    /* comm_split and comm_dup: the parent's handshakes (runtime/split.c) */
    COLL_KIND_END, /* one past the last */
};

/*
 * One validated collective call.  count is the API's per-rank count: allgather's
 * sendcount, reduce_scatter's recvcount, alltoall's count per block.  root is
 * broadcast's and reduce's (0 for the others).  On ranks other than the root, broadcast's
 * send and reduce's recv may be NULL.
 */
struct coll_call {
    enum coll_kind kind;
    int root;
    const void *send;
    void *recv;
    const void *addend;  /* comm_allreduce_add, else NULL */
    size_t addend_count; /* with addend */
    size_t count;
    comm_dtype_t dtype;
    comm_op_t op;
    void *stream;
};

/* The host allreduce (with or without an addend): flag, one-pass or staged. */
comm_status_t coll_host_allreduce(struct comm *c, const struct coll_call *call);
/* The host collectives beyond allreduce (broadcast.c, reduce_root.c, allgather.c,
 * reduce_scatter.c, alltoall.c): flag, one-pass or staged, chosen as for allreduce. */
comm_status_t coll_host_broadcast(struct comm *c, const struct coll_call *call);
comm_status_t coll_host_reduce(struct comm *c, const struct coll_call *call);
comm_status_t coll_host_allgather(struct comm *c, const struct coll_call *call);
comm_status_t coll_host_reduce_scatter(struct comm *c, const struct coll_call *call);
comm_status_t coll_host_alltoall(struct comm *c, const struct coll_call *call);
/* The segment's barrier: every backend's (CUDA checks its GPU first). */
comm_status_t coll_host_barrier(struct comm *c);

/* Turns the "auto" knobs of the host paths into numbers for this host, rank count and
 * kind of ranks (all threads of one process, or not). */
void coll_host_resolve_knobs(struct rt_knobs *k, const struct rt_topo_summary *topo, int nranks,
                             bool same_process);

/*
 * The host path choices, the one formula the library and arinfo share (on resolved
 * knobs).  Does a message of bytes take the flag path (else the bulk path)?
 */
static inline bool coll_host_flag_path(const struct rt_knobs *k, size_t bytes)
{
    return k->flag_threshold != RT_SIZE_OFF && bytes <= k->flag_threshold;
}

/* Does a one-pass bulk call whose inputs and outputs, all ranks' together, come to
 * footprint bytes stream its stores (footprint reaches ARCOMM_NT_THRESHOLD)? */
static inline bool coll_host_streams_footprint(const struct rt_knobs *k, size_t footprint)
{
    return k->nt_threshold != RT_SIZE_OFF && footprint >= k->nt_threshold;
}

/* The same for a call of bytes per rank in and out (allreduce: 2 x nranks x bytes). */
static inline bool coll_host_streams(const struct rt_knobs *k, int nranks, size_t bytes)
{
    return coll_host_streams_footprint(k, 2 * (size_t)nranks * bytes);
}

/* Which host path a message of bytes (of dtype) takes: "flag" or "bulk". */
const char *coll_host_path_name(const struct rt_knobs *k, size_t bytes);

/* "broadcast", "allgather", ... (the API's name without comm_), or "?". */
const char *coll_kind_name(enum coll_kind kind);

/* Does the collective combine the ranks' data with an op (else op is COMM_SUM and
 * ignored)?  Does it have a root? */
static inline bool coll_kind_reduces(enum coll_kind kind)
{
    return kind == COLL_ALLREDUCE || kind == COLL_REDUCE || kind == COLL_REDUCE_SCATTER;
}
static inline bool coll_kind_rooted(enum coll_kind kind)
{
    return kind == COLL_BROADCAST || kind == COLL_REDUCE;
}

/* Is one of its buffers nranks blocks of count elements (allgather's recvbuf,
 * reduce_scatter's sendbuf, both of alltoall's)? */
static inline bool coll_kind_blocks(enum coll_kind kind)
{
    return kind == COLL_ALLGATHER || kind == COLL_REDUCE_SCATTER || kind == COLL_ALLTOALL;
}

/*
 * How many elements of sendbuf and recvbuf rank of nranks uses in call (0: it does
 * not touch that buffer): count, or nranks * count for the gathered or scattered side.
 * Broadcast reads sendbuf on the root only; reduce writes recvbuf on the root only.
 * The runtime's validation and the host paths read buffers by the same rule.
 */
static inline void coll_call_shape(const struct coll_call *call, int rank, int nranks,
                                   size_t *send_elems, size_t *recv_elems)
{
    size_t n = call->count, all = (size_t)nranks * call->count;
    *send_elems = n;
    *recv_elems = n;
    switch (call->kind) {
    case COLL_BROADCAST:
        *send_elems = rank == call->root ? n : 0;
        break;
    case COLL_REDUCE:
        *recv_elems = rank == call->root ? n : 0;
        break;
    case COLL_ALLGATHER:
        *recv_elems = all;
        break;
    case COLL_REDUCE_SCATTER:
        *send_elems = all;
        break;
    case COLL_ALLTOALL:
        *send_elems = all;
        *recv_elems = all;
        break;
    default:
        break;
    }
}

/*
 * Bytes each rank stages in its slot on the flag path for a call of kind moving
 * bytes_per_rank (count times the element size) between nranks ranks: the whole
 * sendbuf (nranks blocks for reduce_scatter and alltoall).
 */
static inline size_t coll_host_flag_bytes(enum coll_kind kind, size_t bytes_per_rank, int nranks)
{
    bool blocks = kind == COLL_REDUCE_SCATTER || kind == COLL_ALLTOALL;
    return blocks ? bytes_per_rank * (size_t)(nranks > 0 ? nranks : 1) : bytes_per_rank;
}

/*
 * Does ARCOMM_CMA_THRESHOLD=auto send a call of kind moving bytes_per_rank (as
 * coll_host_path counts them) between nranks process ranks through CMA, where their
 * buffers are private and the communicator can use it?  The windows where it was
 * measured faster than the flag and staged paths (docs/PERFORMANCE.md, "Cross Memory
 * Attach"); in them it also replaces the flag path.
 */
bool coll_host_cma_auto(enum coll_kind kind, int nranks, size_t bytes_per_rank);

/*
 * Where ARCOMM_CMA_THRESHOLD=auto also takes CMA for a bulk call on a host where the
 * single copy is fast (cma_calibrate.h): the windows where it was measured faster than
 * the staging slots on such a host.  Bulk calls only: it never moves the flag path.
 */
bool coll_host_cma_fast_window(enum coll_kind kind, int nranks, size_t bytes_per_rank);

/* Does a call of kind moving bytes_per_rank take the flag path (else the bulk path)?
 * Where ARCOMM_CMA_THRESHOLD=auto sends it through CMA, the bulk path. */
static inline bool coll_host_kind_flag(enum coll_kind kind, const struct rt_knobs *k,
                                       size_t bytes_per_rank, int nranks)
{
    if (k->cma_threshold == RT_SIZE_AUTO && coll_host_cma_auto(kind, nranks, bytes_per_rank))
        return false;
    return coll_host_flag_path(k, coll_host_flag_bytes(kind, bytes_per_rank, nranks));
}

/* Which host path a call of kind moving bytes_per_rank between nranks ranks takes:
 * "flag" or "bulk" (the bulk path is one-pass or staged by the buffers; see
 * coll_host_run).  The one formula the library and arinfo share. */
const char *coll_host_path(enum coll_kind kind, const struct rt_knobs *k, size_t bytes_per_rank,
                           int nranks);

/* ARCOMM_WIRE_THRESHOLD as it applies: "auto" is ARCOMM_BF16_THRESHOLD's value. */
static inline size_t coll_wire_threshold(const struct rt_knobs *k)
{
    return k->wire_threshold == RT_SIZE_AUTO ? k->bf16_threshold : k->wire_threshold;
}

/* Is f32 narrowed to bf16 for a reduction with op of dtype moving bytes?  The host paths
 * carry bf16 (f32 inputs rounded once) for every op; ARCOMM_WIRE=int8 or fp8 leave host
 * calls at full width (docs/wire.md). */
static inline bool coll_narrows(const struct rt_knobs *k, comm_dtype_t dtype, comm_op_t op,
                                size_t bytes)
{
    static const struct wire_carry host = {.ops = {[WIRE_BF16] = WIRE_OPS_ALL}};
    return wire_pick(k->wire, coll_wire_threshold(k), &host, dtype, op, bytes) == WIRE_BF16;
}

/* host_common.c: the arrival handshake every host call starts with. */

/* Fills and publishes this rank's arrival word for call c->seq (status OK, seq last):
 * alone only where a rank leaves without waiting (the eager broadcast). */
void coll_arrive(struct comm *c, const struct shm_arrival *mine);

/*
 * The one coarse segment call every host collective, the split's handshakes and the
 * Hexagon backend start with: publishes this rank's arrival word for call c->seq with
 * the call's words (mine), waits for every peer's, and checks they agree with this
 * rank's (collective, count, dtype, op, root, path: flag or bulk, inline, addend):
 * COMM_ERR_MISMATCH on every rank otherwise, before any rank writes a byte of the call.
 * what names the call in messages.
 */
comm_status_t coll_meet(struct comm *c, const struct shm_arrival *mine, const char *what);

/* coll_meet's second half, for the one path that arrives before its own exchange and
 * waits for every arrival only to name a disagreement it found (the gather path). */
comm_status_t coll_wait_arrivals(struct comm *c, const char *what);

/* This rank's arrival word for call on path (what the peers compare). */
static inline struct shm_arrival coll_arrival_of(const struct coll_call *call, unsigned path)
{
    struct shm_arrival a = {
        .count = call->count,
        .dtype = (uint8_t)call->dtype,
        .op = (uint8_t)call->op,
        .path = (uint8_t)path,
        .coll = (uint8_t)call->kind,
        .root = call->root,
    };
    return a;
}

/*
 * How peers may reach this rank's buffers bufs[0..n) (lens[i] bytes each; a buffer of
 * length 0 is one the peers do not touch): SHM_BUF_SAME_PROC (raw pointers, every rank
 * a thread of this process), SHM_BUF_IN_SEG (offsets: every buffer lies in the
 * comm_mem_alloc pools or, tagged SHM_HEAP_TAG, in this process's shared heap), SHM_BUF_CMA (raw
 * pointers of this process, for process_vm_readv/writev: only when cma says the call may take the
 * CMA path and the communicator agreed on CMA at join), or 0.  out[i] receives what to publish.
 */
uint32_t coll_reach(const struct comm *c, int n, const void *const *bufs, const size_t *lens,
                    bool cma, uint64_t *out);

/*
 * After a bulk call's handshake: the path every rank takes, from the buffer kinds every
 * rank published (mine_flags: this rank's own, the only kinds that can be common to
 * all): one-pass where all reach every buffer (raw pointers between thread ranks, or
 * offsets), CMA where all offered it, else staged; staged whatever the buffers where the
 * plan's row says so; counted in c->shm->bulk_calls.
 */
struct coll_plan;
enum shm_bulk coll_bulk_path(struct comm *c, const struct coll_plan *plan, uint32_t mine_flags);

/* Does a call of kind moving bytes_per_rank between nranks ranks take the CMA path
 * where the buffers allow it, on resolved knobs (cma_threshold is off for thread ranks
 * and where some rank cannot reach its peers)?  fast: the ranks agreed at join that the
 * single copy is fast (struct shm_comm.cma_fast). */
static inline bool coll_host_cma_size(enum coll_kind kind, const struct rt_knobs *k,
                                      size_t bytes_per_rank, int nranks, bool fast)
{
    size_t t = k->cma_threshold;
    if (t == RT_SIZE_OFF)
        return false;
    if (t == RT_SIZE_AUTO)
        return coll_host_cma_auto(kind, nranks, bytes_per_rank) ||
               (fast && coll_host_cma_fast_window(kind, nranks, bytes_per_rank));
    return bytes_per_rank >= t;
}

/*
 * Does a bulk call of kind moving bytes_per_rank offer the CMA path (host_paths.c)?
 * The windows are the same on every rank: the knob is agreed at join (RT_KNOB_AGREE),
 * and so are whether every rank reaches every peer (c->shm->cma) and whether all found
 * the single copy fast (c->shm->cma_fast).  Inside the windows of ARCOMM_CMA_THRESHOLD=
 * auto each call is tuned, per collective and size class: the first COLL_CMA_BURST calls
 * run on CMA and the next COLL_CMA_BURST on the staging slots; then a burst of
 * COLL_CMA_BURST runs on the path not in use at calls 64, 128, 256, 512 and every 1024
 * calls from 1024 on, and the rest on the one with the lower time per byte as this rank
 * measured it (coll_tune_record: the median of its last 3 calls, the first call on a
 * path after the other not counted).  The bursts thin out because the path measured
 * slower may be twice as slow and more (process_vm_readv at a fifth of memcpy's rate on
 * the AMD VM): with a burst every 64 calls, 1 and 2 MiB per rank allgathers of 2
 * process ranks there took 96 and 191 us at the 90th percentile, 65 and 135 us on
 * average; with these, 71 and 160, 63 and 129 (medians of 10 alternated runs,
 * docs/PERFORMANCE.md).  A path that gets slower is left after two of its calls show
 * it; that the other got faster is seen within 1024 calls.  The schedule depends on the
 * call's number alone, so that the exploring calls are the same on every rank; ranks
 * that measure differently still agree: the call takes CMA only if every rank offered
 * it.  coll_host_cma_done records the call's time.
 */
#define COLL_CMA_EXPLORE     64
#define COLL_CMA_EXPLORE_MAX 1024
#define COLL_CMA_BURST       3
/*
 * The flag path or CMA, for calls of 2 process ranks that agreed at join that the single
 * copy is fast (c->shm->cma_fast) and that the flag path would take: every kind from
 * COLL_CHOICE_MIN bytes per rank.  Whether flag or bulk must be the same on
 * every rank before the call, so rank 0 alone measures and chooses, and publishes each
 * choice in the segment (shm_header.choice, one word per kind and size class) as
 * {old, new, from}: new from call number `from` on, old before.  Rank 0 writes a word
 * only at the end of a call s, with from = s + 2 and old = the choice in force for s + 1:
 * a rank still in call s + 1 reads the same choice from either word, and a rank in call
 * s + 2 has seen rank 0 arrive in call s + 1, which it did after the write.
 */
#define COLL_CHOICE_MIN     (16u << 10)
#define COLL_CHOICE_CLASSES 8
uint64_t coll_choice_pack(uint32_t from, bool old, bool now);
/* The choice a word gives call number seq (wrapping call numbers compared as such). */
bool coll_choice_at(uint64_t word, uint32_t seq);
/* One call's part in it. */
struct coll_choice {
    bool active; /* a call the choice covers */
    bool cma;    /* CMA (the bulk path, CMA offered) instead of the flag path */
    unsigned index;
    uint32_t seq;
    uint64_t t0; /* rank 0: when the call started */
};
/* Takes the choice in force for this call (c->seq) of kind moving bytes_per_rank, which
 * the flag path would take; true: CMA instead. */
bool coll_choice_take(struct comm *c, enum coll_kind kind, size_t bytes_per_rank,
                      struct coll_choice *ch);
/* After the call, on rank 0: its time counted, the choice for later calls published. */
void coll_choice_done(struct comm *c, const struct coll_choice *ch, size_t bytes_per_rank);

/* A tuned size class: the calls seen, each path's time per byte (0: not measured yet)
 * and the last COLL_TUNE_SAMPLES counted times it is taken from, and the path of the
 * class's last call. */
#define COLL_TUNE_SAMPLES 3
struct coll_tune_cell {
    uint64_t calls;
    double ns_per_byte[2]; /* [0] staged (or flag), [1] CMA */
    double sample[2][COLL_TUNE_SAMPLES];
    uint8_t nsamples[2], next[2];
    int8_t last; /* the last call's path + 1; 0: none yet */
};
/* A call of t's class took path (1: CMA) in ns: counted unless it was the first on its
 * path after a call on the other (it ran cold: the other path's buffers in the caches).
 * A path's time is the median of its last 3 counted calls (the lower of 2, the one of
 * 1): one call the host delayed (a preemption: 10-70 times a call's time on the
 * development VM) changes nothing, two in a row do; the mean with half the weight on
 * the newest call that it replaces moved to the other path on every such call, and
 * stayed there until the next exploring burst. */
void coll_tune_record(struct coll_tune_cell *t, int path, uint64_t ns, size_t bytes_per_rank);
/* The tuner's rule for call n of a size class (pure, for the tests): offer CMA? */
bool coll_cma_tune_offer(uint64_t n, double staged_ns, double cma_ns);
/* Is call n one of an exploring burst (on the path measured slower)? */
bool coll_cma_tune_exploring(uint64_t n);
struct coll_cma_pick {
    bool offer;                  /* offer CMA in this call's handshake */
    struct coll_tune_cell *cell; /* the tuned size class, or NULL: not tuned */
    uint64_t t0;                 /* when the call started (tuned calls) */
};
/* After a tuned call that ran on the staged (cma false) or the CMA path. */
void coll_host_cma_done(struct comm *c, const struct coll_cma_pick *p, bool cma,
                        size_t bytes_per_rank);

/*
 * The CMA reduction of one range (host_paths.c): count elements of every rank's input
 * (peer p's at address in[p] of its process, this rank's at own) are reduced in rank
 * order, chunk by chunk through a cache-sized private scratch, into dst (this rank's
 * memory; NULL: the scratch only), and each chunk's result is written to every peer p
 * with out[p] != 0 at out[p] of its process.  what names the call in messages.
 */
comm_status_t coll_cma_reduce(struct comm *c, const struct coll_call *call, const uint64_t *in,
                              const void *own, size_t count, void *dst, const uint64_t *out,
                              const char *what);

/*
 * A peer's buffer as this rank can address it, or NULL (the message recorded, status
 * COMM_ERR_PEER) when peer p published one this rank must not touch: an offset must
 * lie, with its whole length, in the segment's pools; a raw pointer is only taken from
 * a rank known at join to live in this process.
 */
void *coll_peer_ptr(struct comm *c, int p, const struct shm_arrival *a, uint64_t v, uint64_t len,
                    const char *what);

/*
 * One host collective's paths, for coll_host_run.  The flag path: flag_stage copies
 * what the peers read into this rank's staging slot, the ranks arrive and agree, and
 * flag_finish reads the peers' slots (slot: the staging slot number of the call).  The
 * bulk path: the ranks publish the buffers peers touch (expose_send, expose_recv: this
 * rank's sendbuf or recvbuf, as far as coll_call_shape says it uses them) and agree;
 * direct when every rank can reach every such buffer, else CMA when every rank offered
 * it (coll_host_cma), else staged.
 */
struct coll_host_algo {
    const char *flag_what; /* the stage, in messages: "broadcast (flag path)" */
    const char *bulk_what;
    void (*flag_stage)(struct comm *c, const struct coll_call *call, void *slot);
    void (*flag_finish)(struct comm *c, const struct coll_call *call, uint32_t slot);
    bool expose_send, expose_recv;
    comm_status_t (*direct)(struct comm *c, const struct coll_call *call);
    comm_status_t (*staged)(struct comm *c, const struct coll_call *call);
    /* The CMA path: every rank published raw send and recv pointers (SHM_BUF_CMA). */
    comm_status_t (*cma)(struct comm *c, const struct coll_call *call);
};

/* The plan of a validated call on this communicator (paths.c: the first row of its path
 * table the call matches; narrow: allreduce's f32 travels as bf16), and after a call
 * that succeeded, the tuner layer's part (rank 0 times a call its choice covered). */
void coll_host_plan(struct comm *c, const struct coll_call *call, bool narrow,
                    struct coll_plan *plan);
void coll_host_plan_done(struct comm *c, const struct coll_plan *plan,
                         const struct coll_call *call);

/* Runs a validated call through algo's path for it, as its plan says (a call of count 0
 * only arrives and agrees); publishes the call's completion when it succeeds. */
comm_status_t coll_host_run(struct comm *c, const struct coll_call *call,
                            const struct coll_host_algo *algo);

/* Reduces count elements of the n sources (rank order) into dst, in call's dtype and op
 * (AVG divides by n); offset is dst's element index in the tensor, nt streams the stores. */
void coll_reduce_block(const struct coll_call *call, void *dst, const void *const *src, int n,
                       size_t count, size_t offset, bool nt);

/* Publishes this rank's progress and waits for every peer's: the end of a one-pass
 * path (peers read and write this rank's buffers until every rank is done) and of a
 * staged round. */
comm_status_t coll_sync(struct comm *c, const char *what);

/*
 * The staged pipeline of the rooted collectives (broadcast: the root produces, the
 * others consume; reduce: the others produce, the root consumes).  A producer's two
 * staging slots are one ring of places of chunk elements; in round k every producer
 * fills place k % places and every consumer uses round k's places, so producers fill
 * ahead while consumers drain.  Every rank publishes one progress step per round, so
 * that the ranks' step counts stay equal: a consumer waits for every producer's step
 * k + 1 before round k, a producer for every consumer's step k + 1 - places before it
 * overwrites a place, and a producer returns only when every consumer has drained
 * the ring (the next call may write any place).
 */
struct coll_pipe {
    struct comm *c;
    int root;
    size_t chunk;       /* elements per round */
    size_t place_bytes; /* a place: chunk elements, whole cache lines */
    size_t per_slot;    /* places in one slot */
    size_t places;      /* places in the ring (both slots) */
    size_t rounds;
    uint64_t base; /* this rank's progress steps before round 0 (every rank's alike) */
};

/*
 * A round's chunk, in bytes (at most a slot).  128 KiB keeps a producer's place and a
 * consumer's reads of it in the caches while the ring holds 16 of them (1 MiB slots).
 * Allgather, where every rank produces and consumes at once, reads 5-6% faster at 2-4 MiB
 * with 256 KiB chunks on the 2-core EPYC VM, broadcast and reduce 5-10% slower at 1-2 MiB
 * (docs/PERFORMANCE.md, 2026-12-03 19:45).
 */
#define COLL_PIPE_CHUNK_BYTES           (128u << 10)
#define COLL_PIPE_CHUNK_BYTES_ALLGATHER (256u << 10)

void coll_pipe_begin(struct coll_pipe *pp, struct comm *c, int root, size_t count, size_t esize,
                     size_t chunk_bytes);
/* Rank p's place for round k. */
void *coll_pipe_place(const struct coll_pipe *pp, int p, size_t k);
/* Waits until the root (root_side) or every other rank has published step base + steps
 * (root -1, allgather's pipeline where every rank produces and consumes: every rank). */
comm_status_t coll_pipe_wait(const struct coll_pipe *pp, bool root_side, uint64_t steps,
                             const char *what);

/* Elements in each of regions equal parts of a staging slot (64-byte multiples, so
 * regions keep to their own cache lines), for the staged paths that cut slots so. */
static inline size_t coll_region_elems(const struct comm *c, size_t esize, int regions)
{
    return (size_t)(c->shm->slot_bytes / (uint64_t)regions / 64 * 64) / esize;
}

/* Region idx (of region_bytes each) of owner's staging slot slot. */
static inline void *coll_region(const struct comm *c, int owner, uint32_t slot, int idx,
                                size_t region_bytes)
{
    return (char *)shm_slot(c->shm, owner, slot) + (size_t)idx * region_bytes;
}

/* The [lo, hi) element range rank r reduces out of count (64-byte aligned cuts). */
void coll_slice(size_t count, size_t esize, int nranks, int r, size_t *lo, size_t *hi);

/* Alternating staging slot for the next phase that writes staging (all ranks alike). */
uint32_t coll_next_stage_slot(struct comm *c);

/*
 * The flag path's messages of at most SHM_INLINE_BYTES per rank (what a rank stages:
 * coll_host_flag_bytes) travel inside the arrival line, where the waiter's one miss on
 * the line brings them with the word; the slot they would take is COLL_SLOT_INLINE.
 * Every rank decides alike from the agreed kind, count and dtype (and the peers check
 * SHM_BUF_INLINE with the rest).
 */
#define COLL_SLOT_INLINE UINT32_MAX

static inline bool coll_flag_inline(size_t staged_bytes)
{
    return staged_bytes > 0 && staged_bytes <= SHM_INLINE_BYTES;
}

/* Where rank p's flag-path message of this call lies: its slot, or its arrival line. */
static inline void *coll_flag_data(const struct comm *c, int p, uint32_t slot)
{
    return slot == COLL_SLOT_INLINE ? shm_arrival_at(c->shm, c->seq, p)->data
                                    : shm_slot(c->shm, p, slot);
}

/* The eager broadcast (broadcast_eager.c, ARCOMM_BCAST_EAGER): does this call take it
 * (decided from the call alone, as on every rank), and the call itself. */
bool coll_bcast_eager_takes(const struct comm *c, const struct coll_call *call);
/* Its ranks publish without a fence before looking for sleepers: a sleep on such a
 * communicator lasts at most this long (shm_ring_lax). */
#define COLL_EAGER_WAKE_NS 1000000u
comm_status_t coll_bcast_eager(struct comm *c, const struct coll_call *call);
/* The eager reduce (reduce_eager.c, ARCOMM_REDUCE_EAGER): the same pair. */
bool coll_reduce_eager_takes(const struct comm *c, const struct coll_call *call);
comm_status_t coll_reduce_eager(struct comm *c, const struct coll_call *call);

/* Are eager calls on for this communicator (its rings in use, its wake-ups lax)? */
static inline bool coll_eager_on(const struct rt_knobs *k)
{
    return k->bcast_eager != RT_SIZE_OFF || k->reduce_eager != RT_SIZE_OFF;
}

/*
 * The eager calls' rings (broadcast_eager.c; layout.h struct shm_eager), for call
 * c->seq, the communicator's eager call number c->shm->eager_calls.  A writer claims its
 * entry (waiting while the ring is full: every peer completed the call that last wrote
 * it; NULL and *status on a failure, what naming the wait) and posts its call and bytes
 * of data there (tag last, release).  A reader waits for peer p's entry (*other: p made
 * a call of another kind, which its arrival word or its completion shows) and checks it
 * with coll_eager_agrees before it writes a byte; a disagreement goes to
 * coll_eager_mismatch (theirs: the peer's call as text), which publishes this rank's
 * call in its arrival word and fails with COMM_ERR_MISMATCH.  A rank that returns
 * without waiting first looks for a failure published since its last look
 * (coll_eager_peers_failed: how a mismatch that a peer found reaches it).
 */
struct shm_eager *coll_eager_claim(struct comm *c, const char *what, comm_status_t *status);
void coll_eager_post(struct comm *c, struct shm_eager *e, const struct coll_call *call,
                     const void *data, size_t bytes);
comm_status_t coll_eager_wait(struct comm *c, int p, const char *what, const char *missing,
                              const struct shm_eager **entry, bool *other);
bool coll_eager_agrees(const struct shm_eager *e, const struct coll_call *call, uint32_t seq);
comm_status_t coll_eager_mismatch(struct comm *c, const struct coll_call *call, int p,
                                  const char *theirs);
comm_status_t coll_eager_peers_failed(struct comm *c);
/* "broadcast count 10 dtype f32 root 0", "reduce count 3 dtype i32 op max root 1", for
 * messages (values as a peer published them: "?" where they name none). */
void coll_eager_describe(char *buf, size_t len, unsigned kind, uint64_t count, unsigned dtype,
                         unsigned op, int root);
void coll_eager_describe_entry(char *buf, size_t len, const struct shm_eager *e);
/* After an eager call the peers may still be in it: a call that synchronises first
 * waits until every peer completed every call before it. */
comm_status_t coll_settle_wait(struct comm *c);
static inline comm_status_t coll_settle(struct comm *c)
{
    return c->shm->eager_prev ? coll_settle_wait(c) : COMM_OK;
}

/* The host paths. */
comm_status_t coll_allreduce_flag(struct comm *c, const struct coll_call *call, bool narrow);
/* A flag-sized allreduce: the flat flag path, or the gather path (allreduce_gather.c)
 * where coll_small_gather says so for a message staging staged bytes per rank. */
comm_status_t coll_allreduce_small(struct comm *c, const struct coll_call *call, bool narrow);
bool coll_small_gather(const struct rt_knobs *k, int nranks, size_t slot_bytes, size_t staged);
comm_status_t coll_allreduce_direct(struct comm *c, const struct coll_call *call, bool narrow);
comm_status_t coll_allreduce_staged(struct comm *c, const struct coll_call *call, bool narrow);
/* Bytes per rank of a staged allreduce round (ARCOMM_STAGED_CHUNK_BYTES, "auto" from the
 * L2 and L3 sizes and the rank count), at most what slots of slot_bytes hold. */
size_t coll_staged_chunk_bytes(const struct rt_knobs *k, const struct rt_topo_summary *topo,
                               int nranks, size_t slot_bytes);
comm_status_t coll_allreduce_cma(struct comm *c, const struct coll_call *call);

#endif /* ARCOMM_COLL_H */
