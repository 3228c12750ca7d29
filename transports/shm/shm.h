/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory transport: the communicator's segment as mapped in this process,
 * and the primitives the host collectives are built from (staging slots, arrival
 * words, progress words, waiting).
 */
#ifndef ARCOMM_SHM_H
#define ARCOMM_SHM_H

#include "comm_base.h"
#include "layout.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct shm_pool_block;
struct shm_mapping;

/* The segment a backend asks for, in the knobs' terms: bytes, or RT_SIZE_OFF (no arena).
 * rt_knobs_load has turned "auto" into the table's default already. */
struct shm_sizes {
    size_t slot_bytes; /* each of a rank's two staging slots */
    size_t pool_bytes; /* a rank's comm_mem_alloc arena */
};

/* The bulk paths of the host collectives, as struct shm_comm counts them. */
enum shm_bulk {
    SHM_BULK_DIRECT, /* one-pass: every rank reaches every buffer */
    SHM_BULK_STAGED, /* through the staging slots */
    SHM_BULK_CMA,    /* single copy through process_vm_readv/writev */
    SHM_BULK_KINDS,
};

struct shm_comm {
    char name[SHM_NAME_MAX]; /* "/arcomm-<hex>", for shm_unlink */
    bool unlinked;           /* the name is gone (normally right after rendezvous) */
    uint8_t *base;           /* the whole segment, mapped here */
    size_t size;
    struct shm_header *hdr;
    uint32_t nranks;             /* local copy: never re-read from the header */
    struct shm_rank *ranks;      /* [nranks] */
    struct shm_arrival *arrival; /* [SHM_SLOTS][nranks] */
    struct shm_eager *eager;     /* [nranks][SHM_EAGER_ENTRIES] */
    uint8_t *staging;            /* rank r slot s at (r * SHM_SLOTS + s) * slot_bytes */
    uint64_t slot_bytes;
    uint8_t *pool; /* rank r's arena at r * pool_bytes */
    uint64_t pool_bytes;
    struct shm_pool_block *blocks; /* this rank's arena: blocks in address order */
    struct shm_mapping *mapping;   /* the process-wide mapping record (mapping.c) */
    int ext_refs_private;          /* ext holders when the mapping is not shared */
    struct shm_sizes want;         /* what the backend asked for (rank 0 creates it so) */

    /* This rank's side of the protocol, which only the segment and the host
     * collectives built on it read. */
    uint64_t steps; /* progress steps this rank has published */
    /* Nonzero: some publisher on this segment looks for sleepers without a fence after
     * its store (shm_ring_lax), so a waiter sleeps at most this long before it looks
     * again (a wake-up missed in that race costs this much at most). */
    uint64_t lax_wake_ns;
    /* The eager broadcasts (collectives/broadcast_eager.c): */
    uint64_t eager_calls; /* made on this communicator (the same count on every rank) */
    bool eager_prev;      /* the last call was one: peers may still be in it, so the next
                           * call of another kind first waits until they completed it */
    uint32_t eager_done;  /* every peer completed the calls before this one (seen) */
    uint32_t eager_bell;  /* the doorbell's count when the peers' status was last read */
    bool same_process;    /* every rank lives in this process */
    bool cma;             /* every rank reaches every peer's memory through CMA (agreed at
                           * join: the same on every rank) */
    bool cma_fast;        /* and 2 ranks that all found the single copy fast (agreed at
                           * join; cma_calibrate.h): ARCOMM_CMA_THRESHOLD=auto's wider
                           * windows */
    bool same_cpu_check;  /* ranks unpinned: waiters check for a peer on their CPU */
    long spin_ns;         /* effective spin phase */

    /* The shared heaps (peer_heap.c): heap is true when every rank is in a process with
     * one and mapped every peer's (agreed at join); buffers there travel as heap offsets
     * (SHM_HEAP_TAG). */
    bool heap;
    uint8_t **heap_base;  /* [nranks] with heap: rank p's heap as mapped here (this rank's
                           * and its process's: the process's own heap) */
    uint64_t *heap_bytes; /* [nranks] with heap: its size */
    uint64_t heap_min;    /* with heap: the largest ARCOMM_HEAP_MIN of the ranks (agreed):
                           * buffers from this size lie in the heaps */

    uint64_t bulk_calls[SHM_BULK_KINDS]; /* host bulk calls by path (enum shm_bulk) */

    /* Point-to-point (layout.h, collectives/p2p/): the channels and the stages. */
    uint8_t *p2p_chan;     /* channel (dst, src) at (dst * nranks + src) * p2p_stride */
    uint8_t *p2p_stage;    /* rank r's two chunks at (2 * r + i) * p2p_chunk */
    uint64_t p2p_stride;   /* bytes per channel, its eager room included */
    uint64_t p2p_eager;    /* eager room of a channel */
    uint64_t p2p_chunk;    /* bytes of one stage chunk */
    uint64_t p2p_recvs[6]; /* messages this rank received, by enum shm_p2p_kind */

