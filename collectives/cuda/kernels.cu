/* SPDX-License-Identifier: MIT */
/*
 * Device code of the CUDA collectives: allreduce's two paths, and the reduction kernel
 * the staged reduce and reduce_scatter share with allreduce's copy path.  The kernels
 * are templates over the element type T, its wire type W (T, or bf16 for narrowed f32
 * sums) and the op; one instance per (dtype, op) is launched by dispatch() below.
 *
 * Kernel path (small messages): LL rounds (layout.h).  Every thread writes its slice of
 * the rank's data into the rank's mapped host sub-slot as 16-byte units that carry the
 * round's flag next to every 4 data bytes, then polls the peers' units of the same
 * indices until their flags match and reduces every rank's value in rank order: one PCIe
 * write and one read round trip, no fences, no separate tokens.  A launch per round.
 *
 * Copy path (large messages): the copy engines move chunks, ordered by the host with
 * one-thread wait kernels and events (allreduce_cuda.c, collectives_cuda.c); the add
 * (reduction) kernel of a chunk is stream-ordered after its copies and never waits.
 *
 * Every wait is bounded by %globaltimer and polls the fail lines of every rank (abort,
 * peers' failures); a failure is written to this rank's fail line, which the host
 * reports on the next call, and releases every copy-path counter.
 */
#include "kernels_ll.cuh"
#include "wire.h"
#include "wire_scalar.h"

