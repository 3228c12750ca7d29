/* SPDX-License-Identifier: MIT */
/*
 * Device code of the CUDA peer-to-peer transport (cuda-p2p, transports/cuda/p2p_layout.h).
 * Written without a GPU on 2026-12-01; verified on one GPU (process ranks sharing an H200 under
 * CUDA IPC, 2026-12-01 and -02: tools/gpu-check.sh p2p); not yet on two GPUs.
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
 * Two-shot with a block codec (int8, fp8: p2p_ts_codec_kernel, kernels_p2p_codec.cu) encodes each
 * rank's input once, a warp a block, straight into the slice owners' RS areas; the owner decodes
 * every rank's blocks, its own included, sums them in rank order and sends the result on at full
 * width (docs/wire.md).  Written without a GPU on 2026-12-07; tests contract-cuda-p2p-int8
 * and -fp8 check it bit for bit.
 *
 * Two-shot (large allreduce) and the direct copies (broadcast, allgather, alltoall) move
 * plain data, so each block raises a flag per peer after its pushes: every thread's
 * __threadfence_system (fence.sc.sys) after its stores, a barrier, then thread 0's
 * volatile 16-byte store of the flag unit {desc, flag, seq, flag} (ld/st.volatile are
 * relaxed at system scope in the PTX memory model: fence then relaxed store is a release
 * pattern).  The reader's thread 0 polls with volatile loads and, once the flag is there,
 * issues __threadfence_system (relaxed load then fence: an acquire pattern) before a
 * barrier; the block then reads the data with ld.global.cg (L2: an L1 line of this SM may
 * hold the area's previous round).  System scope, not gpu scope: the writers are other
 * GPUs (NVLink or PCIe peer writes) or other processes' contexts on this GPU, and the fail
 * lines are read by the host.
 *
 * Sub-slot reuse needs no wait (as the host-staged LL path): this rank writes round t + 2
 * into peer p's area [t % 2][me] only after its round t + 1 launch ended, which read p's
 * round t + 1 data, which p wrote only after its round t launch (its reads of area
 * [t % 2][me]) ended.
 */
#include "kernels_p2p.h"
#include "cuda/p2p_layout.h"
#include "kernels_ll.cuh"
#include "kernels_p2p_ts.cuh"

