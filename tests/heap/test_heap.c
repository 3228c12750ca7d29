/* SPDX-License-Identifier: MIT */
/*
 * libarcomm_heap.so, preloaded (tests/heap/meson.build sets LD_PRELOAD): large blocks in
 * the shared heap and small ones not, alignment, contents under a seeded random stress
 * (HEAP_TEST_SEED repeats a run) in one thread and in four, the memory really shared
 * through the memfd, pages punched on free, fork giving the child a private copy and a
 * heap of its own (two generations), bad frees aborting, and the knobs, which run this
 * executable again with an argument naming the case and the environment it needs.
 * Without the preload the test fails: it would otherwise check glibc alone.
 */
#include "heap_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define KiB      ((size_t)1 << 10)
#define MiB      ((size_t)1 << 20)
#define HEAP_MIN (64 * KiB) /* ARCOMM_HEAP_MIN's default */
#define SLOTS    48

static int (*region_fn)(struct arcomm_heap_info *);
static struct arcomm_heap_info heap0; /* this process's heap, read at start */
static uint64_t seed;

static bool in_range(const void *p, const struct arcomm_heap_info *h)
{
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)h->base;
    return u >= b && u - b < h->bytes;
}

static bool in_heap(const void *p)
{
    return in_range(p, &heap0);
}

/* The pattern byte at offset o of block id: distinct per block and per position. */
static uint64_t pat_word(uint64_t id, uint64_t w)
{
    uint64_t x = ((id + 1) << 40) ^ w;
    x *= 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

static uint8_t pat_byte(uint64_t id, size_t o)
{
    return (uint8_t)(pat_word(id, o / 8) >> (8 * (o % 8)));
}

static void fill(void *p, size_t from, size_t to, uint64_t id)
{
    uint8_t *b = p;
    size_t o = from;
    for (; o < to && o % 8 != 0; o++)
        b[o] = pat_byte(id, o);
    for (; o + 8 <= to; o += 8) {
        uint64_t w = pat_word(id, o / 8);
        memcpy(b + o, &w, 8);
    }
    for (; o < to; o++)
        b[o] = pat_byte(id, o);
}

/* The first offset in [0, n) that does not hold block id's pattern, or SIZE_MAX. */
static size_t check(const void *p, size_t n, uint64_t id)
{
    const uint8_t *b = p;
    size_t o = 0;
    for (; o + 8 <= n; o += 8) {
        uint64_t w = pat_word(id, o / 8), have;
        memcpy(&have, b + o, 8);
        if (have != w)
            break;
    }
    for (; o < n; o++)
        if (b[o] != pat_byte(id, o))
            return o;
    return SIZE_MAX;
}

static size_t first_nonzero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t o = 0; o < n; o++)
        if (b[o] != 0)
            return o;
    return SIZE_MAX;
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* 1 B to 8 MiB, log-uniform, with extra weight around the threshold. */
static size_t rnd_size(uint64_t *s)
{
    if (rnd(s) % 8 == 0)
        return HEAP_MIN - 64 + rnd(s) % 128;
    unsigned bits = (unsigned)(rnd(s) % 24);
    return 1 + (size_t)(rnd(s) % ((uint64_t)1 << bits));
}

struct slot {
    uint8_t *p;
    size_t n;
    uint64_t id;
};

/* Failure text of the stress (threads must not call cmocka's asserts). */
#define STRESS_FAIL(...)                                                                           \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        goto out;                                                                                  \
    } while (0)

/*
 * ops random operations on SLOTS slots; every live block carries its pattern, checked
 * before it is freed or reallocated; large blocks must be in the heap, small ones not.
 * 0, or 1 with what went wrong in err.
 */
