/* SPDX-License-Identifier: MIT */
/*
 * What the MPI test programs of libarcomm_pmpi share: the counts of calls each expects
 * arcomm to serve and to hand to MPI (printed at the end in the report's format, which
 * run_pmpi.sh compares with the library's own report), a seeded generator, the typed
 * element access of the datatypes under test, and the failure count.  The programs keep
 * their own bookkeeping (seeds, verdicts, hashes) on PMPI_*, so that only the calls under
 * test are counted.
 */
#ifndef ARCOMM_TESTS_PMPI_TEST_H
#define ARCOMM_TESTS_PMPI_TEST_H

#include <mpi.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum t_call { T_ALLREDUCE, T_REDUCE, T_BCAST, T_ALLGATHER, T_RSB, T_ALLTOALL, T_BARRIER, T_NCALL };

static const char *const t_call_names[T_NCALL] = {
    "allreduce", "reduce", "bcast", "allgather", "reduce_scatter_block", "alltoall", "barrier",
};

static uint64_t t_served[T_NCALL], t_handed[T_NCALL];
static int t_failures;
static int t_rank, t_size;

#define SERVED(call) (t_served[call]++)
#define HANDED(call) (t_handed[call]++)

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (t_failures++ < 20) {                                                               \
                fprintf(stderr, "rank %d: %s:%d: ", t_rank, __FILE__, __LINE__);                   \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fputc('\n', stderr);                                                               \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* splitmix64: the same sequence for the same seed on every rank. */
static inline uint64_t t_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double t_uniform(uint64_t *s) /* [0, 1) */
{
    return (double)(t_next(s) >> 11) * 0x1.0p-53;
}
static inline uint64_t t_seed(uint64_t test, int rank)
{
    uint64_t s = test * 1000003u + (uint64_t)rank * 7919u + 17u;
    t_next(&s);
    return s;
}

/* The datatypes under test: how to store a double in an element of each. */
enum t_kind { T_F, T_I, T_U };
struct t_type {
    MPI_Datatype type;
    const char *name;
    enum t_kind kind;
    size_t size;
};

static inline void t_put(const struct t_type *t, void *buf, size_t i, double v)
{
    char *p = (char *)buf + i * t->size;
    if (t->kind == T_F) {
        if (t->size == 4) {
            float f = (float)v;
            memcpy(p, &f, 4);
        } else {
            memcpy(p, &v, 8);
        }
    } else if (t->kind == T_I) {
        int64_t x = (int64_t)v;
        int8_t a = (int8_t)x;
        int32_t b = (int32_t)x;
        if (t->size == 1)
            memcpy(p, &a, 1);
        else if (t->size == 4)
            memcpy(p, &b, 4);
        else
            memcpy(p, &x, 8);
    } else {
        uint64_t x = (uint64_t)v;
        uint8_t a = (uint8_t)x;
        uint32_t b = (uint32_t)x;
        if (t->size == 1)
            memcpy(p, &a, 1);
        else if (t->size == 4)
            memcpy(p, &b, 4);
        else
            memcpy(p, &x, 8);
    }
}

static inline double t_get(const struct t_type *t, const void *buf, size_t i)
{
    const char *p = (const char *)buf + i * t->size;
    if (t->kind == T_F) {
        if (t->size == 4) {
            float f;
            memcpy(&f, p, 4);
            return f;
        }
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    if (t->kind == T_I) {
        int8_t a;
        int32_t b;
        int64_t x;
        if (t->size == 1)
            return memcpy(&a, p, 1), a;
        if (t->size == 4)
            return memcpy(&b, p, 4), b;
        return memcpy(&x, p, 8), (double)x;
    }
    uint8_t a;
    uint32_t b;
    uint64_t x;
    if (t->size == 1)
        return memcpy(&a, p, 1), a;
    if (t->size == 4)
        return memcpy(&b, p, 4), b;
    return memcpy(&x, p, 8), (double)x;
}

/* FNV-1a of a buffer, to compare ranks' results bit for bit. */
static inline uint64_t t_hash(const void *buf, size_t bytes)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ ((const unsigned char *)buf)[i]) * 1099511628211ull;
    return h;
}

/* True when every rank of comm passed the same hash. */
static inline bool t_same_everywhere(uint64_t h, MPI_Comm comm)
{
    uint64_t lo = h, hi = h;
    PMPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
    PMPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
    return lo == hi;
}

/* Prints the expectation in the report's words, then the verdict; returns the exit code. */
static inline int t_finish(void)
{
    char line[1024];
    size_t o = 0;
    uint64_t total = 0;
    o += (size_t)snprintf(line + o, sizeof(line) - o, "expect: rank %d: served by arcomm", t_rank);
    for (int i = 0; i < T_NCALL; i++) {
        o += (size_t)snprintf(line + o, sizeof(line) - o, " %s=%llu", t_call_names[i],
                              (unsigned long long)t_served[i]);
        total += t_served[i];
    }
    snprintf(line + o, sizeof(line) - o, " total=%llu", (unsigned long long)total);
    printf("%s\n", line);
    o = 0;
    total = 0;
    o += (size_t)snprintf(line + o, sizeof(line) - o, "expect: rank %d: handed to MPI", t_rank);
    for (int i = 0; i < T_NCALL; i++) {
        o += (size_t)snprintf(line + o, sizeof(line) - o, " %s=%llu", t_call_names[i],
                              (unsigned long long)t_handed[i]);
        total += t_handed[i];
    }
    snprintf(line + o, sizeof(line) - o, " total=%llu", (unsigned long long)total);
    printf("%s\n", line);
    int any = t_failures;
    PMPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (t_rank == 0)
        printf("%s: %d failures\n", any ? "FAIL" : "ok", any);
    fflush(stdout);
    return any ? 1 : 0;
}

#endif /* ARCOMM_TESTS_PMPI_TEST_H */
