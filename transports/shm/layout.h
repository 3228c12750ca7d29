/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory segment of one communicator: what every rank maps, byte for byte.
 * Rank 0 creates it; the others check it before trusting a byte (segment.c).
 *
 *   offset 0            struct shm_header          (one page)
 *   off_ranks           struct shm_rank[nranks]    (ten cache lines each)
 *   off_arrival         struct shm_arrival[2][nranks]  (one cache line each)
 *   off_staging         rank r: slot 0, slot 1     (slot_bytes each, page aligned)
 *   off_pool            rank r: pool_bytes         (comm_mem_alloc arena, page aligned)
 *
 * Every field written by more than one rank is atomic; every field a peer polls sits on
 * a cache line that only its owner writes, so a waiter's spin never steals the line
 * from the writer more than once per publication.
 */
#ifndef ARCOMM_SHM_LAYOUT_H
#define ARCOMM_SHM_LAYOUT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_CACHE_LINE   64
#define SHM_PAGE         4096
#define SHM_MAGIC        0x41524353484d3031ull /* "ARCSHM01" */
#define SHM_VERSION      13u
#define SHM_SLOTS        2
#define SHM_ERRMSG_BYTES 512 /* a whole comm_last_error message (RT_ERRMSG_BYTES) */
#define SHM_NAME_MAX     80
/* Header room for the init failure record and the agreed knobs. */
#define SHM_INIT_DONE_WORDS 4 /* bits for 256 ranks (RT_MAX_RANKS) */
#define SHM_AGREE_MAX       16
#define SHM_INIT_MSG_BYTES  SHM_ERRMSG_BYTES /* whole, like a call's */
#define SHM_CHOICES         48               /* words of shm_header.choice */

/* Header: written by rank 0 before it publishes magic; read-only afterwards, except
 * the lines marked otherwise. */
struct shm_header {
    /* --- line 0: identity and geometry, immutable once magic is set --- */
    _Atomic uint64_t magic; /* SHM_MAGIC, stored last with release order */
    uint32_t version;       /* SHM_VERSION: the layout of this file */
    uint32_t nranks;        /* ranks in the communicator */
    uint64_t total_bytes;   /* size of the whole segment */
    uint64_t slot_bytes;    /* bytes of each staging slot (two per rank) */
    uint64_t pool_bytes;    /* bytes of each rank's comm_mem_alloc arena */
    uint32_t owner_uid;     /* effective uid of rank 0 (also checked with fstat) */
    uint32_t header_bytes;  /* sizeof(struct shm_header), as built by rank 0 */
    uint64_t off_ranks;     /* offset of struct shm_rank[nranks] */
    /* --- line 1 --- */
    alignas(SHM_CACHE_LINE) uint64_t off_arrival; /* offset of struct shm_arrival[2][n] */
    uint64_t off_staging;                         /* offset of the staging slots */
    uint64_t off_pool;                            /* offset of the pools */
    char transport[16];                           /* transport that created it, NUL-terminated */
    uint64_t off_eager;                           /* offset of struct shm_eager[n][ENTRIES] */
    uint64_t off_p2p; /* offset of the point-to-point region (struct shm_p2p_chan) */
    uint8_t pad1[8];
    /* --- line 2: rendezvous, written by every rank during comm_init --- */
    alignas(SHM_CACHE_LINE) _Atomic uint32_t attached; /* ranks that have joined */
    _Atomic int32_t init_status; /* COMM_OK, or why some rank gave up joining */
    _Atomic int32_t init_rank;   /* the rank that set init_status */
    _Atomic uint32_t cma_probed; /* ranks that finished the CMA probe (after attached) */
    _Atomic uint32_t cma_off;    /* nonzero: some rank cannot use CMA, or has it off */
    _Atomic uint32_t cma_slow;   /* nonzero: some rank found the single copy slow */
    _Atomic uint32_t heap_off;   /* nonzero: some rank has no shared heap, or could not map
                                  * a peer's (peer_heap.c) */
    uint8_t pad2[36];
    /* --- line 3: the doorbell that sleeping waiters block on (futex) --- */
    alignas(SHM_CACHE_LINE) _Atomic uint32_t bell; /* bumped when a sleeper must wake */
    _Atomic uint32_t sleepers;                     /* waiters blocked on bell right now */
    uint8_t pad3[56];
    /* --- line 4: how a failed rendezvous ends (segment.c, "failed rendezvous") --- */
    alignas(SHM_CACHE_LINE) _Atomic uint64_t
        init_done[SHM_INIT_DONE_WORDS]; /* bit r: rank
                                         * r left the failed rendezvous (or failed itself) */
    _Atomic uint32_t init_published;    /* 1 once init_rank and init_msg are written (release) */
    uint32_t stub;                      /* 1: only this header exists, made to carry a failure
                                         * that happened before a real segment (rank 0's) */
    uint32_t agree_count;               /* values in agree[] */
    uint8_t pad4[SHM_CACHE_LINE - 8 * SHM_INIT_DONE_WORDS - 12];
    /* --- lines 5..6: rank 0's values of the knobs every rank must share (knobs.c,
     * RT_KNOB_AGREE), in table order; a joining rank compares its own --- */
    alignas(SHM_CACHE_LINE) uint64_t agree[SHM_AGREE_MAX];
    /* --- lines 7..14: the message of the init failure, valid once init_published --- */
    alignas(SHM_CACHE_LINE) char init_msg[SHM_INIT_MSG_BYTES];
    /* --- lines 15..20: choices rank 0 makes for every rank, each valid from a call
     * number on (the collectives' lagged choices, host_paths.c); zero at creation --- */
    alignas(SHM_CACHE_LINE) _Atomic uint64_t choice[SHM_CHOICES];
};

