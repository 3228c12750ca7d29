/* SPDX-License-Identifier: MIT */
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
 *     kernel-path LL buffers: 2 sub-slots   (kslot_bytes each, rounds alternate)
 *     copy-path staging:   cslots slots     (chunk_max bytes each)
 *
 * Kernel path (LL, "low latency"): a sub-slot is an array of 16-byte units, each
 * {data, flag, data, flag} with 32-bit halves, written with one 16-byte store.  The flag
 * is the round number + 1, so a reader polls the data itself: an 8-byte half whose flag
 * matches holds this round's 4 data bytes (8-byte accesses are single-copy atomic over
 * PCIe), and no fence, token or second round trip is on the path.  Each block of the
 * round's launch writes a header {desc, flag, seq, flag} (the call, so that peers that
 * disagree notice before they write a result) on a 128-byte line of its own: reads of
 * one line from many blocks queue up behind each other (measured: about 1 us per block
 * when every block read one shared header).  Payload unit u (from unit
 * CUDA_LL_PAYLOAD0) carries wire bytes [8u, 8u + 8) of the round.
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

#define CUDA_LINE          64
#define CUDA_PAGE          4096
#define CUDA_MAX_BLOCKS    128 /* kernel-path blocks at most */
#define CUDA_MAX_RANKS     8   /* GPUs of one communicator at most */
#define CUDA_CTRL_BYTES    8192
#define CUDA_KSLOTS        2          /* kernel-path sub-slots: rounds alternate */
#define CUDA_KSLOT_BYTES   (1u << 20) /* each kernel-path sub-slot */
#define CUDA_LL_UNIT       16         /* bytes of an LL unit: {data, flag, data, flag} */
#define CUDA_LL_DATA       8          /* payload bytes of an LL unit */
#define CUDA_LL_THREADS    256        /* threads of a kernel-path block */
#define CUDA_LL_UPT        2          /* payload units a thread polls at once */
#define CUDA_LL_HDR_STRIDE 8          /* units from one block's header to the next (128 B) */
#define CUDA_LL_PAYLOAD0   (CUDA_MAX_BLOCKS * CUDA_LL_HDR_STRIDE) /* first payload unit */
#define CUDA_CHUNK_MIN     (512u << 10) /* copy-path auto chunk: clamp(n/2, MIN, MAX) */
#define CUDA_CHUNK_MAX     (4u << 20)
#define CUDA_VEC_ELEMS     8 /* copy chunks are cut at multiples of 8 elements */
#define CUDA_GEOM_MAGIC    0x4152435544413031ull /* "ARCUDA01" */
/* A counter moved this far past what any wait asks for releases every stream wait
 * (the wait kernels compare cyclically); a kernel that sees such a jump knows a
 * failed rank released it and stops. */
#define CUDA_RELEASE 0x40000000u
#define CUDA_RELEASED(v, want)                                                                     \
    ((int32_t)((uint32_t)(v) - (uint32_t)(want)) >= (int32_t)(CUDA_RELEASE / 2))

/* Paths (part of the call descriptor: the peers must agree). */
enum cuda_path { CUDA_PATH_KERNEL = 1, CUDA_PATH_COPY = 2 };

