/* SPDX-License-Identifier: MIT */
/* The MPI tests' inputs, references and checks (mpi_check.h). */
#include "mpi_check.h"

#include <arcomm_mpi.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof(f));
    return f;
}

double mc_value(uint64_t seed, int rank, size_t i, comm_dtype_t dtype, comm_op_t op)
{
    uint64_t r = mix(seed * 0x100000001b3ull ^ mix((uint64_t)rank * 0x5851f42d4c957f2dull ^ i));
    double u = (double)(r >> 11) / 9007199254740992.0; /* [0, 1) */
    bool prod = op == COMM_PROD;
    switch (dtype) {
    case COMM_F32:
        return (float)(prod ? 0.5 + u : 2 * u - 1);
    case COMM_F64:
        return prod ? 0.5 + u : 2 * u - 1;
    case COMM_BF16:
        return bf16_round((float)(prod ? 0.5 + u : 2 * u - 1));
    case COMM_F16:
        return (double)(_Float16)(prod ? 0.5 + u : 2 * u - 1);
    case COMM_U8:
    case COMM_U32:
    case COMM_U64:
        return prod ? 1 + (double)(r % 3) : (double)(r % 50);
    case COMM_I8: /* sums of 4 ranks stay within -128..127 */
        return prod ? 1 + (double)(r % 3) : (double)(r % 61) - 30;
    default: /* signed integers */
        return prod ? 1 + (double)(r % 3) : (double)(r % 201) - 100;
    }
}

uint8_t mc_byte(uint64_t seed, int rank, size_t i)
{
    return (uint8_t)(mix(seed * 0x9e3779b97f4a7c15ull ^ mix((uint64_t)rank << 40 ^ i)) >> 56);
}

void mc_store(void *buf, size_t i, comm_dtype_t dtype, double v)
{
    switch (dtype) {
    case COMM_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case COMM_F64:
        ((double *)buf)[i] = v;
        break;
    case COMM_BF16: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
        break;
    }
    case COMM_F16:
        ((_Float16 *)buf)[i] = (_Float16)v;
        break;
    case COMM_I32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case COMM_I64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case COMM_U8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    case COMM_I8:
        ((int8_t *)buf)[i] = (int8_t)v;
        break;
    case COMM_U32:
        ((uint32_t *)buf)[i] = (uint32_t)v;
        break;
    case COMM_U64:
        ((uint64_t *)buf)[i] = (uint64_t)v;
        break;
    default:
        break;
    }
}

double mc_load(const void *buf, size_t i, comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_F32:
        return ((const float *)buf)[i];
    case COMM_F64:
        return ((const double *)buf)[i];
    case COMM_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof(f));
        return f;
    }
    case COMM_F16:
        return ((const _Float16 *)buf)[i];
    case COMM_I32:
        return ((const int32_t *)buf)[i];
    case COMM_I64:
        return (double)((const int64_t *)buf)[i];
    case COMM_U8:
        return ((const uint8_t *)buf)[i];
    case COMM_I8:
        return ((const int8_t *)buf)[i];
    case COMM_U32:
        return ((const uint32_t *)buf)[i];
    case COMM_U64:
        return (double)((const uint64_t *)buf)[i];
    default:
        return NAN;
    }
}

void mc_fill(void *buf, size_t n, uint64_t seed, int rank, comm_dtype_t dtype, comm_op_t op,
             size_t first)
{
    for (size_t i = 0; i < n; i++)
        mc_store(buf, i, dtype, mc_value(seed, rank, first + i, dtype, op));
}

double mc_reduce_ref(uint64_t seed, int nranks, size_t i, comm_dtype_t dtype, comm_op_t op,
                     double *sumabs)
{
    double acc = mc_value(seed, 0, i, dtype, op), abs_acc = fabs(acc);
    for (int r = 1; r < nranks; r++) {
        double v = mc_value(seed, r, i, dtype, op);
        abs_acc += fabs(v);
        if (op == COMM_MAX)
            acc = v > acc ? v : acc;
        else if (op == COMM_MIN)
            acc = v < acc ? v : acc;
        else if (op == COMM_PROD)
            acc *= v;
        else
            acc += v;
    }
    if (op == COMM_AVG)
        acc /= nranks;
    *sumabs = abs_acc;
    return acc;
}

