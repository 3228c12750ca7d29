/* SPDX-License-Identifier: MIT */
/*
 * libarcomm_heap.so: the shared heap, an LD_PRELOAD allocator.  Process ranks reach each
 * other's buffers only where those lie in shared memory, so this library serves the
 * process's large allocations (malloc and its family, from ARCOMM_HEAP_MIN bytes) from one
 * MAP_SHARED mapping of a memfd; a peer opens /proc/<pid>/fd/<fd> and maps the same
 * pages, libarcomm learns base, size and fd from arcomm_heap_region(), and asks
 * arcomm_heap_share() whether a buffer is there (heap_abi.h).  docs/heap.md is the
 * user's side of it.
 *
 * This file: the malloc family, the two entry points libarcomm calls, the knobs and the
 * library's setup.  Everything small, and everything while there is no heap, goes to
 * glibc's own allocator through its __libc_* entry points, which never come back here:
 * that is what makes recursion (dlsym, pthread_atfork and stdio allocating) harmless.
 * Which allocator owns a pointer is decided by its address alone.
 */
#include "heap_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

typedef size_t (*usable_fn)(void *);

size_t heap_page = 4096;
pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic int heap_state;
_Atomic uintptr_t heap_lo, heap_hi;
struct heap *heap_cur;
struct heap **heap_legacy;
size_t heap_n_legacy, heap_cap_legacy;
volatile uint8_t *heap_canary;
__thread bool heap_in_fork __attribute__((tls_model("initial-exec")));

static _Atomic bool ctor_done;
static _Atomic size_t heap_min = SIZE_MAX; /* SIZE_MAX until ARCOMM_HEAP_MIN was read */
static _Atomic(usable_fn) libc_usable;
/* Set while this thread is inside the heap's own setup: its allocations go to glibc. */
static __thread bool heap_busy __attribute__((tls_model("initial-exec")));

/*
 * One line to stderr.  vsnprintf of these formats does not allocate, and if it did, a
 * small request goes straight to glibc; strerrorname_np, unlike strerror, never
 * translates.
 */
void heap_say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    n = n < 0 ? 0 : n < (int)sizeof(buf) - 1 ? n : (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t r = write(STDERR_FILENO, buf, (size_t)n);
    (void)r;
}

void heap_complain(const char *what, int err, const char *then)
{
    const char *name = strerrorname_np(err);
    heap_say("arcomm heap (pid %d): %s failed (%s); %s", (int)getpid(), what,
             name != NULL ? name : "?", then);
}

_Noreturn void heap_bad(const char *fn, uintptr_t p)
{
    heap_say("arcomm heap (pid %d): %s(): %#lx is not a live block (double free, or a pointer "
             "malloc did not return)",
             (int)getpid(), fn, (unsigned long)p);
    abort();
}

uint64_t heap_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Grows an array kept in an anonymous mapping of its own: never malloc'd memory, so the
 * allocator cannot recurse, and a fork child reads and drops it with syscalls only.
 */
