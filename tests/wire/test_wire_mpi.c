/* SPDX-License-Identifier: MIT */
/*
 * The wire codec on the inter-host step of comm_init_mpi (docs/wire.md): under mpirun,
 * hosts of ARCOMM_MPI_RANKS_PER_HOST ranks, ARCOMM_WIRE and ARCOMM_WIRE_THRESHOLD from
 * the environment.  An f32 sum's result must be, bit for bit on every rank, this model
 * of the documented formats, written here apart from the library: each host's
 * rank-order f32 sum, then the binomial tree over the hosts, where every round adds the
 * two partials each as decoded from its own encoding (int8: per block of 64 an f32
 * scale absmax / 127 and codes rint(x / scale); bf16: round to nearest even; none:
 * unchanged).  fp8 (e4m3, whose rounding this model does not repeat) is checked for the
 * same bits on every rank.  Every codec's result is also checked against the float64
 * sum within the documented bound, accumulated round by round.  Inputs of normal size
 * with a few 100x outliers (an LLM activation's shape).  Exits non-zero on a failure.
 */
#include <arcomm_mpi.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 64

static int g_rank, g_size, g_failed;

static void fail(const char *what, size_t count, size_t i, double got, double want, double bound)
{
    if (g_failed++ < 10)
        fprintf(stderr, "rank %d of %d: count %zu, element %zu: %s: %.9g, want %.9g (bound %.3g)\n",
                g_rank, g_size, count, i, what, got, want, bound);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Rank r's element i: uniform in [-4, 4), one element in 97 a hundred times larger. */
static float input(uint64_t seed, int r, size_t i)
{
    uint64_t h = mix(seed ^ ((uint64_t)r << 40) ^ i);
    float v = (float)((double)(h >> 11) * 0x1p-53 * 8.0 - 4.0);
    return h % 97 == 0 ? v * 100.0f : v;
}

enum codec { C_NONE, C_BF16, C_INT8, C_FP8 };

static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* The model's decode(encode(p)) over n elements, blocks from element 0; the error it
 * may add to each element, added to err. */
static void quantize(enum codec c, float *p, size_t n, double *err)
{
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t m = n - b < BLOCK ? n - b : BLOCK;
        float amax = 0.0f;
        for (size_t i = 0; i < m; i++)
            amax = fabsf(p[b + i]) > amax ? fabsf(p[b + i]) : amax;
        float scale = c == C_INT8 ? amax / 127.0f : amax / 448.0f;
        for (size_t i = 0; i < m; i++) {
            float x = p[b + i];
            if (c == C_BF16) {
                p[b + i] = bf16_round(x);
                err[b + i] += fabs((double)x) * 0x1p-8;
            } else if (c == C_INT8) {
                if (scale != 0.0f) {
                    float q = rintf(x / scale);
                    q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
                    p[b + i] = (float)(int)q * scale; /* an integer code: no -0 */
                } else {
                    p[b + i] = 0.0f;
                }
                err[b + i] += (double)scale * 0.5 + fabs((double)x) * 0x1p-21;
            } else if (c == C_FP8) {
                /* e4m3: 3 stored bits (relative half-step 2^-4), subnormal step 2^-9 of the
                 * scaled value; the model does not round (p keeps x). */
                err[b + i] += fabs((double)x) * 0x1p-4 * 1.05 + (double)scale * 0x1p-10;
            }
        }
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *w = getenv("ARCOMM_WIRE"), *rph = getenv("ARCOMM_MPI_RANKS_PER_HOST");
    enum codec codec = w == NULL                ? C_BF16
                       : strcmp(w, "none") == 0 ? C_NONE
                       : strcmp(w, "int8") == 0 ? C_INT8
                       : strcmp(w, "fp8") == 0  ? C_FP8
                                                : C_BF16;
    int per = rph != NULL && atoi(rph) > 0 ? atoi(rph) : g_size;
    if (per > g_size)
        per = g_size;
    int hosts = (g_size + per - 1) / per;
    comm_t *comm = NULL;
    comm_status_t st = comm_init_mpi(&comm, MPI_COMM_WORLD, NULL);
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init_mpi: %s\n", g_rank, comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* One element, a block's edges, the leaders scheme, the slices scheme (hosts of 2 or
     * more), several 256 KiB segments. */
    const size_t counts[] = {1, 63, 64, 65, 4099, 70001, 300007};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t n = counts[k];
        uint64_t seed = 0x31e7 + k;
        float *send = malloc(n * 4), *recv = malloc(n * 4), *part = malloc(n * 4 * hosts);
        double *err = calloc(n * (size_t)hosts, sizeof(double)), *exact = calloc(n, 8);
        if (send == NULL || recv == NULL || part == NULL || err == NULL || exact == NULL)
            MPI_Abort(MPI_COMM_WORLD, 2);
        for (size_t i = 0; i < n; i++)
            send[i] = input(seed, g_rank, i);
        /* The model: each host's rank-order f32 sum, then the tree's rounds. */
        for (int h = 0; h < hosts; h++)
            for (size_t i = 0; i < n; i++) {
                float s = 0.0f;
                double mag = 0.0;
                for (int r = h * per; r < (h + 1) * per && r < g_size; r++) {
                    float x = input(seed, r, i);
                    s = r == h * per ? x : s + x;
                    exact[i] += x;
                    mag += fabs((double)x);
                }
                part[(size_t)h * n + i] = s;
                err[(size_t)h * n + i] = mag * 0x1p-24 * per;
            }
        for (int step = 1; step < hosts; step <<= 1)
            for (int b = 0; b + step < hosts; b += 2 * step) {
                float *lo = part + (size_t)b * n, *up = part + (size_t)(b + step) * n;
                double *elo = err + (size_t)b * n, *eup = err + (size_t)(b + step) * n;
                quantize(codec, lo, n, elo);
                quantize(codec, up, n, eup);
                for (size_t i = 0; i < n; i++) {
                    lo[i] = lo[i] + up[i];
                    elo[i] += eup[i] + fabs((double)lo[i]) * 0x1p-24;
                }
            }
        memset(recv, 0xff, n * 4);
        st = comm_allreduce(comm, send, recv, n, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK) {
            fprintf(stderr, "rank %d: allreduce of %zu: %s\n", g_rank, n, comm_last_error(comm));
            g_failed++;
        }
        uint64_t hash = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < n && st == COMM_OK; i++) {
            uint32_t u;
            memcpy(&u, &recv[i], 4);
            hash = (hash ^ u) * 0x100000001b3ull;
            if (codec != C_FP8 && memcmp(&recv[i], &part[i], 4) != 0)
                fail("not the model's bits", n, i, recv[i], part[i], 0);
            if (fabs((double)recv[i] - exact[i]) > err[i])
                fail("off the float64 sum by more than the bound", n, i, recv[i], exact[i], err[i]);
        }
        uint64_t lo_hash = hash, hi_hash = hash;
        MPI_Allreduce(MPI_IN_PLACE, &lo_hash, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &hi_hash, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        if (lo_hash != hi_hash && g_failed++ < 10)
            fprintf(stderr, "rank %d: count %zu: the ranks' results differ\n", g_rank, n);
        free(send);
        free(recv);
        free(part);
        free(err);
        free(exact);
    }
    comm_destroy(comm);
    int any = g_failed;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: %d ranks, %d hosts, wire %s: %s\n", argv[0], g_size, hosts,
               w != NULL ? w : "(default)", any ? "FAILED" : "as the model, within the bound");
    MPI_Finalize();
    return any ? 1 : 0;
}
