/* SPDX-License-Identifier: MIT */
/*
 * libarcomm_heap.so: the shared heap, an LD_PRELOAD allocator.  Process ranks reach
 * each other's buffers only where those lie in shared memory, so this library serves
 * the process's large allocations (malloc and its family, from ARCOMM_HEAP_MIN bytes)
 * from one MAP_SHARED mapping of a memfd; a peer opens /proc/<pid>/fd/<fd> and maps the
 * same pages, and libarcomm learns base, size and fd from arcomm_heap_region().
 *
 * Everything small, and everything while there is no heap, goes to glibc's own
 * allocator through its __libc_* entry points, which never come back here: that is what
 * makes recursion (dlsym, pthread_atfork and stdio allocating) harmless.  Which
 * allocator owns a pointer is decided by its address alone.
 *
 * The heap is page-granular blocks carved first-fit from an address-sorted array of free
 * extents (kept in its own anonymous mapping, never in malloc'd memory) under one mutex.
 * Each block starts with a header and has a copy of it at user - 64, where free() looks.
 * Pages are committed with fallocate() when a block is carved, so that running out of
 * memory is a NULL from malloc (or glibc's answer) instead of a SIGBUS on first touch,
 * and free extents of 4 MiB or more are punched out of the memfd, which returns the
 * memory to the system (and zaps it from the peers' mappings too).
 *
 * fork() gives the child a private copy of the heap's live blocks at the same addresses
 * (a "legacy" region, kept reserved so no other mapping lands there) and a heap of its
 * own, made lazily as at process start.  Limits: a child made without fork()'s handlers
 * (vfork, _Fork, clone) shares the parent's heap until it execs; a second free of a
 * legacy block faults rather than aborting with a message, as its pages are gone.
 */
#include "heap_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#define HEAP_EXPORT      __attribute__((visibility("default")))
#define HEAP_HDR         64 /* the header slot before the user pointer, and the alignment */
#define HEAP_MAX_ALIGN   (1UL << 20)  /* larger alignments go to glibc */
#define HEAP_PUNCH_MIN   (4UL << 20)  /* free extents from this size give their pages back */
#define HEAP_DEFAULT_MIN (64UL << 10) /* ARCOMM_HEAP_MIN's default */
#define HEAP_MAX_BYTES   (1ULL << 40) /* ARCOMM_HEAP_BYTES's default is capped here */
#define HEAP_MAGIC_LIVE  0x6172636f6d6d4850ULL /* "arcommHP" */
#define HEAP_MAGIC_FREE  0x6172636f6d6d4846ULL /* "arcommHF": caught by a second free */

/* glibc's own allocator, exported under these names: they never call back into us. */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

/* At the block's start and at user - 64 (one struct when the two coincide). */
struct heap_hdr {
    uint64_t magic; /* HEAP_MAGIC_LIVE while allocated */
    uint64_t off;   /* block start, in bytes from the region's base (page-aligned) */
    uint64_t len;   /* block length (a page multiple) */
    uint64_t size;  /* the size the program asked for */
};

struct extent {
    uint64_t off, len; /* a free range of the heap, page-aligned, in bytes from the base */
    bool backed;       /* its pages are allocated in the memfd */
    bool zero;         /* its contents are known zero (never used, or punched) */
};

/* An old heap inherited over fork(): private copies of its blocks, PROT_NONE elsewhere. */
struct legacy {
    uintptr_t lo, hi;
};

typedef size_t (*usable_fn)(void *);

/*
 * heap_state, heap_lo and heap_hi are read without the lock on every call; they change
 * only when the heap is made (under the lock, published by the release store of
 * heap_state and heap_hi) and in a fork child, which is single-threaded.
 */