namespace
{

__device__ __forceinline__ cuda_ll_unit *area_of(const cuda_p2p_ll_args &a, int owner,
                                                 uint32_t round, int sender, int nranks)
{
    return reinterpret_cast<cuda_ll_unit *>(a.peer[owner] +
                                            cuda_p2p_ll_off(a.area_bytes, nranks, round, sender));
}

/* The peer-to-peer kernels' units(p) for ll_gather: peer p's area of the round in this
 * rank's own device region (peers push; this rank polls local memory). */
struct p2p_units_at {
    const cuda_p2p_ll_args &a;
    const cuda_kcommon &c;
    uint32_t round;
    __device__ __forceinline__ cuda_ll_unit *operator()(int p) const
    {
        return area_of(a, c.rank, round, p, c.nranks);
    }
};

template <typename T, typename W, int OP, int R>
__global__ void __launch_bounds__(CUDA_LL_THREADS) p2p_ll_kernel(const cuda_p2p_ll_args a)
{
    __shared__ cuda_kcommon sc;
    __shared__ uint32_t sround;
    ll_take_call(a.c, sc, sround);
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
        int32_t st = ll_gather<R>(a, c, p2p_units_at{a, c, round}, flag, u0, nthreads, hdr, v, 64);
        if (st == 0 && hdr)
            st = ll_headers_agree<R>(c, v);
        if (__syncthreads_or(st != 0))
            return;
        ll_reduce_batch<T, W, OP, R>(a, c, send, recv, addend, u0, nthreads, v);
    }
    ll_launch_end(c, round, a.last);
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

/* ---- two-shot (its shared device code: kernels_p2p_ts.cuh) ---- */

/*
 * One two-shot round.  Block b of every rank takes part b of every slice:
 *   1. pushes its part of peer q's slice of its input (as wire elements) into q's RS area
 *      [round][me], for every peer q; then its RS flags into every peer;
 *   2. waits for every peer's RS flag of block b (and compares their calls), reduces its
 *      part of this rank's slice in rank order into recvbuf, and pushes that result into
 *      every peer's AG area [round][me]; then its AG flags;
 *   3. waits for every peer's AG flag of block b and copies their parts of their slices
 *      into recvbuf.
 * Nothing is written to recvbuf before every peer's call was compared (step 2's wait).
 * Blocks never wait for each other: block b of one rank waits only for block b of the
 * others, so the parts pipeline across blocks.
 */
template <typename T, typename W, int OP, int R>
__global__ void __launch_bounds__(TS_THREADS) p2p_ts_kernel(const cuda_p2p_ts_args a)
{
    __shared__ cuda_kcommon sc;
    __shared__ uint32_t sround;
    __shared__ int32_t sst;
    if (threadIdx.x == 0) {
        const volatile cuda_dcount *n = a.c.counters;
        sc = a.c;
        sc.seq = n->seq;
        sc.release = n->cchunk + CUDA_RELEASE;
        sround = n->kround;
        sst = 0;
    }
    __syncthreads();
    const cuda_kcommon &c = sc;
    const uint32_t round = sround;
    const uint32_t flag = cuda_ll_flag(round);
    const int n = c.nranks, me = c.rank;
    const T *send = static_cast<const T *>(c.send);
    T *recv = static_cast<T *>(c.recv);
    const bool vec = c.vec != 0;
    const uint64_t slice = cuda_p2p_slice(a.rn, n);
    const uint64_t portion = cuda_p2p_portion(slice, gridDim.x);
    if (threadIdx.x == 0 && blockIdx.x == 0)
        write_call_line(c);

    /* 1: reduce-scatter pushes. */
    for (int q = 0; q < R; q++) {
        if (q >= n || q == me)
            continue;
        uint64_t slo, shi, lo, hi;
        cuda_p2p_part(a.rn, slice, (uint64_t)q, &slo, &shi);
        cuda_p2p_part(shi - slo, portion, blockIdx.x, &lo, &hi);
        W *dst = reinterpret_cast<W *>(a.peer[q] + cuda_p2p_ts_off(&a.g, n, 0, round, me));
        ts_push_wire<T, W>(send + a.rlo + slo, dst, lo, hi, vec);
    }
    ts_signal(a, c, 0, round, flag);

    /* 2: this rank's slice, reduced. */
    if (threadIdx.x == 0)
        sst = ts_wait_flags(a.peer[c.rank], &a.g, c, 0, round, flag);
    __syncthreads();
    if (sst != 0)
        return;
    {
        uint64_t slo, shi, lo, hi;
        cuda_p2p_part(a.rn, slice, (uint64_t)me, &slo, &shi);
        cuda_p2p_part(shi - slo, portion, blockIdx.x, &lo, &hi);
        const uint64_t origin = a.rlo + slo;
        ts_src<T, W> src = {a.peer[me], &a.g, n, round, origin};
        for (uint64_t i = lo + (uint64_t)threadIdx.x * 8; i < hi; i += (uint64_t)blockDim.x * 8) {
            const uint32_t cnt = hi - i < 8 ? (uint32_t)(hi - i) : 8;
            reduce_group<T, W, OP>(c, origin + i, cnt, src);
        }
        /* Each thread pushes the groups it reduced (its own writes, read back). */
        for (int q = 0; q < R; q++) {
            if (q >= n || q == me)
                continue;
            T *dst = reinterpret_cast<T *>(a.peer[q] + cuda_p2p_ts_off(&a.g, n, 1, round, me));
            ts_copy<T, false>(recv + origin, dst, lo, hi, vec);
        }
    }
    ts_signal(a, c, 1, round, flag);

    /* 3: the peers' slices. */
    if (threadIdx.x == 0)
        sst = ts_wait_flags(a.peer[c.rank], &a.g, c, 1, round, flag);
    __syncthreads();
    if (sst != 0)
        return;
    for (int q = 0; q < R; q++) {
        if (q >= n || q == me)
            continue;
        uint64_t slo, shi, lo, hi;
        cuda_p2p_part(a.rn, slice, (uint64_t)q, &slo, &shi);
        cuda_p2p_part(shi - slo, portion, blockIdx.x, &lo, &hi);
        const T *from =
            reinterpret_cast<const T *>(a.peer[me] + cuda_p2p_ts_off(&a.g, n, 1, round, q));
        ts_copy<T, true>(from, recv + a.rlo + slo, lo, hi, vec);
    }

    /* The last block to end moves the counters on (as the LL kernels). */
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda_dcount *cn = c.counters;
        if (atomicAdd(&cn->done, 1u) == gridDim.x - 1) {
            cn->done = 0;
            cn->kround = round + 1;
            if (a.last) {
                cn->seq = c.seq + 1;
                st_vol(&static_cast<cuda_count_line *>(c.mirror)->seq, c.seq + 1);
            }
        }
    }
}