    /* The root cause of this rank's COMM_ERR_PEER, when it saw a peer fail: what it
     * publishes instead of its own message, so every rank names the rank that really
     * failed (root_rank1: that rank plus one; 0 = none seen). */
    uint32_t root_rank1;
    int32_t root_status;
    uint32_t root_kind; /* enum shm_root_kind */
    char root_msg[SHM_ERRMSG_BYTES];
};

_Static_assert(SHM_ERRMSG_BYTES >= RT_ERRMSG_BYTES, "a peer's message travels whole");
_Static_assert(64 * SHM_INIT_DONE_WORDS >= RT_MAX_RANKS, "a done bit for every rank");

/* Can shm serve these ranks (host buffers)?  When not, says why. */
bool shm_probe(const struct transport_probe *p, char *why, size_t len);

/*
 * The segment's failure publication, for every transport built on the segment: the
 * rank's sticky status and message (first caller wins), its arrival word for the
 * current call when in_call, and a ring of the doorbell.  See backend.h's
 * publish_failure.
 */
void shm_publish_failure(struct comm *c, comm_status_t status, const char *msg, bool in_call);
/* Wakes every waiter of the segment (comm_abort). */
void shm_wake(struct comm *c);
/*
 * A backend's setup failed after it joined the segment (status, with c->errmsg as the
 * reason): the one way every backend tells the peers waiting in their own setup, at
 * once rather than at their timeout (sticky status word, message, doorbell).
 */
void shm_setup_failed(struct comm *c, comm_status_t status);

/* segment.c */
/* Creates (rank 0) or attaches to the communicator's segment, sized as asked, and waits
 * for every rank (the rendezvous); publishes its own failures. */
comm_status_t shm_segment_join(struct comm *c, const struct shm_sizes *sizes);
/* shm_segment_join sized by the knobs (ARCOMM_SHM_SLOT_BYTES, ARCOMM_MEM_POOL_BYTES). */
comm_status_t shm_segment_create_or_attach(struct comm *c);
void shm_segment_detach(struct comm *c);
/* The shared-memory name of a communicator id ("/arcomm-<hex>"). */
void shm_segment_name(const comm_id_t *id, char *name, size_t len);
/* Tells the other ranks of communicator id, joining or about to, that this rank failed
 * comm_init (status, msg) before it could join; returns once they know (at most a few
 * seconds, never past timeout_ms).  segment.c says how. */
void shm_init_failure_publish(const comm_id_t *id, int nranks, int rank, long timeout_ms,
                              comm_status_t status, const char *msg);
/* Reserves the pages of [p, p + len) of the segment, so touching them cannot SIGBUS;
 * 0 or an errno. */
int shm_segment_reserve(struct comm *c, void *p, size_t len);

/*
 * Per-process state a transport keeps on the mapping (CUDA registers it with the
 * driver once per process, however many thread ranks share it): setup runs for the
 * first holder, teardown for the last, both under the registry lock.
 */
typedef comm_status_t (*shm_ext_setup_fn)(struct comm *c, void *base, size_t size);
typedef void (*shm_ext_teardown_fn)(void *base, size_t size);
comm_status_t shm_mapping_ext_hold(struct comm *c, shm_ext_setup_fn setup);
void shm_mapping_ext_release(struct comm *c, shm_ext_teardown_fn teardown);

/* peer_heap.c: the shared heaps of process ranks (libarcomm_heap.so, heap_abi.h). */
struct shm_heap_own {
    uint8_t *base;
    uint64_t bytes;
    uint64_t min_bytes; /* ARCOMM_HEAP_MIN of this process */
    int fd;
};
/* This process's shared heap: false without libarcomm_heap.so (or when it has none). */
bool shm_heap_own(struct shm_heap_own *own);
/* Maps every rank's heap into s->heap_base (a rank of this process: own, this process's
 * heap); false, with nothing held and the reason logged, when some rank has none or one
 * cannot be mapped.  Needs s->ranks' line 0 of every rank (after every rank attached). */
bool shm_heap_map_peers(struct comm *c, struct shm_comm *s, const struct shm_heap_own *own);
/* Is [p, p + len) in this process's heap, shared with the peers?  Its offset there into
 * *offset (heap_abi.h: arcomm_heap_share). */
bool shm_heap_share(const void *p, size_t len, uint64_t *offset);
/* Drops what shm_heap_map_peers holds (any time, also when it held nothing). */
void shm_heap_unmap_peers(const struct comm *c, struct shm_comm *s);