bool mc_close(double got, double ref, double sumabs, comm_dtype_t dtype, comm_op_t op)
{
    double rel;
    switch (dtype) {
    case COMM_F32:
        rel = 1e-6;
        break;
    case COMM_F64:
        rel = 1e-14;
        break;
    case COMM_BF16:
        rel = 1.0 / 128;
        break;
    case COMM_F16:
        rel = 1.0 / 1024;
        break;
    default:
        return got == ref;
    }
    if (op == COMM_MAX || op == COMM_MIN)
        return got == ref;
    return fabs(got - ref) <= rel * (fabs(ref) + sumabs) + 1e-30;
}

uint64_t mc_hash(const void *buf, size_t bytes)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ ((const uint8_t *)buf)[i]) * 0x100000001b3ull;
    return h;
}

bool mc_same_everywhere(uint64_t h)
{
    uint64_t lo, hi;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

const char *mc_dtype_name(comm_dtype_t dtype)
{
    static const char *const names[] = {"f32", "f16", "bf16", "f64", "i32",
                                        "i64", "i8",  "u8",   "u32", "u64"};
    return (unsigned)dtype < sizeof(names) / sizeof(names[0]) ? names[dtype] : "?";
}

/* ---- what the test left in /dev/shm ------------------------------------------------- */

/* The "/arcomm-..." names this process's shm_open made or opened. */
static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;
static char (*g_names)[NAME_MAX + 1];
static size_t g_nnames, g_names_cap;

static void record_name(const char *name)
{
    pthread_mutex_lock(&g_names_lock);
    bool known = false;
    for (size_t i = 0; i < g_nnames && !known; i++)
        known = strcmp(g_names[i], name) == 0;
    if (!known && g_nnames == g_names_cap) {
        size_t cap = g_names_cap ? 2 * g_names_cap : 64;
        char(*grown)[NAME_MAX + 1] = realloc(g_names, cap * sizeof(*g_names));
        if (grown != NULL) {
            g_names = grown;
            g_names_cap = cap;
        }
    }
    if (!known && g_nnames < g_names_cap)
        snprintf(g_names[g_nnames++], sizeof(g_names[0]), "%s", name);
    pthread_mutex_unlock(&g_names_lock);
}

/*
 * The library's shm_open, seen first by this program (the executable's definition wins
 * the dynamic lookup; "default" visibility, as -fvisibility=hidden would keep it out of
 * the dynamic symbol table): every name of arcomm's that it made or opened is recorded.
 */
__attribute__((visibility("default"))) int shm_open(const char *name, int oflag, mode_t mode)
{
    static int (*real)(const char *, int, mode_t);
    if (real == NULL)
        *(void **)&real = dlsym(RTLD_NEXT, "shm_open");
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    int fd = real(name, oflag, mode);
    if (fd >= 0 && name != NULL && strncmp(name, "/arcomm-", 8) == 0)
        record_name(name + 1);
    return fd;
}

static char g_bystander[64];

void mc_shm_begin(void)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0)
        return;
    /* Another arcomm job's name, as far as this test knows: made with open(2), so not
     * recorded. */
    snprintf(g_bystander, sizeof(g_bystander), "/dev/shm/arcomm-bystander-%d", (int)getpid());
    int fd = open(g_bystander, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "rank 0: cannot make %s: %s\n", g_bystander, strerror(errno));
        g_bystander[0] = '\0';
        return;
    }
    close(fd);
}

/* This rank's recorded names still in /dev/shm after up to wait_s seconds, each printed. */
static int shm_left(double wait_s)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int left = 0;
        pthread_mutex_lock(&g_names_lock);
        for (size_t i = 0; i < g_nnames; i++) {
            char path[NAME_MAX + 16];
            struct stat st;
            snprintf(path, sizeof(path), "/dev/shm/%s", g_names[i]);
            left += stat(path, &st) == 0;
        }
        pthread_mutex_unlock(&g_names_lock);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double s = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
        if (left == 0 || s >= wait_s) {
            pthread_mutex_lock(&g_names_lock);
            for (size_t i = 0; i < g_nnames && left != 0; i++) {
                char path[NAME_MAX + 16];
                struct stat st;
                snprintf(path, sizeof(path), "/dev/shm/%s", g_names[i]);
                if (stat(path, &st) == 0)
                    fprintf(stderr, "rank %d: %s (made or opened by this rank) is left behind\n",
                            rank, path);
            }
            pthread_mutex_unlock(&g_names_lock);
            return left;
        }
        usleep(50000);
    }
}

