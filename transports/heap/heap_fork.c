/* SPDX-License-Identifier: MIT */
/*
 * fork() and the heap.  The heap's pages are MAP_SHARED, and shared pages are not
 * copy-on-write: a child that kept them would see the parent's (and the peers') later
 * writes, and the parent the child's.  A program that works under glibc must work here,
 * so at fork every live block becomes private to each side, at glibc's cost where that
 * is possible:
 *
 * - A block no collective used (BLK_SHARED) is frozen: in the prepare handler the
 *   parent remaps it MAP_PRIVATE from the memfd at the same offset (same contents, no
 *   copy), and the child inherits that private mapping, so the two share its pages
 *   copy-on-write exactly as with glibc's memory.  The memfd pages under it must then
 *   never change while a child may read them: a frozen block the parent frees is HELD
 *   (not reused, not punched) until every child of the forks since its freezing is gone.
 *   The parent's frozen blocks stay private (a collective stages them) until
 *   arcomm_heap_share thaws one (heap_thaw).
 * - A block a collective handed to peers (BLK_EXPORTED) must stay shared in the parent,
 *   so the child gets a private copy of it, taken in the prepare handler (before the
 *   fork, so no write after it reaches the copy) and moved into place by the child.
 *   That is the one cost proportional to data: the bytes the program gave collectives.
 *
 * Which children are gone is the kernel's to know: each fork that freezes is a
 * generation g, whose child inherits a one-page mapping (the sentinel) of a file
 * description of the memfd of its own, holding an OFD read lock on byte g.  The parent
 * drops its own reference before fork returns; the description (and the lock) lives as
 * long as any process maps the sentinel: the child and everything it forks, until they
 * exit or exec, whatever descriptors they close.  F_OFD_GETLK on byte g tells the parent.
 *
 * The locks: every heap call by another thread waits while a thread forks (heap_lock,
 * and the threads' caches, are held from our prepare handler to our parent or child
 * handler).  The forking thread itself may call the allocator from any fork handler,
 * registered before or after ours (heap_in_fork): its allocations go to glibc, its frees
 * wait for the end of our handlers, so that nothing changes the heap between our
 * prepare handler and the fork, or before the child's heap is consistent.
 */
#include "heap_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define RELEASE_PERIOD_NS (50u * 1000u * 1000u) /* how often held spans are checked */

/* Frees made by the forking thread inside fork handlers (done at the end of ours). */
static void **deferred;
static size_t n_deferred, cap_deferred;
/* This fork's sentinel (see above), from the prepare handler to the parent or child one. */
static void *fork_sentinel;

void heap_defer_free(void *p)
{
    if (!heap_vec_reserve((void **)&deferred, &cap_deferred, n_deferred + 1, sizeof(void *))) {
        heap_complain("mmap for a free inside a fork handler", errno, "the block stays allocated");
        return;
    }
    deferred[n_deferred++] = p;
}

static void run_deferred(void)
{
    while (n_deferred > 0)
        free(deferred[--n_deferred]);
}

static _Noreturn void child_die(const char *what)
{
    heap_complain(what, errno,
                  "aborting the fork child (its heap blocks would stay shared with the parent)");
    abort();
}

/* Is byte g of the memfd locked by some description (generation g's, in a child)? */
static bool gen_lock_held(struct heap *h, uint32_t g)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = g, .l_len = 1};
    if (fcntl(h->fd, F_OFD_GETLK, &fl) != 0)
        return true; /* unknown: keep holding */
    return fl.l_type != F_UNLCK;
}

/*
 * Are generations from..to all released (no process left that maps their sentinel)?
 * Known answers cost nothing; asking the kernel costs a syscall per generation, at most
 * every RELEASE_PERIOD_NS unless force.
 */
