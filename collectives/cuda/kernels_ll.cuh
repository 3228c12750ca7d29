/* SPDX-License-Identifier: MIT */
/*
 * The kernel path's LL rounds as both CUDA transports run them (kernels.cu: peers' units
 * in host memory; kernels_p2p.cu: pushed into this rank's device region): LL units, the
 * gather of a thread's batch, the call from the device counters, the headers' check, a
 * batch's results in rank order, the launch's end.  After kernels_dev.cuh, in the same
 * anonymous namespace.
 */
#ifndef ARCOMM_COLL_CUDA_KERNELS_LL_CUH
#define ARCOMM_COLL_CUDA_KERNELS_LL_CUH

#include "kernels_dev.cuh"

namespace
{

/* ---- kernel path: LL rounds ---- */

/* One unit, data and flags together: a 16-byte store whose 8-byte halves each carry the
 * flag (NCCL's LL format).  Volatile: straight to the mapped host memory. */
__device__ __forceinline__ void st_ll(cuda_ll_unit *p, uint32_t d0, uint32_t d1, uint32_t flag)
{
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0), "r"(flag),
                 "r"(d1), "r"(flag)
                 : "memory");
}

/* A unit as it is now in host memory (no memory clobber: polls may be in flight together). */
__device__ __forceinline__ uint4 ld_ll(const cuda_ll_unit *p)
{
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ cuda_ll_unit *ll_buf(const cuda_kcommon &c, int r, uint64_t sub_off)
{
    return reinterpret_cast<cuda_ll_unit *>(c.regions + (uint64_t)r * c.region_bytes + sub_off);
}

/* A unit's payload: EPU wire elements, element e at bits (e % PER) * SB of word e / PER
 * (an 8-byte element spans both words, low word first). */
template <typename T, typename W>
__device__ __forceinline__ void ll_pack(const T *send, uint64_t rn, uint32_t u, uint32_t d[2])
{
    constexpr int EPU = CUDA_LL_DATA / sizeof(W);
    d[0] = d[1] = 0;
#pragma unroll
    for (int e = 0; e < EPU; e++) {
        uint64_t i = (uint64_t)u * EPU + e;
        if (i < rn)
            word_put<sizeof(W)>(d, e, wire<T, W>::bits(send[i]));
    }
}

/* Lane 0's look around while its warp waits: failures, mismatched calls, the clock. */
__device__ int32_t ll_check(const cuda_kcommon &c, uint64_t start, int32_t *who)
{
    int32_t st = check_fail(c, who);
    if (st != 0)
        return st;
    for (int p = 0; p < c.nranks; p++) {
        if (p != c.rank && call_agrees(c, p) < 0) {
            *who = p;
            return COMM_ERR_MISMATCH;
        }
    }
    if (c.timeout_ns != 0 && now_ns() - start > c.timeout_ns)
        return COMM_ERR_TIMEOUT;
    return 0;
}

/* ---- an LL round's pieces, shared by the host-staged and the peer-to-peer kernels ---- */

/*
 * A thread's batch: payload units u0 + i * stride (i < CUDA_LL_UPT) of every peer, and
 * with hdr each peer's header of this block (slot CUDA_LL_UPT), polled until their flags
 * match; units(p) is where peer p's units of the round lie (the host-staged kernels: the
 * peer's sub-slot in host memory; the peer-to-peer kernels: the peer's area in this
 * rank's device region).  The
 * warp waits together (its lanes keep polling what they lack; lane 0 checks failures
 * now and then), so that the exchange of results and the shuffles stay converged.
 * Returns 0 with v filled, else the failure (recorded).
 */
template <int R, typename Args, typename Units>
__device__ int32_t ll_gather(const Args &a, const cuda_kcommon &c, Units units, uint32_t flag,
                             uint32_t u0, uint32_t stride, bool hdr, uint4 (&v)[R][CUDA_LL_UPT + 1],
                             uint32_t long_sleep_ns)
{
    constexpr int S = CUDA_LL_UPT + 1;
    uint32_t pend = 0;
#pragma unroll
    for (int p = 0; p < R; p++) {
#pragma unroll
        for (int i = 0; i < S; i++) {
            bool want = p < c.nranks && p != c.rank &&
                        (i < CUDA_LL_UPT ? u0 + (uint32_t)i * stride < a.units : hdr);
            if (want)
                pend |= 1u << (p * S + i);
        }
    }
    const uint64_t start = now_ns();
    int32_t st = 0, who = -1;
    for (uint32_t polls = 1;; polls++) {
        const uint32_t want = pend;
#pragma unroll
        for (int p = 0; p < R; p++) {
#pragma unroll
            for (int i = 0; i < S; i++) {
                if (want & (1u << (p * S + i)))
                    v[p][i] = ld_ll(units(p) + (i < CUDA_LL_UPT ? CUDA_LL_PAYLOAD0 + u0 + i * stride
                                                                : cuda_ll_header(blockIdx.x)));
            }
        }
#pragma unroll
        for (int p = 0; p < R; p++) {
#pragma unroll
            for (int i = 0; i < S; i++) {
                if ((want & (1u << (p * S + i))) && v[p][i].y == flag && v[p][i].w == flag)
                    pend &= ~(1u << (p * S + i));
            }
        }
        if (!__any_sync(0xffffffffu, pend != 0))
            return 0; /* all here (also when it came together with a failure) */
        if (st != 0)
            break; /* the failure stands after one more look */
        if (polls > 16)
            __nanosleep(polls < 256 ? long_sleep_ns : 1024);
        /* The warps of a block take turns at the host lines (reads of one line queue up
         * behind each other), so a block checks about every POLL_CHECK * 2 polls. */
        const uint32_t warps = blockDim.x / 32, warp = threadIdx.x / 32;
        if (polls % (POLL_CHECK * 2) == 0 && (polls / (POLL_CHECK * 2)) % warps == warp) {
            if ((threadIdx.x & 31) == 0)
                st = ll_check(c, start, &who);
            st = __shfl_sync(0xffffffffu, st, 0);
            who = __shfl_sync(0xffffffffu, who, 0);
        }
    }
    if (st == COMM_ERR_TIMEOUT) {
        /* Blame the lowest rank some lane still waits for. */
        int mine = R;
        for (int p = R - 1; p >= 0; p--)
            if (pend & (((1u << S) - 1) << (p * S)))
                mine = p;
        for (int o = 16; o > 0; o /= 2) {
            int other = __shfl_xor_sync(0xffffffffu, mine, o);
            mine = other < mine ? other : mine;
        }
        who = mine;
    }
    if ((threadIdx.x & 31) == 0)
        record_fail(c, st, st == COMM_ERR_MISMATCH ? CUDA_STAGE_KDESC : CUDA_STAGE_KWAIT, who);
    return st;
}

/* The host-staged kernels' units(p): peer p's sub-slot in host memory. */
struct ll_units_at {
    const cuda_kcommon &c;
    uint64_t sub;
    __device__ __forceinline__ cuda_ll_unit *operator()(int p) const
    {
        return ll_buf(c, p, sub);
    }
};

/* The launch's call (number, release value) and round, from the counters (not from the
 * launch: a graph replays its launches), into the block's shared copy. */
__device__ __forceinline__ void ll_take_call(const cuda_kcommon &in, cuda_kcommon &sc,
                                             uint32_t &sround)
{
    if (threadIdx.x == 0) {
        const volatile cuda_dcount *n = in.counters;
        sc = in;
        sc.seq = n->seq;
        sc.release = n->cchunk + CUDA_RELEASE;
        sround = n->kround;
    }
    __syncthreads();
}

/* Every block sees the peers' calls (the headers it gathered) before it writes a result:
 * 0, or COMM_ERR_MISMATCH (recorded). */
template <int R>
__device__ __forceinline__ int32_t ll_headers_agree(const cuda_kcommon &c,
                                                    const uint4 (&v)[R][CUDA_LL_UPT + 1])
{
    for (int p = 0; p < R; p++) {
        if (p < c.nranks && p != c.rank && v[p][CUDA_LL_UPT].x != c.desc) {
            record_fail(c, COMM_ERR_MISMATCH, CUDA_STAGE_KDESC, p);
            return COMM_ERR_MISMATCH;
        }
    }
    return 0;
}

/* A thread's batch of results: units u0 + i * nthreads of the round, every rank's value
 * (its own from send, the peers' from the gathered units v) in rank order. */
template <typename T, typename W, int OP, int R, typename Args>
__device__ __forceinline__ void
ll_reduce_batch(const Args &a, const cuda_kcommon &c, const T *send, T *recv, const T *addend,
                uint32_t u0, uint32_t nthreads, const uint4 (&v)[R][CUDA_LL_UPT + 1])
{
    constexpr int EPU = CUDA_LL_DATA / sizeof(W);
    typedef typename acc_of<T>::type A;
    typedef opf<OP> F;
#pragma unroll
    for (int i = 0; i < CUDA_LL_UPT; i++) {
        const uint32_t u = u0 + (uint32_t)i * nthreads;
        if (u >= a.units)
            continue;
#pragma unroll
        for (int e = 0; e < EPU; e++) {
            const uint64_t idx = (uint64_t)u * EPU + e;
            if (idx >= a.rn)
                break;
            A acc = A();
#pragma unroll
            for (int p = 0; p < R; p++) {
                if (p >= c.nranks)
                    break;
                A x;
                if (p == c.rank) {
                    x = wire<T, W>::own(send[idx]);
                } else {
                    const uint32_t w[2] = {v[p][i].x, v[p][i].z};
                    x = wire<T, W>::val(word_elem<sizeof(W)>(w, e));
                }
                acc = p == 0 ? x : F::f(acc, x);
            }
            if (addend != nullptr)
                acc = add_(acc, to_acc(addend[(a.rlo + idx) % c.addend_count]));
            recv[idx] = from_acc<T>(F::fin(acc, c.nranks));
        }
    }
}

/* The launch's end: the last block to end moves the counters on; the next launch
 * (stream-ordered after this one) reads them.  Every block read them before it got
 * here. */
__device__ __forceinline__ void ll_launch_end(const cuda_kcommon &c, uint32_t round, bool last)
{
    if (threadIdx.x != 0)
        return;
    cuda_dcount *n = c.counters;
    if (atomicAdd(&n->done, 1u) == gridDim.x - 1) {
        n->done = 0;
        n->kround = round + 1;
        if (last) {
            n->seq = c.seq + 1;
            st_vol(&static_cast<cuda_count_line *>(c.mirror)->seq, c.seq + 1);
        }
    }
}

} // namespace

#endif /* ARCOMM_COLL_CUDA_KERNELS_LL_CUH */