/* Per-rank state: line 0 is written once at join; line 1 by its owner during calls. */
struct shm_rank {
    /* --- line 0: identity, written by the owner at join --- */
    _Atomic uint32_t claimed; /* 1 once a rank took this number, 2 once the fields
                               * below are written (release) */
    int32_t pid;              /* owner's process id */
    uint64_t start_time;      /* owner's start time (/proc/pid/stat field 22) */
    int32_t numa_node;        /* node its staging memory is bound to, -1 none */
    uint64_t cma_word;        /* address, in the owner's process, of a word holding
                               * SHM_CMA_MAGIC: what the peers' CMA probe reads */
    uint64_t heap_bytes;      /* size of the owner's shared heap (libarcomm_heap.so), 0:
                               * it has none */
    int32_t heap_fd;          /* with heap_bytes: the heap's memfd in the owner's process,
                               * which peers open as /proc/<pid>/fd/<heap_fd> */
    uint32_t pad_heap;
    uint64_t heap_min; /* with heap_bytes: allocations from this size lie in it */
    uint8_t pad0[SHM_CACHE_LINE - 56];
    /* --- line 1: progress of multi-step algorithms --- */
    alignas(SHM_CACHE_LINE) _Atomic uint64_t progress; /* steps completed, monotonic */
    _Atomic int32_t status;     /* sticky: COMM_OK, or the error that broke it */
    uint32_t failed_seq;        /* call number where status was set */
    _Atomic int32_t cpu;        /* CPU the owner last arrived from (-1 unknown): a
                                 * waiter on the same CPU yields instead of spinning */
    _Atomic uint32_t completed; /* host calls the owner completed (release, wraps): a
                                 * peer that completed call N never fails call N */
    /* The root cause of the owner's failure, valid with status like errmsg: */
    uint32_t root_rank1; /* 0: the owner's own failure; else the rank (plus one)
                          * whose failure the owner saw, and errmsg is that rank's */
    int32_t root_status; /* with root_rank1: the status the root rank failed with */
    uint32_t root_kind;  /* with root_rank1: enum shm_root_kind */
    uint8_t pad1[SHM_CACHE_LINE - 36];
    /* --- lines 2..9: the error text of the root cause, valid once status != COMM_OK:
     * the owner's own message, or (root_rank1) the root rank's, whole --- */
    char errmsg[SHM_ERRMSG_BYTES];
};

