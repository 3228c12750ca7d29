/* SPDX-License-Identifier: MIT */
/*
 * Device helpers that the CUDA kernels share (kernels.cu, the host-staged paths;
 * kernels_p2p.cu, the peer-to-peer paths): the clock, element types and ops with their
 * fixed rounding, wire types, vector words, fail lines and bounded spins, call lines,
 * the reduction of a group, the block codecs' encoding of a block, the dispatch by dtype
 * and op (the LL rounds' pieces: kernels_ll.cuh).  Everything is in an anonymous
 * namespace, so each translation unit has its own copy.
 */
#ifndef ARCOMM_COLL_CUDA_KERNELS_DEV_CUH
#define ARCOMM_COLL_CUDA_KERNELS_DEV_CUH

#include "kernels.h"
#include "cuda/layout.h"
#include "arcomm.h"
#include "wire.h"
#include "wire_scalar.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <type_traits>

#define KTHREADS   256
#define POLL_CHECK 16 /* polls between fail-line and clock checks */

namespace
{

/* Unsigned integers of S bytes (for loads of any element type's bits). */
template <int S> struct uint_n;
template <> struct uint_n<1> {
    typedef unsigned char t;
};
template <> struct uint_n<2> {
    typedef unsigned short t;
};
template <> struct uint_n<4> {
    typedef unsigned int t;
};
template <> struct uint_n<8> {
    typedef unsigned long long t;
};

__device__ __forceinline__ uint64_t now_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void st_vol(uint32_t *p, uint32_t v)
{
    *(volatile uint32_t *)p = v;
}

/* Observation at system scope: what a peer's copy stream published before it. */
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ bool reached(uint32_t v, uint32_t want)
{
    return (int32_t)(v - want) >= 0;
}

__device__ __forceinline__ cuda_ctrl *ctrl_of(const cuda_kcommon &c, int r)
{
    return (cuda_ctrl *)(c.regions + (uint64_t)r * c.region_bytes);
}

/* ---- element types and ops: the accumulator type, one rounding at the end ---- */

/* f16 and bf16 accumulate in f32; every other type in itself (integers wrap). */
template <typename T> struct acc_of {
    typedef T type;
};
template <> struct acc_of<__half> {
    typedef float type;
};
template <> struct acc_of<__nv_bfloat16> {
    typedef float type;
};

template <typename T> __device__ __forceinline__ typename acc_of<T>::type to_acc(T x)
{
    return x;
}
template <> __device__ __forceinline__ float to_acc<__half>(__half x)
{
    return __half2float(x);
}
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T from_acc(typename acc_of<T>::type x)
{
    return x;
}
template <> __device__ __forceinline__ __half from_acc<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* The bits of an element (low bits of the result), and back. */
__device__ __forceinline__ uint64_t bits_of(float x)
{
    return __float_as_uint(x);
}
__device__ __forceinline__ uint64_t bits_of(double x)
{
    return (uint64_t)__double_as_longlong(x);
}
__device__ __forceinline__ uint64_t bits_of(__half x)
{
    return __half_as_ushort(x);
}
__device__ __forceinline__ uint64_t bits_of(__nv_bfloat16 x)
{
    return __bfloat16_as_ushort(x);
}
template <typename I> __device__ __forceinline__ uint64_t bits_of(I x)
{
    return (uint64_t)(typename std::make_unsigned<I>::type)x;
}

template <typename T> __device__ __forceinline__ T of_bits(uint64_t b)
{
    return (T)(typename std::make_unsigned<T>::type)b;
}
template <> __device__ __forceinline__ float of_bits<float>(uint64_t b)
{
    return __uint_as_float((uint32_t)b);
}
template <> __device__ __forceinline__ double of_bits<double>(uint64_t b)
{
    return __longlong_as_double((long long)b);
}
template <> __device__ __forceinline__ __half of_bits<__half>(uint64_t b)
{
    return __ushort_as_half((unsigned short)b);
}
template <> __device__ __forceinline__ __nv_bfloat16 of_bits<__nv_bfloat16>(uint64_t b)
{
    return __ushort_as_bfloat16((unsigned short)b);
}

/* Arithmetic without contraction (fixed rounding); integers wrap (unsigned arithmetic). */
__device__ __forceinline__ float add_(float a, float b)
{
    return __fadd_rn(a, b);
}
__device__ __forceinline__ double add_(double a, double b)
{
    return __dadd_rn(a, b);
}
template <typename I> __device__ __forceinline__ I add_(I a, I b)
{
    typedef typename std::make_unsigned<I>::type U;
    return (I)(U)((U)a + (U)b);
}
__device__ __forceinline__ float mul_(float a, float b)
{
    return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_(double a, double b)
{
    return __dmul_rn(a, b);
}
template <typename I> __device__ __forceinline__ I mul_(I a, I b)
{
    typedef typename std::make_unsigned<I>::type U;
    return (I)(U)((U)a * (U)b);
}
/* AVG's division by the rank count (float types only: integers do not instantiate it). */
__device__ __forceinline__ float div_(float a, int n)
{
    return __fdiv_rn(a, (float)n);
}
__device__ __forceinline__ double div_(double a, int n)
{
    return __ddiv_rn(a, (double)n);
}

/* The ops: f folds the next rank's value b into acc a (rank order), fin ends the fold.
 * MAX and MIN keep the earlier value on a tie or a NaN, as the host engine does. */
template <int OP> struct opf;
template <> struct opf<COMM_SUM> {
    template <typename A> static __device__ __forceinline__ A f(A a, A b)
    {
        return add_(a, b);
    }
    template <typename A> static __device__ __forceinline__ A fin(A a, int)
    {
        return a;
    }
};
template <> struct opf<COMM_AVG> {
    template <typename A> static __device__ __forceinline__ A f(A a, A b)
    {
        return add_(a, b);
    }
    template <typename A> static __device__ __forceinline__ A fin(A a, int n)
    {
        return div_(a, n);
    }
};
template <> struct opf<COMM_PROD> {
    template <typename A> static __device__ __forceinline__ A f(A a, A b)
    {
        return mul_(a, b);
    }
    template <typename A> static __device__ __forceinline__ A fin(A a, int)
    {
        return a;
    }
};
template <> struct opf<COMM_MAX> {
    template <typename A> static __device__ __forceinline__ A f(A a, A b)
    {
        return b > a ? b : a;
    }
    template <typename A> static __device__ __forceinline__ A fin(A a, int)
    {
        return a;
    }
};
template <> struct opf<COMM_MIN> {
    template <typename A> static __device__ __forceinline__ A f(A a, A b)
    {
        return b < a ? b : a;
    }
    template <typename A> static __device__ __forceinline__ A fin(A a, int)
    {
        return a;
    }
};

/*
 * The wire type W of a T: T itself, or bf16 for narrowed f32.  bits: what a rank puts on
 * the wire; val: a wire element as the accumulator sees it; own: a rank's own element,
 * rounded through the wire type as its peers see it.
 */
template <typename T, typename W> struct wire {
    typedef typename acc_of<T>::type A;
    static __device__ __forceinline__ uint64_t bits(T x)
    {
        return bits_of(from_acc<W>(to_acc(x)));
    }
    static __device__ __forceinline__ A val(uint64_t b)
    {
        return to_acc(of_bits<W>(b));
    }
    static __device__ __forceinline__ A own(T x)
    {
        return to_acc(from_acc<W>(to_acc(x)));
    }
};
template <typename T> struct wire<T, T> {
    typedef typename acc_of<T>::type A;
    static __device__ __forceinline__ uint64_t bits(T x)
    {
        return bits_of(x);
    }
    static __device__ __forceinline__ A val(uint64_t b)
    {
        return to_acc(of_bits<T>(b));
    }
    static __device__ __forceinline__ A own(T x)
    {
        return to_acc(x);
    }
};

/* ---- groups of 8 elements as 32-bit words: vector loads and stores of any type ---- */

/* Words of 8 elements of S bytes: 2 (S = 1), 4, 8 or 16. */
template <int S> struct words8 {
    static constexpr int SUB = S < 4 ? S : 4; /* bytes of an element within a word */
    static constexpr int PER = 4 / SUB;       /* elements per word (1 for S >= 4) */
    static constexpr int SB = 8 * SUB;        /* bits of an element within a word */
    static constexpr uint32_t MASK = SB == 32 ? 0xffffffffu : (1u << (SB & 31)) - 1u;
};

/* Loads the words of 8 elements at p (8 * S-byte aligned up to 16); CG: skip L1 (device
 * buffers this GPU's copy engine rewrites between uses). */
template <int S, bool CG> __device__ __forceinline__ void ld_words(const void *p, uint32_t w[2 * S])
{
    if constexpr (S == 1) {
        const uint2 *q = reinterpret_cast<const uint2 *>(p);
        uint2 u = CG ? __ldcg(q) : *q;
        w[0] = u.x;
        w[1] = u.y;
    } else {
#pragma unroll
        for (int j = 0; j < (2 * S) / 4; j++) {
            const uint4 *q = reinterpret_cast<const uint4 *>(p) + j;
            uint4 u = CG ? __ldcg(q) : *q;
            w[4 * j] = u.x;
            w[4 * j + 1] = u.y;
            w[4 * j + 2] = u.z;
            w[4 * j + 3] = u.w;
        }
    }
}

template <int S> __device__ __forceinline__ void st_words(void *p, const uint32_t w[2 * S])
{
    if constexpr (S == 1) {
        *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
        for (int j = 0; j < (2 * S) / 4; j++)
            reinterpret_cast<uint4 *>(p)[j] =
                make_uint4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]);
    }
}

