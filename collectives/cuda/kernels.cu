/*
 * Device code of the CUDA allreduce paths.
 *
 * Kernel path (small messages): every block stages its slice of the rank's data into
 * the rank's mapped host region with 16-byte stores, publishes its arrival token (one
 * 64-byte line per block), spins on the same block's tokens of the peers with
 * __nanosleep, then sums every rank's slice in rank order.  Many blocks keep many PCIe
 * stores and loads in flight.  Rounds alternate between two sub-slots; a round that
 * cuts its sub-slot differently from the round two before it (another size, block
 * count or wire type) first waits until every peer published, in 'kcons', that it read
 * that round to the end (cuda_kslot_reuse_safe says when the tokens suffice).
 *
 * Copy path (large messages): the copy engines move chunks, ordered by the host with
 * one-thread wait kernels and events (allreduce_cuda.c); the add kernel of a chunk is
 * stream-ordered after its copies and never waits.
 *
 * Every spin is bounded by %globaltimer and polls the fail lines of every rank (abort,
 * peers' failures); a failure is written to this rank's fail line, which the host
 * reports on the next call, and releases every copy-path counter.
 */
#include "kernels.h"
#include "cuda/layout.h"
#include "arcomm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define KTHREADS     256
#define POLL_CHECK   16     /* polls between fail-line and clock checks */
#define REPUBLISH_NS 100000 /* republish a token this often while waiting */

