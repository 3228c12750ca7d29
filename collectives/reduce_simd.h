/* SPDX-License-Identifier: MIT */
/*
 * The vector reduction kernels, written once over a small set of vector primitives and
 * included by reduce_avx2.c and reduce_avx512.c, each of which defines the primitives
 * for its instruction set (under its own target pragma) before including this file.
 * One source for both ISAs keeps their results identical by construction; the tests
 * still compare them bit for bit.
 *
 * The includer defines: RD_W (f32 lanes per vector); the types rd_vf, rd_mf (f32 vector
 * and its lane mask), rd_vd, rd_md (f64, RD_W / 2 lanes), rd_vi (integers, as wide as
 * rd_vf); and the rd_* primitives used below.
 *
 * Every vector result that could depend on how NaNs are combined (a NaN in any lane of
 * a sum, a product, an average or an addend, a NaN in any source of a MAX/MIN) is
 * recomputed by the scalar element functions of reduce_isa.h, which define the result;
 * other lanes give the same bits either way.  NaNs are rare, so the check costs one
 * compare per vector.  Integers have no NaNs and wrap (their sums and products are
 * associative and exact modulo 2^bits), so their vectors are the result as they stand.
 */
#ifndef ARCOMM_COLL_REDUCE_SIMD_H
#define ARCOMM_COLL_REDUCE_SIMD_H

#include <stdint.h>
#include <string.h>

#define RD_INLINE static inline __attribute__((always_inline))

/* Unroll: four independent vectors per source keep the loads and adds in flight. */
enum { RD_U = 4 };

RD_INLINE rd_vf rd_ld(enum coll_rd_kind kind, const void *p, size_t i)
{
    const unsigned char *b = p;

    switch (kind) {
    case COLL_RD_F16:
        return rd_vf_load_f16(b + 2 * i);
    case COLL_RD_BF16:
        return rd_vf_load_bf16(b + 2 * i);
    case COLL_RD_F32_BF16:
        return rd_vf_round_bf16(rd_vf_loadu(b + 4 * i));
    case COLL_RD_F32:
    default:
        return rd_vf_loadu(b + 4 * i);
    }
}

RD_INLINE rd_vf rd_vf_op(comm_op_t op, rd_vf acc, rd_vf s)
{
    switch (op) {
    case COMM_MAX:
        return rd_vf_max(s, acc); /* (s, acc): on a tie the earlier source, acc */
    case COMM_MIN:
        return rd_vf_min(s, acc);
    case COMM_PROD:
        return rd_vf_mul(acc, s);
    case COMM_SUM:
    default:
        return rd_vf_add(acc, s);
    }
}

RD_INLINE rd_vd rd_vd_op(comm_op_t op, rd_vd acc, rd_vd s)
{
    switch (op) {
    case COMM_MAX:
        return rd_vd_max(s, acc);
    case COMM_MIN:
        return rd_vd_min(s, acc);
    case COMM_PROD:
        return rd_vd_mul(acc, s);
    case COMM_SUM:
    default:
        return rd_vd_add(acc, s);
    }
}

/* acc[i], through memcpy: acc may be a destination of any alignment. */
RD_INLINE float rd_accf(const float *acc, size_t i)
{
    float v;
    memcpy(&v, &acc[i], sizeof(v));
    return v;
}

/* Scalar elements [i, i + m) of an f32-accumulated block: tails and NaN vectors. */
static void rd_scalar_f32(float *out, const void *const *src, int nsrc, enum coll_rd_kind kind,
                          comm_op_t op, size_t i0, size_t i, size_t m)
{
    for (size_t t = i; t < i + m; t++) {
        float v = coll_rd_elem_f32(src, nsrc, kind, op, i0 + t);
        memcpy(&out[t], &v, sizeof(v));
    }
}

