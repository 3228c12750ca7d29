/* SPDX-License-Identifier: MIT */
/*
 * What every CUDA test program shares (cuda_check.c): the skip status, the failed-check
 * count and CHECK, cuda_ok, and bf16 on the host.
 */
#ifndef ARCOMM_TESTS_CUDA_CHECK_H
#define ARCOMM_TESTS_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SKIP 77

extern int g_fail; /* failed checks so far */
extern int g_ndev; /* CUDA devices */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_fail++;                                                                              \
        }                                                                                          \
    } while (0)

/* Exits with a FAIL line naming what when e is an error. */
void cuda_ok(cudaError_t e, const char *what);

static inline float bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; NaN stays NaN. */
static inline uint16_t f_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif /* ARCOMM_TESTS_CUDA_CHECK_H */
