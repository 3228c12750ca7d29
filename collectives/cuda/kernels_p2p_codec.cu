/* SPDX-License-Identifier: MIT */
/*
 * cuda-p2p's two-shot allreduce with a block codec (int8, fp8) on the reduce-scatter leg
 * (docs/wire.md): each rank encodes its input once, a warp a block, straight into the
 * slice owners' RS areas; the owner decodes every rank's blocks, its own included, sums
 * them in rank order and sends the result on at full width.  The flags, waits and copies
 * are the full-width two-shot's (kernels_p2p_ts.cuh, protocol in kernels_p2p.cu).
 * Written without a GPU on 2026-12-07; tests contract-cuda-p2p-int8 and -fp8 check it
 * bit for bit.
 */
#include "kernels_p2p_ts.cuh"

namespace
{

/* ---- two-shot with a block codec (int8, fp8) on the reduce-scatter leg ---- */

/* The last block of a round to end moves the counters on (as the LL kernels). */
__device__ __forceinline__ void ts_round_end(const cuda_kcommon &c, uint32_t round, uint32_t last)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda_dcount *cn = c.counters;
        if (atomicAdd(&cn->done, 1u) == gridDim.x - 1) {
            cn->done = 0;
            cn->kround = round + 1;
            if (last) {
                cn->seq = c.seq + 1;
                st_vol(&static_cast<cuda_count_line *>(c.mirror)->seq, c.seq + 1);
            }
        }
    }
}

/*
 * One two-shot round whose contributions travel in a block codec (docs/wire.md's
 * contract).  Slices and parts are cut at multiples of WIRE_BLOCK_ELEMS, so every part
 * starts on a block boundary of the message (blocks counted from element 0, as the host
 * encoder counts them).  Block b of every rank:
 *   1. encodes part b of every slice q of its input, a warp a block of 64
 *      (encode_block_warp, the copy path's encoder), into q's RS area [round][me] (its own
 *      slice into its own region's area [round][me]): each element of the input is
 *      encoded once; then its RS flags into every peer;
 *   2. waits for every peer's RS flag of block b (their calls compared), decodes part b of
 *      this rank's slice from every rank's bytes, its own included, and sums the decoded
 *      values in rank order in f32 (then the addend, AVG's division, one rounding to T),
 *      into recvbuf and, at full width, into every peer's AG area [round][me]; then its
 *      AG flags;
 *   3. as the full-width kernel: copies the peers' parts of their slices into recvbuf.
 * So every rank holds the same bits: an element's result is made once, by its slice's
 * owner, and travels as it is.
 */