static int stress(uint64_t s, int ops, char *err, size_t errlen)
{
    struct slot sl[SLOTS] = {{0}};
    uint64_t next_id = s << 16;
    int rc = 1;
    for (int op = 0; op < ops; op++) {
        struct slot *b = &sl[rnd(&s) % SLOTS];
        unsigned kind = (unsigned)(rnd(&s) % 4);
        size_t n = rnd_size(&s), off;
        if (b->p == NULL) {
            uint64_t id = next_id++;
            if (kind == 0 || kind == 3) {
                b->p = malloc(n);
            } else if (kind == 1) {
                b->p = calloc(1, n);
                if (b->p != NULL && (off = first_nonzero(b->p, n)) != SIZE_MAX)
                    STRESS_FAIL("op %d: calloc(%zu) = %p: byte %zu is not zero", op, n, b->p, off);
            } else {
                size_t align = (size_t)8 << (rnd(&s) % 18); /* 8 B to 1 MiB */
                void *p = NULL;
                if (posix_memalign(&p, align, n) != 0)
                    STRESS_FAIL("op %d: posix_memalign(%zu, %zu) failed", op, align, n);
                if ((uintptr_t)p % align != 0)
                    STRESS_FAIL("op %d: posix_memalign(%zu, %zu) = %p: misaligned", op, align, n,
                                p);
                b->p = p;
            }
            if (b->p == NULL)
                STRESS_FAIL("op %d: allocation of %zu bytes failed", op, n);
            if (in_heap(b->p) != (n >= HEAP_MIN))
                STRESS_FAIL("op %d: %zu bytes at %p: %s the heap", op, n, b->p,
                            n >= HEAP_MIN ? "outside" : "inside");
            if (malloc_usable_size(b->p) < n)
                STRESS_FAIL("op %d: malloc_usable_size(%p) = %zu < %zu", op, b->p,
                            malloc_usable_size(b->p), n);
            b->n = n;
            b->id = id;
            fill(b->p, 0, n, id);
            continue;
        }
        if ((off = check(b->p, b->n, b->id)) != SIZE_MAX)
            STRESS_FAIL("op %d: block %p (%zu bytes) lost its contents at byte %zu", op, b->p, b->n,
                        off);
        if (kind == 0) {
            free(b->p);
            b->p = NULL;
            continue;
        }
        bool was_heap = in_heap(b->p);
        size_t usable = malloc_usable_size(b->p), old_n = b->n;
        void *old = b->p;
        uint8_t *q = kind == 1 ? realloc(b->p, n) : reallocarray(b->p, 1, n);
        if (q == NULL)
            STRESS_FAIL("op %d: realloc(%p, %zu) failed", op, old, n);
        b->p = q; /* what the clean-up frees, from here on */
        size_t keep = n < old_n ? n : old_n;
        if ((off = check(q, keep, b->id)) != SIZE_MAX)
            STRESS_FAIL("op %d: realloc(%p of %zu, %zu) = %p lost byte %zu", op, old, old_n, n, q,
                        off);
        /*
         * Where it must be: a block that fits stays where it is; a glibc block that
         * outgrows itself moves to the heap when large; a heap block that outgrows
         * itself grows in place or moves to where its new size belongs.
         */
        int want = n <= usable ? was_heap : n >= HEAP_MIN ? 1 : was_heap ? -1 : 0;
        if (want >= 0 && in_heap(q) != (want == 1))
            STRESS_FAIL("op %d: realloc(%p of %zu, %zu) = %p: %s the heap", op, old, old_n, n, q,
                        want == 1 ? "outside" : "inside");
        fill(q, keep, n, b->id);
        b->n = n;
    }
    rc = 0;
out:
    for (int i = 0; i < SLOTS; i++)
        free(sl[i].p);
    return rc;
}

static void preload_active(void **state)
{
    (void)state;
    assert_non_null(region_fn);
    struct arcomm_heap_info h;
    assert_int_equal(region_fn(&h), 1);
    assert_ptr_equal(h.base, heap0.base);
    assert_int_equal(h.bytes, heap0.bytes);
    assert_int_equal(h.fd, heap0.fd);
    assert_int_equal(h.bytes % (uint64_t)sysconf(_SC_PAGESIZE), 0);
    struct stat st;
    assert_int_equal(fstat(h.fd, &st), 0);
    assert_int_equal((uint64_t)st.st_size, h.bytes);
    assert_true(fcntl(h.fd, F_GETFD) & FD_CLOEXEC);
}

static void placement(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 100, HEAP_MIN - 1, HEAP_MIN, HEAP_MIN + 1, MiB, 3 * MiB};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        void *p[3] = {malloc(n), calloc(n, 1), realloc(NULL, n)};
        for (int k = 0; k < 3; k++) {
            assert_non_null(p[k]);
            if (in_heap(p[k]) != (n >= HEAP_MIN))
                fail_msg("%s(%zu) = %p: %s the heap [%p, +%" PRIu64 ")",
                         k == 0   ? "malloc"
                         : k == 1 ? "calloc"
                                  : "realloc(NULL)",
                         n, p[k], n >= HEAP_MIN ? "outside" : "inside", heap0.base, heap0.bytes);
            if (malloc_usable_size(p[k]) < n)
                fail_msg("malloc_usable_size(%p) = %zu < %zu", p[k], malloc_usable_size(p[k]), n);
            if (in_heap(p[k]) && (uintptr_t)p[k] % 64 != 0)
                fail_msg("heap block %p is not 64-byte aligned", p[k]);
            memset(p[k], 0x3c, n);
        }
        for (int k = 0; k < 3; k++)
            free(p[k]);
    }
    free(NULL);
    assert_int_equal(malloc_usable_size(NULL), 0);
    /* Through volatile pointers: the compiler must not see the overflow coming. */
    void *(*volatile calloc_fn)(size_t, size_t) = calloc;
    errno = 0;
    assert_null(calloc_fn(SIZE_MAX / 2, 4));
    assert_int_equal(errno, ENOMEM);
}