bool heap_gens_released(struct heap *h, uint32_t from, uint32_t to, bool force)
{
    if (from < h->gen_low)
        from = h->gen_low;
    uint32_t g = from;
    while (g <= to && h->gen_rel[g])
        g++;
    if (g > to)
        return true;
    uint64_t now = heap_now_ns();
    if ((!force && now < h->next_release_ns) || !heap_fd_ok(h))
        return false;
    for (; g <= to; g++) {
        if (h->gen_rel[g])
            continue;
        if (gen_lock_held(h, g)) {
            h->next_release_ns = now + RELEASE_PERIOD_NS;
            return false;
        }
        h->gen_rel[g] = 1;
    }
    while (h->gen_low <= h->gen && h->gen_rel[h->gen_low])
        h->gen_low++;
    return true;
}

/* Held spans whose children are all gone become dirty free spans. */
void heap_release_held(struct heap *h, bool force)
{
    uint32_t id = h->held_head;
    while (id != 0) {
        struct span *s = &h->recs[id];
        id = s->next; /* held spans never merge, so the next one stays */
        if (heap_gens_released(h, s->gen, s->gen_to, force)) {
            span_held_remove(h, s);
            span_set_free(h, s, SPAN_DIRTY);
        } else if (!force) {
            return;
        }
    }
}

/*
 * A new generation: its lock, taken through a description of the memfd of its own, and
 * its sentinel, the only thing that keeps that description open.  false when /proc or
 * the memfd is not at hand (the fork then copies instead).
 */
static bool gen_make(struct heap *h)
{
    uint32_t g = h->gen + 1;
    if (g == 0 || !heap_vec_reserve((void **)&h->gen_rel, &h->cap_gen, (size_t)g + 1, 1))
        return false;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", h->fd);
    int x = open(path, O_RDONLY | O_CLOEXEC);
    if (x < 0)
        return false;
    struct stat st;
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = g, .l_len = 1};
    void *m = MAP_FAILED;
    if (fstat(x, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino &&
        fcntl(x, F_OFD_SETLK, &fl) == 0)
        m = mmap(NULL, heap_page, PROT_NONE, MAP_SHARED, x, 0);
    close(x);
    if (m == MAP_FAILED)
        return false;
    fork_sentinel = m;
    h->gen = g;
    h->gen_rel[g] = 0;
    return true;
}

/* Remaps the run of shared live blocks [s, end) private, in place; the new kind on
 * success.  On failure the pages are still the memfd's: they are mapped shared again. */
static void freeze_run(struct heap *h, struct span *s, const struct span *end)
{
    uint32_t first = s->first, pages = 0;
    for (const struct span *t = s; t != end; t = span_next(h, t))
        pages += t->npages;
    void *a = (void *)span_addr(h, s);
    size_t len = (size_t)pages * heap_page;
    off_t off = (off_t)first * (off_t)heap_page;
    if (mmap(a, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, h->fd, off) == MAP_FAILED) {
        if (mmap(a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd, off) == MAP_FAILED)
            heap_complain("fork: mmap of heap blocks", errno, "they may be lost to this process");
        return; /* they stay shared: the child gets copies */
    }
    for (struct span *t = s; t != end; t = span_next(h, t)) {
        t->kind = BLK_PRIVATE;
        t->gen = h->gen;
        atomic_fetch_add_explicit(&t->seq, 1, memory_order_relaxed);
    }
}

/*
 * Copies [src, src + len) into the staging copy: its pages committed in one call first
 * (a fault per page costs more than the copy), then one memcpy.
 */
static void copy_range(char *dst, const char *src, size_t len)
{
    (void)madvise(dst, len, MADV_POPULATE_WRITE); /* (without it, the copy faults them) */
    memcpy(dst, src, len);
}

/*
 * Copies a block for the child, its untouched pages left unallocated in the copy: with
 * the memfd at hand, only the ranges it holds data in are read (SEEK_DATA, SEEK_HOLE:
 * swapped-out pages are data too; reading a hole through the mapping would allocate it).
 */