/* Element k's bits of a group's words. */
template <int S> __device__ __forceinline__ uint64_t word_elem(const uint32_t *w, int k)
{
    typedef words8<S> G;
    if constexpr (S == 8)
        return (uint64_t)w[2 * k] | ((uint64_t)w[2 * k + 1] << 32);
    else
        return (w[k / G::PER] >> ((k % G::PER) * G::SB)) & G::MASK;
}

/* ORs element k's bits into a group's words (zeroed first). */
template <int S> __device__ __forceinline__ void word_put(uint32_t *w, int k, uint64_t b)
{
    typedef words8<S> G;
    if constexpr (S == 8) {
        w[2 * k] = (uint32_t)b;
        w[2 * k + 1] = (uint32_t)(b >> 32);
    } else {
        w[k / G::PER] |= ((uint32_t)b & G::MASK) << ((k % G::PER) * G::SB);
    }
}

/* 8 elements of T at p as accumulator values, each through the wire as a rank's own. */
template <typename T, typename W>
__device__ __forceinline__ void load8_own(const T *p, typename acc_of<T>::type v[8])
{
    uint32_t w[2 * sizeof(T)];
    ld_words<sizeof(T), false>(p, w);
#pragma unroll
    for (int k = 0; k < 8; k++)
        v[k] = wire<T, W>::own(of_bits<T>(word_elem<sizeof(T)>(w, k)));
}

