/*
 * The CUDA transport's part of the communicator's shared segment, and the arithmetic
 * every rank must do alike (chunks, rounds, block slices, call descriptors).
 *
 * The CUDA region lives in the shm segment's staging area: rank r's two shm staging
 * slots, contiguous, are rank r's CUDA region (transport.c sizes the slots so).  The
 * whole staging area is registered with CUDA as mapped, portable pinned memory, so
 * kernels and copy engines of every GPU reach every rank's region.
 *
 *   rank r's region (region_bytes, page aligned):
 *     struct cuda_ctrl                      control lines (CUDA_CTRL_BYTES)
 *     kernel-path staging: 2 sub-slots      (kslot_bytes each)
 *     copy-path staging:   cslots slots     (chunk_max bytes each)
 *
 * Only the owner writes its region in normal operation; a failed rank may overwrite
 * peers' copy-path counters with release values so that no stream stays blocked.
 *
 * Plain C (no atomics, no CUDA headers): included by the host code (C11), by the
 * kernels (CUDA C++) and by the CPU unit tests.  Words polled across PCIe are read and
 * written through volatile accesses at the places that use them.
 */
#ifndef ARCOMM_CUDA_LAYOUT_H
#define ARCOMM_CUDA_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

/* The arithmetic below runs on the host and in kernels alike. */
#ifdef __CUDACC__
#define CUDA_LAYOUT_FN static inline __host__ __device__
#else
#define CUDA_LAYOUT_FN static inline
#endif

#define CUDA_LINE        64
#define CUDA_PAGE        4096
#define CUDA_MAX_BLOCKS  64 /* kernel-path blocks: one token line each */
#define CUDA_CTRL_BYTES  8192
#define CUDA_KSLOTS      2            /* kernel-path sub-slots: rounds alternate */
#define CUDA_KSLOT_BYTES (1u << 20)   /* each kernel-path sub-slot */
#define CUDA_CHUNK_MIN   (512u << 10) /* copy-path auto chunk: clamp(n/4, MIN, MAX) */
#define CUDA_CHUNK_MAX   (2u << 20)
#define CUDA_KDONE                                                                                 \
    64                                        /* kernel-path per-round block counters (a ring: the \
                                               * blocks of one launch are resident together and    \
                                               * advance in step, never this many rounds apart) */
#define CUDA_VEC_ELEMS  8                     /* slices are cut at multiples of 8 elements */
#define CUDA_GEOM_MAGIC 0x4152435544413031ull /* "ARCUDA01" */
/* A counter moved this far past what any wait asks for releases every stream wait
 * (cuStreamWaitValue32 compares cyclically); a kernel that sees such a jump knows a
 * failed rank released it and stops. */
#define CUDA_RELEASE 0x40000000u
#define CUDA_RELEASED(v, want)                                                                     \
    ((int32_t)((uint32_t)(v) - (uint32_t)(want)) >= (int32_t)(CUDA_RELEASE / 2))

/* Paths (part of the call descriptor: the peers must agree). */
enum cuda_path { CUDA_PATH_KERNEL = 1, CUDA_PATH_COPY = 2 };

/* Where a device-side failure happened (struct cuda_fail_line.stage). */
enum cuda_stage {
    CUDA_STAGE_NONE = 0,
    CUDA_STAGE_KTOKEN = 1, /* kernel path: waiting for a peer's arrival token */
    CUDA_STAGE_KDESC = 2,  /* kernel path: peers disagree on the call */
    CUDA_STAGE_CCALL = 3,  /* copy path: waiting for a peer to start the call */
    CUDA_STAGE_CDATA = 4,  /* copy path: waiting for a chunk to arrive */
    CUDA_STAGE_CDESC = 5,  /* copy path: peers disagree on the call */
    CUDA_STAGE_CSLOT = 6,  /* copy path, D2H: waiting for peers to fetch a slot */
    CUDA_STAGE_CFETCH = 7, /* copy path, H2D: waiting for a peer to stage a chunk */
    CUDA_STAGE_KSLOT = 8,  /* kernel path: waiting for peers to read a sub-slot */
};