static void copy_block(struct heap *h, int fd, char *dst, const struct span *s)
{
    const char *src = (const char *)span_addr(h, s);
    size_t len = span_bytes(s);
    off_t lo = (off_t)(span_addr(h, s) - h->lo), hi = lo + (off_t)len;
    if (fd < 0 || s->kind == BLK_PRIVATE) {
        copy_range(dst, src, len); /* (a private view holds the parent's own pages too) */
        return;
    }
    for (off_t d = lo; d < hi;) {
        d = lseek(fd, d, SEEK_DATA);
        if (d < 0 || d >= hi)
            break; /* ENXIO: no data after it */
        off_t e = lseek(fd, d, SEEK_HOLE);
        if (e < 0 || e > hi)
            e = hi;
        copy_range(dst + (d - lo), src + (d - lo), (size_t)(e - d));
        d = e;
    }
}

/* The parent's side of a fork, under every lock: freeze, or stage copies. */
static void prepare_heap(struct heap *h)
{
    bool need_gen = false;
    for (struct span *s = span_first(h); s != NULL; s = span_next(h, s))
        need_gen = need_gen ||
                   (s->state == SPAN_LIVE && (s->kind == BLK_SHARED || s->kind == BLK_PRIVATE));
    bool gen = need_gen && heap_fd_ok(h) && gen_make(h);
    if (gen) {
        struct span *s = span_first(h);
        while (s != NULL) {
            struct span *e = s;
            while (e != NULL && e->state == SPAN_LIVE && e->kind == BLK_SHARED)
                e = span_next(h, e);
            if (e != s)
                freeze_run(h, s, e);
            s = e != s ? e : span_next(h, s);
        }
    }
    /* What the child must get a copy of: exported blocks, those that could not be frozen,
     * and without a generation the private ones too (nothing would hold their pages). */
    size_t pages = 0;
    for (struct span *s = span_first(h); s != NULL; s = span_next(h, s)) {
        s->stage = 0;
        if (s->state == SPAN_LIVE && (s->kind != BLK_PRIVATE || !gen)) {
            s->stage = (uint32_t)pages + 1;
            pages += s->npages;
        }
    }
    h->stage = NULL;
    h->stage_len = pages * heap_page;
    if (pages == 0)
        return;
    char *st = mmap(NULL, h->stage_len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (st == MAP_FAILED) {
        heap_complain("fork: mmap of the child's copy of the heap", errno,
                      "the child will abort when it starts");
        return;
    }
    int fd = heap_fd_ok(h) ? h->fd : -1;
    for (struct span *s = span_first(h); s != NULL; s = span_next(h, s))
        if (s->stage != 0)
            copy_block(h, fd, st + (size_t)(s->stage - 1) * heap_page, s);
    h->stage = st;
}

static void atfork_prepare(void)
{
    if (heap_canary != NULL && *heap_canary != 1)
        heap_fork_child_unhandled();
    heap_cache_lock_all();
    pthread_mutex_lock(&heap_lock);
    heap_in_fork = true;
    fork_sentinel = NULL;
    if (heap_cur != NULL) {
        heap_cache_flush_all();
        prepare_heap(heap_cur);
    }
}

static void atfork_parent(void)
{
    struct heap *h = heap_cur;
    if (fork_sentinel != NULL)
        munmap(fork_sentinel, heap_page); /* the child's, from now on */
    fork_sentinel = NULL;
    if (h != NULL && h->stage != NULL)
        munmap(h->stage, h->stage_len);
    if (h != NULL)
        h->stage = NULL;
    heap_in_fork = false;
    pthread_mutex_unlock(&heap_lock);
    heap_cache_unlock_all(false);
    run_deferred();
}

/* Keeps [a, a + len) reserved, without memory, so no other mapping lands there. */
static bool reserve(uintptr_t a, size_t len)
{
    return mmap((void *)a, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                -1, 0) != MAP_FAILED;
}

/* Records h as an inherited heap (single-threaded: a fork child), or unmaps it when it
 * has no live block. */
static void legacy_add(struct heap *h, void *sentinel)
{
    h->legacy = true;
    h->sentinel = sentinel;
    h->sentinel_len = sentinel != NULL ? heap_page : 0;
    memset(h->bins, 0, sizeof(h->bins));
    h->lru_head = h->lru_tail = h->held_head = 0;
    h->dirty_bytes = h->held_bytes = 0;
    if (h->live_blocks == 0) {
        heap_unmake(h);
        return;
    }
    size_t i = 0;
    while (i < heap_n_legacy && heap_legacy[i] != NULL)
        i++;
    if (i == heap_n_legacy) {
        if (!heap_vec_reserve((void **)&heap_legacy, &heap_cap_legacy, i + 1, sizeof(*heap_legacy)))
            child_die("fork: mmap of the list of inherited heaps");
        __atomic_store_n(&heap_n_legacy, i + 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&heap_legacy[i], h, __ATOMIC_RELEASE);
}

/* Closes this process's copy of the memfd's descriptor, if it still is one. */
static void close_fd(struct heap *h)
{
    if (h->fd >= 0) {
        struct stat st;
        if (fstat(h->fd, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino)
            close(h->fd);
        h->fd = -1;
    }
}

/*
 * The parent's heap as a fork child keeps it: exported blocks become the staged copies,
 * frozen ones are the private mappings the child inherited, and everything free is a
 * reservation (the parent's memfd pages must not stay mapped here: a stray write would
 * land in the parent's heap).  Single-threaded, syscalls and memcpy only.
 */
static void child_legacy(struct heap *h)
{
    uintptr_t run = 0;
    for (struct span *s = span_first(h); s != NULL; s = span_next(h, s)) {
        uintptr_t a = span_addr(h, s);
        if (s->state != SPAN_LIVE) {
            s->state = SPAN_GONE;
            run = run != 0 ? run : a;
            continue;
        }
        if (run != 0 && !reserve(run, a - run))
            child_die("fork: mmap of a reservation over the parent's heap");
        run = 0;
        if (s->stage != 0) {
            if (h->stage == NULL)
                child_die("fork: the parent could not copy the heap");
            char *src = h->stage + (size_t)(s->stage - 1) * heap_page;
            if (mremap(src, span_bytes(s), span_bytes(s), MREMAP_MAYMOVE | MREMAP_FIXED,
                       (void *)a) == MAP_FAILED)
                child_die("fork: mremap of the child's copy of a heap block");
            s->kind = BLK_COPY;
            s->stage = 0;
        }
        atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    }
    if (run != 0 && !reserve(run, h->hi - run))
        child_die("fork: mmap of a reservation over the parent's heap");
    if (h->stage != NULL)
        munmap(h->stage, h->stage_len); /* what is left of it: the pieces moved out */
    h->stage = NULL;
    close_fd(h);
    legacy_add(h, fork_sentinel);
    fork_sentinel = NULL;
}

static void atfork_child(void)
{
    pthread_mutex_init(&heap_lock, NULL);
    heap_cache_unlock_all(true);
    heap_share_forget();
    struct heap *h = heap_cur;
    if (h != NULL) {
        heap_cur = NULL;
        atomic_store_explicit(&heap_hi, 0, memory_order_relaxed);
        atomic_store_explicit(&heap_lo, 0, memory_order_relaxed);
        child_legacy(h);
        /* As at process start, the knobs are read again when the child makes its heap. */
        atomic_store_explicit(&heap_state, 0, memory_order_release);
    }
    if (heap_canary != NULL)
        __atomic_store_n(heap_canary, 1, __ATOMIC_RELEASE);
    heap_in_fork = false;
    run_deferred();
}

void heap_atfork_register(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/*
 * A child made without our handlers (_Fork, clone, syscall(SYS_fork)), noticed by its
 * zeroed canary at its first heap call: its live blocks are still the parent's memory
 * (too late to copy them), but it must not allocate from the parent's memfd nor return
 * blocks to it, so its heap becomes an inherited one (free spans reserved) and it makes
 * a heap of its own.  One thread does it; the canary goes 0, 2, 1.
 */
void heap_fork_child_unhandled(void)
{
    uint8_t zero = 0;
    if (!__atomic_compare_exchange_n((uint8_t *)heap_canary, &zero, 2, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(heap_canary, __ATOMIC_ACQUIRE) != 1)
            sched_yield();
        return;
    }
    pthread_mutex_init(&heap_lock, NULL);
    struct heap *h = heap_cur;
    if (h != NULL) {
        heap_cur = NULL;
        atomic_store_explicit(&heap_hi, 0, memory_order_relaxed);
        atomic_store_explicit(&heap_lo, 0, memory_order_relaxed);
        uintptr_t run = 0;
        for (struct span *s = span_first(h); s != NULL; s = span_next(h, s)) {
            uintptr_t a = span_addr(h, s);
            if (s->state == SPAN_LIVE && s->kind == BLK_CACHED) {
                heap_block_forget(h, s);
                s->state = SPAN_GONE;
            }
            if (s->state != SPAN_LIVE) {
                s->state = SPAN_GONE;
                run = run != 0 ? run : a;
                continue;
            }
            if (run != 0)
                reserve(run, a - run);
            run = 0;
            atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
        }
        if (run != 0)
            reserve(run, h->hi - run);
        close_fd(h);
        legacy_add(h, NULL);
        atomic_store_explicit(&heap_state, 0, memory_order_release);
    }
    heap_cache_unlock_all(true);
    heap_share_forget();
    __atomic_store_n(heap_canary, 1, __ATOMIC_RELEASE);
}

/*
 * A frozen block the parent frees: its range maps the memfd shared again (the private
 * pages go), and its memfd pages are held until the children that may see them are gone.
 * Without the memfd's descriptor the range is reserved and never used again.
 */
void heap_free_private(struct heap *h, struct span *s)
{
    uintptr_t a = span_addr(h, s);
    size_t len = span_bytes(s);
    heap_block_forget(h, s);
    if (heap_fd_ok(h) && mmap((void *)a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd,
                              (off_t)(a - h->lo)) != MAP_FAILED) {
        s->gen_to = h->gen;
        if (heap_gens_released(h, s->gen, s->gen_to, false)) {
            span_set_free(h, s, SPAN_DIRTY);
            heap_trim_maybe(h);
            return;
        }
        s->state = SPAN_HELD;
        s->prev = 0;
        s->next = h->held_head;
        if (s->next != 0)
            h->recs[s->next].prev = span_id(h, s);
        h->held_head = span_id(h, s);
        h->held_bytes += len;
        return;
    }
    reserve(a, len);
    s->state = SPAN_GONE;
}

/*
 * Makes a frozen block shared again, for a collective that is handed the whole block:
 * once no child of the forks since its freezing is left, its memfd pages are the
 * parent's alone, and its current contents (the private view) are copied into them and
 * the view replaced by the shared mapping.  A write by another thread during the copy
 * would be lost, which is why only a collective on the whole block may thaw it: the
 * program may not write a collective's buffers while the call runs.
 */
int heap_thaw(struct heap *h, struct span *s)
{
    if (!heap_gens_released(h, s->gen, h->gen, false) || !heap_fd_ok(h))
        return 0;
    uintptr_t a = span_addr(h, s);
    size_t len = span_bytes(s);
    void *t = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd, (off_t)(a - h->lo));
    if (t == MAP_FAILED)
        return 0;
    memcpy(t, (const void *)a, len);
    if (mremap(t, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a) == MAP_FAILED) {
        munmap(t, len);
        return 0;
    }
    s->kind = BLK_EXPORTED;
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    return 1;
}

/* A block of an inherited heap: its memory goes, its range stays reserved (a glibc
 * mapping there would be taken for the old heap's block by free); the heap goes with
 * its last block. */
void heap_legacy_release(struct heap *h, struct span *s)
{
    reserve(span_addr(h, s), span_bytes(s));
    heap_block_forget(h, s);
    s->state = SPAN_GONE;
    if (h->live_blocks != 0)
        return;
    for (size_t i = 0; i < heap_n_legacy; i++)
        if (heap_legacy[i] == h)
            __atomic_store_n(&heap_legacy[i], NULL, __ATOMIC_RELEASE);
    heap_unmake(h);
}