/* How the root rank of a failure failed. */
enum shm_root_kind {
    SHM_ROOT_FAILED = 0, /* it published root_status and errmsg itself */
    SHM_ROOT_DIED = 1,   /* its process exited; errmsg is what the rank that found it saw */
};

/* Path a rank takes for a call: the peers must agree. */
enum shm_path {
    SHM_PATH_FLAG = 1,
    SHM_PATH_BULK = 2,
    SHM_PATH_BARRIER = 3,
};

/* Buffer flags of an arrival. */
#define SHM_BUF_SAME_PROC 0x1u  /* send/recv/addend are raw pointers of owner's process */
#define SHM_BUF_IN_SEG    0x2u  /* send/recv/addend are offsets into the segment */
#define SHM_BUF_NARROW    0x4u  /* f32 travels as bf16 */
#define SHM_BUF_ADD       0x8u  /* fused add: addend/addend_count valid */
#define SHM_BUF_INLINE    0x20u /* flag path: the message is in the arrival's data */
#define SHM_BUF_CMA                                                                                \
    0x10u /* send/recv are raw pointers of owner's process, which                                  \
           * the peers reach with process_vm_readv/writev */

/* With SHM_BUF_IN_SEG, a published value with this bit set is an offset into the
 * owner's shared heap (peer_heap.c), not into the segment. */
#define SHM_HEAP_TAG (1ull << 63)
/* The largest shared heap a peer may publish (1 TiB, the heap's own cap). */
#define SHM_HEAP_MAX (1ull << 40)

/* The word every rank's CMA probe reads from each peer (struct shm_rank.cma_word). */
#define SHM_CMA_MAGIC 0x41524353434d4131ull /* "ARCSCMA1" */

/* Bytes of a flag-path message that travel inside the arrival line itself. */
#define SHM_INLINE_BYTES 32u

/*
 * One cache line per (slot, rank); the only writer is the owning rank.  A call with
 * number seq uses slot seq % 2.  The owner writes every other field, then status,
 * then seq (release); a reader loads seq (acquire), then the rest.  A flag-path
 * message of at most SHM_INLINE_BYTES (SHM_BUF_INLINE) travels in data, in the place
 * of the buffer fields the flag path does not use: the waiter's one miss on the line
 * brings the word and the data together.
 */
struct shm_arrival {
    _Atomic uint32_t seq;   /* call number this rank has reached (wraps; signed compare) */
    _Atomic int32_t status; /* COMM_OK, or the error this rank hit in this call */
    uint64_t count;         /* elements: what the peers must agree on ... */
    uint8_t dtype;          /* ... comm_dtype_t */
    uint8_t op;             /* ... comm_op_t */
    uint8_t path;           /* ... enum shm_path */
    uint8_t coll;           /* ... the collective (collectives/coll.h enum coll_kind) */
    uint32_t flags;         /* SHM_BUF_* */
    int32_t root;           /* ... broadcast's and reduce's root (0 for the others) */
    uint32_t align;         /* recvbuf's address mod 64 (bulk paths; peers mask it) */
    union {
        struct {
            uint64_t send;         /* sendbuf: pointer or offset (flags say which) */
            uint64_t recv;         /* recvbuf: pointer or offset */
            uint64_t addend;       /* addend: pointer or offset, with SHM_BUF_ADD */
            uint64_t addend_count; /* addend row length, with SHM_BUF_ADD */
        };
        unsigned char data[SHM_INLINE_BYTES]; /* with SHM_BUF_INLINE: the message */
    };
} __attribute__((aligned(SHM_CACHE_LINE)));