static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int heap_state; /* 0: not tried yet, 1: active, -1: none (failed or disabled) */
static _Atomic uintptr_t heap_lo, heap_hi;
static int heap_fd = -1;
static size_t page_size;
static struct extent *ext; /* the free extents, by address (under heap_lock) */
static size_t n_ext, cap_ext;
static struct legacy *legacy; /* written only in fork children, before any other thread */
static size_t n_legacy, cap_legacy;
static _Atomic size_t heap_min = SIZE_MAX; /* SIZE_MAX until ARCOMM_HEAP_MIN was read */
static _Atomic(usable_fn) libc_usable;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* Set while this thread is inside the heap's own setup: its allocations go to glibc. */
static __thread bool heap_busy __attribute__((tls_model("initial-exec")));

/*
 * One line to stderr.  vsnprintf of these formats does not allocate, and if it did, a
 * small request goes straight to glibc; strerrorname_np, unlike strerror, never
 * translates.
 */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    n = n < 0 ? 0 : n < (int)sizeof(buf) - 1 ? n : (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t r = write(STDERR_FILENO, buf, (size_t)n);
    (void)r;
}

static void complain(const char *what, int err, const char *then)
{
    const char *name = strerrorname_np(err);
    say("arcomm heap: %s failed (%s); %s", what, name != NULL ? name : "?", then);
}

static _Noreturn void heap_bad(const char *fn, uintptr_t p)
{
    say("arcomm heap: %s(): %#lx is not a live block (double free, bad pointer or overwritten "
        "header)",
        fn, (unsigned long)p);
    abort();
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
static uint64_t knob(const char *name, uint64_t dflt, bool warn)
{
    const char *s = getenv(name);
    uint64_t v;
    if (s == NULL || parse_size(s, &v))
        return s == NULL ? dflt : v;
    if (warn)
        say("arcomm heap: %s=%s is not a size; using the default (%llu bytes)", name, s,
            (unsigned long long)dflt);
    return dflt;
}

/*
 * ARCOMM_HEAP_MIN, read where the heap is made, with the other knob (so that a process
 * may set it before its first large allocation, and a fork child before its own heap).
 * A call must know it before (it decides whether the call makes the heap): the first
 * call of the process reads it too, quietly (heap creation reports a bad value once).
 */
static size_t read_threshold(bool warn)
{
    uint64_t k = knob("ARCOMM_HEAP_MIN", HEAP_DEFAULT_MIN, warn);
    size_t v = k >= SIZE_MAX ? SIZE_MAX - 1 : (size_t)k;
    atomic_store_explicit(&heap_min, v, memory_order_relaxed);
    return v;
}

static size_t heap_threshold(void)
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

/*
 * Grows an array kept in an anonymous mapping of its own: never malloc'd memory, so the
 * allocator cannot recurse, and a fork child reads and drops it with syscalls only.
 */
static bool vec_reserve(void **arr, size_t *cap, size_t want, size_t elem)
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

static const char private_tail[] = "large allocations stay private";

/* Makes the heap (under heap_lock): a sparse memfd, mapped shared, one free extent. */
static void heap_create(void)
{
    int state = -1;
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    struct sysinfo si;
    uint64_t dflt = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : HEAP_MAX_BYTES;
    dflt = (dflt < HEAP_MAX_BYTES ? dflt : HEAP_MAX_BYTES) / page_size * page_size;
    uint64_t bytes = knob("ARCOMM_HEAP_BYTES", dflt, true);
    read_threshold(true);
    if (bytes == 0)
        goto out; /* disabled on purpose: no message */
    if (bytes > SIZE_MAX - page_size)
        bytes = SIZE_MAX - page_size; /* mmap will refuse it, with a message */
    bytes = (bytes + page_size - 1) / page_size * page_size;
    /* The slot a fork child will need for this heap is reserved now, where it can fail. */
    if (!vec_reserve((void **)&legacy, &cap_legacy, n_legacy + 1, sizeof(*legacy)) ||
        !vec_reserve((void **)&ext, &cap_ext, 16, sizeof(*ext))) {
        complain("mmap of the heap's bookkeeping", errno, private_tail);
        goto out;
    }
    int fd = memfd_create("arcomm-heap", MFD_CLOEXEC);
    if (fd < 0) {
        complain("memfd_create", errno, private_tail);
        goto out;
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        complain("ftruncate of the heap's memfd", errno, private_tail);
        goto err_close;
    }
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (base == MAP_FAILED) {
        complain("mmap of the heap", errno, private_tail);
        goto err_close;
    }
    ext[0] = (struct extent){.off = 0, .len = bytes, .backed = false, .zero = true};
    n_ext = 1;
    heap_fd = fd;
    atomic_store_explicit(&heap_lo, (uintptr_t)base, memory_order_relaxed);
    atomic_store_explicit(&heap_hi, (uintptr_t)base + bytes, memory_order_release);
    state = 1;
    goto out;
err_close:
    close(fd);
out:
    atomic_store_explicit(&heap_state, state, memory_order_release);
}

/*
 * The child copies the heap's live blocks out of the shared memfd after fork returns
 * there, so the parent must not write to them (nor hand the lock to a thread that
 * could) until the copy is done: the parent waits on a pipe that the child writes to
 * when it has its copy, or closes by dying.  A program that writes to the heap from
 * another thread while it forks still races, as it would with any fork.
 */
static int fork_pipe[2] = {-1, -1};

static void atfork_prepare(void)
{
    pthread_mutex_lock(&heap_lock);
    if (atomic_load_explicit(&heap_state, memory_order_relaxed) == 1 &&
        pipe2(fork_pipe, O_CLOEXEC) != 0) {
        complain("fork: pipe", errno, "the child's copy of the heap may see later writes");
        fork_pipe[0] = fork_pipe[1] = -1;
    }
}

static void atfork_parent(void)
{
    if (fork_pipe[0] >= 0) {
        int saved_errno = errno;
        char c;
        close(fork_pipe[1]); /* so that a child that died is an end of file */
        while (read(fork_pipe[0], &c, 1) < 0 && errno == EINTR)
            ;
        close(fork_pipe[0]);
        fork_pipe[0] = fork_pipe[1] = -1;
        errno = saved_errno;
    }
    pthread_mutex_unlock(&heap_lock);
}

static _Noreturn void child_die(const char *what)
{
    complain(what, errno, "aborting the child (its heap would stay shared with the parent)");
    abort();
}

/* Replaces [addr, addr + len) of the shared mapping with a private copy, in place. */
static void child_copy(uintptr_t addr, size_t len)
{
    char *tmp =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (tmp == MAP_FAILED)
        child_die("fork: mmap of a private copy of the heap");
    /* Pages never written stay unallocated in the copy, so big sparse blocks stay cheap. */
    for (size_t o = 0; o < len; o += page_size) {
        const uint64_t *w = (const uint64_t *)(addr + o);
        uint64_t any = 0;
        for (size_t i = 0; i < page_size / sizeof(*w); i++)
            any |= w[i];
        if (any != 0)
            memcpy(tmp + o, w, page_size);
    }
    if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)addr) == MAP_FAILED)
        child_die("fork: mremap of a private copy of the heap");
}

