/* SPDX-License-Identifier: MIT */
/*
 * libarcomm_heap.so, preloaded (tests/heap/meson.build sets LD_PRELOAD): large blocks in
 * the shared heap and small ones not, alignment and its edges, contents under a seeded
 * random stress (HEAP_TEST_SEED repeats a run) in one thread and in four, realloc's
 * patterns, the memory really shared through the memfd, what a free keeps and what it
 * gives back, pages committed by touching (and counted in RSS) rather than by malloc,
 * bad frees aborting, and the knobs; the cases that need a fresh heap or an environment
 * run this executable again with an argument naming the case.  Without the preload the
 * test fails: it would otherwise check glibc alone.  Fork: test_heap_fork.c; the
 * memfd's descriptor: test_heap_fd.c.
 */
#include "heap_test.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <setjmp.h>

#include <cmocka.h>

#define SLOTS 48

struct ht ht;
static uint64_t seed;

/* 1 B to 8 MiB, log-uniform, with extra weight around the threshold. */
static size_t rnd_size(uint64_t *s)
{
    if (ht_rnd(s) % 8 == 0)
        return HEAP_MIN - 64 + ht_rnd(s) % 128;
    unsigned bits = (unsigned)(ht_rnd(s) % 24);
    return 1 + (size_t)(ht_rnd(s) % ((uint64_t)1 << bits));
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
        struct slot *b = &sl[ht_rnd(&s) % SLOTS];
        unsigned kind = (unsigned)(ht_rnd(&s) % 4);
        size_t n = rnd_size(&s), off;
        if (b->p == NULL) {
            uint64_t id = next_id++;
            if (kind == 0 || kind == 3) {
                b->p = malloc(n);
            } else if (kind == 1) {
                b->p = calloc(1, n);
                if (b->p != NULL && (off = ht_first_nonzero(b->p, n)) != SIZE_MAX)
                    STRESS_FAIL("op %d: calloc(%zu) = %p: byte %zu is not zero", op, n, b->p, off);
            } else {
                size_t align = (size_t)8 << (ht_rnd(&s) % 18); /* 8 B to 1 MiB */
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
            if (ht_in_heap(b->p) != (n >= HEAP_MIN))
                STRESS_FAIL("op %d: %zu bytes at %p: %s the heap", op, n, b->p,
                            n >= HEAP_MIN ? "outside" : "inside");
            if (malloc_usable_size(b->p) < n)
                STRESS_FAIL("op %d: malloc_usable_size(%p) = %zu < %zu", op, b->p,
                            malloc_usable_size(b->p), n);
            b->n = n;
            b->id = id;
            ht_fill(b->p, 0, n, id);
            continue;
        }
        if ((off = ht_check(b->p, b->n, b->id)) != SIZE_MAX)
            STRESS_FAIL("op %d: block %p (%zu bytes) lost its contents at byte %zu", op, b->p, b->n,
                        off);
        if (kind == 0) {
            free(b->p);
            b->p = NULL;
            continue;
        }
        bool was_heap = ht_in_heap(b->p);
        size_t usable = malloc_usable_size(b->p), old_n = b->n;
        void *old = b->p;
        uint8_t *q = kind == 1 ? realloc(b->p, n) : reallocarray(b->p, 1, n);
        if (q == NULL)
            STRESS_FAIL("op %d: realloc(%p, %zu) failed", op, old, n);
        b->p = q; /* what the clean-up frees, from here on */
        size_t keep = n < old_n ? n : old_n;
        if ((off = ht_check(q, keep, b->id)) != SIZE_MAX)
            STRESS_FAIL("op %d: realloc(%p of %zu, %zu) = %p lost byte %zu", op, old, old_n, n, q,
                        off);
        /*
         * Where it must be: a block that fits stays where it is; a glibc block that
         * outgrows itself moves to the heap when large; a heap block that outgrows
         * itself grows in place or moves to where its new size belongs.
         */
        int want = n <= usable ? was_heap : n >= HEAP_MIN ? 1 : was_heap ? -1 : 0;
        if (want >= 0 && ht_in_heap(q) != (want == 1))
            STRESS_FAIL("op %d: realloc(%p of %zu, %zu) = %p: %s the heap", op, old, old_n, n, q,
                        want == 1 ? "outside" : "inside");
        ht_fill(q, keep, n, b->id);
        b->n = n;
    }
    rc = 0;
out:
    for (int i = 0; i < SLOTS; i++)
        free(sl[i].p);
    return rc;
}