/* cma.c: Cross Memory Attach (process_vm_readv/writev) between process ranks. */

/* The address of this process's probe word (struct shm_rank.cma_word). */
uint64_t shm_cma_word(void);
/* Can this rank read every peer's probe word (s->ranks published)?  When not, logs why
 * at debug level. */
bool shm_cma_probe(const struct comm *c, const struct shm_comm *s);
/*
 * Copies len bytes between this rank's local and peer's address remote in peer's
 * process: read (peer to local) or write (local to peer).  A partial transfer is
 * continued; a failure is recorded (rank, peer, what, errno) and returns COMM_ERR_PEER.
 */
comm_status_t shm_cma_read(struct comm *c, int peer, void *local, uint64_t remote, size_t len,
                           const char *what);
comm_status_t shm_cma_write(struct comm *c, int peer, const void *local, uint64_t remote,
                            size_t len, const char *what);

/* pool.c: comm_mem_alloc arenas. */
comm_status_t shm_pool_alloc(struct comm *c, size_t bytes, void **ptr);
comm_status_t shm_pool_free(struct comm *c, void *ptr);
void shm_pool_release(struct comm *c);

static inline struct shm_arrival *shm_arrival_at(const struct shm_comm *s, uint32_t seq, int rank)
{
    return &s->arrival[(seq % SHM_SLOTS) * s->nranks + (uint32_t)rank];
}

/* The point-to-point channel from src to dst, and its eager room. */
static inline struct shm_p2p_chan *shm_p2p_chan_at(const struct shm_comm *s, int dst, int src)
{
    return (struct shm_p2p_chan *)(s->p2p_chan +
                                   ((uint64_t)dst * s->nranks + (uint64_t)src) * s->p2p_stride);
}

static inline uint8_t *shm_p2p_eager_room(struct shm_p2p_chan *ch)
{
    return (uint8_t *)(ch + 1);
}

/* Chunk i (0 or 1) of rank's stage. */
static inline uint8_t *shm_p2p_stage_chunk(const struct shm_comm *s, int rank, uint64_t i)
{
    return s->p2p_stage + ((uint64_t)rank * 2 + i % 2) * s->p2p_chunk;
}

/* The entry of rank's eager ring that the communicator's eager broadcast n takes. */
static inline struct shm_eager *shm_eager_at(const struct shm_comm *s, int rank, uint64_t n)
{
    return &s->eager[(size_t)rank * SHM_EAGER_ENTRIES + n % SHM_EAGER_ENTRIES];
}

static inline void *shm_slot(const struct shm_comm *s, int rank, uint32_t seq)
{
    return s->staging + ((uint64_t)rank * SHM_SLOTS + seq % SHM_SLOTS) * s->slot_bytes;
}

/* Is [p, p + len) inside the segment? */
static inline bool shm_contains(const struct shm_comm *s, const void *p, size_t len)
{
    const uint8_t *b = p;
    return b >= s->base && len <= s->size && (size_t)(b - s->base) <= s->size - len;
}

/* Is [off, off + len) inside the comm_mem_alloc pools (the only segment memory a
 * buffer a rank publishes may lie in)?  Overflow-safe for any off and len. */
static inline bool shm_pool_range(const struct shm_comm *s, uint64_t off, uint64_t len)
{
    uint64_t lo = (uint64_t)(s->pool - s->base);
    return off >= lo && off <= s->size && len <= s->size - off;
}

/* Wrap-aware: has a reached b? */
static inline bool shm_seq_reached(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) >= 0;
}

/* wait.c */

/* A wait condition: 1 = ready, 0 = not yet, < 0 = a comm_status_t to fail with (the
 * condition has already recorded the message with rt_error). */
typedef int (*shm_ready_fn)(struct comm *c, void *arg);

/* For a timeout message: is peer still missing for the condition? */
typedef bool (*shm_behind_fn)(struct comm *c, void *arg, int peer);

/*
 * Waits until ready says so: spin (c->shm->spin_ns), then sched_yield (yield_ns), then sleep
 * on the doorbell futex.  Bounded by the timeout; ends early on comm_abort, on a peer's
 * published failure, and on a dead peer process, except a peer that completed this
 * call (c->seq): it can fail only calls it never made.  what names the stage in
 * messages.
 */
comm_status_t shm_wait(struct comm *c, shm_ready_fn ready, void *arg, const char *what);

/* shm_wait whose timeout names the peers still behind (behind) and those not: "rank 2
 * did not <missing> (ranks 1, 3 did)". */
comm_status_t shm_wait_for(struct comm *c, shm_ready_fn ready, shm_behind_fn behind, void *arg,
                           const char *what, const char *missing);

/* Writes what a wait is for ("comm_recv from rank 2 ...") and what a peer did not do
 * ("make the matching comm_send to rank 0"), for its failure messages alone. */