RD_INLINE void rd_reduce_f32_t(float *out, const void *const *src, int nsrc, enum coll_rd_kind kind,
                               comm_op_t op, size_t i0, size_t n)
{
    size_t i = 0;

    for (; i + RD_U * RD_W <= n; i += RD_U * RD_W) {
        size_t e = i0 + i;
        rd_vf a0 = rd_ld(kind, src[0], e);
        rd_vf a1 = rd_ld(kind, src[0], e + RD_W);
        rd_vf a2 = rd_ld(kind, src[0], e + 2 * RD_W);
        rd_vf a3 = rd_ld(kind, src[0], e + 3 * RD_W);
        rd_mf nan = rd_mf_zero();

        for (int k = 1; k < nsrc; k++) {
            rd_vf b0 = rd_ld(kind, src[k], e);
            rd_vf b1 = rd_ld(kind, src[k], e + RD_W);
            rd_vf b2 = rd_ld(kind, src[k], e + 2 * RD_W);
            rd_vf b3 = rd_ld(kind, src[k], e + 3 * RD_W);

            if (coll_rd_selects(op)) {
                /* vmaxps drops a NaN of s: note NaNs in either operand as we go. */
                nan = rd_mf_or(nan, rd_mf_or(rd_mf_or(rd_vf_unord(a0, b0), rd_vf_unord(a1, b1)),
                                             rd_mf_or(rd_vf_unord(a2, b2), rd_vf_unord(a3, b3))));
            }
            a0 = rd_vf_op(op, a0, b0);
            a1 = rd_vf_op(op, a1, b1);
            a2 = rd_vf_op(op, a2, b2);
            a3 = rd_vf_op(op, a3, b3);
        }
        if (!coll_rd_selects(op) && nsrc > 1) /* a NaN anywhere in a sum or product stays */
            nan = rd_mf_or(rd_vf_unord(a0, a1), rd_vf_unord(a2, a3));
        if (rd_mf_any(nan)) {
            rd_scalar_f32(out, src, nsrc, kind, op, i0, i, RD_U * RD_W);
            continue;
        }
        rd_vf_storeu(out + i, a0);
        rd_vf_storeu(out + i + RD_W, a1);
        rd_vf_storeu(out + i + 2 * RD_W, a2);
        rd_vf_storeu(out + i + 3 * RD_W, a3);
    }
    for (; i + RD_W <= n; i += RD_W) {
        rd_vf a = rd_ld(kind, src[0], i0 + i);
        rd_mf nan = rd_mf_zero();

        for (int k = 1; k < nsrc; k++) {
            rd_vf b = rd_ld(kind, src[k], i0 + i);
            nan = rd_mf_or(nan, rd_vf_unord(a, b));
            a = rd_vf_op(op, a, b);
        }
        if (rd_mf_any(nan)) {
            rd_scalar_f32(out, src, nsrc, kind, op, i0, i, RD_W);
            continue;
        }
        rd_vf_storeu(out + i, a);
    }
    rd_scalar_f32(out, src, nsrc, kind, op, i0, i, n - i);
}

RD_INLINE void rd_reduce_f32_op(float *out, const void *const *src, int nsrc,
                                enum coll_rd_kind kind, comm_op_t op, size_t i0, size_t n)
{
    switch (op) {
    case COMM_MAX:
        rd_reduce_f32_t(out, src, nsrc, kind, COMM_MAX, i0, n);
        break;
    case COMM_MIN:
        rd_reduce_f32_t(out, src, nsrc, kind, COMM_MIN, i0, n);
        break;
    case COMM_PROD:
        rd_reduce_f32_t(out, src, nsrc, kind, COMM_PROD, i0, n);
        break;
    case COMM_SUM:
    case COMM_AVG: /* the sum; coll_reduce divides it */
    default:
        rd_reduce_f32_t(out, src, nsrc, kind, COMM_SUM, i0, n);
        break;
    }
}