static void alignment(void **state)
{
    (void)state;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = 200 * KiB;
    for (size_t a = 64; a <= MiB; a *= 2) {
        void *p[4] = {NULL, aligned_alloc(a, n), memalign(a, n), NULL};
        assert_int_equal(posix_memalign(&p[0], a, n), 0);
        p[3] = a == pg ? valloc(n) : pvalloc(n);
        for (int k = 0; k < 4; k++) {
            size_t want = k < 3 ? a : pg;
            if (p[k] == NULL || (uintptr_t)p[k] % want != 0 || !in_heap(p[k]))
                fail_msg("%s(%zu, %zu) = %p: want %zu-aligned and in the heap",
                         (const char *[]){"posix_memalign", "aligned_alloc", "memalign",
                                          "valloc/pvalloc"}[k],
                         want, n, p[k], want);
            if (malloc_usable_size(p[k]) < n)
                fail_msg("malloc_usable_size(%p) = %zu < %zu", p[k], malloc_usable_size(p[k]), n);
            memset(p[k], 0x5e, n);
        }
        for (int k = 0; k < 4; k++)
            free(p[k]);
    }
    /* Small, or aligned beyond 1 MiB: glibc's, still aligned. */
    void *p = memalign(4096, 1000);
    assert_true(p != NULL && (uintptr_t)p % 4096 == 0 && !in_heap(p));
    free(p);
    assert_int_equal(posix_memalign(&p, 2 * MiB, MiB), 0);
    assert_true((uintptr_t)p % (2 * MiB) == 0 && !in_heap(p));
    free(p);
    assert_int_equal(posix_memalign(&p, 24, MiB), EINVAL);
    assert_int_equal(posix_memalign(&p, 0, MiB), EINVAL);
}

/* A freed, written block comes back from calloc zeroed (the dirty path, not a punched one). */
static void calloc_reuse(void **state)
{
    (void)state;
    size_t n = MiB; /* below the 4 MiB punch: the free extent stays dirty */
    uint8_t *guard[2] = {malloc(n), NULL}, *p = malloc(n);
    guard[1] = malloc(n); /* keeps p's extent from merging with the heap's free tail */
    assert_true(in_heap(guard[0]) && in_heap(p) && in_heap(guard[1]));
    memset(p, 0xab, n);
    free(p);
    uint8_t *held[64];
    int nheld = 0, reused = 0;
    for (; nheld < 64; nheld++) {
        uint8_t *q = held[nheld] = calloc(1, n);
        assert_non_null(q);
        size_t off = first_nonzero(q, n);
        if (off != SIZE_MAX)
            fail_msg("calloc(%zu) = %p (the freed block at %p: %s): byte %zu is 0x%02x", n, q, p,
                     q == p ? "reused" : "not reused", off, q[off]);
        if (q == p) {
            reused = 1;
            nheld++;
            break;
        }
    }
    if (!reused)
        fail_msg("64 callocs of %zu bytes never reused the freed block %p", n, p);
    for (int i = 0; i < nheld; i++)
        free(held[i]);
    free(guard[0]);
    free(guard[1]);
}