/* A failure record, written with one 16-byte store by its only writer. */
struct cuda_fail_line {
    int32_t status; /* COMM_OK, or the comm_status_t of the failure */
    int32_t stage;  /* enum cuda_stage (device) or 0 (host) */
    int32_t peer;   /* the rank waited for, or -1 */
    uint32_t seq;   /* the call number it happened in */
    uint8_t pad[CUDA_LINE - 16];
};

/* A monotonic 32-bit counter on its own line (cyclic compares). */
struct cuda_word_line {
    uint32_t value;
    uint8_t pad[CUDA_LINE - 4];
};

/* A kernel-path arrival token: round + 1 and the call's descriptor, written together with
 * one 8-byte store, so that one load tells a peer both that the data is there and that it
 * belongs to the same call. */
struct cuda_token_line {
    uint32_t value; /* global kernel-path round + 1 */
    uint32_t desc;  /* cuda_call_desc() of the call of that round */
    uint8_t pad[CUDA_LINE - 8];
};

/* What a rank's GPU is doing: written with one 8-byte store before its first token. */
struct cuda_call_line {
    uint32_t seq;  /* call number */
    uint32_t desc; /* cuda_call_desc() of that call */
    uint8_t pad[CUDA_LINE - 8];
};

/* What every rank must agree on, written once at setup and compared by all. */
struct cuda_geom_line {
    uint64_t magic; /* CUDA_GEOM_MAGIC once written */
    uint64_t region_bytes;
    uint64_t chunk_max;      /* copy-path staging slot */
    uint64_t copy_threshold; /* bytes at or above: copy-engine path */
    uint64_t bf16_threshold; /* f32 bytes at or above: bf16 on the wire */
    uint64_t chunk_knob;     /* ARCOMM_COPY_CHUNK_BYTES, 0 = auto */
    uint32_t blocks;         /* kernel-path blocks at most */
    uint32_t cslots;
    uint8_t pad[CUDA_LINE - 56];
};

/* The control lines at the start of every rank's region. */
struct cuda_ctrl {
    struct cuda_fail_line hfail; /* line 0: the owner's host (comm_abort, failures) */
    struct cuda_fail_line dfail; /* line 1: the owner's kernels (timeout, peer, mismatch) */
    struct cuda_word_line ready; /* line 2: copy chunks staged (owner's D2H stream) */
    struct cuda_word_line h2d;   /* line 3: copy chunks fetched from all peers (H2D stream) */
    struct cuda_word_line kcons; /* line 4: kernel-path rounds whose peers' sub-slots the
                                  * owner has read to the end (published in round order) */
    struct cuda_call_line call;  /* line 5 */
    struct cuda_geom_line geom;  /* line 6 */
    uint8_t pad7[CUDA_LINE];     /* line 7 */
    struct cuda_token_line token[CUDA_MAX_BLOCKS]; /* lines 8..: kernel-path round tokens */
};

#ifndef __cplusplus
_Static_assert(sizeof(struct cuda_fail_line) == CUDA_LINE, "one line");
_Static_assert(sizeof(struct cuda_geom_line) == CUDA_LINE, "one line");
_Static_assert(sizeof(struct cuda_token_line) == CUDA_LINE, "one line");
_Static_assert(offsetof(struct cuda_ctrl, token) == 8 * CUDA_LINE, "tokens from line 8");
_Static_assert(sizeof(struct cuda_ctrl) <= CUDA_CTRL_BYTES, "control fits its page");
#endif

/* The geometry of every rank's region, from the staging knobs (identical everywhere). */
struct cuda_geometry {
    uint64_t off_kstage; /* kernel-path sub-slot 0 */
    uint64_t kslot_bytes;
    uint64_t off_cstage;   /* copy-path slot 0 */
    uint64_t chunk_max;    /* bytes of a copy-path slot */
    uint32_t cslots;       /* copy-path slots (>= 2) */
    uint64_t region_bytes; /* page aligned */
};

CUDA_LAYOUT_FN uint64_t cuda_align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

CUDA_LAYOUT_FN uint64_t cuda_min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/*
 * staging_bytes: the copy-path staging of one rank; chunk_max: its slot (the largest
 * chunk).  At least two slots, so that one rank stages while its peers fetch.
 */
