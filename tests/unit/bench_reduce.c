/* SPDX-License-Identifier: MIT */
/*
 * bench_reduce: speed of coll_reduce under every instruction set this machine has.
 * Built, not run as a test.  GB/s counts the bytes the reduction must move: every
 * source read once and every destination written once ((nsrc + ndst) * count * size),
 * best of several runs; memcpy of the same size is printed as the machine's yardstick
 * (read + write).  Usage: bench_reduce [MiB per buffer, default 16]
 */
#include "reduce.h"
#include "reduce_isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 20

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *alloc_filled(size_t bytes, unsigned seed)
{
    unsigned char *p = aligned_alloc(64, (bytes + 63) / 64 * 64);

    if (!p) {
        perror("aligned_alloc");
        exit(1);
    }
    /* small finite floats, never zero, whatever the dtype reads them as */
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)(i % 2 ? 0x3c : (seed + i * 7) | 1);
    return p;
}

static double bench(struct coll_reduce_args *args, size_t esz)
{
    double best = 1e30;

    coll_reduce(args); /* warm up: page faults, caches */
    for (int r = 0; r < REPS; r++) {
        double t = now();
        coll_reduce(args);
        t = now() - t;
        best = t < best ? t : best;
    }
    return (double)(args->nsrc + args->ndst) * (double)(args->count * esz) / best / 1e9;
}

int main(int argc, char **argv)
{
    static const char *const isas[] = {"generic", "avx2", "avx512"};
    static const struct {
        const char *what;
        comm_dtype_t dtype;
        int nsrc, ndst;
        bool nt;
    } cases[] = {
        {"f32 sum 2 src -> 2 dst", COMM_F32, 2, 2, false},
        {"f32 sum 2 src -> 2 dst, nt stores", COMM_F32, 2, 2, true},
        {"f32 sum 2 src -> 1 dst", COMM_F32, 2, 1, false},
        {"f32 sum 8 src -> 8 dst", COMM_F32, 8, 8, false},
        {"f16 sum 2 src -> 2 dst", COMM_F16, 2, 2, false},
        {"bf16 sum 4 src -> 4 dst", COMM_BF16, 4, 4, false},
    };
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 16;
    size_t bytes = mib << 20;
    void *src[8], *dst[8];
    double t, best = 1e30;

    for (int k = 0; k < 8; k++) {
        src[k] = alloc_filled(bytes, (unsigned)k);
        dst[k] = alloc_filled(bytes, 99);
    }
    for (int r = 0; r < REPS; r++) {
        t = now();
        memcpy(dst[0], src[0], bytes);
        t = now() - t;
        best = t < best ? t : best;
    }
    printf("buffers of %zu MiB; best of %d; machine's choice: %s\n", mib, REPS, coll_reduce_isa());
    printf("%-40s %-8s %8.2f GB/s\n", "memcpy (read + write)", "libc",
           2.0 * (double)bytes / best / 1e9);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t esz = cases[c].dtype == COMM_F32 ? 4 : 2;
        for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
            struct coll_reduce_args args = {
                .dst = dst,
                .ndst = cases[c].ndst,
                .dst_dtype = cases[c].dtype,
                .src = (const void *const *)src,
                .nsrc = cases[c].nsrc,
                .src_dtype = cases[c].dtype,
                .count = bytes / esz,
                .op = COMM_SUM,
                .nt_store = cases[c].nt,
            };
            if (!coll_reduce_force_isa(isas[i]))
                continue;
            printf("%-40s %-8s %8.2f GB/s\n", cases[c].what, isas[i], bench(&args, esz));
            fflush(stdout);
        }
    }
    coll_reduce_force_isa(NULL);
    return 0;
}