/* Everything the cases allocated is freed: nothing live but the threads' caches. */
static void assert_nothing_live(const char *after)
{
    struct arcomm_heap_stats st = ht_stats();
    if (st.live_bytes != st.cached_bytes)
        fail_msg("after %s: %" PRIu64 " bytes in %" PRIu64 " blocks are live (%" PRIu64
                 " of them cached): a block leaked",
                 after, st.live_bytes, st.live_blocks, st.cached_bytes);
}

static void preload_active(void **state)
{
    (void)state;
    struct arcomm_heap_info h;
    assert_int_equal(ht.region(&h), 1);
    assert_ptr_equal(h.base, ht.heap0.base);
    assert_int_equal(h.bytes, ht.heap0.bytes);
    assert_int_equal(h.fd, ht.heap0.fd);
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
            if (ht_in_heap(p[k]) != (n >= HEAP_MIN))
                fail_msg("%s(%zu) = %p: %s the heap [%p, +%" PRIu64 ")",
                         k == 0   ? "malloc"
                         : k == 1 ? "calloc"
                                  : "realloc(NULL)",
                         n, p[k], n >= HEAP_MIN ? "outside" : "inside", ht.heap0.base,
                         ht.heap0.bytes);
            if (malloc_usable_size(p[k]) < n)
                fail_msg("malloc_usable_size(%p) = %zu < %zu", p[k], malloc_usable_size(p[k]), n);
            if (ht_in_heap(p[k]) && (uintptr_t)p[k] % 64 != 0)
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
            if (p[k] == NULL || (uintptr_t)p[k] % want != 0 || !ht_in_heap(p[k]))
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
    assert_true(p != NULL && (uintptr_t)p % 4096 == 0 && !ht_in_heap(p));
    free(p);
    assert_int_equal(posix_memalign(&p, 2 * MiB, MiB), 0);
    assert_true((uintptr_t)p % (2 * MiB) == 0 && !ht_in_heap(p));
    free(p);
    assert_int_equal(posix_memalign(&p, 24, MiB), EINVAL);
    assert_int_equal(posix_memalign(&p, 0, MiB), EINVAL);
}

/*
 * The edges a demanding program reaches: alignments that are not powers of two (glibc
 * rounds them up), size 0 and sizes past any heap, valloc/pvalloc of 0, aligned blocks
 * that realloc grows and shrinks, and the huge requests that must fail with ENOMEM and
 * leave the block as it was.
 */
static void alignment_edges(void **state)
{
    (void)state;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    /* memalign(3 * 4096): not a power of two, glibc's (rounded up to 16 KiB). */
    void *p = memalign(3 * pg, MiB);
    assert_true(p != NULL && (uintptr_t)p % pg == 0);
    memset(p, 1, MiB);
    free(p);
    /* posix_memalign of 0 bytes: a pointer free takes, or NULL. */
    p = NULL;
    assert_int_equal(posix_memalign(&p, 64 * KiB, 0), 0);
    free(p);
    p = valloc(0);
    free(p);
    p = pvalloc(0);
    assert_true(p != NULL && malloc_usable_size(p) >= pg);
    free(p);
    /* Every power of two from 8 B to 1 MiB, at sizes around the threshold and a page. */
    for (size_t a = 8; a <= MiB; a *= 2) {
        for (int k = 0; k < 3; k++) {
            size_t n = k == 0 ? HEAP_MIN : k == 1 ? HEAP_MIN + 1 : 5 * pg + 3;
            void *q = NULL;
            assert_int_equal(posix_memalign(&q, a < sizeof(void *) ? sizeof(void *) : a, n), 0);
            if ((uintptr_t)q % a != 0 || malloc_usable_size(q) < n)
                fail_msg("posix_memalign(%zu, %zu) = %p, usable %zu", a, n, q,
                         malloc_usable_size(q));
            ht_fill(q, 0, n, a + (size_t)k);
            /* Grown and shrunk, the contents stay and the block stays aligned where it is. */
            uint8_t *r = realloc(q, 3 * n);
            assert_non_null(r);
            assert_int_equal(ht_check(r, n, a + (size_t)k), SIZE_MAX);
            uint8_t *t = realloc(r, n / 2);
            assert_ptr_equal(t, r);
            assert_int_equal(ht_check(t, n / 2, a + (size_t)k), SIZE_MAX);
            free(t);
        }
    }
    /* Requests past any memory: NULL and ENOMEM, the old block untouched. */
    void *(*volatile malloc_fn)(size_t) = malloc;
    void *(*volatile realloc_fn)(void *, size_t) = realloc;
    void *(*volatile aligned_fn)(size_t, size_t) = aligned_alloc;
    errno = 0;
    assert_null(malloc_fn(SIZE_MAX - pg));
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_null(aligned_fn(4096, SIZE_MAX - 2 * pg));
    assert_int_equal(errno, ENOMEM);
    uint8_t *b = malloc(MiB);
    ht_fill(b, 0, MiB, 99);
    errno = 0;
    assert_null(realloc_fn(b, SIZE_MAX - pg));
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(ht_check(b, MiB, 99), SIZE_MAX);
    /* Larger than the heap (whose size is the machine's memory) but not absurd: glibc's
     * mmap may still say no; whoever answers, the contents are kept. */
    free(b);
    assert_nothing_live("the alignment edges");
}