CUDA_LAYOUT_FN struct cuda_geometry cuda_geometry_compute(uint64_t staging_bytes,
                                                          uint64_t chunk_max)
{
    struct cuda_geometry g;
    g.chunk_max = cuda_align_up(chunk_max ? chunk_max : CUDA_CHUNK_MAX, CUDA_LINE);
    if (staging_bytes < 2 * g.chunk_max)
        staging_bytes = 2 * g.chunk_max;
    g.cslots = (uint32_t)cuda_min_u64(staging_bytes / g.chunk_max, 1u << 16);
    g.off_kstage = CUDA_CTRL_BYTES;
    g.kslot_bytes = CUDA_KSLOT_BYTES;
    g.off_cstage = g.off_kstage + CUDA_KSLOTS * g.kslot_bytes;
    g.region_bytes = cuda_align_up(g.off_cstage + (uint64_t)g.cslots * g.chunk_max, 2 * CUDA_PAGE);
    return g;
}

/* Bytes of one element on the wire. */
CUDA_LAYOUT_FN uint32_t cuda_wire_size(uint32_t esize, int narrow)
{
    return narrow ? 2u : esize;
}

/*
 * The copy-path chunk of a message of wire_bytes: the knob when set, else
 * clamp(wire_bytes / 4, 512 KiB, 2 MiB); a multiple of 64 bytes, at most chunk_max.
 */
CUDA_LAYOUT_FN uint64_t cuda_copy_chunk(uint64_t wire_bytes, uint64_t knob, uint64_t chunk_max)
{
    uint64_t c = knob;
    if (c == 0) {
        c = wire_bytes / 4;
        c = c < CUDA_CHUNK_MIN ? CUDA_CHUNK_MIN : c > CUDA_CHUNK_MAX ? CUDA_CHUNK_MAX : c;
    }
    c = cuda_min_u64(c, chunk_max);
    c = c / CUDA_LINE * CUDA_LINE;
    return c ? c : CUDA_LINE;
}

CUDA_LAYOUT_FN uint32_t cuda_div_up32(uint64_t a, uint64_t b)
{
    return (uint32_t)((a + b - 1) / b);
}

/* The kernel path's plan for count elements of wsize bytes on the wire. */
struct cuda_kplan {
    uint64_t round_elems; /* elements staged per round (a sub-slot's worth) */
    uint32_t rounds;      /* rounds of this call (>= 1 when count > 0) */
    uint32_t blocks;      /* blocks of the kernel */
};

/* Blocks: one per 2 KiB of a round's wire bytes, at least 1, at most max_blocks. */
CUDA_LAYOUT_FN struct cuda_kplan cuda_kplan_compute(uint64_t count, uint32_t wsize,
                                                    uint64_t kslot_bytes, uint32_t max_blocks)
{
    struct cuda_kplan p;
    p.round_elems = kslot_bytes / wsize / CUDA_VEC_ELEMS * CUDA_VEC_ELEMS;
    p.rounds = count ? cuda_div_up32(count, p.round_elems) : 0;
    uint64_t first = cuda_min_u64(count, p.round_elems) * wsize;
    uint64_t want = (first + 2047) / 2048;
    if (max_blocks > CUDA_MAX_BLOCKS)
        max_blocks = CUDA_MAX_BLOCKS;
    p.blocks = (uint32_t)(want < 1 ? 1 : want > max_blocks ? max_blocks : want);
    return p;
}

/*
 * The shape of a kernel-path round: which bytes of a sub-slot each block writes and its
 * peers read.  Two rounds of one shape cut a sub-slot identically.
 */
struct cuda_kshape {
    uint64_t elems; /* elements of the round (0: no round) */
    uint32_t wsize; /* bytes of an element on the wire */
    uint32_t blocks;
};

CUDA_LAYOUT_FN int cuda_kshape_same(struct cuda_kshape a, struct cuda_kshape b)
{
    return a.elems == b.elems && a.wsize == b.wsize && a.blocks == b.blocks;
}