static void rd_reduce_f32(float *out, const void *const *src, int nsrc, enum coll_rd_kind kind,
                          comm_op_t op, size_t i0, size_t n)
{
    switch (kind) {
    case COLL_RD_F16:
        rd_reduce_f32_op(out, src, nsrc, COLL_RD_F16, op, i0, n);
        break;
    case COLL_RD_BF16:
        rd_reduce_f32_op(out, src, nsrc, COLL_RD_BF16, op, i0, n);
        break;
    case COLL_RD_F32_BF16:
        rd_reduce_f32_op(out, src, nsrc, COLL_RD_F32_BF16, op, i0, n);
        break;
    case COLL_RD_F32:
    default:
        rd_reduce_f32_op(out, src, nsrc, COLL_RD_F32, op, i0, n);
        break;
    }
}

RD_INLINE void rd_reduce_f64_t(double *out, const void *const *src, int nsrc, comm_op_t op,
                               size_t i0, size_t n)
{
    enum { DW = RD_W / 2 };
    size_t i = 0;

    for (; i + 2 * DW <= n; i += 2 * DW) {
        const unsigned char *p = src[0];
        rd_vd a0 = rd_vd_loadu(p + 8 * (i0 + i));
        rd_vd a1 = rd_vd_loadu(p + 8 * (i0 + i + DW));
        rd_md nan = rd_md_zero();

        for (int k = 1; k < nsrc; k++) {
            p = src[k];
            rd_vd b0 = rd_vd_loadu(p + 8 * (i0 + i));
            rd_vd b1 = rd_vd_loadu(p + 8 * (i0 + i + DW));
            nan = rd_md_or(nan, rd_md_or(rd_vd_unord(a0, b0), rd_vd_unord(a1, b1)));
            a0 = rd_vd_op(op, a0, b0);
            a1 = rd_vd_op(op, a1, b1);
        }
        if (rd_md_any(nan)) {
            for (size_t t = i; t < i + 2 * DW; t++) {
                double v = coll_rd_elem_f64(src, nsrc, op, i0 + t);
                memcpy(&out[t], &v, sizeof(v));
            }
            continue;
        }
        rd_vd_storeu(out + i, a0);
        rd_vd_storeu(out + i + DW, a1);
    }
    for (; i < n; i++) {
        double v = coll_rd_elem_f64(src, nsrc, op, i0 + i);
        memcpy(&out[i], &v, sizeof(v));
    }
}

static void rd_reduce_f64(double *out, const void *const *src, int nsrc, comm_op_t op, size_t i0,
                          size_t n)
{
    switch (op) {
    case COMM_MAX:
        rd_reduce_f64_t(out, src, nsrc, COMM_MAX, i0, n);
        break;
    case COMM_MIN:
        rd_reduce_f64_t(out, src, nsrc, COMM_MIN, i0, n);
        break;
    case COMM_PROD:
        rd_reduce_f64_t(out, src, nsrc, COMM_PROD, i0, n);
        break;
    case COMM_SUM:
    case COMM_AVG:
    default:
        rd_reduce_f64_t(out, src, nsrc, COMM_SUM, i0, n);
        break;
    }
}

