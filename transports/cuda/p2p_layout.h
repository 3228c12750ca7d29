/* SPDX-License-Identifier: MIT */
/*
 * The CUDA peer-to-peer transport ("cuda-p2p"): what lies where, and the decision
 * whether the GPUs of a communicator reach each other.  Plain C (no CUDA headers, no
 * atomics): included by the host code, by the kernels and by the CPU unit tests.
 *
 * A cuda-p2p communicator is a host-staged CUDA communicator (layout.h: its shm segment
 * still carries the control lines, the fail lines and the call lines the kernels poll,
 * and the host-staged copy paths serve the collectives that have no peer-to-peer path
 * yet) plus, for every rank, one region of device memory mapped into every peer: by a
 * CUDA IPC handle where the peer is another process (also on the same GPU), by the
 * pointer itself and peer access where it is a thread of the same process.  The handle,
 * the pointer and what each rank can reach travel in the rank's control page
 * (struct cuda_p2p_line at CUDA_P2P_CTRL_OFF, after struct cuda_ctrl).
 *
 *   rank r's device region (struct cuda_p2p_geom):
 *     LL areas: [sub-slot s < CUDA_KSLOTS][sender q < nranks], ll_area bytes each
 *     two-shot RS areas, AG areas and flags (below)
 *
 * One-shot (LL) in push mode: in round t every rank writes its LL units (layout.h:
 * header per block, then payload from unit CUDA_LL_PAYLOAD0) into area [t % 2][me] of
 * every peer's region, and polls area [t % 2][p] of its own region, in local device
 * memory, for every peer p.  Area [s][me] of the own region is never written.
 */
#ifndef ARCOMM_CUDA_P2P_LAYOUT_H
#define ARCOMM_CUDA_P2P_LAYOUT_H

#include "cuda/layout.h"

#include <stdbool.h>
#include <stdint.h>

#define CUDA_P2P_CTRL_OFF   4096 /* struct cuda_p2p_line within a rank's control page */
#define CUDA_P2P_MAGIC      0x4152503250303031ull /* "ARP2P001" */
#define CUDA_P2P_AREA_BYTES (4u << 20)            /* an LL area (one sender, one sub-slot) */
#define CUDA_P2P_BUSID      32                    /* "0000:19:00.0" and its NUL */
#define CUDA_P2P_IPC_BYTES  64                    /* sizeof(cudaIpcMemHandle_t) */

/* What a rank tells its peers at setup, on lines of its own control page (only the owner
 * writes them; magic last, with release order, then mask in a second round). */
struct cuda_p2p_line {
    /* line 0 */
    uint64_t magic;     /* CUDA_P2P_MAGIC once the rest is written */
    uint64_t bytes;     /* of the device region */
    uint64_t dptr;      /* its device address in the owner's process */
    int32_t pid;        /* the owner's process */
    int32_t device;     /* the owner's CUDA ordinal (in its process) */
    uint32_t mask;      /* second round: bit q = this rank reaches rank q's GPU */
    uint32_t mask_done; /* 1 once mask is written */
    uint32_t closed;    /* 1 once the owner's GPU will not touch a peer's region again */
    uint8_t pad0[CUDA_LINE - 44];
    /* line 1 */
    char busid[CUDA_P2P_BUSID]; /* PCI bus id of the owner's GPU (upper case, CUDA's) */
    uint8_t pad1[CUDA_LINE - CUDA_P2P_BUSID];
    /* line 2 */
    uint8_t ipc[CUDA_P2P_IPC_BYTES]; /* cudaIpcMemHandle_t of the device region */
};

#ifndef __cplusplus
_Static_assert(sizeof(struct cuda_p2p_line) == 3 * CUDA_LINE, "three lines");
_Static_assert(CUDA_P2P_CTRL_OFF >= sizeof(struct cuda_ctrl), "after the control lines");
_Static_assert(CUDA_P2P_CTRL_OFF + sizeof(struct cuda_p2p_line) <= CUDA_CTRL_BYTES,
               "inside the control page");
#endif

/* Byte offset of LL area [sub-slot of round][sender] within a rank's region. */
CUDA_LAYOUT_FN uint64_t cuda_p2p_ll_off(uint64_t area_bytes, int nranks, uint32_t round, int sender)
{
    return ((uint64_t)(round % CUDA_KSLOTS) * (uint64_t)nranks + (uint64_t)sender) * area_bytes;
}

/*
 * Two-shot (large messages), after the LL areas of the region:
 *   RS areas [sub-slot][sender]: slice_bytes each, the sender's wire elements of this
 *            rank's slice of the round (reduce-scatter pushes): full width, bf16, or
 *            the int8 / fp8 blocks of the slice (the plan below keeps them in the area);
 *            with a block codec, area [sub-slot][me] of the own region holds this rank's
 *            own encoded slice, which it decodes as it decodes its peers'.
 *   AG areas [sub-slot][sender]: slice_bytes each, the sender's reduced slice (all-gather)
 *   flags    [sub-slot][kind: 0 RS, 1 AG][sender][block]: one LL unit {desc, flag, seq,
 *            flag} on a 128-byte line of its own, written by the sender after its block's
 *            pushes (and a system-scope fence), polled by this rank's block of that index
 */
