/* SPDX-License-Identifier: MIT */
/*
 * coll_reduce: the host reduction every host path shares.  It picks the kernels of the
 * best instruction set once (reduce_isa.h), then walks the tensor in blocks of a few
 * KiB: all sources of one block are reduced into an accumulator that stays in L1, and
 * the fan-out to every destination (with its addend, narrowed, maybe streamed) reads
 * it from there, so memory sees each source read once and each destination written
 * once.
 */
#include "reduce.h"
#include "reduce_isa.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/*
 * Accumulator bytes per block: small enough that the accumulator, the block of every
 * source and the destinations' lines fit in a 32 KiB L1 together for a few sources,
 * large enough that the per-block overhead (calls, nt alignment heads) is noise.
 */
#define COLL_REDUCE_BLOCK_BYTES 8192

static pthread_once_t reduce_once = PTHREAD_ONCE_INIT;
static const struct coll_reduce_ops *reduce_best = &coll_reduce_ops_generic;
/* Set by coll_reduce_force_isa (tests only); NULL means the machine's best. */
static _Atomic(const struct coll_reduce_ops *) reduce_forced;

#if defined(__x86_64__)
static bool cpu_has_avx512(void)
{
    /* __builtin_cpu_supports also checks that the OS saves the zmm/ymm state (XCR0). */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

static bool cpu_has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#endif

static void reduce_detect(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (cpu_has_avx512())
        reduce_best = &coll_reduce_ops_avx512;
    else if (cpu_has_avx2())
        reduce_best = &coll_reduce_ops_avx2;
#endif
}

const struct coll_reduce_ops *coll_reduce_ops_current(void)
{
    const struct coll_reduce_ops *forced;

    pthread_once(&reduce_once, reduce_detect);
    forced = atomic_load_explicit(&reduce_forced, memory_order_acquire);
    return forced ? forced : reduce_best;
}

const struct coll_reduce_ops *coll_reduce_ops_find(const char *isa)
{
    pthread_once(&reduce_once, reduce_detect);
    if (!isa)
        return NULL;
    if (strcmp(isa, "generic") == 0)
        return &coll_reduce_ops_generic;
#if defined(__x86_64__)
    if (strcmp(isa, "avx2") == 0 && cpu_has_avx2())
        return &coll_reduce_ops_avx2;
    if (strcmp(isa, "avx512") == 0 && cpu_has_avx512())
        return &coll_reduce_ops_avx512;
#endif
    return NULL;
}

bool coll_reduce_force_isa(const char *isa)
{
    const struct coll_reduce_ops *ops = NULL;

    if (isa && strcmp(isa, "auto") != 0) {
        ops = coll_reduce_ops_find(isa);
        if (!ops)
            return false;
    }
    atomic_store_explicit(&reduce_forced, ops, memory_order_release);
    return true;
}

const char *coll_reduce_isa(void)
{
    return coll_reduce_ops_current()->name;
}

static size_t reduce_dtype_size(comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_I8:
    case COMM_U8:
        return 1;
    case COMM_F16:
    case COMM_BF16:
        return 2;
    case COMM_F32:
    case COMM_I32:
    case COMM_U32:
        return 4;
    case COMM_F64:
    case COMM_I64:
    case COMM_U64:
        return 8;
    }
    return 0;
}

/* f32 for the float dtypes of 32 bits and less, else the dtype itself. */
static bool reduce_acc_is_f32(comm_dtype_t dtype)
{
    return dtype == COMM_F32 || dtype == COMM_F16 || dtype == COMM_BF16;
}

/*
 * The accumulators of one block into out.  AVG: the sum, then divided in the
 * accumulator type right here, so that acc_out and every destination see the quotient.
 * Integers have no AVG (the runtime refuses it); their kernels reduce it as SUM.
 */
static void reduce_block(const struct coll_reduce_ops *ops, const struct coll_reduce_args *args,
                         enum coll_rd_kind kind, void *out, size_t i0, size_t n)
{
    const int d = args->avg_n > 0 ? args->avg_n : args->nsrc;

