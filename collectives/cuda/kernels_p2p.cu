/* SPDX-License-Identifier: MIT */
/*
 * Device code of the CUDA peer-to-peer transport (cuda-p2p, transports/cuda/p2p_layout.h).
 * NOT YET VERIFIED ON A GPU (written without one, 2026-12-01).
 *
 * One-shot allreduce, LL rounds in push mode: every thread writes its payload units of
 * the round into area [round % 2][me] of every peer's device region (NVLink or PCIe peer
 * writes; for process ranks on one GPU, the same GPU's memory through an IPC mapping),
 * each 16-byte unit carrying the round's flag beside every 4 data bytes, then polls the
 * units of the same indices in its own region's areas [round % 2][p] (local memory) until
 * their flags match, and reduces every rank's value in rank order (bit-identical on every
 * rank).  Data and flag share each 8-byte half, so no fence, no separate flag and no
 * second round trip are on the path: the reader's volatile 16-byte load (L2, never a
 * stale L1 line) sees a half either old or new whole.
 *
 * What must be visible across processes and GPUs otherwise lives where the host-staged
 * path keeps it: the fail lines (abort, failures), the call lines and the counter mirror
 * in the mapped pinned control pages, read and written with volatile accesses and
 * __threadfence_system (system scope: the host and other GPUs read them).  Every wait is
 * bounded by %globaltimer, polls the fail lines, and compares the peers' call
 * descriptors (per-block headers) before any result is written.  The call number and the
 * round come from the device counters (struct cuda_dcount), never from the launch, so a
 * CUDA graph replays these launches as fresh collectives.
 *
 * Sub-slot reuse needs no wait (as the host-staged LL path): this rank writes round t + 2
 * into peer p's area [t % 2][me] only after its round t + 1 launch ended, which read p's
 * round t + 1 data, which p wrote only after its round t launch (its reads of area
 * [t % 2][me]) ended.
 */
#include "kernels_p2p.h"
#include "cuda/p2p_layout.h"
#include "kernels_dev.cuh"