_Static_assert(sizeof(struct shm_header) == 21 * SHM_CACHE_LINE, "header is 21 lines");
_Static_assert(offsetof(struct shm_header, choice) == 15 * SHM_CACHE_LINE, "line 15");
_Static_assert(sizeof(struct shm_header) <= SHM_PAGE, "a failure stub is one page");
_Static_assert(offsetof(struct shm_header, init_done) == 4 * SHM_CACHE_LINE, "line 4");
_Static_assert(offsetof(struct shm_header, agree) == 5 * SHM_CACHE_LINE, "line 5");
_Static_assert(offsetof(struct shm_header, init_msg) == 7 * SHM_CACHE_LINE, "line 7");
_Static_assert(sizeof(struct shm_rank) == 2 * SHM_CACHE_LINE + SHM_ERRMSG_BYTES,
               "rank record is two lines and the message");
_Static_assert(SHM_ERRMSG_BYTES % SHM_CACHE_LINE == 0, "the message fills whole lines");
_Static_assert(sizeof(struct shm_arrival) == SHM_CACHE_LINE, "an arrival is one line");
_Static_assert(offsetof(struct shm_header, attached) == 2 * SHM_CACHE_LINE, "line 2");
_Static_assert(offsetof(struct shm_header, bell) == 3 * SHM_CACHE_LINE, "line 3");
_Static_assert(offsetof(struct shm_rank, progress) == SHM_CACHE_LINE, "progress on line 1");
_Static_assert(offsetof(struct shm_rank, cma_word) == 24, "cma_word on line 0, aligned");
_Static_assert(offsetof(struct shm_header, cma_off) < 3 * SHM_CACHE_LINE, "cma on line 2");
_Static_assert(offsetof(struct shm_header, heap_off) < 3 * SHM_CACHE_LINE, "heap on line 2");
_Static_assert(offsetof(struct shm_rank, heap_min) + 8 <= SHM_CACHE_LINE, "heap on line 0");
_Static_assert(offsetof(struct shm_rank, root_kind) < 2 * SHM_CACHE_LINE, "root on line 1");
_Static_assert(offsetof(struct shm_rank, errmsg) == 2 * SHM_CACHE_LINE, "message from line 2");

/*
 * The eager rooted calls' rings (collectives/broadcast_eager.c, ARCOMM_BCAST_EAGER, and
 * collectives/reduce_eager.c, ARCOMM_REDUCE_EAGER), one per rank, written by that rank
 * alone: the n-th eager call of a communicator takes entry n % SHM_EAGER_ENTRIES of the
 * ring of every rank that writes in it (a broadcast's root: its call and its message; a
 * reduce's every rank: its call, and but the root its contribution), the call in the
 * first 32 bytes, the message after them (on the same line up to 32 bytes), tag last.
 * A reader waits for tag == n + 1 (acquire), checks the call against its own and reads.
 * The writer reuses the entry once every peer completed call seq (struct
 * shm_rank.completed).
 */
#define SHM_EAGER_ENTRIES 16u
#define SHM_EAGER_BYTES   512u
struct shm_eager {
    _Atomic uint64_t tag; /* the communicator's eager call number plus one, 0 = unused */
    uint64_t count;       /* elements */
    uint32_t seq;         /* call number of that call */
    int32_t root;         /* its root */
    uint8_t dtype;        /* comm_dtype_t */
    uint8_t coll;         /* the collective (collectives/coll.h enum coll_kind) */
    uint8_t op;           /* comm_op_t (a reduce's; 0 for a broadcast) */
    uint8_t pad[5];
    unsigned char data[SHM_EAGER_BYTES]; /* the message, count x the dtype's size bytes */
} __attribute__((aligned(SHM_CACHE_LINE)));

_Static_assert(offsetof(struct shm_eager, data) == 32, "the message starts on the first line");
_Static_assert(offsetof(struct shm_header, off_eager) < 2 * SHM_CACHE_LINE, "off_eager on line 1");

/* v rounded up to a multiple of a; UINT64_MAX when that does not fit. */
static inline uint64_t shm_align_up(uint64_t v, uint64_t a)
{
    return v > UINT64_MAX - (a - 1) ? UINT64_MAX : (v + a - 1) / a * a;
}

/* a * b + c, or false on overflow. */
static inline bool shm_mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
    uint64_t p;
    return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(p, c, out);
}