    switch (args->dst_dtype) {
    case COMM_F32:
    case COMM_F16:
    case COMM_BF16:
        ops->reduce_f32(out, args->src, args->nsrc, kind, args->op, i0, n);
        if (args->op == COMM_AVG)
            ops->avg_f32(out, n, (float)d);
        break;
    case COMM_F64:
        ops->reduce_f64(out, args->src, args->nsrc, args->op, i0, n);
        if (args->op == COMM_AVG)
            ops->avg_f64(out, n, (double)d);
        break;
    default:
        ops->reduce_int(out, args->src, args->nsrc, args->dst_dtype, args->op, i0, n);
        break;
    }
}

static void reduce_emit(const struct coll_reduce_ops *ops, comm_dtype_t dtype, void *dst,
                        const void *acc, const void *addend, size_t n, bool nt)
{
    if (reduce_acc_is_f32(dtype))
        ops->emit_f32(dst, dtype, acc, addend, n, nt);
    else if (addend)
        ops->emit_add(dst, dtype, acc, addend, n, nt);
    else
        ops->copy(dst, acc, n * reduce_dtype_size(dtype), nt);
}

/*
 * One destination block of n elements starting at tensor element offset + i0, with the
 * addend row lined up: addend element (offset + i0 + t) % addend_count goes with t.
 * Rows shorter than the block are tiled into tile (one block of dst dtype) first, so
 * that a short bias row still gets whole vectors.
 */
static void reduce_emit_addend(const struct coll_reduce_ops *ops,
                               const struct coll_reduce_args *args, void *dst, const void *acc,
                               const void *addend, size_t i0, size_t n, unsigned char *tile)
{
    const size_t esz = reduce_dtype_size(args->dst_dtype);
    const size_t acc_esz = reduce_acc_is_f32(args->dst_dtype) ? 4 : esz;
    const size_t rows = args->addend_count;
    size_t a = (size_t)((args->offset % rows + i0 % rows) % rows);
    const unsigned char *row = addend;

    if (rows < n) {
        for (size_t t = 0; t < n;) {
            size_t m = rows - a < n - t ? rows - a : n - t;
            memcpy(tile + t * esz, row + a * esz, m * esz);
            t += m;
            a = 0;
        }
        reduce_emit(ops, args->dst_dtype, dst, acc, tile, n, args->nt_store);
        return;
    }
    for (size_t t = 0; t < n;) {
        size_t m = rows - a < n - t ? rows - a : n - t;
        reduce_emit(ops, args->dst_dtype, (unsigned char *)dst + t * esz,
                    (const unsigned char *)acc + t * acc_esz, row + a * esz, m, args->nt_store);
        t += m;
        a = 0;
    }
}

/*
 * A long reduction whose first destination is element-aligned but not line-aligned:
 * its head up to the next line of dst[0], then the rest on aligned stores (and on
 * aligned loads from every source co-aligned with it: the staged path places its
 * regions so).  Elementwise, so the bits are those of one call.  Returns false when
 * nothing is to be split.
 */
static bool reduce_split_head(const struct coll_reduce_args *args, size_t esz, size_t src_esz)
{
    if (args->count * esz < 4096) /* first: the flag path's small calls leave at once */
        return false;
    uintptr_t d = (uintptr_t)args->dst[0];
    size_t head = (size_t)((64 - (d & 63)) & 63);
    if (head == 0 || head % esz != 0)
        return false;
    head /= esz;
    struct coll_reduce_args a = *args;
    a.count = head;
    coll_reduce(&a);
    void *dst[args->ndst];
    const void *src[args->nsrc];
    for (int j = 0; j < args->ndst; j++)
        dst[j] = (unsigned char *)args->dst[j] + head * esz;
    for (int k = 0; k < args->nsrc; k++)
        src[k] = (const unsigned char *)args->src[k] + head * src_esz;
    a = *args;
    a.dst = dst;
    a.src = src;
    a.count = args->count - head;
    a.offset = args->offset + head;
    a.acc_out = args->acc_out ? args->acc_out + head : NULL;
    coll_reduce(&a);
    return true;
}