bool heap_vec_reserve(void **arr, size_t *cap, size_t want, size_t elem)
{
    if (want <= *cap)
        return true;
    size_t ncap = *cap != 0 ? *cap * 2 : 4096 / elem;
    while (ncap < want)
        ncap *= 2;
    void *p = *arr == NULL ? mmap(NULL, ncap * elem, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                           : mremap(*arr, *cap * elem, ncap * elem, MREMAP_MAYMOVE);
    if (p == MAP_FAILED)
        return false;
    *arr = p;
    *cap = ncap;
    return true;
}

/*
 * Is h->fd still the heap's memfd?  A program may close descriptors it did not open
 * (closefrom(3), as daemons do) and get the number back for a file of its own: the heap
 * then must never touch that number again.  Checked before every use of the descriptor,
 * none of which is on the allocation path; once lost, it is forgotten (with a message).
 */
bool heap_fd_ok(struct heap *h)
{
    if (h->fd < 0)
        return false;
    struct stat st;
    if (fstat(h->fd, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino)
        return true;
    heap_say("arcomm heap (pid %d): the heap's memfd (descriptor %d) was closed, or replaced, "
             "by the program (closefrom?); the heap leaves that descriptor alone from now on: "
             "peer processes can no longer map this heap (collectives stage its buffers), and "
             "fork() copies its blocks instead of sharing them copy-on-write",
             (int)getpid(), h->fd);
    h->fd = -1;
    return false;
}

/* A size as rt_parse_size reads one: digits, then K, M, G or T (1024s), "i" and "B". */
static bool parse_size(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    unsigned shift = 0;
    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    static const char units[] = "kmgt";
    const char *unit = *s != '\0' ? strchr(units, *s | 0x20) : NULL;
    if (unit != NULL)
        shift = 10 * (unsigned)(unit - units + 1);
    if (shift != 0 && *++s == 'i')
        s++;
    if (shift != 0 && (*s | 0x20) == 'b')
        s++;
    if (*s != '\0' || v > UINT64_MAX >> shift)
        return false;
    *out = v << shift;
    return true;
}

/* getenv only: this runs inside malloc, before and while the heap is made. */
static uint64_t knob(const char *name, uint64_t dflt, bool warn, const char **text)
{
    const char *s = getenv(name);
    uint64_t v;
    *text = s;
    if (s == NULL || parse_size(s, &v))
        return s == NULL ? dflt : v;
    if (warn)
        heap_say("arcomm heap: %s=%s is not a size; using the default (%llu bytes)", name, s,
                 (unsigned long long)dflt);
    return dflt;
}

/*
 * ARCOMM_HEAP_MIN, read where the heap is made, with the other knob (so that a process
 * may set it before its first large allocation, and a fork child before its own heap).
 * A call must know it before (it decides whether the call makes the heap): the first
 * call of the process reads it too, quietly (heap creation reports a bad value once).
 * Below a page it is refused: the heap hands out whole pages, so every small allocation
 * would take a page of memory and a trip through the heap's lock.
 */
static size_t read_threshold(bool warn)
{
    const char *text;
    uint64_t k = knob("ARCOMM_HEAP_MIN", HEAP_DEFAULT_MIN, warn, &text);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (k < pg) {
        if (warn)
            heap_say("arcomm heap: ARCOMM_HEAP_MIN=%s is below the page size (%zu bytes): the "
                     "heap hands out whole pages, so each smaller allocation would cost a page; "
                     "using the default (64K): set ARCOMM_HEAP_MIN to %zuK or more, or unset it",
                     text, pg, pg >> 10);
        k = HEAP_DEFAULT_MIN;
    }
    size_t v = k >= SIZE_MAX ? SIZE_MAX - 1 : (size_t)k;
    atomic_store_explicit(&heap_min, v, memory_order_relaxed);
    return v;
}

static inline size_t heap_threshold(void)
{
    size_t v = atomic_load_explicit(&heap_min, memory_order_relaxed);
    return __builtin_expect(v != SIZE_MAX, 1) ? v : read_threshold(false);
}

static size_t libc_usable_size(void *p)
{
    usable_fn fn = atomic_load_explicit(&libc_usable, memory_order_acquire);
    if (fn == NULL) {
        /* dlsym may allocate: small requests and heap_busy keep that out of the heap. */
        bool busy = heap_busy;
        heap_busy = true;
        fn = (usable_fn)dlsym(RTLD_NEXT, "malloc_usable_size");
        heap_busy = busy;
        atomic_store_explicit(&libc_usable, fn, memory_order_release);
    }
    return fn != NULL ? fn(p) : 0;
}

/* Makes the heap (under heap_lock), with the knobs as they are now. */
static void heap_create(void)
{
    int state = -1;
    struct sysinfo si;
    uint64_t dflt = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : HEAP_MAX_BYTES;
    dflt = (dflt < HEAP_MAX_BYTES ? dflt : HEAP_MAX_BYTES) / heap_page * heap_page;
    const char *text;
    uint64_t bytes = knob("ARCOMM_HEAP_BYTES", dflt, true, &text);
    read_threshold(true);
    if (bytes == 0)
        goto out; /* disabled on purpose: no message */
    if (bytes > SIZE_MAX - heap_page)
        bytes = SIZE_MAX - heap_page; /* heap_make will refuse it, with a message */
    bytes = (bytes + heap_page - 1) / heap_page * heap_page;
    /* The slot a fork child will need for this heap is reserved now, where it can fail. */
    if (!heap_vec_reserve((void **)&heap_legacy, &heap_cap_legacy, heap_n_legacy + 1,
                          sizeof(*heap_legacy))) {
        heap_complain("mmap of the heap's bookkeeping", errno, "large allocations stay private");
        goto out;
    }
    struct heap *h = heap_make((size_t)bytes);
    if (h == NULL)
        goto out;
    heap_cur = h;
    atomic_store_explicit(&heap_lo, h->lo, memory_order_relaxed);
    atomic_store_explicit(&heap_hi, h->hi, memory_order_release);
    state = 1;
out:
    atomic_store_explicit(&heap_state, state, memory_order_release);
}

/* A fork child that no handler of ours saw (_Fork, clone, syscall(SYS_fork)): see
 * heap_fork_child_unhandled.  One load on every path that touches the heap. */
static inline bool fork_unhandled(void)
{
    return __builtin_expect(heap_canary != NULL && *heap_canary != 1, 0) && !heap_in_fork;
}

/* True when the heap exists, making it on the first call after the library's setup. */
static bool heap_ready(void)
{
    if (fork_unhandled())
        heap_fork_child_unhandled();
    int s = atomic_load_explicit(&heap_state, memory_order_acquire);
    if (__builtin_expect(s != 0, 1))
        return s > 0;
    if (heap_busy || !atomic_load_explicit(&ctor_done, memory_order_acquire))
        return false;
    heap_busy = true;
    pthread_mutex_lock(&heap_lock);
    if (atomic_load_explicit(&heap_state, memory_order_relaxed) == 0)
        heap_create();
    pthread_mutex_unlock(&heap_lock);
    heap_busy = false;
    return atomic_load_explicit(&heap_state, memory_order_acquire) > 0;
}

/*
 * A block of the heap for size bytes at user alignment align (0 for the default, else a
 * power of two up to HEAP_MAX_ALIGN), zeroed if asked; NULL when there is no heap or no
 * room in it, and the caller then asks glibc.  While this thread forks (a fork handler
 * allocating), everything goes to glibc, which is usable there.
 */
static void *heap_alloc(size_t size, size_t align, bool zero)
{
    if (heap_busy || heap_in_fork || !heap_ready() || size < heap_threshold())
        return NULL; /* (the threshold may have changed as the heap was made) */
    int saved_errno = errno;
    bool zeroed = false;
    void *p = align <= heap_page ? heap_cache_get(size) : NULL;
    if (p == NULL) {
        pthread_mutex_lock(&heap_lock);
        struct heap *h = heap_cur;
        p = h != NULL ? (void *)heap_carve(h, size, align, &zeroed) : NULL;
        pthread_mutex_unlock(&heap_lock);
    }
    if (p != NULL && zero && !zeroed)
        memset(p, 0, size);
    errno = saved_errno;
    return p;
}

/* malloc without the heap's fallbacks spelled out at each caller. */
static void *alloc_any(size_t n)
{
    void *p = n >= heap_threshold() ? heap_alloc(n, 0, false) : NULL;
    return p != NULL ? p : __libc_malloc(n);
}

/* The inherited heap that holds u, or NULL (slots of dropped ones have lo = hi = 0). */
static struct heap *legacy_of(uintptr_t u)
{
    size_t n = __atomic_load_n(&heap_n_legacy, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++) {
        struct heap *h = __atomic_load_n(&heap_legacy[i], __ATOMIC_ACQUIRE);
        if (h != NULL && u >= __atomic_load_n(&h->lo, __ATOMIC_ACQUIRE) &&
            u < __atomic_load_n(&h->hi, __ATOMIC_ACQUIRE))
            return h;
    }
    return NULL;
}

/* Who owns u: the current heap (1), an inherited one (2, *hp), or glibc (0). */
static int owner_of(uintptr_t u, struct heap **hp)
{
    uintptr_t hi = atomic_load_explicit(&heap_hi, memory_order_acquire);
    uintptr_t lo = atomic_load_explicit(&heap_lo, memory_order_relaxed);
    if (u - lo < hi - lo) {
        *hp = heap_cur;
        return 1;
    }
    if (__atomic_load_n(&heap_n_legacy, __ATOMIC_RELAXED) != 0 && (*hp = legacy_of(u)) != NULL)
        return 2;
    return 0;
}

static void free_in(int owner, struct heap *h, uintptr_t u)
{
    if (heap_in_fork) {
        heap_defer_free((void *)u);
        return;
    }
    if (owner == 1) {
        struct span *s = heap_block_at(h, u);
        if (s != NULL && heap_cache_put(h, s))
            return;
    }
    pthread_mutex_lock(&heap_lock);
    struct span *s = heap_block_at(h, u);
    if (s == NULL || s->kind == BLK_CACHED) {
        pthread_mutex_unlock(&heap_lock);
        heap_bad("free", u);
    }
    if (owner == 2)
        heap_legacy_release(h, s);
    else if (s->kind == BLK_PRIVATE)
        heap_free_private(h, s);
    else
        heap_release(h, s);
    pthread_mutex_unlock(&heap_lock);
}

HEAP_EXPORT void *malloc(size_t size)
{
    return alloc_any(size);
}

HEAP_EXPORT void free(void *ptr)
{
    struct heap *h;
    uintptr_t u = (uintptr_t)ptr;
    int owner = owner_of(u, &h);
    if (owner == 1 && fork_unhandled()) {
        heap_fork_child_unhandled();
        owner = owner_of(u, &h);
    }
    if (owner != 0)
        free_in(owner, h, u);
    else
        __libc_free(ptr); /* free(NULL) included: a no-op there */
}

HEAP_EXPORT void *calloc(size_t nmemb, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(nmemb, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = n >= heap_threshold() ? heap_alloc(n, 0, true) : NULL;
    return p != NULL ? p : __libc_calloc(nmemb, size);
}

/* The bytes from u to its block's end (under heap_lock or for the block's owner). */
static size_t usable_of(const char *fn, struct heap *h, uintptr_t u)
{
    struct span *s = heap_block_at(h, u);
    if (s == NULL || s->kind == BLK_CACHED)
        heap_bad(fn, u);
    return span_addr(h, s) + span_bytes(s) - u;
}

/* Moves block u (usable bytes at hand) to a new one of n bytes and frees u; NULL (and u
 * left alone) when there is no memory. */
static void *move_block(uintptr_t u, size_t usable, size_t n)
{
    void *q = alloc_any(n);
    if (q == NULL)
        return NULL;
    memcpy(q, (const void *)u, usable < n ? usable : n);
    free((void *)u);
    return q;
}

static void *realloc_cur(struct heap *h, uintptr_t u, size_t n)
{
    if (heap_in_fork) {
        /* A fork handler: the block moves to glibc, its free waits for the fork's end. */
        size_t usable = usable_of("realloc", h, u);
        void *q = __libc_malloc(n);
        if (q != NULL) {
            memcpy(q, (const void *)u, usable < n ? usable : n);
            heap_defer_free((void *)u);
        }
        return q;
    }
    pthread_mutex_lock(&heap_lock);
    struct span *s = heap_block_at(h, u);
    if (s == NULL || s->kind == BLK_CACHED) {
        pthread_mutex_unlock(&heap_lock);
        heap_bad("realloc", u);
    }
    size_t usable = span_addr(h, s) + span_bytes(s) - u;
    if (s->kind != BLK_PRIVATE) {
        size_t tail = heap_threshold() > heap_page ? heap_threshold() : heap_page;
        if (n <= usable) {
            /* It fits.  A tail worth a heap allocation of its own goes back to the heap. */
            heap_shrink_in_place(h, s, n, tail);
            pthread_mutex_unlock(&heap_lock);
            return (void *)u;
        }
        /* Grow in place over the free span that follows, as a growing vector wants. */
        if (heap_grow_in_place(h, s, n)) {
            pthread_mutex_unlock(&heap_lock);
            return (void *)u;
        }
    } else if (n <= usable) {
        s->size = n; /* a private block keeps its pages: its tail is not the heap's to reuse */
        pthread_mutex_unlock(&heap_lock);
        return (void *)u;
    }
    pthread_mutex_unlock(&heap_lock);
    return move_block(u, usable, n);
}

/*
 * glibc's semantics: realloc(NULL, n) is malloc(n), realloc(p, 0) frees p and returns
 * NULL, and a failure leaves p as it was.  A glibc block that grows past the threshold
 * moves into the heap (peers must reach a vector grown by realloc, too); one that
 * shrinks or fits stays with glibc.
 */
HEAP_EXPORT void *realloc(void *ptr, size_t size)
{
    uintptr_t u = (uintptr_t)ptr;
    struct heap *h;
    if (ptr == NULL)
        return alloc_any(size);
    int owner = owner_of(u, &h);
    if (owner == 1 && fork_unhandled()) {
        heap_fork_child_unhandled();
        owner = owner_of(u, &h);
    }
    if (owner != 0 && size == 0) {
        free(ptr);
        return NULL;
    }
    if (owner == 1)
        return realloc_cur(h, u, size);
    if (owner == 2) {
        /* An inherited heap's block moves to where its new size belongs. */
        size_t usable = usable_of("realloc", h, u);
        if (heap_in_fork) {
            void *q = __libc_malloc(size);
            if (q != NULL) {
                memcpy(q, ptr, usable < size ? usable : size);
                heap_defer_free(ptr);
            }
            return q;
        }
        return move_block(u, usable, size);
    }
    if (size >= heap_threshold() && !heap_busy && !heap_in_fork && heap_ready()) {
        size_t usable = libc_usable_size(ptr);
        void *q = usable != 0 && usable < size ? heap_alloc(size, 0, false) : NULL;
        if (q != NULL) {
            memcpy(q, ptr, usable);
            __libc_free(ptr);
            return q;
        }
    }
    return __libc_realloc(ptr, size);
}

HEAP_EXPORT void *reallocarray(void *ptr, size_t nmemb, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(nmemb, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(ptr, n);
}

/*
 * The heap's block for an aligned request, or glibc's: small, an alignment that is not a
 * power of two (glibc 2.36 rounds it up) or above 1 MiB, or no room in the heap.
 */
static void *aligned_any(size_t align, size_t size)
{
    void *p = NULL;
    if (size >= heap_threshold() && align != 0 && (align & (align - 1)) == 0 &&
        align <= HEAP_MAX_ALIGN)
        p = heap_alloc(size, align, false);
    return p != NULL ? p : __libc_memalign(align, size);
}

HEAP_EXPORT int posix_memalign(void **memptr, size_t alignment, size_t size)
{
    if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0)
        return EINVAL;
    int saved_errno = errno;
    void *p = aligned_any(alignment, size);
    errno = saved_errno;
    if (p == NULL)
        return ENOMEM;
    *memptr = p;
    return 0;
}

HEAP_EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
    return aligned_any(alignment, size);
}

HEAP_EXPORT void *memalign(size_t alignment, size_t size)
{
    return aligned_any(alignment, size);
}

HEAP_EXPORT void *valloc(size_t size)
{
    return aligned_any((size_t)sysconf(_SC_PAGESIZE), size);
}

HEAP_EXPORT void *pvalloc(size_t size)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (size > SIZE_MAX - pg) {
        errno = ENOMEM;
        return NULL;
    }
    size = size != 0 ? (size + pg - 1) & ~(pg - 1) : pg;
    return aligned_any(pg, size);
}

HEAP_EXPORT size_t malloc_usable_size(void *ptr)
{
    struct heap *h;
    int owner = owner_of((uintptr_t)ptr, &h);
    if (owner != 0)
        return usable_of("malloc_usable_size", h, (uintptr_t)ptr);
    return ptr != NULL ? libc_usable_size(ptr) : 0;
}

HEAP_EXPORT int arcomm_heap_region(struct arcomm_heap_info *info)
{
    if (heap_busy || heap_in_fork || !heap_ready())
        return 0;
    pthread_mutex_lock(&heap_lock);
    struct heap *h = heap_cur;
    int ok = h != NULL && heap_fd_ok(h);
    if (ok) {
        info->base = (void *)h->lo;
        info->bytes = h->hi - h->lo;
        info->fd = h->fd;
        info->pad = 0;
        info->min_bytes = heap_threshold();
    }
    pthread_mutex_unlock(&heap_lock);
    return ok;
}

/*
 * The last blocks arcomm_heap_share answered yes for, per thread: a collective calls it
 * for every buffer of every call, mostly the same few.  A hit needs the block's record
 * unchanged since (seq: it changes when the block is freed or changes kind).
 */
struct share_hit {
    const struct heap *h;
    uintptr_t lo, hi; /* the block's pages */
    uint32_t id, seq;
};
#define SHARE_HITS 4
static __thread struct share_hit share_hits[SHARE_HITS] __attribute__((tls_model("initial-exec")));
static __thread unsigned share_next __attribute__((tls_model("initial-exec")));

void heap_share_forget(void)
{
    memset(share_hits, 0, sizeof(share_hits));
}

HEAP_EXPORT int arcomm_heap_share(const void *p, uint64_t len, uint64_t *offset)
{
    uintptr_t u = (uintptr_t)p;
    uintptr_t hi = atomic_load_explicit(&heap_hi, memory_order_acquire);
    uintptr_t lo = atomic_load_explicit(&heap_lo, memory_order_relaxed);
    if (u - lo >= hi - lo || heap_in_fork || heap_busy || fork_unhandled())
        return 0;
    struct heap *h = heap_cur;
    for (int i = 0; i < SHARE_HITS; i++) {
        const struct share_hit *e = &share_hits[i];
        if (e->h == h && u >= e->lo && u < e->hi && len <= e->hi - u &&
            atomic_load_explicit(&h->recs[e->id].seq, memory_order_acquire) == e->seq) {
            *offset = u - h->lo;
            return 1;
        }
    }
    int ok = 0;
    pthread_mutex_lock(&heap_lock);
    struct span *s = heap_block_holding(h, u);
    if (s != NULL && s->state == SPAN_LIVE) {
        uintptr_t a = span_addr(h, s), end = a + span_bytes(s);
        uintptr_t user = span_user(h, s);
        if (len <= end - u) {
            if (s->kind == BLK_SHARED)
                s->kind = BLK_EXPORTED; /* a fork from now on keeps it shared */
            else if (s->kind == BLK_PRIVATE && u <= user && u + len >= user + s->size)
                heap_thaw(h, s); /* the whole block is the collective's: see heap_thaw */
            ok = s->kind == BLK_EXPORTED;
        }
        if (ok) {
            struct share_hit *e = &share_hits[share_next++ % SHARE_HITS];
            *e = (struct share_hit){.h = h,
                                    .lo = a,
                                    .hi = end,
                                    .id = span_id(h, s),
                                    .seq = atomic_load_explicit(&s->seq, memory_order_relaxed)};
            *offset = u - h->lo;
        }
    }
    pthread_mutex_unlock(&heap_lock);
    return ok;
}

HEAP_EXPORT int arcomm_heap_stats(struct arcomm_heap_stats *st)
{
    if (heap_in_fork || fork_unhandled())
        return 0;
    pthread_mutex_lock(&heap_lock);
    struct heap *h = heap_cur;
    if (h != NULL) {
        memset(st, 0, sizeof(*st));
        for (struct span *s = span_first(h); s != NULL; s = span_next(h, s)) {
            uint64_t b = span_bytes(s);
            if (s->state == SPAN_CLEAN || s->state == SPAN_DIRTY)
                st->free_spans++;
            if (s->state != SPAN_LIVE)
                continue;
            st->exported_bytes += s->kind == BLK_EXPORTED ? b : 0;
            st->private_bytes += s->kind == BLK_PRIVATE ? b : 0;
            st->cached_bytes += s->kind == BLK_CACHED ? b : 0;
        }
        st->live_bytes = h->live_bytes;
        st->live_blocks = h->live_blocks;
        st->dirty_bytes = h->dirty_bytes;
        st->held_bytes = h->held_bytes;
        st->forks = h->gen;
        for (uint32_t g = h->gen_low; g <= h->gen; g++)
            st->forks_alive += !h->gen_rel[g];
    }
    pthread_mutex_unlock(&heap_lock);
    return h != NULL;
}

/*
 * Sets up before main, away from any lock: the fork canary (a page that every fork child
 * gets zeroed, MADV_WIPEONFORK), the fork handlers, glibc's malloc_usable_size and the
 * threshold.  The heap itself is made only after this ran (until then large allocations
 * are glibc's), so that no fork can find a heap without our handlers: registering them
 * lazily, at the first large allocation, could happen inside a fork handler, where
 * pthread_atfork deadlocks.
 */
__attribute__((constructor)) static void heap_init(void)
{
    heap_page = (size_t)sysconf(_SC_PAGESIZE);
    void *c = mmap(NULL, heap_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c != MAP_FAILED && madvise(c, heap_page, MADV_WIPEONFORK) == 0) {
        *(volatile uint8_t *)c = 1;
        heap_canary = c;
    } else if (c != MAP_FAILED) {
        munmap(c, heap_page); /* (kernels before 4.14) a child made by _Fork goes unnoticed */
    }
    heap_cache_init();
    heap_atfork_register();
    heap_threshold();
    libc_usable_size(NULL);
    atomic_store_explicit(&ctor_done, true, memory_order_release);
}