/*
 * Point-to-point (comm_send / comm_recv, collectives/p2p/): one channel per ordered pair
 * of ranks, channel (dst, src) at index dst * nranks + src, so that a receiver's
 * channels are contiguous.  One message is in flight per channel: the sender writes the
 * descriptor (and an eager message's bytes) and then posted; the receiver matches it
 * against its receive, copies, writes its verdict and then taken.  Both counters count
 * the pair's messages from 1 and never go back.  Large messages that the receiver
 * cannot read in place travel in chunks through the sender's stage (two chunks of
 * shm_p2p_chunk_bytes per rank, after the channels): filled and drained count the pair's
 * chunks.  The eager room and the chunk size shrink with the rank count so that the
 * region stays small at COMM_MAX_RANKS (n^2 channels).
 */
#define SHM_P2P_EAGER_MAX 8192u      /* eager room of a channel at few ranks */
#define SHM_P2P_EAGER_MIN 64u        /* ... and at many */
#define SHM_P2P_EAGER_ALL (4u << 20) /* what all channels' eager room may take */
#define SHM_P2P_CHUNK_MAX (512u << 10)
#define SHM_P2P_CHUNK_MIN (64u << 10)
#define SHM_P2P_STAGE_ALL (32u << 20) /* what all ranks' stages may take */
#define SHM_P2P_RANKS_MAX 65536u      /* a header claiming more is corrupt (n^2 fits) */

/* How the sender's bytes reach the receiver (shm_p2p_chan.kind). */
enum shm_p2p_kind {
    SHM_P2P_EAGER = 1,  /* in the channel's eager room */
    SHM_P2P_RAW = 2,    /* addr: a pointer of the sender's process, which is the receiver's */
    SHM_P2P_OFFSET = 3, /* addr: an offset into the pools, or (SHM_HEAP_TAG) the sender's heap */
    SHM_P2P_CMA = 4,    /* addr: a pointer of the sender's process, read with process_vm_readv */
    SHM_P2P_STAGED = 5, /* in chunks through the sender's stage */
};

/* An eager message of at most this many bytes travels in the channel's line 0 itself, so
 * that the receiver's one read of the line brings the message with its description (a
 * small message costs one line transfer each way, not two). */
#define SHM_P2P_INLINE 32u

struct shm_p2p_chan {
    /* --- line 0: written by the sender alone --- */
    _Atomic uint64_t posted; /* messages posted; the fields below describe the last (release) */
    _Atomic uint64_t filled; /* chunks of the pair's staged messages in the sender's stage */
    uint64_t count;          /* the message's elements */
    uint8_t dtype;           /* the message's comm_dtype_t */
    uint8_t kind;            /* enum shm_p2p_kind */
    uint8_t pad0[6];
    union {
        struct {
            uint64_t addr;  /* RAW, OFFSET, CMA: where the bytes are (kind says how) */
            uint64_t first; /* STAGED: the pair's chunk number of the message's first chunk */
            uint64_t chunk; /* STAGED: bytes per chunk (the last may be shorter) */
        };
        uint8_t inline_bytes[SHM_P2P_INLINE]; /* EAGER of at most SHM_P2P_INLINE bytes */
    };
    /* --- line 1: written by the receiver alone --- */
    alignas(SHM_CACHE_LINE) _Atomic uint64_t taken; /* messages matched and finished (release) */
    _Atomic uint64_t drained; /* chunks of the pair's staged messages copied out */
    int32_t verdict;          /* message taken's outcome: COMM_OK or COMM_ERR_MISMATCH */
    uint8_t want_dtype;       /* with MISMATCH: the receive's dtype ... */
    uint8_t pad1[3];
    uint64_t want_count; /* ... and count, for the sender's message */
    uint8_t pad2[SHM_CACHE_LINE - 32];
    /* the eager room follows: shm_p2p_eager_bytes(nranks) bytes */
};