namespace
{

/*
 * One LL round: every thread writes its payload units (thread 0 also the block's header,
 * block 0 the call line), then polls the peers' units of the same indices and sums every rank's
 * value in rank order.  Sub-slot reuse needs no wait: this rank writes round t + 2 into
 * the sub-slot of round t only after its round t + 1 launch ended, which read every
 * peer's round t + 1 data, which each peer wrote after its own round t launch (its
 * reads of round t) ended.  R: ranks at most (registers for every peer's units).
 */
template <typename T, typename W, int OP, int R>
__global__ void __launch_bounds__(CUDA_LL_THREADS) ll_kernel(const cuda_ll_args a)
{
    /* The round and the call number come from the counters, not from the launch: a graph
     * replays its launches. */
    __shared__ cuda_kcommon sc;
    __shared__ uint32_t sround;
    ll_take_call(a.c, sc, sround);
    const cuda_kcommon &c = sc;
    const uint32_t round = sround;
    const uint32_t flag = cuda_ll_flag(round);
    const uint64_t sub = a.off_kstage + (uint64_t)(round % CUDA_KSLOTS) * a.kslot_bytes;
    const T *send = static_cast<const T *>(c.send) + a.rlo;
    T *recv = static_cast<T *>(c.recv) + a.rlo;
    const T *addend = static_cast<const T *>(c.addend);
    const uint32_t nthreads = gridDim.x * blockDim.x;
    const uint32_t gtid = blockIdx.x * blockDim.x + threadIdx.x;
    cuda_ll_unit *mine = ll_buf(c, c.rank, sub);

    if (threadIdx.x == 0) {
        if (blockIdx.x == 0)
            write_call_line(c);
        st_ll(mine + cuda_ll_header(blockIdx.x), c.desc, c.seq, flag);
    }
    for (uint32_t u = gtid; u < a.units; u += nthreads) {
        uint32_t d[2];
        ll_pack<T, W>(send, a.rn, u, d);
        st_ll(mine + CUDA_LL_PAYLOAD0 + u, d[0], d[1], flag);
    }

    const uint32_t per_batch = nthreads * CUDA_LL_UPT;
    const uint32_t batches = (a.units + per_batch - 1) / per_batch;
    for (uint32_t k = 0; k < batches; k++) {
        const uint32_t u0 = k * per_batch + gtid;
        const bool hdr = k == 0 && threadIdx.x == 0;
        uint4 v[R][CUDA_LL_UPT + 1];
        int32_t st = ll_gather<R>(a, c, ll_units_at{c, sub}, flag, u0, nthreads, hdr, v, 128);
        if (st == 0 && hdr)
            st = ll_headers_agree<R>(c, v);
        if (__syncthreads_or(st != 0))
            return;
        ll_reduce_batch<T, W, OP, R>(a, c, send, recv, addend, u0, nthreads, v);
    }
    ll_launch_end(c, round, a.last);
}

/* ---- copy path: the add kernel of one chunk, and the copy streams' waits ---- */

#define CADD_THREADS 512

template <typename T, typename W> struct cadd_src {
    const cuda_cadd_args *a;
    typedef typename acc_of<T>::type A;
    __device__ __forceinline__ const W *at(int p, uint64_t i) const
    {
        int q = p < a->c.rank ? p : p - 1;
        return reinterpret_cast<const W *>(a->tmp + (uint64_t)q * a->peer_stride) + (i - a->lo);
    }
    __device__ __forceinline__ void load8(int p, uint64_t i, A v[8]) const
    {
        load8_wire<T, W>(at(p, i), v);
    }
    __device__ __forceinline__ A load1(int p, uint64_t i) const
    {
        typedef typename uint_n<sizeof(W)>::t U;
        return wire<T, W>::val(__ldcg(reinterpret_cast<const U *>(at(p, i))));
    }
};

/* Has this rank recorded a failure (any call: one enqueued after a failed call must not
 * write either)?  The wait that recorded it is stream-ordered before (events).  Read
 * from the device counters (L2), once per thread. */
__device__ __forceinline__ bool failed_here(const cuda_kcommon &c)
{
    return __ldcg(&c.counters->failed) != 0;
}

/* Runs after the chunk's own D2H and every peer's H2D (stream order): no waiting here.
 * Writes nothing after a failure (a mismatch: recvbuf untouched). */
template <typename T, typename W, int OP>
__global__ void __launch_bounds__(CADD_THREADS) cadd_kernel(const cuda_cadd_args a)
{
    if (failed_here(a.c))
        return;
    cadd_src<T, W> src = {&a};
    const uint64_t stride = (uint64_t)gridDim.x * CADD_THREADS * 8;
    for (uint64_t i = ((uint64_t)blockIdx.x * CADD_THREADS + threadIdx.x) * 8; i < a.n;
         i += stride) {
        uint32_t n = a.n - i < 8 ? (uint32_t)(a.n - i) : 8;
        reduce_group<T, W, OP>(a.c, a.lo + i, n, src);
    }
}

/* One chunk of a data movement out of the ring (blockIdx.y: the part); nothing after a
 * failure.  16-byte accesses where the part allows them, bytes otherwise. */
__global__ void __launch_bounds__(CADD_THREADS) ccopy_kernel(const cuda_ccopy_args a)
{
    if (failed_here(a.c))
        return;
    const uint8_t *src = a.src[blockIdx.y];
    uint8_t *dst = a.dst[blockIdx.y];
    const uint64_t tid = (uint64_t)blockIdx.x * CADD_THREADS + threadIdx.x;
    const uint64_t stride = (uint64_t)gridDim.x * CADD_THREADS;
    if ((((uintptr_t)src | (uintptr_t)dst | a.len) & 15) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        for (uint64_t i = tid; i < a.len / 16; i += stride)
            d[i] = __ldcg(s + i);
    } else {
        for (uint64_t i = tid; i < a.len; i += stride)
            dst[i] = src[i];
    }
}

/*
 * A copy stream's wait (one thread): until every peer's counter at peer_off reached
 * peer_want; with check_call (the first wait of a call), first that every peer makes
 * this same call.  Bounded like every spin; a mismatch, a timeout, an abort or a peer's
 * failure is recorded, which releases every counter, so that no stream stays blocked.
 *
 * No kernel of the copy path may spin longer than its own wait: streams can share a
 * hardware queue (more streams than CUDA_DEVICE_MAX_CONNECTIONS), so a kernel that
 * waits for work enqueued after it can block that very work.  Seen on the lent H200s
 * (2026-11-30): a per-call watchdog kernel on a third stream, waiting for the call's
 * last chunk, deadlocked every copy-path call until its timeout.
 */
__global__ void wait_kernel(const cuda_wait_args a)
{
    if (threadIdx.x != 0)
        return;
    cuda_kcommon c = a.c;
    const volatile cuda_dcount *n = c.counters;
    c.seq = n->cur_seq;
    c.release = n->cchunk + CUDA_RELEASE;
    const uint32_t base = n->cur_base;
    if (a.pub_off != 0) {
        /* What this stream copied before (stream order) is out: publish it. */
        __threadfence_system();
        st_vol((uint32_t *)((uint8_t *)ctrl_of(c, c.rank) + a.pub_off), base + a.pub_rel);
        __threadfence_system();
    }
    if (a.check_call) {
        write_call_line(c);
        for (int p = 0; p < c.nranks; p++) {
            if (p == c.rank)
                continue;
            spin s;
            spin_init(s);
            int agree;
            while ((agree = call_agrees(c, p)) == 0) {
                int32_t who = -1;
                int32_t st = spin_step(c, s, p, &who);
                if (st != 0 && (agree = call_agrees(c, p)) == 0) {
                    record_fail(c, st, CUDA_STAGE_CCALL, who);
                    return;
                }
            }
            if (agree < 0) {
                record_fail(c, COMM_ERR_MISMATCH, CUDA_STAGE_CDESC, p);
                return;
            }
        }
    }
    if (a.peer_off == 0)
        return;
    const uint32_t want = base + a.want_rel;
    for (int p = 0; p < c.nranks; p++) {
        if (p == c.rank)
            continue;
        const uint32_t *w = (const uint32_t *)((const uint8_t *)ctrl_of(c, p) + a.peer_off);
        spin s;
        spin_init(s);
        uint32_t v;
        while (!reached(v = ld_acquire_sys(w), want)) {
            int32_t who = -1;
            int32_t st = spin_step(c, s, p, &who);
            if (st != 0 && !reached(v = ld_acquire_sys(w), want)) {
                record_fail(c, st, a.stage, who);
                return;
            }
        }
        if (CUDA_RELEASED(v, want)) {
            /* A failed rank let the streams go: what they copy is not data. */
            int32_t who = -1;
            int32_t st = check_fail(c, &who);
            if (*(volatile int32_t *)&ctrl_of(c, c.rank)->dfail.status == 0)
                record_fail(c, st != 0 ? st : COMM_ERR_PEER, CUDA_STAGE_CDATA, who);
            return;
        }
    }
}

/* A copy-path call's first kernel (caller's stream): its number and its chunks. */
__global__ void begin_kernel(cuda_dcount *n, uint32_t chunks, cuda_count_line *mirror)
{
    if (threadIdx.x != 0)
        return;
    const uint32_t seq = n->seq, base = n->cchunk;
    n->cur_seq = seq;
    n->cur_base = base;
    n->seq = seq + 1;
    n->cchunk = base + chunks;
    st_vol(&mirror->cchunk, base + chunks);
    st_vol(&mirror->seq, seq + 1);
}

__global__ void narrow_kernel(const float *src, __nv_bfloat16 *dst, uint64_t n, int vec)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x * 8;
    for (uint64_t i = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n; i += stride) {
        if (vec && i + 8 <= n) {
            float v[8];
            load8_own<float, float>(src + i, v);
            store8<__nv_bfloat16>(dst + i, v);
        } else {
            for (uint64_t k = i; k < n && k < i + 8; k++)
                dst[k] = __float2bfloat16_rn(src[k]);
        }
    }
}