/* A freed, written block comes back from calloc zeroed (the dirty path, not a punched one). */
static void calloc_reuse(void **state)
{
    (void)state;
    size_t n = MiB;
    uint8_t *p = malloc(n);
    assert_true(p != NULL && ht_in_heap(p));
    memset(p, 0xab, n);
    free(p);
    uint8_t *held[64];
    int nheld = 0, reused = 0;
    for (; nheld < 64; nheld++) {
        uint8_t *q = held[nheld] = calloc(1, n);
        assert_non_null(q);
        size_t off = ht_first_nonzero(q, n);
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
}

static void realloc_contents(void **state)
{
    (void)state;
    /* glibc -> heap: a small block that grows past the threshold moves into the heap. */
    uint8_t *p = malloc(1000);
    assert_true(p != NULL && !ht_in_heap(p));
    ht_fill(p, 0, 1000, 7);
    static const size_t steps[] = {MiB, 8 * MiB, 100 * KiB, 500, 3 * MiB, 70 * KiB};
    size_t n = 1000;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        size_t m = steps[i], keep = m < n ? m : n, off;
        uint8_t *q = realloc(p, m);
        assert_non_null(q);
        if ((off = ht_check(q, keep, 7)) != SIZE_MAX)
            fail_msg("realloc(%p of %zu, %zu) = %p lost byte %zu", p, n, m, q, off);
        if (!ht_in_heap(q))
            fail_msg("realloc(%p of %zu, %zu) = %p: outside the heap", p, n, m, q);
        if (malloc_usable_size(q) < m)
            fail_msg("malloc_usable_size(%p) = %zu < %zu", q, malloc_usable_size(q), m);
        ht_fill(q, keep, m, 7);
        p = q;
        n = m;
    }
    void *(*volatile reallocarray_fn)(void *, size_t, size_t) = reallocarray;
    errno = 0;
    assert_null(reallocarray_fn(p, SIZE_MAX / 2, 3));
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(ht_check(p, n, 7), SIZE_MAX);
    assert_null(realloc(p, 0)); /* glibc 2.36: frees p, returns NULL */
    /* A small glibc block that stays small stays with glibc. */
    p = realloc(malloc(10), 5000);
    assert_true(p != NULL && !ht_in_heap(p));
    free(p);
}

/*
 * realloc as programs use it: a vector doubled a page at a time to 64 MiB and then
 * shrunk, interleaved with other blocks that pin its neighbours, contents checked at
 * every step; the pages a shrink gives back are reused.
 */
static void realloc_patterns(void **state)
{
    (void)state;
    uint8_t *v = NULL, *pins[16] = {NULL};
    size_t n = 0;
    for (int i = 0; n < 64 * MiB; i++) {
        size_t m = n == 0 ? HEAP_MIN : n * 2 - (size_t)i * 13;
        uint8_t *q = realloc(v, m);
        assert_non_null(q);
        if (n != 0 && ht_check(q, n, 41) != SIZE_MAX)
            fail_msg("growing vector: realloc(%p of %zu, %zu) = %p lost data", v, n, m, q);
        ht_fill(q, n, m, 41);
        v = q;
        n = m;
        if (i < 16)
            pins[i] = malloc(HEAP_MIN + (size_t)i * 4096); /* after the vector, mostly */
    }
    for (size_t m = n; m > HEAP_MIN; m /= 3) {
        uintptr_t was = (uintptr_t)v;
        v = realloc(v, m);
        if ((uintptr_t)v != was)
            fail_msg("shrinking realloc(%#lx, %zu) moved the block to %p", (unsigned long)was, m,
                     (void *)v);
        assert_int_equal(ht_check(v, m, 41), SIZE_MAX);
    }
    for (int i = 0; i < 16; i++)
        free(pins[i]);
    free(v);
    assert_nothing_live("the realloc patterns");
}