template <typename T, int CODEC, int OP, int R>
__global__ void __launch_bounds__(TS_THREADS) p2p_ts_codec_kernel(const cuda_p2p_ts_args a)
{
    typedef block_codec<CODEC> K;
    typedef opf<OP> F;
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
    const T *addend = static_cast<const T *>(c.addend);
    const uint64_t slice = cuda_p2p_slice_at(a.rn, n, WIRE_BLOCK_ELEMS);
    const uint64_t portion = cuda_p2p_portion_at(slice, gridDim.x, WIRE_BLOCK_ELEMS);
    /* A warp a block of 64: part [lo, hi) of a slice starts on a block (lo is a multiple of
     * WIRE_BLOCK_ELEMS unless the part is empty, lo == hi), and only a slice's last part
     * at the message's end holds a short block. */
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
    const uint32_t warps = blockDim.x / 32u;
    if (threadIdx.x == 0 && blockIdx.x == 0)
        write_call_line(c);

    /* 1: every slice's part b encoded into its owner's RS area (this rank's into its own). */
    for (int q = 0; q < R; q++) {
        if (q >= n)
            continue;
        uint64_t slo, shi, lo, hi;
        cuda_p2p_part(a.rn, slice, (uint64_t)q, &slo, &shi);
        cuda_p2p_part(shi - slo, portion, blockIdx.x, &lo, &hi);
        uint8_t *dst = a.peer[q] + cuda_p2p_ts_off(&a.g, n, 0, round, me);
        const T *src = send + a.rlo + slo;
        for (uint64_t i = lo + (uint64_t)warp * WIRE_BLOCK_ELEMS; i < hi;
             i += (uint64_t)warps * WIRE_BLOCK_ELEMS) {
            const uint64_t b = i / WIRE_BLOCK_ELEMS;
            const uint32_t m = hi - i < WIRE_BLOCK_ELEMS ? (uint32_t)(hi - i) : WIRE_BLOCK_ELEMS;
            encode_block_warp<T, CODEC>(src + i, m, dst + b * WIRE_BLOCK_BYTES, lane);
        }
    }
    ts_signal(a, c, 0, round, flag);

    /* 2: this rank's slice: every rank's blocks decoded, summed in rank order. */
    if (threadIdx.x == 0)
        sst = ts_wait_flags(a.peer[me], &a.g, c, 0, round, flag);
    __syncthreads();
    if (sst != 0)
        return;
    {
        uint64_t slo, shi, lo, hi;
        cuda_p2p_part(a.rn, slice, (uint64_t)me, &slo, &shi);
        cuda_p2p_part(shi - slo, portion, blockIdx.x, &lo, &hi);
        const uint64_t origin = a.rlo + slo;
        for (uint64_t i0 = lo + (uint64_t)warp * WIRE_BLOCK_ELEMS; i0 < hi;
             i0 += (uint64_t)warps * WIRE_BLOCK_ELEMS) {
            const uint64_t b = i0 / WIRE_BLOCK_ELEMS;
            float acc[2] = {0.0f, 0.0f};
#pragma unroll
            for (int p = 0; p < R; p++) {
                if (p >= n)
                    break;
                const uint8_t *blk =
                    a.peer[me] + cuda_p2p_ts_off(&a.g, n, 0, round, p) + b * WIRE_BLOCK_BYTES;
                const float s = __ldcg(reinterpret_cast<const float *>(blk));
                const float v0 = K::value(__ldcg(blk + 4 + lane), s);
                const float v1 = K::value(__ldcg(blk + 4 + 32 + lane), s);
                acc[0] = p == 0 ? v0 : F::f(acc[0], v0);
                acc[1] = p == 0 ? v1 : F::f(acc[1], v1);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint64_t i = i0 + lane + 32u * (uint32_t)h;
                if (i >= hi)
                    continue;
                float v = acc[h];
                if (addend != nullptr)
                    v = add_(v, to_acc(addend[(origin + i) % c.addend_count]));
                const T r = from_acc<T>(F::fin(v, n));
                recv[origin + i] = r;
#pragma unroll
                for (int q = 0; q < R; q++)
                    if (q < n && q != me)
                        reinterpret_cast<T *>(a.peer[q] +
                                              cuda_p2p_ts_off(&a.g, n, 1, round, me))[i] = r;
            }
        }
    }
    ts_signal(a, c, 1, round, flag);

    /* 3: the peers' slices, at full width. */
    if (threadIdx.x == 0)
        sst = ts_wait_flags(a.peer[me], &a.g, c, 1, round, flag);
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
        ts_copy<T, true>(from, recv + a.rlo + slo, lo, hi, c.vec != 0);
    }
    ts_round_end(c, round, a.last);
}

template <typename T, int CODEC, int OP>
cudaError_t launch_p2p_ts_codec_t(const cuda_p2p_ts_args *a, unsigned blocks, cudaStream_t s)
{
    if (a->c.nranks <= 2)
        p2p_ts_codec_kernel<T, CODEC, OP, 2><<<blocks, TS_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= 4)
        p2p_ts_codec_kernel<T, CODEC, OP, 4><<<blocks, TS_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= CUDA_MAX_RANKS)
        p2p_ts_codec_kernel<T, CODEC, OP, CUDA_MAX_RANKS><<<blocks, TS_THREADS, 0, s>>>(*a);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

template <typename T, int CODEC>
cudaError_t ts_codec_op(const cuda_p2p_ts_args *a, unsigned blocks, cudaStream_t s)
{
    switch (a->c.op) {
    case COMM_SUM:
        return launch_p2p_ts_codec_t<T, CODEC, COMM_SUM>(a, blocks, s);
    case COMM_AVG:
        return launch_p2p_ts_codec_t<T, CODEC, COMM_AVG>(a, blocks, s);
    default:
        return cudaErrorInvalidValue; /* wire_applies: sums and averages only */
    }
}

template <int CODEC>
cudaError_t ts_codec_dtype(const cuda_p2p_ts_args *a, unsigned blocks, cudaStream_t s)
{
    switch (a->c.dtype) {
    case COMM_F32:
        return ts_codec_op<float, CODEC>(a, blocks, s);
    case COMM_F16:
        return ts_codec_op<__half, CODEC>(a, blocks, s);
    case COMM_BF16:
        return ts_codec_op<__nv_bfloat16, CODEC>(a, blocks, s);
    default:
        return cudaErrorInvalidValue;
    }
}

} // namespace

extern "C" int cuda_launch_p2p_ts_codec(const struct cuda_p2p_ts_args *a, unsigned blocks,
                                        void *stream)
{
    if (blocks < 1 || blocks > CUDA_MAX_BLOCKS)
        return cudaErrorInvalidValue;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (a->c.codec == WIRE_INT8)
        return ts_codec_dtype<WIRE_INT8>(a, blocks, st);
    if (a->c.codec == WIRE_FP8)
        return ts_codec_dtype<WIRE_FP8>(a, blocks, st);
    return cudaErrorInvalidValue;
}