/*
 * May round t write its sub-slot on the strength of the same block's peer tokens alone?
 * Round t reuses the sub-slot of round t - 2.  Block b of round t waited in round t - 1 for
 * every peer's token b, which each peer's block b published after it had read its slice of
 * round t - 2.  That covers what block b now overwrites only when round t cuts the sub-slot
 * as round t - 2 did and block b took part in round t - 1.  Otherwise the block must wait
 * for every peer's 'kcons' to pass round t - 2.  prev2, prev1: shapes of rounds t - 2 and
 * t - 1 (elems 0 where there was none: nothing to overwrite).
 */
CUDA_LAYOUT_FN int cuda_kslot_reuse_safe(struct cuda_kshape cur, struct cuda_kshape prev2,
                                         struct cuda_kshape prev1)
{
    if (prev2.elems == 0)
        return 1;
    return cuda_kshape_same(cur, prev2) && prev1.elems != 0 && prev1.blocks >= cur.blocks;
}

/*
 * Block b's [lo, hi) out of m elements split among nblocks, cut at multiples of
 * CUDA_VEC_ELEMS so that every block's vectors stay 16-byte aligned.
 */
CUDA_LAYOUT_FN void cuda_block_slice(uint64_t m, uint32_t nblocks, uint32_t b, uint64_t *lo,
                                     uint64_t *hi)
{
    uint64_t per = (m + nblocks - 1) / nblocks;
    per = cuda_align_up(per, CUDA_VEC_ELEMS);
    uint64_t l = per * b;
    *lo = l < m ? l : m;
    *hi = m - *lo < per ? m : *lo + per;
}

/* The copy path's plan: chunk k covers [k * chunk_elems, min(count, (k+1) * chunk_elems)). */
struct cuda_cplan {
    uint64_t chunk_bytes; /* wire bytes of a full chunk */
    uint64_t chunk_elems;
    uint32_t chunks;
};

CUDA_LAYOUT_FN struct cuda_cplan cuda_cplan_compute(uint64_t count, uint32_t wsize, uint64_t knob,
                                                    uint64_t chunk_max)
{
    struct cuda_cplan p;
    p.chunk_bytes = cuda_copy_chunk(count * wsize, knob, chunk_max);
    p.chunk_elems = p.chunk_bytes / wsize;
    p.chunk_bytes = p.chunk_elems * wsize;
    p.chunks = count ? cuda_div_up32(count, p.chunk_elems) : 0;
    return p;
}

/* Byte offset of rank r's region, and of its pieces, from the start of rank 0's. */
CUDA_LAYOUT_FN uint64_t cuda_region_off(const struct cuda_geometry *g, int rank)
{
    return (uint64_t)rank * g->region_bytes;
}

CUDA_LAYOUT_FN uint64_t cuda_kslot_off(const struct cuda_geometry *g, int rank, uint32_t round)
{
    return cuda_region_off(g, rank) + g->off_kstage +
           (uint64_t)(round % CUDA_KSLOTS) * g->kslot_bytes;
}

CUDA_LAYOUT_FN uint64_t cuda_cslot_off(const struct cuda_geometry *g, int rank, uint32_t chunk)
{
    return cuda_region_off(g, rank) + g->off_cstage + (uint64_t)(chunk % g->cslots) * g->chunk_max;
}

/*
 * What the peers must agree on for one call, folded into 32 bits (never 0): a
 * disagreement shows as different descriptors on the two sides.
 */
CUDA_LAYOUT_FN uint32_t cuda_call_desc(uint64_t count, uint32_t dtype, uint32_t op, uint32_t path,
                                       int narrow, int add, uint64_t addend_count)
{
    uint64_t v[4] = {count,
                     ((uint64_t)dtype << 24) | ((uint64_t)op << 16) | (path << 8) |
                         ((uint64_t)(narrow != 0) << 1) | (uint64_t)(add != 0),
                     addend_count, 0x9e3779b97f4a7c15ull};
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 4; i++) {
        h ^= v[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    uint32_t d = (uint32_t)(h ^ (h >> 32));
    return d ? d : 1u;
}

#endif /* ARCOMM_CUDA_LAYOUT_H */