/* ---- the block codecs (int8, fp8): encode once, decode every rank's bytes in the add ---- */

/* Warps of 256-thread blocks, one a block of 64 elements (encode_block_warp,
 * kernels_dev.cuh: the bytes transports/base/wire.c's encode writes). */
template <typename T, int CODEC>
__global__ void __launch_bounds__(256) encode_kernel(const T *src, uint8_t *dst, uint64_t n)
{
    const uint32_t lane = threadIdx.x & 31u;
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32u);
    const uint64_t nblocks = (n + WIRE_BLOCK_ELEMS - 1) / WIRE_BLOCK_ELEMS;
    for (uint64_t b = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32u; b < nblocks;
         b += warps) {
        const uint64_t i = b * WIRE_BLOCK_ELEMS;
        const uint32_t m = n - i < WIRE_BLOCK_ELEMS ? (uint32_t)(n - i) : WIRE_BLOCK_ELEMS;
        encode_block_warp<T, CODEC>(src + i, m, dst + b * WIRE_BLOCK_BYTES, lane);
    }
}

/* The add kernel of a chunk on a block codec: one warp a block; every rank's value of an
 * element decoded from the bytes on the wire (this rank's own from a.own, the very bytes
 * its peers fetched) and summed in rank order in f32, then the addend, AVG's division and
 * the one rounding to T, as reduce_group does.  Writes nothing after a failure. */
