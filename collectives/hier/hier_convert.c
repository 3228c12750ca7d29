/* SPDX-License-Identifier: MIT */
/*
 * The hierarchical reductions run in f32 for f16 and bf16 (exact widening), so that
 * the sum over every host is rounded once at the end, as api.md asks of f16/bf16 sums;
 * AVG is a sum divided by the number of ranks in the last step.
 */
#include "coll.h"
#include "hier.h"
#include "wire.h"

#include <stdint.h>
#include <string.h>

comm_dtype_t hier_work_dtype(comm_dtype_t dtype)
{
    return dtype == COMM_F16 || dtype == COMM_BF16 ? COMM_F32 : dtype;
}

void hier_widen(const void *src, comm_dtype_t dtype, void *dst, size_t n)
{
    float *out = dst;
    if (dtype == COMM_BF16) {
        const uint16_t *in = src;
        for (size_t i = 0; i < n; i++)
            out[i] = wire_bf16_value(in[i]);
    } else if (dtype == COMM_F16) {
        const _Float16 *in = src;
        for (size_t i = 0; i < n; i++)
            out[i] = (float)in[i];
    } else if (src != dst) {
        memcpy(dst, src, n * rt_dtype_size(dtype));
    }
}

void hier_narrow(const void *src, comm_dtype_t dtype, void *dst, size_t n, int divisor)
{
    const float *in = src;
    if (dtype == COMM_BF16) {
        uint16_t *out = dst;
        for (size_t i = 0; i < n; i++)
            out[i] = wire_bf16_of(divisor > 1 ? in[i] / (float)divisor : in[i]);
    } else if (dtype == COMM_F16) {
        _Float16 *out = dst;
        for (size_t i = 0; i < n; i++)
            out[i] = (_Float16)(divisor > 1 ? in[i] / (float)divisor : in[i]);
    } else if (divisor > 1 && dtype == COMM_F32) {
        float *out = dst;
        for (size_t i = 0; i < n; i++)
            out[i] = in[i] / (float)divisor;
    } else if (divisor > 1 && dtype == COMM_F64) {
        const double *d = src;
        double *out = dst;
        for (size_t i = 0; i < n; i++)
            out[i] = d[i] / (double)divisor;
    } else if (src != dst) {
        memcpy(dst, src, n * rt_dtype_size(dtype));
    }
}

/* One addend element of dtype, widened to f32 (f16, bf16). */
static float half_at(const void *addend, comm_dtype_t dtype, size_t i)
{
    if (dtype == COMM_BF16)
        return wire_bf16_value(((const uint16_t *)addend)[i]);
    return (float)((const _Float16 *)addend)[i];
}

#define HIER_ADD_INT(T)                                                                            \
    do {                                                                                           \
        T *w = work;                                                                               \
        const T *a = addend;                                                                       \
        for (size_t i = 0; i < n; i++)                                                             \
            w[i] = (T)(w[i] + a[i % addend_count]);                                                \
    } while (0)

void hier_add(void *work, comm_dtype_t dtype, const void *addend, size_t addend_count, size_t n)
{
    switch (dtype) {
    case COMM_F16:
    case COMM_BF16: {
        float *w = work;
        for (size_t i = 0; i < n; i++)
            w[i] += half_at(addend, dtype, i % addend_count);
        break;
    }
    case COMM_F32: {
        float *w = work;
        const float *a = addend;
        for (size_t i = 0; i < n; i++)
            w[i] += a[i % addend_count];
        break;
    }
    case COMM_F64: {
        double *w = work;
        const double *a = addend;
        for (size_t i = 0; i < n; i++)
            w[i] += a[i % addend_count];
        break;
    }
    case COMM_I8:
    case COMM_U8:
        HIER_ADD_INT(uint8_t); /* wrapping: the same bits for signed and unsigned */
        break;
    case COMM_I32:
    case COMM_U32:
        HIER_ADD_INT(uint32_t);
        break;
    default: /* I64, U64 */
        HIER_ADD_INT(uint64_t);
        break;
    }
}

const struct wire_row *hier_inter_wire(const struct comm *c, comm_dtype_t dtype, comm_op_t op,
                                       size_t n)
{
    /* The f32 partial sums (and averages' sums) of f32, f16 and bf16 inputs, any codec. */
    static const struct wire_carry inter = {.ops = {[WIRE_BF16] = WIRE_OPS_SUM_AVG,
                                                    [WIRE_INT8] = WIRE_OPS_SUM_AVG,
                                                    [WIRE_FP8] = WIRE_OPS_SUM_AVG}};
    enum wire_codec w = wire_pick(c->knobs.wire, coll_wire_threshold(&c->knobs), &inter, dtype, op,
                                  n * rt_dtype_size(dtype));
    return w == WIRE_NONE || hier_work_dtype(dtype) != COMM_F32 ? NULL : wire_row(w);
}
