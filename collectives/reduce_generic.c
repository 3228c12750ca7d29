/* SPDX-License-Identifier: MIT */
/*
 * Portable reduction kernels: the fallback where no vector ISA was found, and the
 * reference the vector kernels are tested against bit for bit.  Built from the scalar
 * element functions of reduce_isa.h; the compiler may still vectorise the plain loops
 * (SSE2 on x86-64) since they are element-wise.
 */
#include "reduce_isa.h"

#include <string.h>

static void generic_reduce_f32(float *out, const void *const *src, int nsrc, enum coll_rd_kind kind,
                               comm_op_t op, size_t i0, size_t n)
{
    /*
     * Element by element over all sources: out may be one of the sources (in place),
     * so every source's element i is read before out[i] is written.
     */
    for (size_t i = 0; i < n; i++) {
        float v = coll_rd_elem_f32(src, nsrc, kind, op, i0 + i);
        memcpy(&out[i], &v, sizeof(v));
    }
}

static void generic_reduce_f64(double *out, const void *const *src, int nsrc, comm_op_t op,
                               size_t i0, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = coll_rd_elem_f64(src, nsrc, op, i0 + i);
        memcpy(&out[i], &v, sizeof(v));
    }
}

static void generic_reduce_int(void *out, const void *const *src, int nsrc, comm_dtype_t dtype,
                               comm_op_t op, size_t i0, size_t n)
{
    coll_rd_elems_int(out, src, nsrc, dtype, op, i0, 0, n);
}

static void generic_avg_f32(float *acc, size_t n, float d)
{
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, &acc[i], sizeof(v));
        v = coll_rd_avg_f32(v, d);
        memcpy(&acc[i], &v, sizeof(v));
    }
}

static void generic_avg_f64(double *acc, size_t n, double d)
{
    for (size_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, &acc[i], sizeof(v));
        v = coll_rd_avg_f64(v, d);
        memcpy(&acc[i], &v, sizeof(v));
    }
}

static void generic_emit_f32(void *dst, comm_dtype_t dtype, const float *acc, const void *addend,
                             size_t n, bool nt)
{
    (void)nt; /* no portable streaming store */
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, &acc[i], sizeof(v));
        coll_rd_emit_elem_f32(dst, dtype, i, v, addend);
    }
}

static void generic_emit_add(void *dst, comm_dtype_t dtype, const void *acc, const void *addend,
                             size_t n, bool nt)
{
    (void)nt;
    for (size_t i = 0; i < n; i++)
        coll_rd_emit_elem_add(dst, dtype, i, acc, addend);
}

static void generic_copy(void *dst, const void *src, size_t bytes, bool nt)
{
    (void)nt;
    if (dst != src)
        memcpy(dst, src, bytes);
}

const struct coll_reduce_ops coll_reduce_ops_generic = {
    .name = "generic",
    .reduce_f32 = generic_reduce_f32,
    .reduce_f64 = generic_reduce_f64,
    .reduce_int = generic_reduce_int,
    .avg_f32 = generic_avg_f32,
    .avg_f64 = generic_avg_f64,
    .emit_f32 = generic_emit_f32,
    .emit_add = generic_emit_add,
    .copy = generic_copy,
    .fence = NULL,
};