/* Signed MAX/MIN for I8/I32/I64, unsigned for U8/U32/U64; SUM (and AVG) and PROD wrap. */
RD_INLINE rd_vi rd_vi_op(comm_op_t op, comm_dtype_t dt, rd_vi acc, rd_vi s)
{
    switch (dt) {
    case COMM_I8:
    case COMM_U8:
        switch (op) {
        case COMM_MAX:
            return dt == COMM_I8 ? rd_vi8_max(s, acc) : rd_vu8_max(s, acc);
        case COMM_MIN:
            return dt == COMM_I8 ? rd_vi8_min(s, acc) : rd_vu8_min(s, acc);
        case COMM_PROD:
            return rd_vi8_mul(acc, s);
        default:
            return rd_vi8_add(acc, s);
        }
    case COMM_I32:
    case COMM_U32:
        switch (op) {
        case COMM_MAX:
            return dt == COMM_I32 ? rd_vi32_max(s, acc) : rd_vu32_max(s, acc);
        case COMM_MIN:
            return dt == COMM_I32 ? rd_vi32_min(s, acc) : rd_vu32_min(s, acc);
        case COMM_PROD:
            return rd_vi32_mul(acc, s);
        default:
            return rd_vi32_add(acc, s);
        }
    default:
        switch (op) {
        case COMM_MAX:
            return dt == COMM_I64 ? rd_vi64_max(s, acc) : rd_vu64_max(s, acc);
        case COMM_MIN:
            return dt == COMM_I64 ? rd_vi64_min(s, acc) : rd_vu64_min(s, acc);
        case COMM_PROD:
            return rd_vi64_mul(acc, s);
        default:
            return rd_vi64_add(acc, s);
        }
    }
}

/* Integers: no NaNs and wrap-around sums and products, so no scalar fallback. */
RD_INLINE void rd_reduce_int_t(void *out, const void *const *src, int nsrc, comm_dtype_t dt,
                               comm_op_t op, size_t i0, size_t n)
{
    const size_t esz = coll_rd_int_size(dt), lanes = RD_W * 4 / esz;
    unsigned char *o = out;
    size_t i = 0;

    for (; i + 2 * lanes <= n; i += 2 * lanes) {
        const unsigned char *p = src[0];
        rd_vi a0 = rd_vi_loadu(p + esz * (i0 + i));
        rd_vi a1 = rd_vi_loadu(p + esz * (i0 + i + lanes));

        for (int k = 1; k < nsrc; k++) {
            p = src[k];
            a0 = rd_vi_op(op, dt, a0, rd_vi_loadu(p + esz * (i0 + i)));
            a1 = rd_vi_op(op, dt, a1, rd_vi_loadu(p + esz * (i0 + i + lanes)));
        }
        rd_vi_storeu(o + esz * i, a0);
        rd_vi_storeu(o + esz * (i + lanes), a1);
    }
    coll_rd_elems_int(out, src, nsrc, dt, op, i0, i, n - i);
}

RD_INLINE void rd_reduce_int_op(void *out, const void *const *src, int nsrc, comm_dtype_t dt,
                                comm_op_t op, size_t i0, size_t n)
{
    switch (op) {
    case COMM_MAX:
        rd_reduce_int_t(out, src, nsrc, dt, COMM_MAX, i0, n);
        break;
    case COMM_MIN:
        rd_reduce_int_t(out, src, nsrc, dt, COMM_MIN, i0, n);
        break;
    case COMM_PROD:
        rd_reduce_int_t(out, src, nsrc, dt, COMM_PROD, i0, n);
        break;
    case COMM_SUM:
    case COMM_AVG: /* refused for integers by the runtime; reduced as SUM here */
    default:
        rd_reduce_int_t(out, src, nsrc, dt, COMM_SUM, i0, n);
        break;
    }
}

static void rd_reduce_int(void *out, const void *const *src, int nsrc, comm_dtype_t dtype,
                          comm_op_t op, size_t i0, size_t n)
{
    switch (dtype) {
    case COMM_I8:
        rd_reduce_int_op(out, src, nsrc, COMM_I8, op, i0, n);
        break;
    case COMM_U8:
        rd_reduce_int_op(out, src, nsrc, COMM_U8, op, i0, n);
        break;
    case COMM_I32:
        rd_reduce_int_op(out, src, nsrc, COMM_I32, op, i0, n);
        break;
    case COMM_U32:
        rd_reduce_int_op(out, src, nsrc, COMM_U32, op, i0, n);
        break;
    case COMM_I64:
        rd_reduce_int_op(out, src, nsrc, COMM_I64, op, i0, n);
        break;
    case COMM_U64:
    default:
        rd_reduce_int_op(out, src, nsrc, COMM_U64, op, i0, n);
        break;
    }
}