static void stress_one(void **state)
{
    (void)state;
    char err[256] = "";
    printf("stress: seed %" PRIu64 " (HEAP_TEST_SEED=%" PRIu64 " repeats it)\n", seed, seed);
    if (stress(seed, 4000, err, sizeof(err)) != 0)
        fail_msg("stress, seed %" PRIu64 ": %s", seed, err);
    assert_nothing_live("the stress");
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
    /* The threads exited: their caches went back to the heap with them. */
    struct arcomm_heap_stats st = ht_stats();
    if (st.live_bytes != st.cached_bytes)
        fail_msg("after the threads' stress: %" PRIu64 " bytes live", st.live_bytes);
}

/* What a peer does: open the memfd through /proc and map it; both views are one memory. */
static void shared(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", ht.heap0.fd);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t *m = mmap(NULL, ht.heap0.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    size_t n = 2 * MiB;
    uint8_t *p = malloc(n);
    uint64_t off;
    assert_true(p != NULL && ht_in_heap(p));
    assert_int_equal(ht.share(p + 100, n - 100, &off), 1);
    assert_int_equal(off, (uint64_t)(p + 100 - (uint8_t *)ht.heap0.base));
    off -= 100;
    ht_fill(p, 0, n, 11);
    if (ht_check(m + off, n, 11) != SIZE_MAX)
        fail_msg("a write through %p is not seen at offset %" PRIu64 " of a second mapping",
                 (void *)p, off);
    ht_fill(m + off, 0, n, 12);
    if (ht_check(p, n, 12) != SIZE_MAX)
        fail_msg("a write through a second mapping is not seen through %p", (void *)p);
    /* Past the block's pages, or outside the heap: not shared. */
    size_t usable = malloc_usable_size(p);
    assert_int_equal(ht.share(p, usable + 1, &off), 0);
    assert_int_equal(ht.share(&off, sizeof(off), &off), 0);
    free(p);
    munmap(m, ht.heap0.bytes);
    close(fd);
}

/*
 * Finding 3's cost, as behaviour: a free keeps the block's pages committed for the next
 * allocation (no hole punched, nothing committed again), and malloc commits nothing (the
 * program's first touch does, and RSS shows it).  Before: every free of a block that
 * merged into 4 MiB punched it, every malloc fallocate()d its pages, and RSS never saw
 * them.
 */
/* Pages of [p, p + n) in memory (mincore: for the heap's shared mapping, in the memfd). */
static size_t resident_pages(const void *p, size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), np = n / pg, in = 0;
    unsigned char *v = malloc(np);
    if (v == NULL || mincore((void *)p, n, v) != 0)
        np = 0;
    for (size_t i = 0; i < np; i++)
        in += v[i] & 1;
    free(v);
    return in;
}