void mc_shm_abandon(void)
{
    if (g_bystander[0] != '\0')
        unlink(g_bystander);
}

int mc_shm_end(void)
{
    int rank = 0, problems = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* Every rank is done with its communicators before any looks. */
    MPI_Barrier(MPI_COMM_WORLD);
    problems += shm_left(6.0) != 0;
    if (rank == 0 && g_bystander[0] != '\0') {
        struct stat st;
        if (stat(g_bystander, &st) != 0) {
            fprintf(stderr, "rank 0: %s, another job's name for all the test knows, was removed\n",
                    g_bystander);
            problems++;
        } else {
            unlink(g_bystander);
        }
        g_bystander[0] = '\0';
    }
    return problems;
}

int mc_finish(int failed)
{
    int any = 0, rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    failed += mc_shm_end();
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %d ranks, %d failures\n", any ? "FAIL" : "ok", size, any);
    MPI_Finalize();
    return any ? 1 : 0;
}

bool mc_first_wrong_add(const void *out, const void *addend, size_t n, size_t addend_count,
                        uint64_t seed, int nranks, comm_dtype_t dtype, char *why, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        double sumabs, ref = mc_reduce_ref(seed, nranks, i, dtype, COMM_SUM, &sumabs);
        double a = mc_load(addend, i % addend_count, dtype), got = mc_load(out, i, dtype);
        if (!mc_close(got, ref + a, sumabs + (a < 0 ? -a : a), dtype, COMM_SUM)) {
            snprintf(why, len, "element %zu is %.9g, expected %.9g", i, got, ref + a);
            return true;
        }
    }
    return false;
}

bool mc_first_wrong_bf16_wire(const void *out, size_t n, uint64_t seed, int nranks, char *why,
                              size_t len)
{
    for (size_t i = 0; i < n; i++) {
        double sumabs, ref = mc_reduce_ref(seed, nranks, i, COMM_F32, COMM_SUM, &sumabs);
        double got = mc_load(out, i, COMM_F32);
        /* bf16 keeps 8 significant bits: the inputs, the partial sums and the result
         * each off by at most 2^-9 of themselves when they cross (mc_close's bf16 rule). */
        if (fabs(got - ref) > (fabs(ref) + sumabs) / 128 + 1e-30) {
            snprintf(why, len, "element %zu is %.9g, expected %.9g (bf16 on the wire)", i, got,
                     ref);
            return true;
        }
    }
    return false;
}

bool mc_one_host(void)
{
    MPI_Comm node;
    int node_size = 0, size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    const char *per = getenv("ARCOMM_MPI_RANKS_PER_HOST");
    return per != NULL && atoi(per) > 0 ? atoi(per) >= size : node_size == size;
}

bool mc_first_wrong(const void *out, size_t n, size_t first, uint64_t seed, int nranks,
                    comm_dtype_t dtype, comm_op_t op, char *why, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        double sumabs, ref = mc_reduce_ref(seed, nranks, first + i, dtype, op, &sumabs);
        double got = mc_load(out, i, dtype);
        if (!mc_close(got, ref, sumabs, dtype, op)) {
            snprintf(why, len, "element %zu is %.9g, expected %.9g", i, got, ref);
            return true;
        }
    }
    return false;
}

comm_t *mc_world_comm(int timeout_ms)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.timeout_ms = timeout_ms;
    comm_t *c = NULL;
    if (comm_init_mpi(&c, MPI_COMM_WORLD, &cfg) != COMM_OK) {
        int rank = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        fprintf(stderr, "rank %d: comm_init_mpi: %s\n", rank, comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return c;
}