/* 8 wire elements at p (a peer's, fetched into device memory) as accumulator values. */
template <typename T, typename W>
__device__ __forceinline__ void load8_wire(const W *p, typename acc_of<T>::type v[8])
{
    uint32_t w[2 * sizeof(W)];
    ld_words<sizeof(W), true>(p, w);
#pragma unroll
    for (int k = 0; k < 8; k++)
        v[k] = wire<T, W>::val(word_elem<sizeof(W)>(w, k));
}

template <typename T>
__device__ __forceinline__ void store8(T *p, const typename acc_of<T>::type v[8])
{
    uint32_t w[2 * sizeof(T)];
#pragma unroll
    for (int j = 0; j < 2 * (int)sizeof(T); j++)
        w[j] = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        word_put<sizeof(T)>(w, k, bits_of(from_acc<T>(v[k])));
    st_words<sizeof(T)>(p, w);
}

/* ---- failure: fail lines, release of the copy-path counters ---- */

/* Does a failure published at call fseq concern call seq?  A rank that published at a
 * later call (comm_destroy after its last call) has done its part of this one. */
__device__ __forceinline__ bool concerns(uint32_t fseq, uint32_t seq)
{
    return (int32_t)(fseq - seq) <= 0;
}

/* A non-zero status to stop with when any rank failed or aborted, else 0. */
__device__ int32_t check_fail(const cuda_kcommon &c, int32_t *who)
{
    for (int r = 0; r < c.nranks; r++) {
        cuda_ctrl *ctl = ctrl_of(c, r);
        int32_t h = *(volatile int32_t *)&ctl->hfail.status;
        int32_t d = *(volatile int32_t *)&ctl->dfail.status;
        if (h != 0 && !concerns(*(volatile uint32_t *)&ctl->hfail.seq, c.seq))
            h = 0;
        if (d != 0 && !concerns(*(volatile uint32_t *)&ctl->dfail.seq, c.seq))
            d = 0;
        if (h == 0 && d == 0)
            continue;
        *who = r;
        if (r == c.rank)
            return h != 0 ? h : d;
        return COMM_ERR_PEER;
    }
    return 0;
}

/* Records this rank's failure (first writer wins, racing blocks are harmless) and lets
 * every copy-path stream wait go. */