template <typename T, typename W, int OP>
cudaError_t launch_p2p_ts_t(const cuda_p2p_ts_args *a, unsigned blocks, cudaStream_t s)
{
    if (a->c.nranks <= 2)
        p2p_ts_kernel<T, W, OP, 2><<<blocks, TS_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= 4)
        p2p_ts_kernel<T, W, OP, 4><<<blocks, TS_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= CUDA_MAX_RANKS)
        p2p_ts_kernel<T, W, OP, CUDA_MAX_RANKS><<<blocks, TS_THREADS, 0, s>>>(*a);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

struct p2p_ts_launch {
    const cuda_p2p_ts_args *a;
    unsigned blocks;
    cudaStream_t s;
    template <typename T, typename W, int OP> cudaError_t run() const
    {
        return launch_p2p_ts_t<T, W, OP>(a, blocks, s);
    }
};

/* ---- broadcast, allgather, alltoall: direct copies ---- */

/* Bytes [lo, hi) of src into dst, this block's threads; 16-byte accesses where src, dst
 * and lo allow; cg: src is written by other GPUs or processes (skip L1). */
template <bool CG>
__device__ __forceinline__ void mv_copy(const uint8_t *src, uint8_t *dst, uint64_t lo, uint64_t hi)
{
    if (hi <= lo || src == dst)
        return;
    uint64_t i = lo;
    if ((((uintptr_t)src | (uintptr_t)dst | lo) & 15u) == 0) {
        const uint64_t vend = lo + (hi - lo) / 16 * 16;
        for (uint64_t k = lo + (uint64_t)threadIdx.x * 16; k < vend;
             k += (uint64_t)blockDim.x * 16) {
            const uint4 *s = reinterpret_cast<const uint4 *>(src + k);
            *reinterpret_cast<uint4 *>(dst + k) = CG ? __ldcg(s) : *s;
        }
        i = vend;
    }
    for (uint64_t k = i + threadIdx.x; k < hi; k += blockDim.x)
        dst[k] = CG ? __ldcg(src + k) : src[k];
}

/* The flags of the direct copies are the two-shot AG flags, and their areas the AG areas. */
__device__ __forceinline__ void mv_signal(const cuda_p2p_mv_args &a, const cuda_kcommon &c,
                                          uint32_t round, uint32_t flag)
{
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int q = 0; q < c.nranks; q++)
        if (q != c.rank)
            st_ll(reinterpret_cast<cuda_ll_unit *>(
                      a.peer[q] + cuda_p2p_flag_off(&a.g, c.nranks, 1, round, c.rank, blockIdx.x)),
                  c.desc, c.seq, flag);
}

/*
 * One round of a broadcast, allgather or alltoall.  Block b of every rank takes part b of
 * the round's bytes of every block: pushes what each peer needs of this rank into the
 * peer's AG area [round][me] (allgather: its block; alltoall: the peer's block; broadcast:
 * the root's block, from the root only), signals every peer (every rank signals and waits
 * for every rank, whatever it copies, so that every call is compared and every area's
 * reuse ordered), waits for every peer's flag, then copies what arrived (and its own block)
 * into recvbuf.
 */