static void realloc_contents(void **state)
{
    (void)state;
    /* glibc -> heap: a small block that grows past the threshold moves into the heap. */
    uint8_t *p = malloc(1000);
    assert_true(p != NULL && !in_heap(p));
    fill(p, 0, 1000, 7);
    static const size_t steps[] = {MiB, 8 * MiB, 100 * KiB, 500, 3 * MiB, 70 * KiB};
    size_t n = 1000;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        size_t m = steps[i], keep = m < n ? m : n, off;
        uint8_t *q = realloc(p, m);
        assert_non_null(q);
        if ((off = check(q, keep, 7)) != SIZE_MAX)
            fail_msg("realloc(%p of %zu, %zu) = %p lost byte %zu", p, n, m, q, off);
        if (!in_heap(q))
            fail_msg("realloc(%p of %zu, %zu) = %p: outside the heap", p, n, m, q);
        if (malloc_usable_size(q) < m)
            fail_msg("malloc_usable_size(%p) = %zu < %zu", q, malloc_usable_size(q), m);
        fill(q, keep, m, 7);
        p = q;
        n = m;
    }
    void *(*volatile reallocarray_fn)(void *, size_t, size_t) = reallocarray;
    errno = 0;
    assert_null(reallocarray_fn(p, SIZE_MAX / 2, 3));
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(check(p, n, 7), SIZE_MAX);
    assert_null(realloc(p, 0)); /* glibc 2.36: frees p, returns NULL */
    /* A small glibc block that stays small stays with glibc. */
    p = realloc(malloc(10), 5000);
    assert_true(p != NULL && !in_heap(p));
    free(p);
}

/* Everything freed: the heap is one free extent again, and the first block starts it. */
static void assert_heap_empty(const char *after)
{
    void *p = malloc(MiB);
    if (p != (uint8_t *)heap0.base + 64)
        fail_msg("after %s: malloc(1 MiB) = %p, not the heap's start %p + 64: freed blocks "
                 "were not merged (or leaked)",
                 after, p, heap0.base);
    free(p);
}

/* Freed neighbours merge, on either side, into room for a block of both sizes. */
static void coalesce(void **state)
{
    (void)state;
    assert_heap_empty("the cases before");
    for (int k = 0; k < 2; k++) {
        uint8_t *x = malloc(MiB), *y = malloc(MiB), *z = malloc(MiB);
        assert_true(x == (uint8_t *)heap0.base + 64 && y > x && z > y);
        free(k == 0 ? x : y);
        free(k == 0 ? y : x);
        uint8_t *w = malloc(2 * MiB);
        if (w != x)
            fail_msg("freed %p and then its %s neighbour: malloc(2 MiB) = %p, not %p", (void *)x,
                     k == 0 ? "right" : "left", (void *)w, (void *)x);
        free(w);
        free(z);
    }
    assert_heap_empty("coalesce");
}

static void stress_one(void **state)
{
    (void)state;
    char err[256] = "";
    printf("stress: seed %" PRIu64 " (HEAP_TEST_SEED=%" PRIu64 " repeats it)\n", seed, seed);
    if (stress(seed, 4000, err, sizeof(err)) != 0)
        fail_msg("stress, seed %" PRIu64 ": %s", seed, err);
    assert_heap_empty("the stress");
}

struct stress_arg {
    uint64_t seed;
    int rc;
    char err[256];
};

static void *stress_thread(void *p)
{
    struct stress_arg *a = p;
    a->rc = stress(a->seed, 2500, a->err, sizeof(a->err));
    return NULL;
}