namespace
{

__device__ __forceinline__ cuda_ll_unit *area_of(const cuda_p2p_ll_args &a, int owner,
                                                 uint32_t round, int sender, int nranks)
{
    return reinterpret_cast<cuda_ll_unit *>(a.peer[owner] +
                                            cuda_p2p_ll_off(a.area_bytes, nranks, round, sender));
}

/*
 * A thread's batch, as the host-staged ll_gather: payload units u0 + i * stride of every
 * peer, and with hdr each peer's header of this block, polled in this rank's own region
 * until their flags match.  Returns 0 with v filled, else the failure (recorded).
 */
template <int R>
__device__ int32_t p2p_gather(const cuda_p2p_ll_args &a, const cuda_kcommon &c, uint32_t round,
                              uint32_t flag, uint32_t u0, uint32_t stride, bool hdr,
                              uint4 (&v)[R][CUDA_LL_UPT + 1])
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
                    v[p][i] = ld_ll(area_of(a, c.rank, round, p, c.nranks) +
                                    (i < CUDA_LL_UPT ? CUDA_LL_PAYLOAD0 + u0 + i * stride
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
            return 0;
        if (st != 0)
            break;
        if (polls > 16)
            __nanosleep(polls < 256 ? 64 : 1024);
        /* Failure lines and call lines are in host memory: the warps take turns. */
        const uint32_t warps = blockDim.x / 32, warp = threadIdx.x / 32;
        if (polls % (POLL_CHECK * 2) == 0 && (polls / (POLL_CHECK * 2)) % warps == warp) {
            if ((threadIdx.x & 31) == 0)
                st = ll_check(c, start, &who);
            st = __shfl_sync(0xffffffffu, st, 0);
            who = __shfl_sync(0xffffffffu, who, 0);
        }
    }
    if (st == COMM_ERR_TIMEOUT) {
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

template <typename T, typename W, int OP, int R>
__global__ void __launch_bounds__(CUDA_LL_THREADS) p2p_ll_kernel(const cuda_p2p_ll_args a)
{
    constexpr int EPU = CUDA_LL_DATA / sizeof(W);
    typedef typename acc_of<T>::type A;
    typedef opf<OP> F;
    __shared__ cuda_kcommon sc;
    __shared__ uint32_t sround;
    if (threadIdx.x == 0) {
        const volatile cuda_dcount *n = a.c.counters;
        sc = a.c;
        sc.seq = n->seq;
        sc.release = n->cchunk + CUDA_RELEASE;
        sround = n->kround;
    }
    __syncthreads();
    const cuda_kcommon &c = sc;
    const uint32_t round = sround;
    const uint32_t flag = cuda_ll_flag(round);
    const T *send = static_cast<const T *>(c.send) + a.rlo;
    T *recv = static_cast<T *>(c.recv) + a.rlo;
    const T *addend = static_cast<const T *>(c.addend);
    const uint32_t nthreads = gridDim.x * blockDim.x;
    const uint32_t gtid = blockIdx.x * blockDim.x + threadIdx.x;

    if (threadIdx.x == 0) {
        if (blockIdx.x == 0)
            write_call_line(c);
        for (int p = 0; p < R; p++)
            if (p < c.nranks && p != c.rank)
                st_ll(area_of(a, p, round, c.rank, c.nranks) + cuda_ll_header(blockIdx.x), c.desc,
                      c.seq, flag);
    }
    for (uint32_t u = gtid; u < a.units; u += nthreads) {
        uint32_t d[2];
        ll_pack<T, W>(send, a.rn, u, d);
#pragma unroll
        for (int p = 0; p < R; p++)
            if (p < c.nranks && p != c.rank)
                st_ll(area_of(a, p, round, c.rank, c.nranks) + CUDA_LL_PAYLOAD0 + u, d[0], d[1],
                      flag);
    }

    const uint32_t per_batch = nthreads * CUDA_LL_UPT;
    const uint32_t batches = (a.units + per_batch - 1) / per_batch;
    for (uint32_t k = 0; k < batches; k++) {
        const uint32_t u0 = k * per_batch + gtid;
        const bool hdr = k == 0 && threadIdx.x == 0;
        uint4 v[R][CUDA_LL_UPT + 1];
        int32_t st = p2p_gather<R>(a, c, round, flag, u0, nthreads, hdr, v);
        if (st == 0 && hdr) {
            /* Every block sees the peers' calls before it writes a result. */
            for (int p = 0; p < R; p++) {
                if (p < c.nranks && p != c.rank && v[p][CUDA_LL_UPT].x != c.desc) {
                    record_fail(c, COMM_ERR_MISMATCH, CUDA_STAGE_KDESC, p);
                    st = COMM_ERR_MISMATCH;
                    break;
                }
            }
        }
        if (__syncthreads_or(st != 0))
            return;
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
    /* The last block to end moves the counters on (as the host-staged LL kernel). */
    if (threadIdx.x == 0) {
        cuda_dcount *n = c.counters;
        if (atomicAdd(&n->done, 1u) == gridDim.x - 1) {
            n->done = 0;
            n->kround = round + 1;
            if (a.last) {
                n->seq = c.seq + 1;
                st_vol(&static_cast<cuda_count_line *>(c.mirror)->seq, c.seq + 1);
            }
        }
    }
}

template <typename T, typename W, int OP>
cudaError_t launch_p2p_ll_t(const cuda_p2p_ll_args *a, unsigned blocks, cudaStream_t s)
{
    if (a->c.nranks <= 2)
        p2p_ll_kernel<T, W, OP, 2><<<blocks, CUDA_LL_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= 4)
        p2p_ll_kernel<T, W, OP, 4><<<blocks, CUDA_LL_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= CUDA_MAX_RANKS)
        p2p_ll_kernel<T, W, OP, CUDA_MAX_RANKS><<<blocks, CUDA_LL_THREADS, 0, s>>>(*a);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

struct p2p_ll_launch {
    const cuda_p2p_ll_args *a;
    unsigned blocks;
    cudaStream_t s;
    template <typename T, typename W, int OP> cudaError_t run() const
    {
        return launch_p2p_ll_t<T, W, OP>(a, blocks, s);
    }
};

} // namespace

extern "C" int cuda_launch_p2p_ll(const struct cuda_p2p_ll_args *a, unsigned blocks, void *stream)
{
    return dispatch(a->c, p2p_ll_launch{a, blocks, static_cast<cudaStream_t>(stream)});
}