__global__ void __launch_bounds__(TS_THREADS) p2p_mv_kernel(const cuda_p2p_mv_args a)
{
    __shared__ cuda_kcommon sc;
    __shared__ uint32_t sround;
    __shared__ int32_t sst;
    if (threadIdx.x == 0) {
        const volatile cuda_dcount *n = a.c.counters;
        sc = a.c;
        sc.seq = n->seq;
        sc.release = n->cchunk + CUDA_RELEASE;
        sround = n->kround;
        sst = 0;
    }
    __syncthreads();
    const cuda_kcommon &c = sc;
    const uint32_t round = sround;
    const uint32_t flag = cuda_ll_flag(round);
    const int n = c.nranks, me = c.rank;
    const uint8_t *send = static_cast<const uint8_t *>(c.send);
    uint8_t *recv = static_cast<uint8_t *>(c.recv);
    const uint64_t part = cuda_align_up((a.n + gridDim.x - 1) / gridDim.x, 16);
    uint64_t plo, phi;
    cuda_p2p_part(a.n, part, blockIdx.x, &plo, &phi);
    if (threadIdx.x == 0 && blockIdx.x == 0)
        write_call_line(c);

    for (int q = 0; q < n; q++) {
        if (q == me || (a.kind == CUDA_P2P_MV_BROADCAST && me != a.root))
            continue;
        const uint8_t *src = send + a.lo;
        if (a.kind == CUDA_P2P_MV_ALLTOALL)
            src += (uint64_t)q * a.block;
        uint8_t *dst = a.peer[q] + cuda_p2p_ts_off(&a.g, n, 1, round, me);
        mv_copy<false>(src, dst, plo, phi);
    }
    mv_signal(a, c, round, flag);
    if (threadIdx.x == 0)
        sst = ts_wait_flags(a.peer[c.rank], &a.g, c, 1, round, flag);
    __syncthreads();
    if (sst != 0)
        return;
    for (int q = 0; q < n; q++) {
        const uint8_t *from = a.peer[me] + cuda_p2p_ts_off(&a.g, n, 1, round, q);
        uint8_t *to = recv + a.lo;
        if (a.kind == CUDA_P2P_MV_BROADCAST) {
            if (q != a.root)
                continue;
            if (me == a.root)
                from = send + a.lo; /* in place: nothing to copy */
        } else {
            to += (uint64_t)q * a.block;
            if (q == me)
                from = send + a.lo + (a.kind == CUDA_P2P_MV_ALLTOALL ? (uint64_t)me * a.block : 0);
        }
        if (q == me || (a.kind == CUDA_P2P_MV_BROADCAST && me == a.root))
            mv_copy<false>(from, to, plo, phi);
        else
            mv_copy<true>(from, to, plo, phi);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda_dcount *cn = c.counters;
        if (atomicAdd(&cn->done, 1u) == gridDim.x - 1) {
            cn->done = 0;
            cn->kround = round + 1;
            if (a.last) {
                cn->seq = c.seq + 1;
                st_vol(&static_cast<cuda_count_line *>(c.mirror)->seq, c.seq + 1);
            }
        }
    }
}

/* ---- reduce_scatter: the two-shot reduce-scatter half ---- */

/*
 * One round of a reduce_scatter: block b of every rank pushes part b of the round of its
 * block q into peer q's RS area [round][me] (every peer q), raises its RS flags, waits for
 * every peer's RS flag of block b (the calls compared), and reduces part b of its own
 * block in rank order into recvbuf.  Area reuse as two-shot's: a round's completion needs
 * every peer's flag of that round.
 */
template <typename T, typename W, int OP, int R>
__global__ void __launch_bounds__(TS_THREADS) p2p_rs_kernel(const cuda_p2p_rs_args a)
{
    __shared__ cuda_kcommon sc;
    __shared__ uint32_t sround;
    __shared__ int32_t sst;
    if (threadIdx.x == 0) {
        const volatile cuda_dcount *n = a.c.counters;
        sc = a.c;
        sc.seq = n->seq;
        sc.release = n->cchunk + CUDA_RELEASE;
        sround = n->kround;
        sst = 0;
    }
    __syncthreads();
    const cuda_kcommon &c = sc;
    const uint32_t round = sround;
    const uint32_t flag = cuda_ll_flag(round);
    const int n = c.nranks, me = c.rank;
    const bool vec = c.vec != 0;
    const uint64_t portion = cuda_p2p_portion(a.rn, gridDim.x);
    uint64_t lo, hi;
    cuda_p2p_part(a.rn, portion, blockIdx.x, &lo, &hi);
    if (threadIdx.x == 0 && blockIdx.x == 0)
        write_call_line(c);
    for (int q = 0; q < R; q++) {
        if (q >= n || q == me)
            continue;
        const T *src = static_cast<const T *>(a.sendbuf) + (uint64_t)q * a.block + a.rlo;
        W *dst = reinterpret_cast<W *>(a.peer[q] + cuda_p2p_ts_off(&a.g, n, 0, round, me));
        ts_push_wire<T, W>(src, dst, lo, hi, vec);
    }
    ts_signal_raw(a.peer, &a.g, c, 0, round, flag);
    if (threadIdx.x == 0)
        sst = ts_wait_flags(a.peer[me], &a.g, c, 0, round, flag);
    __syncthreads();
    if (sst != 0)
        return;
    ts_src<T, W> src = {a.peer[me], &a.g, n, round, a.rlo};
    for (uint64_t i = lo + (uint64_t)threadIdx.x * 8; i < hi; i += (uint64_t)blockDim.x * 8) {
        const uint32_t cnt = hi - i < 8 ? (uint32_t)(hi - i) : 8;
        reduce_group<T, W, OP>(c, a.rlo + i, cnt, src);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda_dcount *cn = c.counters;
        if (atomicAdd(&cn->done, 1u) == gridDim.x - 1) {
            cn->done = 0;
            cn->kround = round + 1;
            if (a.last) {
                cn->seq = c.seq + 1;
                st_vol(&static_cast<cuda_count_line *>(c.mirror)->seq, c.seq + 1);
            }
        }
    }
}