static void stress_threads(void **state)
{
    (void)state;
    struct stress_arg a[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct stress_arg){.seed = seed + 1 + (uint64_t)i, .rc = -1};
        assert_int_equal(pthread_create(&t[i], NULL, stress_thread, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 4; i++)
        if (a[i].rc != 0)
            fail_msg("stress thread %d (seed %" PRIu64 "): %s", i, a[i].seed, a[i].err);
    assert_heap_empty("the threads' stress");
}

/* What a peer does: open the memfd through /proc and map it; both views are one memory. */
static void shared(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", heap0.fd);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t *m = mmap(NULL, heap0.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    size_t n = 2 * MiB;
    uint8_t *p = malloc(n);
    assert_true(p != NULL && in_heap(p));
    size_t off = (size_t)(p - (uint8_t *)heap0.base);
    fill(p, 0, n, 11);
    if (check(m + off, n, 11) != SIZE_MAX)
        fail_msg("a write through %p is not seen at offset %zu of a second mapping", (void *)p,
                 off);
    fill(m + off, 0, n, 12);
    if (check(p, n, 12) != SIZE_MAX)
        fail_msg("a write through a second mapping is not seen through %p", (void *)p);
    free(p);
    munmap(m, heap0.bytes);
    close(fd);
}

static int64_t memfd_blocks(void)
{
    struct stat st;
    assert_int_equal(fstat(heap0.fd, &st), 0);
    return (int64_t)st.st_blocks;
}

/* Pages are committed when a block is carved, and given back when 16 MiB are freed. */
static void punch(void **state)
{
    (void)state;
    size_t n = 16 * MiB;
    int64_t b0 = memfd_blocks();
    uint8_t *p = malloc(n);
    assert_true(p != NULL && in_heap(p));
    int64_t b1 = memfd_blocks();
    if (b1 - b0 < (int64_t)(n / 512))
        fail_msg("malloc(16 MiB) committed %" PRId64 " 512-byte blocks of the memfd, not %zu",
                 b1 - b0, n / 512);
    memset(p, 0x11, n);
    int64_t b2 = memfd_blocks();
    free(p);
    int64_t b3 = memfd_blocks();
    if (b2 - b3 < (int64_t)(n / 512))
        fail_msg("free(16 MiB) gave back %" PRId64 " 512-byte blocks of the memfd, not %zu",
                 b2 - b3, n / 512);
    /* The punched range comes back zeroed (calloc may skip its memset there). */
    p = calloc(1, n);
    assert_non_null(p);
    size_t off = first_nonzero(p, n);
    if (off != SIZE_MAX)
        fail_msg("calloc after a punch: byte %zu of %p is not zero", off, (void *)p);
    free(p);
    /* Growing in place into the free tail commits the new pages too. */
    p = malloc(MiB);
    assert_ptr_equal(p, (uint8_t *)heap0.base + 64);
    b0 = memfd_blocks();
    uint8_t *q = realloc(p, n);
    if (q != p)
        fail_msg("realloc(%p, 16 MiB) with free room after it moved the block to %p", (void *)p,
                 (void *)q);
    b1 = memfd_blocks();
    if (b1 - b0 < (int64_t)((n - MiB) / 512))
        fail_msg("realloc 1 -> 16 MiB in place committed %" PRId64 " 512-byte blocks, not %zu",
                 b1 - b0, (n - MiB) / 512);
    free(q);
}

/* The permissions /proc/self/maps gives the mapping that holds p ("" when none). */
static void maps_perms(const void *p, char perms[5])
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    perms[0] = '\0';
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        char pr[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, pr) == 3 && (uintptr_t)p >= lo &&
            (uintptr_t)p < hi) {
            memcpy(perms, pr, 5);
            break;
        }
    }
    if (f != NULL)
        fclose(f);
}

/* In a child: a failed check prints what it checked and ends the child with 1. */
#define CHILD_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "pid %d: ", (int)getpid());                                            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static ino_t fd_ino(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