/* AVG's division, in place; a vector holding a NaN takes the scalar rule. */
static void rd_avg_f32(float *acc, size_t n, float d)
{
    const rd_vf vd = rd_vf_set1(d);
    size_t i = 0;

    for (; i + RD_W <= n; i += RD_W) {
        rd_vf v = rd_vf_loadu(acc + i);
        if (rd_mf_any(rd_vf_unord(v, v))) {
            for (size_t t = i; t < i + RD_W; t++) {
                float x = coll_rd_avg_f32(rd_accf(acc, t), d);
                memcpy(&acc[t], &x, sizeof(x));
            }
            continue;
        }
        rd_vf_storeu(acc + i, rd_vf_div(v, vd));
    }
    for (; i < n; i++) {
        float x = coll_rd_avg_f32(rd_accf(acc, i), d);
        memcpy(&acc[i], &x, sizeof(x));
    }
}

static void rd_avg_f64(double *acc, size_t n, double d)
{
    enum { DW = RD_W / 2 };
    const rd_vd vd = rd_vd_set1(d);
    size_t i = 0;

    for (; i + DW <= n; i += DW) {
        rd_vd v = rd_vd_loadu(acc + i);
        if (rd_md_any(rd_vd_unord(v, v))) {
            for (size_t t = i; t < i + DW; t++) {
                double x;
                memcpy(&x, &acc[t], sizeof(x));
                x = coll_rd_avg_f64(x, d);
                memcpy(&acc[t], &x, sizeof(x));
            }
            continue;
        }
        rd_vd_storeu(acc + i, rd_vd_div(v, vd));
    }
    for (; i < n; i++) {
        double x;
        memcpy(&x, &acc[i], sizeof(x));
        x = coll_rd_avg_f64(x, d);
        memcpy(&acc[i], &x, sizeof(x));
    }
}

/*
 * Streaming stores need dst aligned to the vector store (vb bytes): the number of
 * leading elements to store the ordinary way, or *nt cleared when dst is not even
 * element-aligned and can never get there.
 */
static size_t rd_nt_head(const void *dst, size_t esz, size_t vb, size_t n, bool *nt)
{
    uintptr_t a = (uintptr_t)dst;
    size_t head;

    if (a % esz != 0) {
        *nt = false;
        return 0;
    }
    head = ((vb - a % vb) % vb) / esz;
    return head < n ? head : n;
}

RD_INLINE void rd_emit_f32_t(void *dst, comm_dtype_t dtype, const float *acc, const void *addend,
                             size_t n, bool nt)
{
    const size_t esz = dtype == COMM_F32 ? 4 : 2;
    unsigned char *d = dst;
    size_t i = 0;

    if (nt) {
        size_t head = rd_nt_head(dst, esz, RD_W * esz, n, &nt);
        for (; i < head; i++)
            coll_rd_emit_elem_f32(dst, dtype, i, rd_accf(acc, i), addend);
    }
    for (; i + RD_W <= n; i += RD_W) {
        rd_vf v = rd_vf_loadu(acc + i);

        if (addend) {
            rd_vf a = rd_ld(coll_rd_kind_of(dtype), addend, i);
            if (rd_mf_any(rd_vf_unord(v, a))) {
                for (size_t t = i; t < i + RD_W; t++)
                    coll_rd_emit_elem_f32(dst, dtype, t, rd_accf(acc, t), addend);
                continue;
            }
            v = rd_vf_add(v, a);
        }
        switch (dtype) {
        case COMM_F16:
            rd_vf_store_f16(d + 2 * i, v, nt);
            break;
        case COMM_BF16:
            rd_vf_store_bf16(d + 2 * i, v, nt);
            break;
        default:
            rd_vf_store(d + 4 * i, v, nt);
            break;
        }
    }
    for (; i < n; i++)
        coll_rd_emit_elem_f32(dst, dtype, i, rd_accf(acc, i), addend);
}