template <typename T, typename W, int OP>
cudaError_t launch_p2p_rs_t(const cuda_p2p_rs_args *a, unsigned blocks, cudaStream_t s)
{
    if (a->c.nranks <= 2)
        p2p_rs_kernel<T, W, OP, 2><<<blocks, TS_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= 4)
        p2p_rs_kernel<T, W, OP, 4><<<blocks, TS_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= CUDA_MAX_RANKS)
        p2p_rs_kernel<T, W, OP, CUDA_MAX_RANKS><<<blocks, TS_THREADS, 0, s>>>(*a);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

struct p2p_rs_launch {
    const cuda_p2p_rs_args *a;
    unsigned blocks;
    cudaStream_t s;
    template <typename T, typename W, int OP> cudaError_t run() const
    {
        return launch_p2p_rs_t<T, W, OP>(a, blocks, s);
    }
};

/* ---- reduce: every rank pushes to the root, the root reduces ---- */

/* Thread 0, after the block's stores: this block's flag of kind into rank q alone. */
__device__ __forceinline__ void signal_one(uint8_t *const *peer, const cuda_p2p_geom *g,
                                           const cuda_kcommon &c, int q, int kind, uint32_t round,
                                           uint32_t flag)
{
    st_ll(reinterpret_cast<cuda_ll_unit *>(
              peer[q] + cuda_p2p_flag_off(g, c.nranks, kind, round, c.rank, blockIdx.x)),
          c.desc, c.seq, flag);
}

/*
 * One round of a reduce.  A non-root's block b pushes part b of its round into the root's
 * RS area [round][me], raises its RS flag in the root, and waits for the root's AG flag of
 * block b (the root's call compared; the root raised it when its launch of this round
 * began, so it is done reading the area of two rounds ago).  The root's block b raises its
 * AG flag in every peer, waits for every peer's RS flag of block b (their calls compared)
 * and reduces part b in rank order into recvbuf.
 */