/* Keeps [addr, addr + len) reserved, without memory, so no other mapping lands there. */
static bool reserve(uintptr_t addr, size_t len)
{
    return mmap((void *)addr, len, PROT_NONE,
                MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) != MAP_FAILED;
}

/*
 * The child of fork(), single-threaded, before fork returns: the heap is shared with
 * the parent, so its live blocks become private copies and the rest a reservation (an
 * old heap without live blocks is simply unmapped), and the child makes a fresh heap
 * when it needs one.  Syscalls and memcpy only; the lock is made anew.  The live blocks
 * are the gaps between free extents, copied whole, so a header the program overwrote
 * cannot derail the walk.
 */
static void atfork_child(void)
{
    if (atomic_load_explicit(&heap_state, memory_order_relaxed) == 1) {
        uintptr_t lo = atomic_load_explicit(&heap_lo, memory_order_relaxed);
        uintptr_t hi = atomic_load_explicit(&heap_hi, memory_order_relaxed);
        uint64_t cur = 0;
        bool live = false;
        for (size_t i = 0; i <= n_ext; i++) {
            uint64_t stop = i < n_ext ? ext[i].off : hi - lo;
            if (stop > cur) {
                child_copy(lo + cur, stop - cur);
                live = true;
            }
            if (i < n_ext) {
                if (!reserve(lo + ext[i].off, ext[i].len))
                    child_die("fork: mmap of a reservation over the old heap");
                cur = ext[i].off + ext[i].len;
            }
        }
        if (live)
            legacy[n_legacy++] = (struct legacy){.lo = lo, .hi = hi}; /* reserved at creation */
        else
            munmap((void *)lo, hi - lo);
        close(heap_fd);
        heap_fd = -1;
        munmap(ext, cap_ext * sizeof(*ext));
        ext = NULL;
        n_ext = cap_ext = 0;
        atomic_store_explicit(&heap_hi, 0, memory_order_relaxed);
        atomic_store_explicit(&heap_lo, 0, memory_order_relaxed);
    }
    /*
     * As at process start, the knobs are read again when the child makes its heap; until
     * then the parent's threshold decides what is large (a child that sets
     * ARCOMM_HEAP_BYTES=0 first thing must not make a heap in setenv's own malloc).
     */
    atomic_store_explicit(&heap_state, 0, memory_order_relaxed);
    if (fork_pipe[1] >= 0) {
        ssize_t r = write(fork_pipe[1], "", 1); /* the parent may write again */
        (void)r;
        close(fork_pipe[0]);
        close(fork_pipe[1]);
        fork_pipe[0] = fork_pipe[1] = -1;
    }
    pthread_mutex_init(&heap_lock, NULL);
}