RD_INLINE void rd_emit_f32_a(void *dst, comm_dtype_t dtype, const float *acc, const void *addend,
                             size_t n, bool nt)
{
    if (nt)
        rd_emit_f32_t(dst, dtype, acc, addend, n, true);
    else
        rd_emit_f32_t(dst, dtype, acc, addend, n, false);
}

static void rd_emit_f32(void *dst, comm_dtype_t dtype, const float *acc, const void *addend,
                        size_t n, bool nt)
{
    switch (dtype) {
    case COMM_F16:
        rd_emit_f32_a(dst, COMM_F16, acc, addend, n, nt);
        break;
    case COMM_BF16:
        rd_emit_f32_a(dst, COMM_BF16, acc, addend, n, nt);
        break;
    default:
        rd_emit_f32_a(dst, COMM_F32, acc, addend, n, nt);
        break;
    }
}

static void rd_emit_add(void *dst, comm_dtype_t dtype, const void *acc, const void *addend,
                        size_t n, bool nt)
{
    const size_t esz = dtype == COMM_F64 ? 8 : coll_rd_int_size(dtype), lanes = RD_W * 4 / esz;
    const unsigned char *a = acc, *b = addend;
    unsigned char *d = dst;
    size_t i = 0;

    if (nt) {
        size_t head = rd_nt_head(dst, esz, RD_W * 4, n, &nt);
        for (; i < head; i++)
            coll_rd_emit_elem_add(dst, dtype, i, acc, addend);
    }
    for (; i + lanes <= n; i += lanes) {
        rd_vi r;

        if (dtype == COMM_F64) {
            rd_vd x = rd_vd_loadu(a + 8 * i), y = rd_vd_loadu(b + 8 * i);
            if (rd_md_any(rd_vd_unord(x, y))) {
                for (size_t t = i; t < i + lanes; t++)
                    coll_rd_emit_elem_add(dst, dtype, t, acc, addend);
                continue;
            }
            r = rd_vi_from_vd(rd_vd_add(x, y));
        } else {
            rd_vi x = rd_vi_loadu(a + esz * i), y = rd_vi_loadu(b + esz * i);
            r = esz == 1 ? rd_vi8_add(x, y) : esz == 4 ? rd_vi32_add(x, y) : rd_vi64_add(x, y);
        }
        if (nt)
            rd_vi_stream(d + esz * i, r);
        else
            rd_vi_storeu(d + esz * i, r);
    }
    for (; i < n; i++)
        coll_rd_emit_elem_add(dst, dtype, i, acc, addend);
}

static void rd_copy(void *dst, const void *src, size_t bytes, bool nt)
{
    const size_t vb = RD_W * 4;
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t i;

    if (dst == src)
        return;
    if (!nt) {
        memcpy(dst, src, bytes);
        return;
    }
    i = (vb - (uintptr_t)d % vb) % vb;
    if (i > bytes)
        i = bytes;
    memcpy(d, s, i);
    for (; i + 4 * vb <= bytes; i += 4 * vb) {
        rd_vi v0 = rd_vi_loadu(s + i), v1 = rd_vi_loadu(s + i + vb);
        rd_vi v2 = rd_vi_loadu(s + i + 2 * vb), v3 = rd_vi_loadu(s + i + 3 * vb);
        rd_vi_stream(d + i, v0);
        rd_vi_stream(d + i + vb, v1);
        rd_vi_stream(d + i + 2 * vb, v2);
        rd_vi_stream(d + i + 3 * vb, v3);
    }
    for (; i + vb <= bytes; i += vb)
        rd_vi_stream(d + i, rd_vi_loadu(s + i));
    memcpy(d + i, s + i, bytes - i);
}

#endif /* ARCOMM_COLL_REDUCE_SIMD_H */