static int wait_status(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The grandchild: a third heap; blocks of both older heaps readable and freeable. */
static int fork_grandchild(const struct arcomm_heap_info *h1, uint8_t *keep, size_t keep_n,
                           uint8_t *q, size_t q_n)
{
    struct arcomm_heap_info h2;
    CHILD_CHECK(region_fn(&h2) == 1, "grandchild: arcomm_heap_region gave no heap");
    CHILD_CHECK(h2.base != heap0.base && h2.base != h1->base,
                "grandchild: heap %p is not new (parent's %p, child's %p)", h2.base, heap0.base,
                h1->base);
    CHILD_CHECK(check(keep, keep_n, 21) == SIZE_MAX,
                "grandchild: the first heap's block %p lost "
                "its contents",
                (void *)keep);
    CHILD_CHECK(check(q, q_n, 23) == SIZE_MAX,
                "grandchild: the child heap's block %p lost its "
                "contents",
                (void *)q);
    CHILD_CHECK(malloc_usable_size(keep) >= keep_n, "grandchild: malloc_usable_size(%p) = %zu",
                (void *)keep, malloc_usable_size(keep));
    free(keep);
    free(q);
    void *r = malloc(2 * MiB);
    CHILD_CHECK(r != NULL && in_range(r, &h2), "grandchild: malloc(2 MiB) = %p, not in %p", r,
                h2.base);
    memset(r, 1, 2 * MiB);
    free(r);
    return 0;
}

static int fork_child(uint8_t *p, size_t n, uint8_t *keep, size_t keep_n, ino_t ino0, int rfd)
{
    char c;
    CHILD_CHECK(read(rfd, &c, 1) == 1, "child: no word from the parent");
    size_t off = check(p, n, 20);
    CHILD_CHECK(off == SIZE_MAX,
                "child: byte %zu of %p is not what it was at fork (the "
                "parent's later write shows through)",
                off, (void *)p);
    fill(p, 0, n, 22);
    char perms[5];
    maps_perms(p, perms);
    CHILD_CHECK(strcmp(perms, "rw-p") == 0, "child: block %p is mapped %s, not rw-p (private)",
                (void *)p, perms);
    maps_perms((uint8_t *)heap0.base + heap0.bytes - 1, perms);
    CHILD_CHECK(strcmp(perms, "---p") == 0, "child: the old heap's end is mapped '%s', not ---p",
                perms);
    struct arcomm_heap_info h1;
    CHILD_CHECK(region_fn(&h1) == 1, "child: arcomm_heap_region gave no heap");
    CHILD_CHECK(h1.base != heap0.base, "child: heap base %p is the parent's", h1.base);
    CHILD_CHECK(fd_ino(h1.fd) != 0 && fd_ino(h1.fd) != ino0,
                "child: heap fd %d is the parent's memfd", h1.fd);
    uint8_t *q = malloc(4 * MiB);
    CHILD_CHECK(q != NULL && in_range(q, &h1), "child: malloc(4 MiB) = %p, not in its heap %p",
                (void *)q, h1.base);
    fill(q, 0, 4 * MiB, 23);
    CHILD_CHECK(malloc_usable_size(p) >= n, "child: malloc_usable_size(%p) = %zu < %zu", (void *)p,
                malloc_usable_size(p), n);
    /* realloc of an inherited block: into the child's heap, contents kept, old pages gone. */
    uint8_t *p2 = realloc(p, 2 * n);
    CHILD_CHECK(p2 != NULL && in_range(p2, &h1), "child: realloc(%p, %zu) = %p, not in %p",
                (void *)p, 2 * n, (void *)p2, h1.base);
    CHILD_CHECK(check(p2, n, 22) == SIZE_MAX, "child: realloc of an inherited block lost data");
    maps_perms(p, perms);
    CHILD_CHECK(strcmp(perms, "---p") == 0,
                "child: the freed inherited block %p is mapped '%s', not reserved (---p)",
                (void *)p, perms);
    pid_t pid = fork();
    if (pid == 0)
        _exit(fork_grandchild(&h1, keep, keep_n, q, 4 * MiB));
    CHILD_CHECK(pid > 0 && wait_status(pid) == 0, "child: the grandchild failed");
    CHILD_CHECK(check(q, 4 * MiB, 23) == SIZE_MAX, "child: the grandchild's free changed %p",
                (void *)q);
    free(q);
    free(p2);
    return 0;
}

static void fork_private(void **state)
{
    (void)state;
    size_t n = 8 * MiB, keep_n = MiB;
    uint8_t *p = malloc(n), *keep = malloc(keep_n);
    assert_true(p != NULL && in_heap(p) && keep != NULL && in_heap(keep));
    fill(p, 0, n, 20);
    fill(keep, 0, keep_n, 21);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[1]);
        _exit(fork_child(p, n, keep, keep_n, fd_ino(heap0.fd), pfd[0]));
    }
    assert_true(pid > 0);
    close(pfd[0]);
    fill(p, 0, n, 24); /* after the fork: the child must not see it */
    assert_int_equal(write(pfd[1], "x", 1), 1);
    close(pfd[1]);
    int st = wait_status(pid);
    if (st != 0)
        fail_msg("the fork child failed (status %d; its stderr says what)", st);
    size_t off = check(p, n, 24);
    if (off != SIZE_MAX)
        fail_msg("the parent's block %p changed at byte %zu: the child's writes show through",
                 (void *)p, off);
    assert_int_equal(check(keep, keep_n, 21), SIZE_MAX);
    free(p);
    free(keep);
}

/* A fork child reads the knobs again when it makes its heap, as a new process does. */
static int fork_knobs_child(bool disable)
{
    setenv("ARCOMM_HEAP_BYTES", disable ? "0" : "32M", 1);
    setenv("ARCOMM_HEAP_MIN", "128K", 1);
    uint8_t *p = malloc(2 * MiB), *s = malloc(100 * KiB);
    struct arcomm_heap_info h;
    int have = region_fn(&h);
    CHILD_CHECK(p != NULL && s != NULL, "fork child: malloc failed");
    memset(p, 1, 2 * MiB);
    if (disable) {
        CHILD_CHECK(have == 0, "fork child, ARCOMM_HEAP_BYTES=0: arcomm_heap_region gave %d", have);
    } else {
        CHILD_CHECK(have == 1 && h.bytes == 32 * MiB,
                    "fork child, ARCOMM_HEAP_BYTES=32M: arcomm_heap_region gave %d, %" PRIu64
                    " bytes",
                    have, have == 1 ? h.bytes : 0);
        CHILD_CHECK(in_range(p, &h) && !in_range(s, &h),
                    "fork child, ARCOMM_HEAP_MIN=128K: 2 MiB at %p, 100 KiB at %p, heap %p",
                    (void *)p, (void *)s, h.base);
    }
    free(p);
    free(s);
    return 0;
}