#define CUDA_P2P_SLICE_MAX (8u << 20)  /* bytes of a two-shot area, at most */
#define CUDA_P2P_TS_BYTES  (32u << 20) /* two-shot areas of one kind and sub-slot, at most */
#define CUDA_P2P_FLAG_LINE 128

struct cuda_p2p_geom {
    uint64_t ll_area;     /* bytes of an LL area */
    uint64_t slice_bytes; /* bytes of a two-shot area */
    uint64_t off_rs;      /* RS area [0][0] */
    uint64_t off_ag;      /* AG area [0][0] */
    uint64_t off_flags;   /* flag [0][0][0][0] */
    uint64_t bytes;       /* of the region */
};

CUDA_LAYOUT_FN struct cuda_p2p_geom cuda_p2p_geom_compute(int nranks)
{
    struct cuda_p2p_geom g;
    uint64_t n = (uint64_t)(nranks > 0 ? nranks : 1);
    g.ll_area = CUDA_P2P_AREA_BYTES;
    g.slice_bytes = cuda_min_u64(CUDA_P2P_SLICE_MAX, CUDA_P2P_TS_BYTES / n) / CUDA_PAGE * CUDA_PAGE;
    g.off_rs = (uint64_t)CUDA_KSLOTS * n * g.ll_area;
    g.off_ag = g.off_rs + (uint64_t)CUDA_KSLOTS * n * g.slice_bytes;
    g.off_flags = g.off_ag + (uint64_t)CUDA_KSLOTS * n * g.slice_bytes;
    g.bytes = cuda_align_up(g.off_flags + (uint64_t)CUDA_KSLOTS * 2 * n * CUDA_MAX_BLOCKS *
                                              CUDA_P2P_FLAG_LINE,
                            2u << 20);
    return g;
}

/* Two-shot area [sub-slot of round][sender] of kind 0 (RS) or 1 (AG). */
CUDA_LAYOUT_FN uint64_t cuda_p2p_ts_off(const struct cuda_p2p_geom *g, int nranks, int kind,
                                        uint32_t round, int sender)
{
    return (kind ? g->off_ag : g->off_rs) +
           ((uint64_t)(round % CUDA_KSLOTS) * (uint64_t)nranks + (uint64_t)sender) * g->slice_bytes;
}

CUDA_LAYOUT_FN uint64_t cuda_p2p_flag_off(const struct cuda_p2p_geom *g, int nranks, int kind,
                                          uint32_t round, int sender, uint32_t block)
{
    uint64_t line = ((((uint64_t)(round % CUDA_KSLOTS) * 2 + (uint64_t)kind) * (uint64_t)nranks +
                      (uint64_t)sender) *
                     CUDA_MAX_BLOCKS) +
                    block;
    return g->off_flags + line * CUDA_P2P_FLAG_LINE;
}

/*
 * The two-shot plan of count elements of esize bytes: rounds of at most round_elems
 * elements (nranks slices of at most slice_cap, a multiple of align elements, sized by the
 * AG areas, which hold the element type itself, and by the RS areas, which hold what
 * travels).  Round j covers [j * round_elems, ...); within a round of rn elements slice q
 * is part q of size cuda_p2p_slice_at(rn, nranks, align), and block b of nblocks takes
 * part b of size cuda_p2p_portion_at(slice, nblocks, align) of a slice (cuda_p2p_part):
 * every rank cuts alike, at multiples of align elements.  align is CUDA_VEC_ELEMS (8)
 * where elements travel one by one (full width, bf16), a block codec's block
 * (WIRE_BLOCK_ELEMS, 64) where they travel in blocks of block_bytes (int8, fp8: 68): so
 * every slice and part starts on a block boundary of the message, and its encoded blocks
 * lie at (element / align) x block_bytes in an RS area.  Nothing here is agreed at join
 * beyond what the plan is made of: the regions' geometry (the same function of nranks,
 * the region's bytes compared by every rank) and the codec (ARCOMM_WIRE, agreed at join).
 */
struct cuda_p2p_tplan {
    uint64_t slice_cap;   /* elements of a slice, at most */
    uint64_t round_elems; /* elements of a round, at most */
    uint32_t rounds;
};

/* block_bytes 0: elements travel one by one (esize bytes or fewer each). */
CUDA_LAYOUT_FN struct cuda_p2p_tplan cuda_p2p_tplan_cut(const struct cuda_p2p_geom *g,
                                                        uint64_t count, uint32_t esize, int nranks,
                                                        uint32_t align, uint32_t block_bytes)
{
    struct cuda_p2p_tplan p;
    uint64_t cap = g->slice_bytes / esize;
    if (block_bytes != 0)
        cap = cuda_min_u64(cap, g->slice_bytes / block_bytes * align);
    p.slice_cap = cap / align * align;
    p.round_elems = p.slice_cap * (uint64_t)nranks;
    p.rounds = count ? cuda_div_up32(count, p.round_elems) : 0;
    return p;
}