template <typename T, typename W, int OP, int R>
__global__ void __launch_bounds__(TS_THREADS) p2p_reduce_kernel(const cuda_p2p_rs_args a)
{
    __shared__ cuda_kcommon sc;
    __shared__ uint32_t sround;
    __shared__ int32_t sst;
    if (threadIdx.x == 0) {
        const volatile cuda_dcount *n = a.c.counters;
        sc = a.c;
        sc.seq = n->seq;
        sc.release = n->cchunk + CUDA_RELEASE;
        sround = n->kround;
        sst = 0;
    }
    __syncthreads();
    const cuda_kcommon &c = sc;
    const uint32_t round = sround;
    const uint32_t flag = cuda_ll_flag(round);
    const int n = c.nranks, me = c.rank, root = a.root;
    const uint64_t portion = cuda_p2p_portion(a.rn, gridDim.x);
    uint64_t lo, hi;
    cuda_p2p_part(a.rn, portion, blockIdx.x, &lo, &hi);
    if (threadIdx.x == 0 && blockIdx.x == 0)
        write_call_line(c);
    if (me != root) {
        W *dst = reinterpret_cast<W *>(a.peer[root] + cuda_p2p_ts_off(&a.g, n, 0, round, me));
        ts_push_wire<T, W>(static_cast<const T *>(c.send) + a.rlo, dst, lo, hi, c.vec != 0);
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            signal_one(a.peer, &a.g, c, root, 0, round, flag);
            sst = ts_wait_flags(a.peer[me], &a.g, c, 1, round, flag, root);
        }
        __syncthreads();
        if (sst != 0)
            return;
    } else {
        if (threadIdx.x == 0) {
            for (int q = 0; q < n; q++)
                if (q != me)
                    signal_one(a.peer, &a.g, c, q, 1, round, flag);
            sst = ts_wait_flags(a.peer[me], &a.g, c, 0, round, flag);
        }
        __syncthreads();
        if (sst != 0)
            return;
        ts_src<T, W> src = {a.peer[me], &a.g, n, round, a.rlo};
        for (uint64_t i = lo + (uint64_t)threadIdx.x * 8; i < hi; i += (uint64_t)blockDim.x * 8) {
            const uint32_t cnt = hi - i < 8 ? (uint32_t)(hi - i) : 8;
            reduce_group<T, W, OP>(c, a.rlo + i, cnt, src);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda_dcount *cn = c.counters;
        if (atomicAdd(&cn->done, 1u) == gridDim.x - 1) {
            cn->done = 0;
            cn->kround = round + 1;
            if (a.last) {
                cn->seq = c.seq + 1;
                st_vol(&static_cast<cuda_count_line *>(c.mirror)->seq, c.seq + 1);
            }
        }
    }
}

template <typename T, typename W, int OP>
cudaError_t launch_p2p_reduce_t(const cuda_p2p_rs_args *a, unsigned blocks, cudaStream_t s)
{
    if (a->c.nranks <= 2)
        p2p_reduce_kernel<T, W, OP, 2><<<blocks, TS_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= 4)
        p2p_reduce_kernel<T, W, OP, 4><<<blocks, TS_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= CUDA_MAX_RANKS)
        p2p_reduce_kernel<T, W, OP, CUDA_MAX_RANKS><<<blocks, TS_THREADS, 0, s>>>(*a);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

struct p2p_reduce_launch {
    const cuda_p2p_rs_args *a;
    unsigned blocks;
    cudaStream_t s;
    template <typename T, typename W, int OP> cudaError_t run() const
    {
        return launch_p2p_reduce_t<T, W, OP>(a, blocks, s);
    }
};

} // namespace

extern "C" int cuda_launch_p2p_ll(const struct cuda_p2p_ll_args *a, unsigned blocks, void *stream)
{
    return dispatch(a->c, p2p_ll_launch{a, blocks, static_cast<cudaStream_t>(stream)});
}

extern "C" int cuda_launch_p2p_ts(const struct cuda_p2p_ts_args *a, unsigned blocks, void *stream)
{
    if (blocks < 1 || blocks > CUDA_MAX_BLOCKS)
        return cudaErrorInvalidValue;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (a->c.codec != 0)
        return cuda_launch_p2p_ts_codec(a, blocks, stream); /* kernels_p2p_codec.cu */
    return dispatch(a->c, p2p_ts_launch{a, blocks, st});
}

extern "C" int cuda_launch_p2p_mv(const struct cuda_p2p_mv_args *a, unsigned blocks, void *stream)
{
    if (blocks < 1 || blocks > CUDA_MAX_BLOCKS)
        return cudaErrorInvalidValue;
    p2p_mv_kernel<<<blocks, TS_THREADS, 0, static_cast<cudaStream_t>(stream)>>>(*a);
    return cudaGetLastError();
}

extern "C" int cuda_launch_p2p_rs(const struct cuda_p2p_rs_args *a, unsigned blocks, void *stream)
{
    if (blocks < 1 || blocks > CUDA_MAX_BLOCKS)
        return cudaErrorInvalidValue;
    return dispatch(a->c, p2p_rs_launch{a, blocks, static_cast<cudaStream_t>(stream)});
}

extern "C" int cuda_launch_p2p_reduce(const struct cuda_p2p_rs_args *a, unsigned blocks,
                                      void *stream)
{
    if (blocks < 1 || blocks > CUDA_MAX_BLOCKS)
        return cudaErrorInvalidValue;
    return dispatch(a->c, p2p_reduce_launch{a, blocks, static_cast<cudaStream_t>(stream)});
}