static void fork_knobs(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0)
            _exit(fork_knobs_child(k == 0));
        int st = wait_status(pid);
        if (st != 0)
            fail_msg("fork child with ARCOMM_HEAP_BYTES=%s: status %d (its stderr says what)",
                     k == 0 ? "0" : "32M", st);
    }
}

/* Bad frees abort with a line naming the pointer, in a child whose stderr is read. */
static void bad_free(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            dup2(pfd[1], STDERR_FILENO);
            /* The guard keeps p's extent small and unpunched: its header is still there. */
            uint8_t *p = malloc(MiB), *guard = malloc(MiB);
            (void)guard;
            if (k == 0) {
                free(p);
                free(p); /* double free */
            } else {
                free(p + 64); /* not a block's pointer */
            }
            _exit(0);
        }
        close(pfd[1]);
        char buf[512] = "";
        ssize_t len = read(pfd[0], buf, sizeof(buf) - 1);
        buf[len > 0 ? len : 0] = '\0';
        close(pfd[0]);
        int st = wait_status(pid);
        if (st != 128 + SIGABRT || strstr(buf, "arcomm heap: free(): 0x") == NULL)
            fail_msg("%s: status %d (want SIGABRT), stderr '%s'",
                     k == 0 ? "double free" : "free of an inner pointer", st, buf);
    }
}

/* Runs this executable as "test_heap mode" with env (NAME=VALUE, ...); its stderr in err. */
static int run_self(const char *mode, const char *const *env, char *err, size_t errlen)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], STDERR_FILENO);
        unsetenv("ARCOMM_HEAP_BYTES");
        unsetenv("ARCOMM_HEAP_MIN");
        for (; *env != NULL; env++)
            putenv((char *)*env);
        execl("/proc/self/exe", "test_heap", mode, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    size_t len = 0;
    ssize_t r;
    while ((r = read(pfd[0], err + len, errlen - 1 - len)) > 0)
        len += (size_t)r;
    err[len] = '\0';
    close(pfd[0]);
    return wait_status(pid);
}