namespace
{

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

/* Publication and observation at system scope: one release by the publishing thread
 * after a barrier covers the whole block's stores (cumulativity), one acquire by the
 * observing thread before a barrier covers the whole block's loads. */
__device__ __forceinline__ void st_release_sys64(uint64_t *p, uint64_t v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t ld_acquire_sys64(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

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

/* ---- element conversions: f32 arithmetic, one rounding at the end ---- */

__device__ __forceinline__ float to_f(float x)
{
    return x;
}
__device__ __forceinline__ float to_f(__half x)
{
    return __half2float(x);
}
__device__ __forceinline__ float to_f(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ __half from_f<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* The value a rank contributes: its own element rounded through the wire type. */
template <typename W> __device__ __forceinline__ float wire_round(float x)
{
    return to_f(from_f<W>(x));
}

/* 8 elements: two 16-byte accesses for 4-byte types, one for 2-byte types. */
template <typename T> __device__ __forceinline__ void load8(const T *p, float v[8]);
template <> __device__ __forceinline__ void load8<float>(const float *p, float v[8])
{
    float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
    v[4] = b.x;
    v[5] = b.y;
    v[6] = b.z;
    v[7] = b.w;
}
template <> __device__ __forceinline__ void load8<__half>(const __half *p, float v[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 f = __half22float2(h[k]);
        v[2 * k] = f.x;
        v[2 * k + 1] = f.y;
    }
}
template <> __device__ __forceinline__ void load8<__nv_bfloat16>(const __nv_bfloat16 *p, float v[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 f = __bfloat1622float2(h[k]);
        v[2 * k] = f.x;
        v[2 * k + 1] = f.y;
    }
}

/*
 * Loads that skip L1: staging and fetched chunks are rewritten by others between uses.
 * CV re-reads memory every time (__ldcv: mapped host words another GPU writes); else the
 * line may stay in L2 (__ldcg: device buffers written by this GPU's copy engine).
 */
template <bool CV, typename V> __device__ __forceinline__ V ld_nol1(const V *p)
{
    return CV ? __ldcv(p) : __ldcg(p);
}

template <bool CV, typename T> __device__ __forceinline__ void load8_nol1(const T *p, float v[8])
{
    if (sizeof(T) == 4) {
        float4 a = ld_nol1<CV>(reinterpret_cast<const float4 *>(p));
        float4 b = ld_nol1<CV>(reinterpret_cast<const float4 *>(p) + 1);
        v[0] = a.x;
        v[1] = a.y;
        v[2] = a.z;
        v[3] = a.w;
        v[4] = b.x;
        v[5] = b.y;
        v[6] = b.z;
        v[7] = b.w;
    } else {
        uint4 u = ld_nol1<CV>(reinterpret_cast<const uint4 *>(p));
        load8<T>(reinterpret_cast<const T *>(&u), v);
    }
}
template <typename T> __device__ __forceinline__ void load8_cv(const T *p, float v[8])
{
    load8_nol1<true>(p, v);
}
template <typename T> __device__ __forceinline__ void load8_cg(const T *p, float v[8])
{
    load8_nol1<false>(p, v);
}

template <typename T> __device__ __forceinline__ void store8(T *p, const float v[8])
{
    if (sizeof(T) == 4) {
        float4 *q = reinterpret_cast<float4 *>(p);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        uint4 u;
        T *h = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int k = 0; k < 8; k++)
            h[k] = from_f<T>(v[k]);
        *reinterpret_cast<uint4 *>(p) = u;
    }
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

/* A spin's bookkeeping: the clock, the deadline, the poll count. */
struct spin {
    uint64_t start, last_pub;
    uint32_t polls;
    uint32_t nap; /* ns between polls once warm (0: 256) */
};

__device__ __forceinline__ void spin_init(spin &s, uint32_t nap = 0)
{
    s.start = s.last_pub = now_ns();
    s.polls = 0;
    s.nap = nap;
}

/*
 * One poll's worth of waiting: sleep, and every POLL_CHECK polls check the fail lines
 * and the clock.  Returns 0 to keep waiting, else the status to stop with, and in *who
 * the rank to blame (the caller re-checks its condition, then records the failure).
 * token, when not NULL, is republished every REPUBLISH_NS.
 */
__device__ int32_t spin_step(const cuda_kcommon &c, spin &s, int32_t peer, int32_t *who,
                             uint64_t *token = nullptr, uint64_t token_value = 0)
{
    __nanosleep(s.polls < 64 ? 32 : s.nap ? s.nap : 256);
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
    if (token != nullptr && t - s.last_pub > REPUBLISH_NS) {
        st_release_sys64(token, token_value);
        s.last_pub = t;
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

/* ---- the sum of one group of 8 (or fewer, at the end) elements ---- */

template <typename T, typename W, typename PeerSrc>
__device__ __forceinline__ void sum_group(const cuda_kcommon &c, uint64_t i, uint32_t n,
                                          PeerSrc peer)
{
    const T *send = static_cast<const T *>(c.send);
    T *recv = static_cast<T *>(c.recv);
    const T *addend = static_cast<const T *>(c.addend);
    float acc[8], v[8];
    if (n == 8 && c.vec) {
        for (int p = 0; p < c.nranks; p++) {
            if (p == c.rank) {
                load8<T>(send + i, v);
#pragma unroll
                for (int k = 0; k < 8; k++)
                    v[k] = wire_round<W>(v[k]);
            } else {
                peer.load8(p, i, v);
            }
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[k] = p == 0 ? v[k] : __fadd_rn(acc[k], v[k]);
        }
        if (addend != nullptr) {
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[k] = __fadd_rn(acc[k], to_f(addend[(i + k) % c.addend_count]));
        }
        store8<T>(recv + i, acc);
        return;
    }
    for (uint32_t k = 0; k < n; k++) {
        float a = 0.0f;
        for (int p = 0; p < c.nranks; p++) {
            float x = p == c.rank ? wire_round<W>(to_f(send[i + k])) : peer.load1(p, i + k);
            a = p == 0 ? x : __fadd_rn(a, x);
        }
        if (addend != nullptr)
            a = __fadd_rn(a, to_f(addend[(i + k) % c.addend_count]));
        recv[i + k] = from_f<T>(a);
    }
}

/* ---- kernel path ---- */

template <typename W> struct kpath_src {
    const cuda_kpath_args *a;
    uint64_t sub_off; /* of this round's sub-slot within a region */
    uint64_t rlo;     /* first element of the round */
    __device__ __forceinline__ const W *at(int p, uint64_t i) const
    {
        return reinterpret_cast<const W *>(a->c.regions + (uint64_t)p * a->c.region_bytes +
                                           sub_off) +
               (i - rlo);
    }
    __device__ __forceinline__ void load8(int p, uint64_t i, float v[8]) const
    {
        load8_cv<W>(at(p, i), v);
    }
    __device__ __forceinline__ float load1(int p, uint64_t i) const
    {
        return to_f(*(const volatile W *)at(p, i));
    }
};

/* Thread 0: waits until every peer read round want - 1 to the end ('kcons' >= want). */
__device__ int32_t wait_kcons(const cuda_kcommon &c, uint32_t want)
{
    for (int p = 0; p < c.nranks; p++) {
        if (p == c.rank)
            continue;
        const uint32_t *w = &ctrl_of(c, p)->kcons.value;
        spin s;
        spin_init(s);
        while (!reached(ld_acquire_sys(w), want)) {
            int32_t who = -1;
            int32_t st = spin_step(c, s, p, &who);
            if (st != 0 && !reached(ld_acquire_sys(w), want)) {
                record_fail(c, st, CUDA_STAGE_KSLOT, who);
                return st;
            }
        }
    }
    return 0;
}

/*
 * Thread 0 of every block, once the block read round 'round' to the end: the last
 * block of the round publishes 'kcons' = round + 1, after the round before was
 * published (blocks of two rounds may finish in either order; the word never moves
 * back).
 */
__device__ void publish_consumed(const cuda_kpath_args &a, uint32_t round)
{
    const cuda_kcommon &c = a.c;
    __threadfence();
    uint32_t *d = &a.kdone[round % CUDA_KDONE];
    if (atomicAdd(d, 1u) != gridDim.x - 1)
        return;
    atomicExch(d, 0u);
    volatile uint32_t *order = a.kdone + CUDA_KDONE;
    spin s;
    spin_init(s);
    while (*order != round) {
        int32_t who = -1;
        if (spin_step(c, s, c.rank, &who) != 0)
            break; /* a failed call left it behind: the communicator is broken anyway */
    }
    /* The block's loads of the peers' sub-slots have returned (their values were
     * stored): a plain posted store suffices, no system fence on the way out. */
    st_vol(&ctrl_of(c, c.rank)->kcons.value, round + 1);
    __threadfence();
    *order = round + 1;
}

template <typename T, typename W>
__global__ void __launch_bounds__(KTHREADS) kpath_kernel(const cuda_kpath_args a)
{
    __shared__ int32_t s_err;
    const cuda_kcommon &c = a.c;
    const uint32_t b = blockIdx.x;
    cuda_ctrl *me = ctrl_of(c, c.rank);
    const T *send = static_cast<const T *>(c.send);
    if (threadIdx.x == 0) {
        s_err = 0;
        if (b == 0)
            write_call_line(c);
    }
    for (uint32_t j = 0; j < a.rounds; j++) {
        const uint32_t round = a.round_base + j;
        const uint32_t token = round + 1;
        const uint64_t tv = ((uint64_t)c.desc << 32) | token;
        const uint64_t rlo = (uint64_t)j * a.round_elems;
        const uint64_t rn = (c.count - rlo < a.round_elems ? c.count - rlo : a.round_elems);
        uint64_t lo, hi;
        cuda_block_slice(rn, gridDim.x, b, &lo, &hi);
        kpath_src<W> src = {&a, a.off_kstage + (uint64_t)(round % CUDA_KSLOTS) * a.kslot_bytes,
                            rlo};
        W *stage = const_cast<W *>(src.at(c.rank, rlo));

        /* The sub-slot still holds round - 2, which the peers may be reading where this
         * block's tokens do not vouch for it: wait for their 'kcons'. */
        bool must_wait =
            j < 2 ? ((a.slot_wait >> j) & 1u) != 0 : (j == a.rounds - 1 && rn != a.round_elems);
        if (must_wait) {
            if (threadIdx.x == 0 && s_err == 0)
                s_err = wait_kcons(c, round - 1);
            __syncthreads();
            if (s_err != 0)
                return;
        }

        /* Stage: 16-byte stores over PCIe into this rank's sub-slot. */
        for (uint64_t g = lo + (uint64_t)threadIdx.x * 8; g < hi; g += (uint64_t)KTHREADS * 8) {
            uint32_t n = hi - g < 8 ? (uint32_t)(hi - g) : 8;
            if (n == 8 && c.vec) {
                float v[8];
                load8<T>(send + rlo + g, v);
                store8<W>(stage + g, v);
            } else {
                for (uint32_t k = 0; k < n; k++)
                    stage[g + k] = from_f<W>(to_f(send[rlo + g + k]));
            }
        }
        /* Every thread's PCIe stores land before the token (seen: a release by thread 0
         * alone let peers read stale slices). */
        __threadfence_system();
        __syncthreads();

        if (threadIdx.x == 0) {
            uint64_t *mine = reinterpret_cast<uint64_t *>(&me->token[b]);
            st_release_sys64(mine, tv);
            for (int p = 0; p < c.nranks && s_err == 0; p++) {
                if (p == c.rank)
                    continue;
                const uint64_t *peer_tok =
                    reinterpret_cast<const uint64_t *>(&ctrl_of(c, p)->token[b]);
                spin s;
                spin_init(s);
                uint64_t v;
                while (!reached((uint32_t)(v = ld_acquire_sys64(peer_tok)), token)) {
                    int32_t who = -1;
                    int32_t st = spin_step(c, s, p, &who, mine, tv);
                    if (st == 0)
                        continue;
                    /* A token that came with the failure still brings this round's data. */
                    if (!reached((uint32_t)(v = ld_acquire_sys64(peer_tok)), token)) {
                        record_fail(c, st, CUDA_STAGE_KTOKEN, who);
                        s_err = st;
                    }
                    break;
                }
                /* The token carries the peer's call: a different one is a mismatch. */
                if (s_err == 0 && (uint32_t)v == token && (uint32_t)(v >> 32) != c.desc) {
                    record_fail(c, COMM_ERR_MISMATCH, CUDA_STAGE_KDESC, p);
                    s_err = COMM_ERR_MISMATCH;
                }
            }
            __threadfence_system();
        }
        __syncthreads();
        if (s_err != 0)
            return;

        /* Sum every rank's slice in rank order. */
        for (uint64_t g = lo + (uint64_t)threadIdx.x * 8; g < hi; g += (uint64_t)KTHREADS * 8) {
            uint32_t n = hi - g < 8 ? (uint32_t)(hi - g) : 8;
            sum_group<T, W>(c, rlo + g, n, src);
        }
        __syncthreads();
        if (threadIdx.x == 0)
            publish_consumed(a, round);
    }
}

/* ---- copy path: the add kernel of one chunk, and the copy streams' waits ---- */

#define CADD_THREADS 512

template <typename W> struct cadd_src {
    const cuda_cadd_args *a;
    __device__ __forceinline__ const W *at(int p, uint64_t i) const
    {
        int q = p < a->c.rank ? p : p - 1;
        return reinterpret_cast<const W *>(a->tmp + (uint64_t)q * a->peer_stride) + (i - a->lo);
    }
    __device__ __forceinline__ void load8(int p, uint64_t i, float v[8]) const
    {
        load8_cg<W>(at(p, i), v);
    }
    __device__ __forceinline__ float load1(int p, uint64_t i) const
    {
        return to_f(__ldcg(at(p, i)));
    }
};

/* Runs after the chunk's own D2H and every peer's H2D (stream order): no waiting here. */
template <typename T, typename W>
__global__ void __launch_bounds__(CADD_THREADS) cadd_kernel(const cuda_cadd_args a)
{
    cadd_src<W> src = {&a};
    const uint64_t stride = (uint64_t)gridDim.x * CADD_THREADS * 8;
    for (uint64_t i = ((uint64_t)blockIdx.x * CADD_THREADS + threadIdx.x) * 8; i < a.n;
         i += stride) {
        uint32_t n = a.n - i < 8 ? (uint32_t)(a.n - i) : 8;
        sum_group<T, W>(a.c, a.lo + i, n, src);
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
    const cuda_kcommon &c = a.c;
    if (threadIdx.x != 0)
        return;
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
    for (int p = 0; p < c.nranks; p++) {
        if (p == c.rank)
            continue;
        const uint32_t *w = (const uint32_t *)((const uint8_t *)ctrl_of(c, p) + a.peer_off);
        spin s;
        spin_init(s);
        uint32_t v;
        while (!reached(v = ld_acquire_sys(w), a.peer_want)) {
            int32_t who = -1;
            int32_t st = spin_step(c, s, p, &who);
            if (st != 0 && !reached(v = ld_acquire_sys(w), a.peer_want)) {
                record_fail(c, st, a.stage, who);
                return;
            }
        }
        if (CUDA_RELEASED(v, a.peer_want)) {
            /* A failed rank let the streams go: what they copy is not data. */
            int32_t who = -1;
            int32_t st = check_fail(c, &who);
            if (*(volatile int32_t *)&ctrl_of(c, c.rank)->dfail.status == 0)
                record_fail(c, st != 0 ? st : COMM_ERR_PEER, CUDA_STAGE_CDATA, who);
            return;
        }
    }
}

__global__ void narrow_kernel(const float *src, __nv_bfloat16 *dst, uint64_t n, int vec)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x * 8;
    for (uint64_t i = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n; i += stride) {
        if (vec && i + 8 <= n) {
            float v[8];
            load8<float>(src + i, v);
            store8<__nv_bfloat16>(dst + i, v);
        } else {
            for (uint64_t k = i; k < n && k < i + 8; k++)
                dst[k] = __float2bfloat16_rn(src[k]);
        }
    }
}

template <typename T, typename W>
cudaError_t launch_kpath_t(const cuda_kpath_args *a, unsigned blocks, cudaStream_t s)
{
    kpath_kernel<T, W><<<blocks, KTHREADS, 0, s>>>(*a);
    return cudaGetLastError();
}

template <typename T, typename W> cudaError_t launch_cadd_t(const cuda_cadd_args *a, cudaStream_t s)
{
    uint64_t groups = (a->n + 7) / 8;
    uint64_t want = (groups + CADD_THREADS - 1) / CADD_THREADS;
    unsigned blocks = (unsigned)(want < 1 ? 1 : want > 528 ? 528 : want);
    cadd_kernel<T, W><<<blocks, CADD_THREADS, 0, s>>>(*a);
    return cudaGetLastError();
}

} // namespace

extern "C" int cuda_launch_kpath(const struct cuda_kpath_args *a, unsigned blocks, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (a->c.dtype) {
    case COMM_F32:
        return a->c.narrow ? launch_kpath_t<float, __nv_bfloat16>(a, blocks, s)
                           : launch_kpath_t<float, float>(a, blocks, s);
    case COMM_F16:
        return launch_kpath_t<__half, __half>(a, blocks, s);
    case COMM_BF16:
        return launch_kpath_t<__nv_bfloat16, __nv_bfloat16>(a, blocks, s);
    default:
        return cudaErrorInvalidValue;
    }
}

extern "C" int cuda_launch_cadd(const struct cuda_cadd_args *a, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (a->c.dtype) {
    case COMM_F32:
        return a->c.narrow ? launch_cadd_t<float, __nv_bfloat16>(a, s)
                           : launch_cadd_t<float, float>(a, s);
    case COMM_F16:
        return launch_cadd_t<__half, __half>(a, s);
    case COMM_BF16:
        return launch_cadd_t<__nv_bfloat16, __nv_bfloat16>(a, s);
    default:
        return cudaErrorInvalidValue;
    }
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