typedef void (*shm_describe_fn)(struct comm *c, void *arg, char *what, size_t what_len,
                                char *missing, size_t missing_len);

/* shm_wait_for of a wait that is no collective's (point-to-point): only the failure or
 * death of a peer that watch names ends it early, whatever calls it completed; a timeout
 * says "a rank did not <missing>".  describe makes what and missing only where a message
 * needs them (a wait that ends well formats nothing: a send's wait of 0.2 us spent half
 * of it in snprintf). */
comm_status_t shm_wait_watch(struct comm *c, shm_ready_fn ready, shm_behind_fn watch, void *arg,
                             shm_describe_fn describe);

/* After publishing a word peers may sleep on: wake them if any sleeps. */
void shm_ring(struct shm_comm *s);
/* The same after a seq_cst read-modify-write of the word published (which orders it
 * before the load of the sleeper count as the fence would: one locked instruction
 * fewer per publication). */
void shm_ring_after_rmw(struct shm_comm *s);
/* The same without the fence: cheap, but a waiter that went to sleep just as the word
 * was published may sleep on until its slice ends; only where s->lax_wake_ns bounds the
 * slices. */
void shm_ring_lax(struct shm_comm *s);
/* Wakes every sleeper unconditionally (abort, teardown). */
void shm_ring_all(struct shm_comm *s);

/* Records the CPU this rank runs on, for waiters deciding whether to spin. */
void shm_note_cpu(struct comm *c);

/* Publishes this rank's progress step (release) and wakes sleepers. */
void shm_progress_publish(struct comm *c);
/* Waits until every peer's progress reached c->shm->steps. */
comm_status_t shm_progress_wait_all(struct comm *c, const char *what);
/* Waits until rank root's progress (only_root), or every other rank's, reached target. */
comm_status_t shm_progress_wait_side(struct comm *c, int root, bool only_root, uint64_t target,
                                     const char *what);

/* Which peers shm_dead_peer looks at. */
enum shm_peers {
    SHM_PEERS_ALL,     /* every rank of another process */
    SHM_PEERS_CLAIMED, /* those that published their identity (rendezvous) */
    SHM_PEERS_IN_CALL, /* those that did not complete call c->seq (one that did and exited
                        * broke nothing of it) */
};
/* The first such peer whose process is gone (exited, killed, a zombie), or -1: the one
 * dead-peer check of every waiter, run every RT_LIVENESS_PERIOD_NS. */
int shm_dead_peer(const struct comm *c, enum shm_peers which);

/* Checks the peers' sticky status words; records the first failure seen.  A peer that
 * completed call c->seq is not a failure of this call. */
comm_status_t shm_check_peers(struct comm *c);

/* While a split's new communicator c joins (c->parent set): has a peer of the
 * communicator being split published a failure, or died?  Then its peers will never all
 * join: records why on c (and on the parent, which the split then breaks) and returns
 * COMM_ERR_PEER.  COMM_OK otherwise, and always without a parent.  Every wait of the
 * join runs it with its dead-peer check. */
comm_status_t shm_parent_check(struct comm *c);

/* Peer's failure word: its sticky status (acquire: its message is whole after it). */
static inline int32_t shm_peer_status(const struct comm *c, int peer)
{
    return atomic_load_explicit(&c->shm->ranks[peer].status, memory_order_acquire);
}

/* Peer's failure message, meaningful once shm_peer_status is not COMM_OK. */
static inline const char *shm_peer_errmsg(const struct comm *c, int peer)
{
    return c->shm->ranks[peer].errmsg;
}

/* Peer's process id, as it published it when it joined. */
static inline pid_t shm_peer_pid(const struct comm *c, int peer)
{
    return c->shm->ranks[peer].pid;
}

/* Did peer complete call seq?  All its writes for that call are visible after this. */
static inline bool shm_peer_completed(const struct shm_comm *s, int peer, uint32_t seq)
{
    return shm_seq_reached(atomic_load_explicit(&s->ranks[peer].completed, memory_order_acquire),
                           seq + 1);
}

/* Publishes that this rank completed call c->seq (release): called when a call that
 * went through the segment succeeded, before the caller counts it. */
static inline void shm_complete(struct comm *c)
{
    atomic_store_explicit(&c->shm->ranks[c->rank].completed, c->seq + 1, memory_order_release);
}

/*
 * Records, as COMM_ERR_PEER, that peer failed with status (its sticky status word or
 * its arrival status, loaded with acquire order), passing on the root cause the peer
 * published, and returns COMM_ERR_PEER.
 */
comm_status_t shm_peer_failed(struct comm *c, int peer, int32_t status);

#endif /* ARCOMM_SHM_H */