CUDA_LAYOUT_FN struct cuda_p2p_tplan
cuda_p2p_tplan_compute(const struct cuda_p2p_geom *g, uint64_t count, uint32_t esize, int nranks)
{
    return cuda_p2p_tplan_cut(g, count, esize, nranks, CUDA_VEC_ELEMS, 0);
}

CUDA_LAYOUT_FN uint64_t cuda_p2p_slice_at(uint64_t rn, int nranks, uint32_t align)
{
    uint64_t s = (rn + (uint64_t)nranks - 1) / (uint64_t)nranks;
    return cuda_align_up(s ? s : 1, align);
}

CUDA_LAYOUT_FN uint64_t cuda_p2p_slice(uint64_t rn, int nranks)
{
    return cuda_p2p_slice_at(rn, nranks, CUDA_VEC_ELEMS);
}

CUDA_LAYOUT_FN uint64_t cuda_p2p_portion_at(uint64_t slice, uint32_t nblocks, uint32_t align)
{
    uint64_t p = (slice + nblocks - 1) / nblocks;
    return cuda_align_up(p ? p : 1, align);
}

CUDA_LAYOUT_FN uint64_t cuda_p2p_portion(uint64_t slice, uint32_t nblocks)
{
    return cuda_p2p_portion_at(slice, nblocks, CUDA_VEC_ELEMS);
}

/* [*lo, *hi) of part i of len elements cut in parts of part elements (empty past the end). */
CUDA_LAYOUT_FN void cuda_p2p_part(uint64_t len, uint64_t part, uint64_t i, uint64_t *lo,
                                  uint64_t *hi)
{
    uint64_t a = i * part, b = a + part;
    *lo = a < len ? a : len;
    *hi = b < len ? b : len;
}

/*
 * Can the ranks of a communicator use cuda-p2p?  For each rank: its process, an identity
 * of its GPU that all ranks compare alike (gpu: an index into a host-wide list, such as
 * the order of the PCI bus ids), and reach[r]: bit q set when rank r's GPU can address
 * rank q's GPU's memory (cudaDeviceCanAccessPeer, or the same GPU).  A pair is served
 * when both reach each other; two threads of one process on one GPU are never served (the
 * host-staged transport refuses them too: their waiting kernels can block each other).
 */
enum cuda_p2p_verdict {
    CUDA_P2P_YES = 0,
    CUDA_P2P_NO_PEER_ACCESS = 1,  /* ranks *a and *b: no peer access between their GPUs */
    CUDA_P2P_SAME_THREAD_GPU = 2, /* ranks *a and *b: threads of one process on one GPU */
    CUDA_P2P_TOO_MANY = 3,        /* more than CUDA_MAX_RANKS ranks */
};

CUDA_LAYOUT_FN enum cuda_p2p_verdict cuda_p2p_decide(int nranks, const int32_t *pid,
                                                     const int32_t *gpu, const uint32_t *reach,
                                                     int *a, int *b)
{
    *a = *b = -1;
    if (nranks > CUDA_MAX_RANKS)
        return CUDA_P2P_TOO_MANY;
    for (int i = 0; i < nranks; i++) {
        for (int j = i + 1; j < nranks; j++) {
            *a = i;
            *b = j;
            if (gpu[i] == gpu[j]) {
                if (pid[i] == pid[j])
                    return CUDA_P2P_SAME_THREAD_GPU;
                continue; /* IPC within one GPU: always */
            }
            if (!((reach[i] >> j) & 1u) || !((reach[j] >> i) & 1u))
                return CUDA_P2P_NO_PEER_ACCESS;
        }
    }
    *a = *b = -1;
    return CUDA_P2P_YES;
}

/*
 * Host-wide: do all ndev visible GPUs reach each other (access[i * ndev + j] != 0)?  One
 * GPU counts as yes (process ranks on it meet through IPC).  This is what probe and
 * arinfo report; the communicator's setup decides over its own ranks (cuda_p2p_decide).
 */
CUDA_LAYOUT_FN bool cuda_p2p_host_reach(int ndev, const uint8_t *access)
{
    if (ndev <= 0)
        return false;
    for (int i = 0; i < ndev; i++)
        for (int j = 0; j < ndev; j++)
            if (i != j && !access[i * ndev + j])
                return false;
    return true;
}

/*
 * Whether cuda-p2p is verified on two GPUs: until it is, an unforced CUDA communicator takes
 * the host-staged transport even where every GPU reaches every other (only
 * ARCOMM_TRANSPORT=cuda-p2p picks it).  Set to 1 once tools/gpu-check.sh p2p passed on
 * one GPU with process ranks and on two GPUs.
 */
#define CUDA_P2P_VERIFIED 0

/* What an unforced CUDA communicator takes: "cuda-p2p" where the GPUs reach each other
 * and the transport is verified, else "cuda" (host-staged). */
CUDA_LAYOUT_FN const char *cuda_transport_auto(bool reach, bool verified)
{
    return reach && verified ? "cuda-p2p" : "cuda";
}

#endif /* ARCOMM_CUDA_P2P_LAYOUT_H */