static void free_keeps_pages(void **state)
{
    (void)state;
    size_t n = MiB, pages = n / (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *p = malloc(n);
    memset(p, 0x11, n);
    uintptr_t a = (uintptr_t)p;
    free(p);
    /* (Still the heap's mapping: mincore may look at it.) */
    size_t in = resident_pages((const void *)a, n);
    if (in != pages)
        fail_msg("free(1 MiB) gave back %zu of its %zu pages: the next malloc commits them again",
                 pages - in, pages);
    /* The next block of that size is memory already committed: no fault, no zeroing. */
    uint8_t *q = malloc(n);
    if (resident_pages(q, n) != pages)
        fail_msg("malloc(1 MiB) after free(1 MiB) = %p (freed %#lx), with %zu of its %zu pages "
                 "not committed: freed memory was not reused",
                 (void *)q, (unsigned long)a, pages - resident_pages(q, n), pages);
    free(q);
}

static void touch_commits(void **state)
{
    (void)state;
    size_t n = 64 * MiB;
    int64_t m0 = ht_memfd_bytes();
    long rss0 = ht_status_kib("RssShmem");
    uint8_t *p = malloc(n);
    assert_true(p != NULL && ht_in_heap(p));
    int64_t m1 = ht_memfd_bytes();
    if (m1 - m0 > (int64_t)(n / 2))
        fail_msg("malloc(64 MiB) committed %" PRId64 " bytes of the memfd before any touch",
                 m1 - m0);
    memset(p, 0x22, n);
    long rss1 = ht_status_kib("RssShmem");
    if (rss1 - rss0 < (long)(n / KiB) * 9 / 10)
        fail_msg("touching 64 MiB of heap raised RssShmem by %ld KiB only: the OOM killer "
                 "and memory cgroups must see the heap's memory",
                 rss1 - rss0);
    free(p);
}

/* Freed memory past the retention bound goes back to the system (and reads as zero). */
static void retention(void **state)
{
    (void)state;
    size_t n = 32 * MiB;
    uint8_t *p[16];
    for (int i = 0; i < 16; i++) {
        p[i] = malloc(n);
        assert_true(p[i] != NULL && ht_in_heap(p[i]));
        memset(p[i], 0x33, n);
    }
    int64_t full = ht_memfd_bytes();
    for (int i = 0; i < 16; i++)
        free(p[i]);
    struct arcomm_heap_stats st = ht_stats();
    int64_t kept = ht_memfd_bytes();
    if (kept > full / 2 || st.dirty_bytes > 128 * MiB)
        fail_msg("after freeing 512 MiB of touched blocks the memfd still holds %" PRId64
                 " bytes (%" PRIu64 " dirty): big frees must go back to the system",
                 kept, st.dirty_bytes);
    /* A punched range comes back zeroed (calloc may skip its memset there). */
    uint8_t *z = calloc(1, 256 * MiB);
    assert_non_null(z);
    size_t off = ht_first_nonzero(z, 256 * MiB);
    if (off != SIZE_MAX)
        fail_msg("calloc after a punch: byte %zu of %p is not zero", off, (void *)z);
    free(z);
}

/* Bad frees abort with a line naming the pointer, in a child whose stderr is read. */
static void bad_free(void **state)
{
    (void)state;
    for (int k = 0; k < 3; k++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            dup2(pfd[1], STDERR_FILENO);
            /* Through a volatile pointer: the compiler must not see the misuse coming. */
            void (*volatile free_fn)(void *) = free;
            uint8_t *p = malloc(4 * MiB), *guard = malloc(4 * MiB), *c = malloc(128 * KiB);
            (void)guard;
            if (k == 0) {
                free_fn(p);
                free_fn(p); /* double free */
            } else if (k == 1) {
                free_fn(p + 64); /* not a block's pointer */
            } else {
                free_fn(c); /* into the thread's cache */
                free_fn(c); /* and again */
            }
            _exit(0);
        }
        close(pfd[1]);
        char buf[512] = "";
        ssize_t len = read(pfd[0], buf, sizeof(buf) - 1);
        buf[len > 0 ? len : 0] = '\0';
        close(pfd[0]);
        int st = ht_wait(pid, 30);
        if (st != 128 + SIGABRT || strstr(buf, "): free(): 0x") == NULL)
            fail_msg("%s: status %d (want SIGABRT), stderr '%s'",
                     (const char *[]){"double free", "free of an inner pointer",
                                      "double free of a cached block"}[k],
                     st, buf);
    }
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
        /* Below a page: refused, with the knob, the value and the fix (finding 3). */
        {"badknob",
         {"ARCOMM_HEAP_MIN=0", NULL},
         "ARCOMM_HEAP_MIN=0 is below the page size (4096 bytes)"},
        {"badknob", {"ARCOMM_HEAP_MIN=4095", NULL}, "set ARCOMM_HEAP_MIN to 4K or more"},
        {"smallmin", {"ARCOMM_HEAP_MIN=4K", NULL}, NULL},
        {"setenv", {NULL}, NULL},
        {"coalesce", {NULL}, NULL},
        {"grow", {NULL}, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[2048];
        int st = ht_run_self(cases[i].mode, cases[i].env, err, sizeof(err), 60);
        if (st != 0 || (cases[i].says != NULL && strstr(err, cases[i].says) == NULL))
            fail_msg("case %s (%s %s): status %d, stderr '%s'%s%s", cases[i].mode,
                     cases[i].env[0] ? cases[i].env[0] : "",
                     cases[i].env[0] && cases[i].env[1] ? cases[i].env[1] : "", st, err,
                     cases[i].says ? ", want " : "", cases[i].says ? cases[i].says : "");
    }
}