__device__ void record_fail(const cuda_kcommon &c, int32_t status, int32_t stage, int32_t peer)
{
    cuda_ctrl *me = ctrl_of(c, c.rank);
    *(volatile uint32_t *)&c.counters->failed = 1;
    __threadfence();
    if (*(volatile int32_t *)&me->dfail.status == 0) {
        /* One 16-byte store: the host never sees half a record. */
        asm volatile("st.volatile.global.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(&me->dfail),
                     "r"(status), "r"(stage), "r"(peer), "r"((int32_t)c.seq)
                     : "memory");
    }
    for (int r = 0; r < c.nranks; r++) {
        cuda_ctrl *ctl = ctrl_of(c, r);
        st_vol(&ctl->ready.value, c.release);
        st_vol(&ctl->h2d.value, c.release);
    }
    __threadfence_system();
}

/* A spin's bookkeeping: the clock and the poll count. */
struct spin {
    uint64_t start;
    uint32_t polls;
};

__device__ __forceinline__ void spin_init(spin &s)
{
    s.start = now_ns();
    s.polls = 0;
}

/*
 * One poll's worth of waiting: sleep, and every POLL_CHECK polls check the fail lines
 * and the clock.  Returns 0 to keep waiting, else the status to stop with, and in *who
 * the rank to blame (the caller re-checks its condition, then records the failure).
 */
__device__ int32_t spin_step(const cuda_kcommon &c, spin &s, int32_t peer, int32_t *who)
{
    __nanosleep(s.polls < 64 ? 32 : 256);
    if (++s.polls % POLL_CHECK != 0)
        return 0;
    int32_t st = check_fail(c, who);
    if (st != 0)
        return st;
    uint64_t t = now_ns();
    if (c.timeout_ns != 0 && t - s.start > c.timeout_ns) {
        *who = peer;
        return COMM_ERR_TIMEOUT;
    }
    return 0;
}

__device__ __forceinline__ void write_call_line(const cuda_kcommon &c)
{
    uint64_t v = ((uint64_t)c.desc << 32) | c.seq;
    *reinterpret_cast<volatile uint64_t *>(&ctrl_of(c, c.rank)->call) = v;
}

/* Peer p's call line against this call: 1 agrees or moved on, 0 not there yet, -1 differs. */
__device__ __forceinline__ int call_agrees(const cuda_kcommon &c, int p)
{
    uint64_t v = *reinterpret_cast<const volatile uint64_t *>(&ctrl_of(c, p)->call);
    uint32_t seq = (uint32_t)v, desc = (uint32_t)(v >> 32);
    if (desc == 0 || !reached(seq, c.seq))
        return 0;
    return seq != c.seq || desc == c.desc ? 1 : -1;
}

/* ---- the reduction of one group of 8 (or fewer, at the end) elements ---- */

template <typename T, typename W, int OP, typename PeerSrc>
__device__ __forceinline__ void reduce_group(const cuda_kcommon &c, uint64_t i, uint32_t n,
                                             PeerSrc peer)
{
    typedef typename acc_of<T>::type A;
    typedef opf<OP> F;
    const T *send = static_cast<const T *>(c.send);
    T *recv = static_cast<T *>(c.recv);
    const T *addend = static_cast<const T *>(c.addend);
    A acc[8], v[8];
    if (n == 8 && c.vec) {
        for (int p = 0; p < c.nranks; p++) {
            if (p == c.rank)
                load8_own<T, W>(send + i, v);
            else
                peer.load8(p, i, v);
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[k] = p == 0 ? v[k] : F::f(acc[k], v[k]);
        }
        if (addend != nullptr) {
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[k] = add_(acc[k], to_acc(addend[(i + k) % c.addend_count]));
        }
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc[k] = F::fin(acc[k], c.nranks);
        store8<T>(recv + i, acc);
        return;
    }
    for (uint32_t k = 0; k < n; k++) {
        A a = A();
        for (int p = 0; p < c.nranks; p++) {
            A x = p == c.rank ? wire<T, W>::own(send[i + k]) : peer.load1(p, i + k);
            a = p == 0 ? x : F::f(a, x);
        }
        if (addend != nullptr)
            a = add_(a, to_acc(addend[(i + k) % c.addend_count]));
        recv[i + k] = from_acc<T>(F::fin(a, c.nranks));
    }
}

/* ---- the block codecs (int8, fp8): a warp encodes a block ---- */