template <typename T, int CODEC, int OP>
__global__ void __launch_bounds__(256) cadd_codec_kernel(const cuda_cadd_args a)
{
    typedef block_codec<CODEC> K;
    typedef opf<OP> F;
    if (failed_here(a.c))
        return;
    const uint32_t lane = threadIdx.x & 31u;
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32u);
    const uint64_t nblocks = (a.n + WIRE_BLOCK_ELEMS - 1) / WIRE_BLOCK_ELEMS;
    T *recv = static_cast<T *>(a.c.recv) + a.lo;
    const T *addend = static_cast<const T *>(a.c.addend);
    for (uint64_t b = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32u; b < nblocks;
         b += warps) {
        float acc[2];
        for (int p = 0; p < a.c.nranks; p++) {
            const int q = p < a.c.rank ? p : p - 1;
            const uint8_t *blk = (p == a.c.rank ? a.own : a.tmp + (uint64_t)q * a.peer_stride) +
                                 b * WIRE_BLOCK_BYTES;
            const float s = __ldcg(reinterpret_cast<const float *>(blk));
            const float v0 = K::value(__ldcg(blk + 4 + lane), s);
            const float v1 = K::value(__ldcg(blk + 4 + 32 + lane), s);
            acc[0] = p == 0 ? v0 : F::f(acc[0], v0);
            acc[1] = p == 0 ? v1 : F::f(acc[1], v1);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint64_t i = b * WIRE_BLOCK_ELEMS + lane + 32u * (uint32_t)h;
            if (i >= a.n)
                continue;
            float v = acc[h];
            if (addend != nullptr)
                v = add_(v, to_acc(addend[(a.lo + i) % a.c.addend_count]));
            recv[i] = from_acc<T>(F::fin(v, a.c.nranks));
        }
    }
}

/* Warps of 256-thread blocks, one a block of 64 elements, at most 132 * 8 warps. */
static unsigned codec_blocks(uint64_t n)
{
    uint64_t nblocks = (n + WIRE_BLOCK_ELEMS - 1) / WIRE_BLOCK_ELEMS;
    uint64_t want = (nblocks + 7) / 8;
    return (unsigned)(want < 1 ? 1 : want > 1056 ? 1056 : want);
}

template <typename T, int CODEC, int OP>
cudaError_t launch_cadd_codec_t(const cuda_cadd_args *a, cudaStream_t s)
{
    cadd_codec_kernel<T, CODEC, OP><<<codec_blocks(a->n), 256, 0, s>>>(*a);
    return cudaGetLastError();
}

template <typename T, int CODEC> cudaError_t cadd_codec_op(const cuda_cadd_args *a, cudaStream_t s)
{
    switch (a->c.op) {
    case COMM_SUM:
        return launch_cadd_codec_t<T, CODEC, COMM_SUM>(a, s);
    case COMM_AVG:
        return launch_cadd_codec_t<T, CODEC, COMM_AVG>(a, s);
    default:
        return cudaErrorInvalidValue; /* wire_applies: sums and averages only */
    }
}

template <int CODEC> cudaError_t cadd_codec_dtype(const cuda_cadd_args *a, cudaStream_t s)
{
    switch (a->c.dtype) {
    case COMM_F32:
        return cadd_codec_op<float, CODEC>(a, s);
    case COMM_F16:
        return cadd_codec_op<__half, CODEC>(a, s);
    case COMM_BF16:
        return cadd_codec_op<__nv_bfloat16, CODEC>(a, s);
    default:
        return cudaErrorInvalidValue;
    }
}