void coll_reduce(const struct coll_reduce_args *args)
{
    if (reduce_split_head(args, reduce_dtype_size(args->dst_dtype),
                          reduce_dtype_size(args->src_dtype)))
        return;
    const struct coll_reduce_ops *ops = coll_reduce_ops_current();
    const comm_dtype_t dtype = args->dst_dtype;
    const size_t esz = reduce_dtype_size(dtype);
    const size_t acc_esz = reduce_acc_is_f32(dtype) ? 4 : esz;
    const size_t block = COLL_REDUCE_BLOCK_BYTES / acc_esz;
    const bool with_addend = args->op == COMM_SUM && args->addend && args->addend_count > 0;
    enum coll_rd_kind kind = coll_rd_kind_of(dtype);
    _Alignas(64) unsigned char acc_buf[COLL_REDUCE_BLOCK_BYTES];
    _Alignas(64) unsigned char tile[COLL_REDUCE_BLOCK_BYTES];
    bool direct;

    assert(args->nsrc >= 1 && args->ndst >= 1 && esz != 0 && args->avg_n >= 0);
    /* Sources that already are f32 accumulators of an f16/bf16 result: only narrow. */
    const bool src_is_acc =
        args->src_dtype == COMM_F32 && (dtype == COMM_F16 || dtype == COMM_BF16);
    assert(args->src_dtype == dtype || (args->src_dtype == COMM_BF16 && dtype == COMM_F32) ||
           (src_is_acc && args->nsrc == 1));
    assert(args->acc_out == NULL || dtype == COMM_F16 || dtype == COMM_BF16);
    assert(!args->round_bf16 || dtype == COMM_F32);
    if (args->src_dtype == COMM_BF16)
        kind = COLL_RD_BF16;
    else if (args->round_bf16 && dtype == COMM_F32)
        kind = COLL_RD_F32_BF16;

    /*
     * Where the accumulator already is the destination's type, reduce straight into
     * dst[0] (saves a pass through L1) and fan out from its block, still hot in L1.
     * Not with streaming stores: those evict what the fan-out would read back.
     */
    direct = !reduce_acc_is_f32(dtype) || dtype == COMM_F32;
    direct = direct && !args->nt_store && !(with_addend && args->addend[0]) && !src_is_acc;

    for (size_t i0 = 0, n; i0 < args->count; i0 += n) {
        void *out = direct ? (unsigned char *)args->dst[0] + i0 * esz : (void *)acc_buf;

        n = args->count - i0 < block ? args->count - i0 : block;
        if (src_is_acc)
            out = (unsigned char *)args->src[0] + i0 * acc_esz;
        else
            reduce_block(ops, args, kind, out, i0, n);
        if (args->acc_out)
            ops->copy(args->acc_out + i0, out, n * sizeof(float), false);
        for (int j = direct ? 1 : 0; j < args->ndst; j++) {
            unsigned char *d = (unsigned char *)args->dst[j] + i0 * esz;
            const void *addend = with_addend ? args->addend[j] : NULL;

            if (addend)
                reduce_emit_addend(ops, args, d, out, addend, i0, n, tile);
            else
                reduce_emit(ops, dtype, d, out, NULL, n, args->nt_store);
        }
    }
    if (args->nt_store && ops->fence)
        ops->fence();
}

void coll_copy_fanout(void *const *dst, int ndst, const void *src, size_t bytes, bool nt)
{
    const struct coll_reduce_ops *ops = coll_reduce_ops_current();
    const unsigned char *s = src;
    for (size_t lo = 0; lo < bytes; lo += COLL_COPY_CHUNK_BYTES) {
        size_t len = bytes - lo < COLL_COPY_CHUNK_BYTES ? bytes - lo : COLL_COPY_CHUNK_BYTES;
        for (int j = 0; j < ndst; j++)
            if (dst[j] != src)
                ops->copy((unsigned char *)dst[j] + lo, s + lo, len, nt);
    }
    if (nt && ops->fence)
        ops->fence();
}