static void atfork_register(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* True when the heap exists, making it on the first call. */
static bool heap_ready(void)
{
    int s = atomic_load_explicit(&heap_state, memory_order_acquire);
    if (__builtin_expect(s != 0, 1))
        return s > 0;
    if (heap_busy)
        return false;
    heap_busy = true;
    /* Outside heap_lock: pthread_atfork takes glibc's fork lock, which fork holds. */
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&heap_lock);
    if (atomic_load_explicit(&heap_state, memory_order_relaxed) == 0)
        heap_create();
    pthread_mutex_unlock(&heap_lock);
    heap_busy = false;
    return atomic_load_explicit(&heap_state, memory_order_acquire) > 0;
}

/* The first extent at or after offset off (under heap_lock). */
static size_t ext_search(uint64_t off)
{
    size_t a = 0, b = n_ext;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (ext[m].off < off)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

static void ext_remove(size_t i)
{
    memmove(&ext[i], &ext[i + 1], (n_ext - i - 1) * sizeof(*ext));
    n_ext--;
}

/* The caller reserved room for one more. */
static void ext_insert(size_t i, struct extent e)
{
    memmove(&ext[i + 1], &ext[i], (n_ext - i) * sizeof(*ext));
    ext[i] = e;
    n_ext++;
}

/*
 * Returns [off, off + len) to the free extents (under heap_lock), merged with its
 * neighbours; a merged extent of HEAP_PUNCH_MIN or more has the parts that may hold
 * data punched out of the memfd, which frees the memory and makes it known zero.
 */
static void ext_free(uint64_t off, uint64_t len)
{
    size_t i = ext_search(off);
    bool left = i > 0 && ext[i - 1].off + ext[i - 1].len == off;
    bool right = i < n_ext && ext[i].off == off + len;
    struct extent m = {.off = off, .len = len, .backed = true, .zero = false};
    uint64_t dirty_lo = off, dirty_hi = off + len;
    if (left) {
        m.off = ext[i - 1].off;
        m.len += ext[i - 1].len;
        m.backed = ext[i - 1].backed;
        dirty_lo = ext[i - 1].zero ? dirty_lo : m.off;
    }
    if (right) {
        m.len += ext[i].len;
        m.backed = m.backed && ext[i].backed;
        dirty_hi = ext[i].zero ? dirty_hi : ext[i].off + ext[i].len;
    }
    if (m.len >= HEAP_PUNCH_MIN && fallocate(heap_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                             (off_t)dirty_lo, (off_t)(dirty_hi - dirty_lo)) == 0) {
        m.backed = false;
        m.zero = true;
    }
    if (left && right) {
        ext[i - 1] = m;
        ext_remove(i);
    } else if (left) {
        ext[i - 1] = m;
    } else if (right) {
        ext[i] = m;
    } else if (vec_reserve((void **)&ext, &cap_ext, n_ext + 1, sizeof(*ext))) {
        ext_insert(i, m);
    } else {
        /* No room to record it: the address range is lost, but not the memory. */
        fallocate(heap_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
    }
}

static void hdr_write(uintptr_t lo, uintptr_t user, const struct heap_hdr *h)
{
    memcpy((void *)(lo + h->off), h, sizeof(*h));
    memcpy((void *)(user - HEAP_HDR), h, sizeof(*h));
}

/* The header of user pointer u of the region [lo, hi), checked; aborts on a bad one. */
static struct heap_hdr hdr_check(const char *fn, uintptr_t lo, uintptr_t hi, uintptr_t u)
{
    struct heap_hdr h, h0;
    if (u % HEAP_HDR != 0 || u - lo < HEAP_HDR)
        heap_bad(fn, u);
    memcpy(&h, (const void *)(u - HEAP_HDR), sizeof(h));
    if (h.magic != HEAP_MAGIC_LIVE || h.off % page_size != 0 || h.off > hi - lo ||
        h.len > hi - lo - h.off || lo + h.off > u - HEAP_HDR || u >= lo + h.off + h.len)
        heap_bad(fn, u);
    memcpy(&h0, (const void *)(lo + h.off), sizeof(h0));
    if (memcmp(&h, &h0, sizeof(h)) != 0)
        heap_bad(fn, u);
    return h;
}

/*
 * A block of the heap for size bytes at user alignment align (a power of two from 64 to
 * HEAP_MAX_ALIGN), zeroed if asked; NULL when there is no heap, no room in it, or no
 * memory for its pages, and the caller then asks glibc.
 */
static void *heap_alloc(size_t size, size_t align, bool zero)
{
    if (heap_busy || !heap_ready() || size < heap_threshold())
        return NULL; /* (the threshold may have changed as the heap was made) */
    int saved_errno = errno;
    uintptr_t lo = atomic_load_explicit(&heap_lo, memory_order_relaxed);
    uintptr_t u = 0, bs = 0, end = 0;
    size_t need = size != 0 ? size : 1; /* a user pointer must lie inside its block */
    size_t i;
    pthread_mutex_lock(&heap_lock);
    if (!vec_reserve((void **)&ext, &cap_ext, n_ext + 1, sizeof(*ext)))
        goto fail;
    for (i = 0; i < n_ext; i++) {
        uintptr_t e_lo = lo + ext[i].off, e_hi = e_lo + ext[i].len;
        u = (e_lo + HEAP_HDR + align - 1) & ~(uintptr_t)(align - 1);
        if (u < e_hi && need <= e_hi - u)
            break;
    }
    if (i == n_ext)
        goto fail; /* the heap's address range is used up */
    struct extent e = ext[i];
    bs = (u - HEAP_HDR) & ~(uintptr_t)(page_size - 1);
    end = (u + need + page_size - 1) & ~(uintptr_t)(page_size - 1);
    if (!e.backed && fallocate(heap_fd, 0, (off_t)(bs - lo), (off_t)(end - bs)) != 0)
        goto fail; /* no memory (ENOSPC, ENOMEM): a private allocation is better than NULL */
    struct extent back = e;
    back.off = end - lo;
    back.len = e.off + e.len - back.off;
    if (bs - lo > e.off) {
        ext[i].len = bs - lo - e.off; /* the front stays free, the back after it */
        if (back.len != 0)
            ext_insert(i + 1, back);
    } else if (back.len != 0) {
        ext[i] = back;
    } else {
        ext_remove(i);
    }
    pthread_mutex_unlock(&heap_lock);
    struct heap_hdr h = {.magic = HEAP_MAGIC_LIVE, .off = bs - lo, .len = end - bs, .size = size};
    hdr_write(lo, u, &h);
    if (zero && !e.zero)
        memset((void *)u, 0, size);
    errno = saved_errno;
    return (void *)u;
fail:
    pthread_mutex_unlock(&heap_lock);
    errno = saved_errno;
    return NULL;
}

static void heap_release(uintptr_t lo, uintptr_t hi, uintptr_t u)
{
    struct heap_hdr h = hdr_check("free", lo, hi, u);
    h.magic = HEAP_MAGIC_FREE; /* so that a second free of u is caught */
    hdr_write(lo, u, &h);
    pthread_mutex_lock(&heap_lock);
    ext_free(h.off, h.len);
    pthread_mutex_unlock(&heap_lock);
}

/*
 * Who owns pointer u: the heap (1), an old heap inherited over fork (2), with the
 * region in *lo and *hi, or glibc (0, NULL included).
 */
static int region_of(uintptr_t u, uintptr_t *lo, uintptr_t *hi)
{
    *hi = atomic_load_explicit(&heap_hi, memory_order_acquire);
    *lo = atomic_load_explicit(&heap_lo, memory_order_relaxed);
    if (u >= *lo && u < *hi)
        return 1;
    for (size_t i = 0; i < n_legacy; i++) {
        if (u >= legacy[i].lo && u < legacy[i].hi) {
            *lo = legacy[i].lo;
            *hi = legacy[i].hi;
            return 2;
        }
    }
    return 0;
}

/*
 * A block of an old heap: its memory goes back, its range stays reserved (a glibc
 * mapping there would be taken for an old heap's block by free).
 */
static void legacy_release(uintptr_t lo, uintptr_t hi, uintptr_t u)
{
    struct heap_hdr h = hdr_check("free", lo, hi, u);
    h.magic = HEAP_MAGIC_FREE;
    hdr_write(lo, u, &h);
    reserve(lo + h.off, h.len);
}

/* malloc without the heap's fallbacks spelled out at each caller. */
static void *alloc_any(size_t n)
{
    void *p = n >= heap_threshold() ? heap_alloc(n, HEAP_HDR, false) : NULL;
    return p != NULL ? p : __libc_malloc(n);
}

/* Moves block u (usable bytes at hand) to a new one of n bytes; NULL leaves u alone. */
static void *move_block(uintptr_t u, size_t usable, size_t n)
{
    void *q = alloc_any(n);
    if (q != NULL)
        memcpy(q, (const void *)u, usable < n ? usable : n);
    return q;
}

static void *heap_realloc(uintptr_t lo, uintptr_t hi, uintptr_t u, size_t n)
{
    struct heap_hdr h = hdr_check("realloc", lo, hi, u);
    uintptr_t end = lo + h.off + h.len;
    uintptr_t want = (u + (n != 0 ? n : 1) + page_size - 1) & ~(uintptr_t)(page_size - 1);
    if (n <= end - u) {
        /* It fits.  A tail worth a heap allocation of its own goes back to the heap. */
        if (end - want >= heap_threshold() && end - want >= page_size) {
            pthread_mutex_lock(&heap_lock);
            ext_free(want - lo, end - want);
            pthread_mutex_unlock(&heap_lock);
            h.len = want - lo - h.off;
        }
        h.size = n;
        hdr_write(lo, u, &h);
        return (void *)u;
    }
    /* Grow in place over the free extent that follows, as a growing vector wants. */
    pthread_mutex_lock(&heap_lock);
    size_t i = ext_search(end - lo);
    bool grown =
        n <= hi - u && i < n_ext && ext[i].off == end - lo &&
        ext[i].off + ext[i].len >= want - lo &&
        (ext[i].backed || fallocate(heap_fd, 0, (off_t)(end - lo), (off_t)(want - end)) == 0);
    if (grown) {
        ext[i].len -= want - end;
        ext[i].off = want - lo;
        if (ext[i].len == 0)
            ext_remove(i);
    }
    pthread_mutex_unlock(&heap_lock);
    if (grown) {
        h.len = want - lo - h.off;
        h.size = n;
        hdr_write(lo, u, &h);
        return (void *)u;
    }
    void *q = move_block(u, end - u, n);
    if (q != NULL)
        heap_release(lo, hi, u);
    return q;
}

HEAP_EXPORT void *malloc(size_t size)
{
    return alloc_any(size);
}

HEAP_EXPORT void free(void *ptr)
{
    uintptr_t lo, hi;
    int owner = region_of((uintptr_t)ptr, &lo, &hi);
    if (owner == 1)
        heap_release(lo, hi, (uintptr_t)ptr);
    else if (owner == 2)
        legacy_release(lo, hi, (uintptr_t)ptr);
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
    void *p = n >= heap_threshold() ? heap_alloc(n, HEAP_HDR, true) : NULL;
    return p != NULL ? p : __libc_calloc(nmemb, size);
}

/*
 * glibc's semantics: realloc(NULL, n) is malloc(n), realloc(p, 0) frees p and returns
 * NULL, and a failure leaves p as it was.  A glibc block that grows past the threshold
 * moves into the heap (peers must reach a vector grown by realloc, too); one that
 * shrinks or fits stays with glibc.
 */
HEAP_EXPORT void *realloc(void *ptr, size_t size)
{
    uintptr_t u = (uintptr_t)ptr, lo, hi;
    int owner = region_of(u, &lo, &hi);
    if (ptr == NULL)
        return alloc_any(size);
    if (owner != 0 && size == 0) {
        free(ptr);
        return NULL;
    }
    if (owner == 1)
        return heap_realloc(lo, hi, u, size);
    if (owner == 2) {
        /* An old heap's block moves to where its new size belongs. */
        struct heap_hdr h = hdr_check("realloc", lo, hi, u);
        void *q = move_block(u, lo + h.off + h.len - u, size);
        if (q != NULL)
            legacy_release(lo, hi, u);
        return q;
    }
    if (size >= heap_threshold() && !heap_busy && heap_ready()) {
        size_t usable = libc_usable_size(ptr);
        void *q = usable != 0 && usable < size ? heap_alloc(size, HEAP_HDR, false) : NULL;
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
 * The heap's block for an aligned request, or NULL to let glibc answer it: small, an
 * alignment that is not a power of two (glibc 2.36 rounds it up) or above 1 MiB, or no
 * room in the heap.
 */
static void *aligned_any(size_t align, size_t size)
{
    void *p = NULL;
    if (size >= heap_threshold() && align != 0 && (align & (align - 1)) == 0 &&
        align <= HEAP_MAX_ALIGN)
        p = heap_alloc(size, align < HEAP_HDR ? HEAP_HDR : align, false);
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
    uintptr_t u = (uintptr_t)ptr, lo, hi;
    if (region_of(u, &lo, &hi) != 0) {
        struct heap_hdr h = hdr_check("malloc_usable_size", lo, hi, u);
        return lo + h.off + h.len - u;
    }
    return ptr != NULL ? libc_usable_size(ptr) : 0;
}

HEAP_EXPORT int arcomm_heap_region(struct arcomm_heap_info *info)
{
    if (heap_busy || !heap_ready())
        return 0;
    uintptr_t lo = atomic_load_explicit(&heap_lo, memory_order_relaxed);
    info->base = (void *)lo;
    info->bytes = atomic_load_explicit(&heap_hi, memory_order_relaxed) - lo;
    info->fd = heap_fd;
    info->pad = 0;
    info->min_bytes = heap_threshold();
    return 1;
}

/*
 * Resolves glibc's malloc_usable_size and reads the threshold before main, away from
 * any lock (the lazy paths above remain for calls made by constructors that run first).
 */
__attribute__((constructor)) static void heap_init(void)
{
    heap_threshold();
    libc_usable_size(NULL);
}