/* A fresh heap: freed neighbours merge, on either side, into room for both. */
static int child_coalesce(void)
{
    for (int k = 0; k < 2; k++) {
        size_t n = 4 * MiB; /* past the threads' caches, which keep blocks up to 256 KiB */
        uint8_t *x = malloc(n), *y = malloc(n), *z = malloc(n);
        CHILD_CHECK(y == x + n && z == y + n, "three blocks of a fresh heap at %p %p %p", (void *)x,
                    (void *)y, (void *)z);
        free(k == 0 ? x : y);
        free(k == 0 ? y : x);
        uint8_t *w = malloc(2 * n);
        CHILD_CHECK(w == x, "freed %p and then its %s neighbour: malloc(8 MiB) = %p, not %p",
                    (void *)x, k == 0 ? "right" : "left", (void *)w, (void *)x);
        free(w);
        free(z);
    }
    struct arcomm_heap_stats st = ht_stats();
    CHILD_CHECK(st.live_blocks == 0 && st.free_spans <= 2,
                "everything freed: %" PRIu64 " live blocks, %" PRIu64 " free spans", st.live_blocks,
                st.free_spans);
    return 0;
}

/* A fresh heap: realloc grows a block in place over the free pages after it. */
static int child_grow(void)
{
    uint8_t *p = malloc(3 * MiB);
    ht_fill(p, 0, 3 * MiB, 5);
    uintptr_t was = (uintptr_t)p;
    uint8_t *q = realloc(p, 48 * MiB);
    CHILD_CHECK((uintptr_t)q == was,
                "realloc(%#lx, 48 MiB) with free room after it moved the block to %p",
                (unsigned long)was, (void *)q);
    CHILD_CHECK(ht_check(q, 3 * MiB, 5) == SIZE_MAX, "realloc in place lost data");
    memset(q + 3 * MiB, 1, 45 * MiB);
    free(q);
    return 0;
}

/* The subprocess cases of knobs(); 0 when all is as the environment says. */
static int child_mode(const char *mode)
{
    struct arcomm_heap_info h;
    int have = ht.region != NULL ? ht.region(&h) : -1;
    if (strcmp(mode, "disabled") == 0) {
        CHILD_CHECK(have == 0, "ARCOMM_HEAP_BYTES=0: arcomm_heap_region gave %d, want 0", have);
        uint8_t *p = malloc(16 * MiB);
        CHILD_CHECK(p != NULL, "ARCOMM_HEAP_BYTES=0: malloc(16 MiB) failed");
        ht_fill(p, 0, 16 * MiB, 30);
        p = realloc(p, 32 * MiB);
        CHILD_CHECK(p != NULL && ht_check(p, 16 * MiB, 30) == SIZE_MAX,
                    "disabled: realloc lost data");
        free(p);
        return 0;
    }
    CHILD_CHECK(have == 1, "%s: arcomm_heap_region gave %d, want 1", mode, have);
    ht.heap0 = h;
    if (strcmp(mode, "exhaust") == 0) {
        CHILD_CHECK(h.bytes == 8 * MiB, "ARCOMM_HEAP_BYTES=8M: the heap has %" PRIu64 " bytes",
                    h.bytes);
        uint8_t *big = malloc(16 * MiB), *a = malloc(4 * MiB), *b = malloc(6 * MiB);
        CHILD_CHECK(big != NULL && !ht_in_range(big, &h),
                    "8 MiB heap: malloc(16 MiB) = %p, want a block outside the heap", (void *)big);
        CHILD_CHECK(a != NULL && ht_in_range(a, &h), "8 MiB heap: malloc(4 MiB) = %p, not in it",
                    (void *)a);
        CHILD_CHECK(b != NULL && !ht_in_range(b, &h),
                    "8 MiB heap, 4 MiB used: malloc(6 MiB) = %p, want outside", (void *)b);
        memset(big, 1, 16 * MiB);
        memset(a, 2, 4 * MiB);
        memset(b, 3, 6 * MiB);
        /* A heap block that cannot grow in the heap moves out, contents kept. */
        uint8_t *a2 = realloc(a, 12 * MiB);
        CHILD_CHECK(a2 != NULL && !ht_in_range(a2, &h) && a2[0] == 2 && a2[4 * MiB - 1] == 2,
                    "8 MiB heap: realloc(4 MiB block, 12 MiB) = %p", (void *)a2);
        free(big);
        free(a2);
        free(b);
        return 0;
    }
    if (strcmp(mode, "knobs") == 0) {
        CHILD_CHECK(h.bytes == 64 * MiB, "ARCOMM_HEAP_BYTES=64m: %" PRIu64 " bytes", h.bytes);
        void *s = malloc(MiB - 1), *l = malloc(MiB);
        CHILD_CHECK(s != NULL && !ht_in_range(s, &h),
                    "ARCOMM_HEAP_MIN=1MiB: 1 MiB - 1 in the heap");
        CHILD_CHECK(l != NULL && ht_in_range(l, &h), "ARCOMM_HEAP_MIN=1MiB: 1 MiB not in the heap");
        free(s);
        free(l);
        return 0;
    }
    if (strcmp(mode, "badknob") == 0) {
        void *l = malloc(HEAP_MIN), *s = malloc(HEAP_MIN - 1);
        CHILD_CHECK(l != NULL && ht_in_range(l, &h) && h.min_bytes == HEAP_MIN,
                    "bad knobs: the defaults do not hold (min %" PRIu64 ")", h.min_bytes);
        CHILD_CHECK(s != NULL && !ht_in_range(s, &h), "bad knobs: 64K - 1 in the heap");
        free(l);
        free(s);
        return 0;
    }
    if (strcmp(mode, "smallmin") == 0) {
        void *l = malloc(4096), *s = malloc(4095);
        CHILD_CHECK(h.min_bytes == 4096 && ht_in_range(l, &h) && !ht_in_range(s, &h),
                    "ARCOMM_HEAP_MIN=4K: min %" PRIu64 ", 4096 B at %p, 4095 B at %p", h.min_bytes,
                    l, s);
        free(l);
        free(s);
        return 0;
    }
    if (strcmp(mode, "coalesce") == 0)
        return child_coalesce();
    if (strcmp(mode, "grow") == 0)
        return child_grow();
    CHILD_CHECK(0, "unknown mode %s", mode);
}