_Static_assert(sizeof(struct shm_p2p_chan) == 2 * SHM_CACHE_LINE, "a channel is two lines");
_Static_assert(offsetof(struct shm_p2p_chan, taken) == SHM_CACHE_LINE, "receiver on line 1");
_Static_assert(offsetof(struct shm_p2p_chan, inline_bytes) + SHM_P2P_INLINE <= SHM_CACHE_LINE,
               "an inline message in line 0");
_Static_assert(SHM_P2P_INLINE <= SHM_P2P_EAGER_MIN, "an inline message is an eager one");

/* The eager room of each channel for nranks ranks: a power of two, 64 B to 8 KiB. */
static inline uint64_t shm_p2p_eager_bytes(uint32_t nranks)
{
    uint64_t e = SHM_P2P_EAGER_MAX, n = nranks;
    while (e > SHM_P2P_EAGER_MIN && n * n * e > SHM_P2P_EAGER_ALL)
        e /= 2;
    return e;
}

/* Bytes from one channel to the next. */
static inline uint64_t shm_p2p_chan_stride(uint32_t nranks)
{
    return sizeof(struct shm_p2p_chan) + shm_p2p_eager_bytes(nranks);
}

/* Each of a rank's two stage chunks for nranks ranks: 64 KiB to 512 KiB. */
static inline uint64_t shm_p2p_chunk_bytes(uint32_t nranks)
{
    uint64_t c = SHM_P2P_CHUNK_MAX, n = nranks;
    while (c > SHM_P2P_CHUNK_MIN && n * 2 * c > SHM_P2P_STAGE_ALL)
        c /= 2;
    return c;
}

/* Offset of the stages from the region's start (the channels come first). */
static inline uint64_t shm_p2p_stage_offset(uint32_t nranks)
{
    uint64_t n = nranks;
    return shm_align_up(n * n * shm_p2p_chan_stride(nranks), SHM_PAGE);
}

static inline uint64_t shm_p2p_region_bytes(uint32_t nranks)
{
    return shm_p2p_stage_offset(nranks) + (uint64_t)nranks * 2 * shm_p2p_chunk_bytes(nranks);
}

/* Geometry of a segment for nranks ranks; every offset page aligned.  ok is false when
 * a size does not fit 64 bits (then the offsets mean nothing). */
struct shm_geometry {
    uint64_t off_ranks, off_arrival, off_eager, off_staging, off_p2p, off_pool, total_bytes;
    bool ok;
};

static inline struct shm_geometry shm_geometry_compute(uint32_t nranks, uint64_t slot_bytes,
                                                       uint64_t pool_bytes)
{
    struct shm_geometry g = {0};
    uint64_t n = nranks, end;
    /* nranks is at most 2^32, the records a few lines each: these cannot overflow. */
    g.off_ranks = shm_align_up(sizeof(struct shm_header), SHM_CACHE_LINE);
    g.off_arrival = shm_align_up(g.off_ranks + n * sizeof(struct shm_rank), SHM_CACHE_LINE);
    g.off_eager =
        shm_align_up(g.off_arrival + SHM_SLOTS * n * sizeof(struct shm_arrival), SHM_CACHE_LINE);
    g.off_staging =
        shm_align_up(g.off_eager + n * SHM_EAGER_ENTRIES * sizeof(struct shm_eager), SHM_PAGE);
    /* The sizes come from knobs (or a peer's header): every step is checked.  The
     * point-to-point region depends on nranks alone (at most 44 MiB at 256 ranks). */
    g.ok = nranks <= SHM_P2P_RANKS_MAX &&
           shm_mul_add(n * SHM_SLOTS, slot_bytes, g.off_staging, &g.off_p2p) &&
           (g.off_pool = shm_align_up(g.off_p2p + shm_p2p_region_bytes(nranks), SHM_PAGE)) !=
               UINT64_MAX &&
           shm_mul_add(n, pool_bytes, g.off_pool, &end) && end != UINT64_MAX;
    g.total_bytes = g.ok ? end : 0;
    return g;
}

#endif /* ARCOMM_SHM_LAYOUT_H */