/* An element of a block codec: its code, and the value a code decodes to. */
template <int CODEC> struct block_codec;
template <> struct block_codec<WIRE_INT8> {
    static __device__ __forceinline__ float scale(float amax)
    {
        return wire_int8_scale(amax);
    }
    static __device__ __forceinline__ uint8_t code(float x, float s)
    {
        return (uint8_t)wire_int8_code(x, s);
    }
    static __device__ __forceinline__ float value(uint8_t c, float s)
    {
        return wire_int8_value((int8_t)c, s);
    }
};
template <> struct block_codec<WIRE_FP8> {
    static __device__ __forceinline__ float scale(float amax)
    {
        return wire_fp8_scale(amax);
    }
    static __device__ __forceinline__ uint8_t code(float x, float s)
    {
        return wire_fp8_code(x, s);
    }
    static __device__ __forceinline__ float value(uint8_t c, float s)
    {
        return wire_fp8_value(c, s);
    }
};

/*
 * One warp encodes one block of WIRE_BLOCK_ELEMS (64): src[0, n), n <= 64, into out
 * (WIRE_BLOCK_BYTES, 4-byte aligned).  Lane l holds elements l and l + 32; the finite
 * absmax by a shuffle reduction (max is exact in any order), then the f32 scale (lane 0)
 * and one code byte an element.  The bytes are wire.c's, bit for bit (the same
 * arithmetic, wire_scalar.h); a short block's unused codes are 0.  Every lane of the warp
 * calls it (the shuffle takes the whole warp).
 */
template <typename T, int CODEC>
__device__ __forceinline__ void encode_block_warp(const T *src, uint32_t n, uint8_t *out,
                                                  uint32_t lane)
{
    typedef block_codec<CODEC> K;
    const float x0 = lane < n ? to_acc(src[lane]) : 0.0f;
    const float x1 = lane + 32u < n ? to_acc(src[lane + 32u]) : 0.0f;
    const float a0 = wire_abs(x0), a1 = wire_abs(x1);
    float amax = wire_finite(a0) ? a0 : 0.0f;
    amax = wire_finite(a1) && a1 > amax ? a1 : amax;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, amax, off);
        amax = o > amax ? o : amax;
    }
    const float s = K::scale(amax);
    if (lane == 0)
        *reinterpret_cast<float *>(out) = s;
    out[4 + lane] = lane < n ? K::code(x0, s) : (uint8_t)0;
    out[4 + 32 + lane] = lane + 32u < n ? K::code(x1, s) : (uint8_t)0;
}

/* Every op of an integer type (AVG is refused before a launch: not instantiated). */
template <typename T, typename L> cudaError_t by_int_op(int op, const L &l)
{
    switch (op) {
    case COMM_SUM:
        return l.template run<T, T, COMM_SUM>();
    case COMM_PROD:
        return l.template run<T, T, COMM_PROD>();
    case COMM_MAX:
        return l.template run<T, T, COMM_MAX>();
    case COMM_MIN:
        return l.template run<T, T, COMM_MIN>();
    default:
        return cudaErrorInvalidValue;
    }
}

/* Every op of a float type. */
template <typename T, typename L> cudaError_t by_float_op(int op, const L &l)
{
    switch (op) {
    case COMM_AVG:
        return l.template run<T, T, COMM_AVG>();
    case COMM_SUM:
        return l.template run<T, T, COMM_SUM>();
    case COMM_PROD:
        return l.template run<T, T, COMM_PROD>();
    case COMM_MAX:
        return l.template run<T, T, COMM_MAX>();
    case COMM_MIN:
        return l.template run<T, T, COMM_MIN>();
    default:
        return cudaErrorInvalidValue;
    }
}

/* The instance for (dtype, op, narrow): bf16 on the wire for f32 sums only. */
template <typename L> cudaError_t dispatch(const cuda_kcommon &c, const L &l)
{
    switch (c.dtype) {
    case COMM_F32:
        if (c.narrow)
            return c.op == COMM_SUM ? l.template run<float, __nv_bfloat16, COMM_SUM>()
                                    : cudaErrorInvalidValue;
        return by_float_op<float>(c.op, l);
    case COMM_F16:
        return by_float_op<__half>(c.op, l);
    case COMM_BF16:
        return by_float_op<__nv_bfloat16>(c.op, l);
    case COMM_F64:
        return by_float_op<double>(c.op, l);
    case COMM_I32:
        return by_int_op<int32_t>(c.op, l);
    case COMM_I64:
        return by_int_op<int64_t>(c.op, l);
    case COMM_I8:
        return by_int_op<int8_t>(c.op, l);
    case COMM_U8:
        return by_int_op<uint8_t>(c.op, l);
    case COMM_U32:
        return by_int_op<uint32_t>(c.op, l);
    case COMM_U64:
        return by_int_op<uint64_t>(c.op, l);
    default:
        return cudaErrorInvalidValue;
    }
}

} // namespace

#endif /* ARCOMM_COLL_CUDA_KERNELS_DEV_CUH */