/*
 * A program that sets the knobs itself before its first large allocation (setenv
 * allocates too, small): the heap is made then, with them.
 */
static int child_setenv(void)
{
    setenv("ARCOMM_HEAP_MIN", "1M", 1);
    setenv("ARCOMM_HEAP_BYTES", "96M", 1);
    void *s = malloc(512 * KiB), *l = malloc(2 * MiB);
    if (!ht_init("test_heap"))
        return 1;
    CHILD_CHECK(ht.heap0.bytes == 96 * MiB && ht.heap0.min_bytes == MiB,
                "setenv before the first allocation: heap of %" PRIu64 " bytes, min %" PRIu64,
                ht.heap0.bytes, ht.heap0.min_bytes);
    CHILD_CHECK(!ht_in_heap(s) && ht_in_heap(l), "512 KiB at %p, 2 MiB at %p (heap %p)", s, l,
                ht.heap0.base);
    free(s);
    free(l);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "setenv") == 0)
        return child_setenv();
    if (argc > 1) {
        ht_init(argv[0]);
        return child_mode(argv[1]);
    }
    /* The cases assume the knobs' defaults: run again without the caller's values. */
    if (getenv("ARCOMM_HEAP_BYTES") != NULL || getenv("ARCOMM_HEAP_MIN") != NULL) {
        unsetenv("ARCOMM_HEAP_BYTES");
        unsetenv("ARCOMM_HEAP_MIN");
        execv("/proc/self/exe", argv);
        perror("test_heap: execv /proc/self/exe");
        return 1;
    }
    if (!ht_init("test_heap"))
        return 1;
    const char *s = getenv("HEAP_TEST_SEED");
    seed = s != NULL ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(preload_active),
        cmocka_unit_test(placement),
        cmocka_unit_test(alignment),
        cmocka_unit_test(alignment_edges),
        cmocka_unit_test(calloc_reuse),
        cmocka_unit_test(realloc_contents),
        cmocka_unit_test(realloc_patterns),
        cmocka_unit_test(stress_one),
        cmocka_unit_test(stress_threads),
        cmocka_unit_test(shared),
        cmocka_unit_test(free_keeps_pages),
        cmocka_unit_test(touch_commits),
        cmocka_unit_test(retention),
        cmocka_unit_test(bad_free),
        cmocka_unit_test(knobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