/* Where a device-side failure happened (struct cuda_fail_line.stage). */
enum cuda_stage {
    CUDA_STAGE_NONE = 0,
    CUDA_STAGE_KWAIT = 1,  /* kernel path: waiting for a peer's data */
    CUDA_STAGE_KDESC = 2,  /* kernel path: peers disagree on the call */
    CUDA_STAGE_CCALL = 3,  /* copy path: waiting for a peer to start the call */
    CUDA_STAGE_CDATA = 4,  /* copy path: waiting for a chunk to arrive */
    CUDA_STAGE_CDESC = 5,  /* copy path: peers disagree on the call */
    CUDA_STAGE_CSLOT = 6,  /* copy path, D2H: waiting for peers to fetch a slot */
    CUDA_STAGE_CFETCH = 7, /* copy path, H2D: waiting for a peer to stage a chunk */
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

/* The host's view of a rank's counters (struct cuda_dcount), written by its kernels when
 * they move them: release values (cchunk), and the calls done once the GPU is idle. */
struct cuda_count_line {
    uint32_t cchunk; /* copy-path chunks taken */
    uint32_t seq;    /* the next call's number (exact once every call ended) */
    uint8_t pad[CUDA_LINE - 8];
};

/* An LL unit as it lies in a sub-slot (16-byte aligned, written with one store). */
struct cuda_ll_unit {
    uint32_t d0, f0, d1, f1; /* data, flag, data, flag; header: desc, flag, seq, flag */
};

/* What a rank's GPU is doing: written with one 8-byte store at the start of a call. */
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

/*
 * A rank's call counters, in its GPU's memory (one per communicator, cuda_comm.dcount):
 * the kernels number the calls, so that a call recorded into a CUDA graph takes fresh
 * numbers at every replay, in whatever order replays and eager calls come (the same on
 * every rank).  Kernel-path launches read seq and kround and the last block to finish
 * moves them on; a copy-path call's first kernel (the begin kernel, on the caller's
 * stream) takes seq and the next chunks for the whole call (cur_seq, cur_base).
 */
struct cuda_dcount {
    uint32_t seq;      /* the next call's number */
    uint32_t kround;   /* kernel-path rounds so far */
    uint32_t cchunk;   /* copy-path chunks so far */
    uint32_t done;     /* blocks of the running kernel-path launch that ended */
    uint32_t cur_seq;  /* the running copy-path call: its number, */
    uint32_t cur_base; /* and its first chunk */
    /* Non-zero once a kernel of this rank recorded a failure (record_fail): the kernels
     * that write recvbuf check it here, in device memory, not the control line (host
     * memory: a read per thread over PCIe made a copy-out kernel 100x slower). */
    uint32_t failed;
    uint32_t pad;
};

/* The control lines at the start of every rank's region. */
struct cuda_ctrl {
    struct cuda_fail_line hfail;  /* line 0: the owner's host (comm_abort, failures) */
    struct cuda_fail_line dfail;  /* line 1: the owner's kernels (timeout, peer, mismatch) */
    struct cuda_word_line ready;  /* line 2: copy chunks staged (owner's D2H stream) */
    struct cuda_word_line h2d;    /* line 3: copy chunks fetched from all peers (H2D stream) */
    struct cuda_word_line device; /* line 4: the owner's CUDA ordinal (in its process) */
    struct cuda_call_line call;   /* line 5 */
    struct cuda_geom_line geom;   /* line 6 */
    struct cuda_count_line count; /* line 7: the owner's counters, as its kernels left them */
    struct cuda_word_line fence;  /* line 8: written by the copy streams' memory fences */
};

#ifndef __cplusplus
_Static_assert(sizeof(struct cuda_fail_line) == CUDA_LINE, "one line");
_Static_assert(sizeof(struct cuda_geom_line) == CUDA_LINE, "one line");
_Static_assert(sizeof(struct cuda_ll_unit) == CUDA_LL_UNIT, "one 16-byte store");
_Static_assert(sizeof(struct cuda_ctrl) <= CUDA_CTRL_BYTES, "control fits its page");
_Static_assert(sizeof(struct cuda_dcount) == 32, "counters: one sector");
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
 * clamp(wire_bytes / 2, 512 KiB, 4 MiB); a multiple of 64 bytes, at most chunk_max.  (Issue 4
 * proposed clamp(n / 4, 512 KiB, 2 MiB); on 2 x H200 4 MiB chunks moved 128 MiB 13% faster
 * and two chunks beat four at 4 MiB: docs/PERFORMANCE.md, 2026-11-30.)
 */
CUDA_LAYOUT_FN uint64_t cuda_copy_chunk(uint64_t wire_bytes, uint64_t knob, uint64_t chunk_max)
{
    uint64_t c = knob;
    if (c == 0) {
        c = wire_bytes / 2;
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

/*
 * The kernel path's plan for count elements of wsize bytes on the wire: rounds of at
 * most round_elems elements, one launch each (a sub-slot's payload units).
 */
struct cuda_kplan {
    uint64_t round_elems; /* elements per round */
    uint32_t rounds;      /* rounds of this call (>= 1 when count > 0) */
};

CUDA_LAYOUT_FN struct cuda_kplan cuda_kplan_compute(uint64_t count, uint32_t wsize,
                                                    uint64_t kslot_bytes)
{
    struct cuda_kplan p;
    p.round_elems = (kslot_bytes / CUDA_LL_UNIT - CUDA_LL_PAYLOAD0) * CUDA_LL_DATA / wsize;
    p.rounds = count ? cuda_div_up32(count, p.round_elems) : 0;
    return p;
}

/* Payload units of a round of n elements. */
CUDA_LAYOUT_FN uint32_t cuda_ll_units(uint64_t n, uint32_t wsize)
{
    return cuda_div_up32(n * wsize, CUDA_LL_DATA);
}

/* Blocks of a round's launch: enough for CUDA_LL_UPT units per thread, at most max_blocks
 * (then threads take several batches). */
CUDA_LAYOUT_FN uint32_t cuda_ll_blocks(uint32_t units, uint32_t max_blocks)
{
    uint32_t want = cuda_div_up32(units, (uint64_t)CUDA_LL_THREADS * CUDA_LL_UPT);
    if (max_blocks > CUDA_MAX_BLOCKS)
        max_blocks = CUDA_MAX_BLOCKS;
    return want < 1 ? 1 : want > max_blocks ? max_blocks : want;
}

/* The unit of block b's header within a sub-slot. */
CUDA_LAYOUT_FN uint32_t cuda_ll_header(uint32_t block)
{
    return block * CUDA_LL_HDR_STRIDE;
}

/* The LL flag of a round: never 0, never the flag of the round two before. */
CUDA_LAYOUT_FN uint32_t cuda_ll_flag(uint32_t round)
{
    uint32_t f = round + 1;
    return f ? f : 1u;
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

/*
 * The copy-path plan of a block codec (wire_scalar.h): chunks of whole blocks of
 * block_elems elements and block_bytes bytes, so that each chunk encodes and decodes on
 * its own; chunk_elems counts elements, chunk_bytes bytes (whole blocks; the last chunk's
 * last block may be partial in elements, never in bytes).  A knob under two lines still
 * gets a block a chunk.
 */
CUDA_LAYOUT_FN struct cuda_cplan cuda_cplan_blocks(uint64_t count, uint32_t block_elems,
                                                   uint32_t block_bytes, uint64_t knob,
                                                   uint64_t chunk_max)
{
    uint64_t blocks = (count + block_elems - 1) / block_elems;
    if (knob != 0 && knob < 2 * CUDA_LINE)
        knob = 2 * CUDA_LINE;
    struct cuda_cplan p = cuda_cplan_compute(blocks, block_bytes, knob, chunk_max);
    p.chunk_elems *= block_elems;
    return p;
}

/* Byte offset of rank r's region, and of its pieces, from the start of rank 0's.  A
 * copy-path call stages its chunk k in slot k % cslots: where a chunk lies depends on the
 * call alone, so that a call recorded into a CUDA graph copies the same addresses at
 * every replay. */
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
 * disagreement shows as different descriptors on the two sides.  kind is the collective
 * (collectives/coll.h enum coll_kind), root broadcast's and reduce's root (0 otherwise).
 */
CUDA_LAYOUT_FN uint32_t cuda_call_desc(uint64_t count, uint32_t dtype, uint32_t op, uint32_t path,
                                       int narrow, int add, uint64_t addend_count, uint32_t kind,
                                       int32_t root)
{
    uint64_t v[5] = {count,
                     ((uint64_t)dtype << 24) | ((uint64_t)op << 16) | (path << 8) |
                         ((uint64_t)(narrow != 0) << 1) | (uint64_t)(add != 0),
                     addend_count, ((uint64_t)kind << 32) | (uint32_t)root, 0x9e3779b97f4a7c15ull};
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 5; i++) {
        h ^= v[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    uint32_t d = (uint32_t)(h ^ (h >> 32));
    return d ? d : 1u;
}

#endif /* ARCOMM_CUDA_LAYOUT_H */