template <int CODEC>
cudaError_t encode_dtype(int dtype, const void *src, uint8_t *dst, uint64_t n, cudaStream_t s)
{
    const unsigned blocks = codec_blocks(n);
    switch (dtype) {
    case COMM_F32:
        encode_kernel<float, CODEC><<<blocks, 256, 0, s>>>(static_cast<const float *>(src), dst, n);
        break;
    case COMM_F16:
        encode_kernel<__half, CODEC>
            <<<blocks, 256, 0, s>>>(static_cast<const __half *>(src), dst, n);
        break;
    case COMM_BF16:
        encode_kernel<__nv_bfloat16, CODEC>
            <<<blocks, 256, 0, s>>>(static_cast<const __nv_bfloat16 *>(src), dst, n);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename T, typename W, int OP>
cudaError_t launch_ll_t(const cuda_ll_args *a, unsigned blocks, cudaStream_t s)
{
    if (a->c.nranks <= 2)
        ll_kernel<T, W, OP, 2><<<blocks, CUDA_LL_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= 4)
        ll_kernel<T, W, OP, 4><<<blocks, CUDA_LL_THREADS, 0, s>>>(*a);
    else if (a->c.nranks <= CUDA_MAX_RANKS)
        ll_kernel<T, W, OP, CUDA_MAX_RANKS><<<blocks, CUDA_LL_THREADS, 0, s>>>(*a);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

template <typename T, typename W, int OP>
cudaError_t launch_cadd_t(const cuda_cadd_args *a, cudaStream_t s)
{
    uint64_t groups = (a->n + 7) / 8;
    uint64_t want = (groups + CADD_THREADS - 1) / CADD_THREADS;
    unsigned blocks = (unsigned)(want < 1 ? 1 : want > 528 ? 528 : want);
    cadd_kernel<T, W, OP><<<blocks, CADD_THREADS, 0, s>>>(*a);
    return cudaGetLastError();
}

/* The launchers as functors: run<T, W, OP>() launches that instance. */
struct ll_launch {
    const cuda_ll_args *a;
    unsigned blocks;
    cudaStream_t s;
    template <typename T, typename W, int OP> cudaError_t run() const
    {
        return launch_ll_t<T, W, OP>(a, blocks, s);
    }
};

struct cadd_launch {
    const cuda_cadd_args *a;
    cudaStream_t s;
    template <typename T, typename W, int OP> cudaError_t run() const
    {
        return launch_cadd_t<T, W, OP>(a, s);
    }
};

} // namespace

extern "C" int cuda_launch_ll(const struct cuda_ll_args *a, unsigned blocks, void *stream)
{
    return dispatch(a->c, ll_launch{a, blocks, static_cast<cudaStream_t>(stream)});
}

extern "C" int cuda_launch_cadd(const struct cuda_cadd_args *a, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (a->c.codec == WIRE_INT8)
        return cadd_codec_dtype<WIRE_INT8>(a, s);
    if (a->c.codec == WIRE_FP8)
        return cadd_codec_dtype<WIRE_FP8>(a, s);
    return dispatch(a->c, cadd_launch{a, s});
}

extern "C" int cuda_launch_encode(int codec, int dtype, const void *src, void *dst, uint64_t count,
                                  void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    uint8_t *d = static_cast<uint8_t *>(dst);
    if (count == 0)
        return cudaSuccess;
    if (codec == WIRE_INT8)
        return encode_dtype<WIRE_INT8>(dtype, src, d, count, s);
    if (codec == WIRE_FP8)
        return encode_dtype<WIRE_FP8>(dtype, src, d, count, s);
    return cudaErrorInvalidValue;
}

extern "C" int cuda_launch_ccopy(const struct cuda_ccopy_args *a, void *stream)
{
    if (a->nparts == 0 || a->len == 0)
        return 0;
    if (a->nparts > CUDA_CCOPY_PARTS)
        return cudaErrorInvalidValue;
    uint64_t units = (a->len + 15) / 16, want = (units + CADD_THREADS - 1) / CADD_THREADS;
    dim3 grid((unsigned)(want < 1 ? 1 : want > 132 ? 132 : want), a->nparts);
    ccopy_kernel<<<grid, CADD_THREADS, 0, static_cast<cudaStream_t>(stream)>>>(*a);
    return cudaGetLastError();
}

extern "C" int cuda_launch_begin(struct cuda_dcount *count, uint32_t chunks, void *mirror,
                                 void *stream)
{
    begin_kernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(
        count, chunks, static_cast<cuda_count_line *>(mirror));
    return cudaGetLastError();
}

extern "C" int cuda_launch_wait(const struct cuda_wait_args *a, void *stream)
{
    wait_kernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(*a);
    return cudaGetLastError();
}

extern "C" int cuda_launch_narrow(const float *src, void *dst, uint64_t count, void *stream)
{
    if (count == 0)
        return cudaSuccess;
    uint64_t groups = (count + 7) / 8;
    unsigned blocks = (unsigned)((groups + 255) / 256);
    if (blocks > 1024)
        blocks = 1024;
    int vec = ((uintptr_t)src % 16 == 0) && ((uintptr_t)dst % 16 == 0);
    narrow_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        src, static_cast<__nv_bfloat16 *>(dst), count, vec);
    return cudaGetLastError();
}