static void knobs(void **state)
{
    (void)state;
    static const struct {
        const char *mode;
        const char *env[3];
        const char *says; /* what its stderr must hold, if anything */
    } cases[] = {
        {"disabled", {"ARCOMM_HEAP_BYTES=0", NULL}, NULL},
        {"exhaust", {"ARCOMM_HEAP_BYTES=8M", NULL}, NULL},
        {"knobs", {"ARCOMM_HEAP_BYTES=64m", "ARCOMM_HEAP_MIN=1MiB", NULL}, NULL},
        {"badknob",
         {"ARCOMM_HEAP_BYTES=lots", "ARCOMM_HEAP_MIN=12Q", NULL},
         "arcomm heap: ARCOMM_HEAP_BYTES=lots is not a size; using the default"},
        {"badknob", {"ARCOMM_HEAP_MIN=12Q", NULL}, "ARCOMM_HEAP_MIN=12Q is not a size"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[2048];
        int st = run_self(cases[i].mode, cases[i].env, err, sizeof(err));
        if (st != 0 || (cases[i].says != NULL && strstr(err, cases[i].says) == NULL))
            fail_msg("case %s (%s %s): status %d, stderr '%s'%s%s", cases[i].mode, cases[i].env[0],
                     cases[i].env[1] ? cases[i].env[1] : "", st, err,
                     cases[i].says ? ", want " : "", cases[i].says ? cases[i].says : "");
    }
}

/* The subprocess cases of knobs(); 0 when all is as the environment says. */
static int child_mode(const char *mode)
{
    struct arcomm_heap_info h;
    int have = region_fn != NULL ? region_fn(&h) : -1;
    if (strcmp(mode, "disabled") == 0) {
        CHILD_CHECK(have == 0, "ARCOMM_HEAP_BYTES=0: arcomm_heap_region gave %d, want 0", have);
        uint8_t *p = malloc(16 * MiB);
        CHILD_CHECK(p != NULL, "ARCOMM_HEAP_BYTES=0: malloc(16 MiB) failed");
        fill(p, 0, 16 * MiB, 30);
        p = realloc(p, 32 * MiB);
        CHILD_CHECK(p != NULL && check(p, 16 * MiB, 30) == SIZE_MAX, "disabled: realloc lost data");
        free(p);
        return 0;
    }
    CHILD_CHECK(have == 1, "%s: arcomm_heap_region gave %d, want 1", mode, have);
    if (strcmp(mode, "exhaust") == 0) {
        CHILD_CHECK(h.bytes == 8 * MiB, "ARCOMM_HEAP_BYTES=8M: the heap has %" PRIu64 " bytes",
                    h.bytes);
        uint8_t *big = malloc(16 * MiB), *a = malloc(4 * MiB), *b = malloc(6 * MiB);
        CHILD_CHECK(big != NULL && !in_range(big, &h),
                    "8 MiB heap: malloc(16 MiB) = %p, want a block outside the heap", (void *)big);
        CHILD_CHECK(a != NULL && in_range(a, &h), "8 MiB heap: malloc(4 MiB) = %p, not in it",
                    (void *)a);
        CHILD_CHECK(b != NULL && !in_range(b, &h),
                    "8 MiB heap, 4 MiB used: malloc(6 MiB) = %p, want outside", (void *)b);
        memset(big, 1, 16 * MiB);
        memset(a, 2, 4 * MiB);
        memset(b, 3, 6 * MiB);
        /* A heap block that cannot grow in the heap moves out, contents kept. */
        uint8_t *a2 = realloc(a, 12 * MiB);
        CHILD_CHECK(a2 != NULL && !in_range(a2, &h) && a2[0] == 2 && a2[4 * MiB - 1] == 2,
                    "8 MiB heap: realloc(4 MiB block, 12 MiB) = %p", (void *)a2);
        free(big);
        free(a2);
        free(b);
        return 0;
    }
    if (strcmp(mode, "knobs") == 0) {
        CHILD_CHECK(h.bytes == 64 * MiB, "ARCOMM_HEAP_BYTES=64m: %" PRIu64 " bytes", h.bytes);
        void *s = malloc(MiB - 1), *l = malloc(MiB);
        CHILD_CHECK(s != NULL && !in_range(s, &h), "ARCOMM_HEAP_MIN=1MiB: 1 MiB - 1 in the heap");
        CHILD_CHECK(l != NULL && in_range(l, &h), "ARCOMM_HEAP_MIN=1MiB: 1 MiB not in the heap");
        free(s);
        free(l);
        return 0;
    }
    if (strcmp(mode, "badknob") == 0) {
        void *l = malloc(HEAP_MIN);
        CHILD_CHECK(l != NULL && in_range(l, &h), "bad knobs: the defaults do not hold");
        free(l);
        return 0;
    }
    CHILD_CHECK(0, "unknown mode %s", mode);
}

int main(int argc, char **argv)
{
    region_fn = (int (*)(struct arcomm_heap_info *))dlsym(RTLD_DEFAULT, "arcomm_heap_region");
    if (argc > 1)
        return child_mode(argv[1]);
    /* The cases assume the knobs' defaults: run again without the caller's values. */
    if (getenv("ARCOMM_HEAP_BYTES") != NULL || getenv("ARCOMM_HEAP_MIN") != NULL) {
        unsetenv("ARCOMM_HEAP_BYTES");
        unsetenv("ARCOMM_HEAP_MIN");
        execv("/proc/self/exe", argv);
        perror("test_heap: execv /proc/self/exe");
        return 1;
    }
    if (region_fn == NULL || region_fn(&heap0) != 1) {
        fprintf(stderr,
                "test_heap: libarcomm_heap.so is not preloaded (%s), or has no heap: "
                "run it with LD_PRELOAD=.../libarcomm_heap.so\n",
                region_fn == NULL ? "no arcomm_heap_region" : "arcomm_heap_region gave 0");
        return 1;
    }
    const char *s = getenv("HEAP_TEST_SEED");
    seed = s != NULL ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(preload_active),   cmocka_unit_test(placement),
        cmocka_unit_test(alignment),        cmocka_unit_test(calloc_reuse),
        cmocka_unit_test(realloc_contents), cmocka_unit_test(coalesce),
        cmocka_unit_test(stress_one),       cmocka_unit_test(stress_threads),
        cmocka_unit_test(shared),           cmocka_unit_test(punch),
        cmocka_unit_test(fork_private),     cmocka_unit_test(fork_knobs),
        cmocka_unit_test(bad_free),         cmocka_unit_test(knobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
