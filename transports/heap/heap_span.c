/* SPDX-License-Identifier: MIT */
/*
 * The blocks and free spans of one heap (heap_int.h has the picture), under heap_lock.
 *
 * Free spans sit in two sets of segregated-fit bins: dirty ones (freed blocks whose pages
 * are still committed) and clean ones (never touched, or punched).  A block is carved
 * from a dirty span when one fits, so that a program that frees and allocates again
 * reuses memory that is already there, as glibc's arenas do, and pays neither a page
 * fault nor a system call for it; clean spans are the fallback.  Freed blocks stay
 * committed until the dirty bytes pass the heap's retention bound (below), or until no
 * allocation took them back for a second; then the oldest dirty spans are punched out of
 * the memfd (MADV_REMOVE on the heap's own mapping: the memory goes back to the system,
 * from the peers' mappings too, and no file descriptor is used).  Nothing is committed
 * when a block is carved: the program's first touch of a page commits it, as with glibc,
 * and counts it in the process's RSS (RssShmem), where the OOM killer and memory cgroups
 * see it.
 */
#include "heap_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * What a heap keeps of its freed pages for reuse: up to as many dirty bytes as it has live
 * ones (at least HEAP_RETAIN_MIN), and none that no allocation took for HEAP_DECAY_NS.
 * A program that frees and allocates again (numpy's temporaries, a server's per-request
 * buffers) then pays no page fault; glibc gets there through its arenas for blocks under
 * its mmap threshold and through transparent huge pages (numpy asks for them, the
 * memfd's shared memory cannot have them) above it.  docs/PERFORMANCE.md, "Shared heap".
 */
#define HEAP_RETAIN_MIN (16ULL << 20)
#define HEAP_DECAY_NS   (1000ULL * 1000 * 1000)

/* Page map entries are read without the lock by free() and arcomm_heap_share(). */
static inline uint32_t pm_get(const struct heap *h, uint32_t page)
{
    return __atomic_load_n(&h->pm[page], __ATOMIC_RELAXED);
}

static inline void pm_set(struct heap *h, uint32_t page, uint32_t id)
{
    __atomic_store_n(&h->pm[page], id, __ATOMIC_RELAXED);
}

static void mark(struct heap *h, struct span *s)
{
    uint32_t id = span_id(h, s);
    pm_set(h, s->first, id);
    pm_set(h, s->first + s->npages - 1, id);
}

static void unmark(struct heap *h, struct span *s)
{
    uint32_t id = span_id(h, s);
    if (pm_get(h, s->first) == id)
        pm_set(h, s->first, 0);
    if (pm_get(h, s->first + s->npages - 1) == id)
        pm_set(h, s->first + s->npages - 1, 0);
}

/* The coarse map names the live block that holds each chunk's first page. */
static void cm_fill(struct heap *h, const struct span *s, uint32_t id)
{
    uint32_t c = (s->first + HEAP_CHUNK_PAGES - 1) / HEAP_CHUNK_PAGES;
    uint32_t last = (s->first + s->npages - 1) / HEAP_CHUNK_PAGES;
    for (; c <= last; c++)
        __atomic_store_n(&h->cm[c], id, __ATOMIC_RELAXED);
}

static uint32_t rec_new(struct heap *h)
{
    uint32_t id = h->free_recs;
    if (id != 0) {
        h->free_recs = h->recs[id].next;
    } else {
        if (h->used_recs >= h->cap_recs)
            return 0;
        id = h->used_recs++;
    }
    struct span *s = &h->recs[id];
    /* Field by field: seq is read without the lock, and only ever counts up. */
    s->first = s->npages = 0;
    s->state = s->kind = s->zeroed = s->pad = 0;
    s->uoff = 0;
    s->size = 0;
    s->prev = s->next = s->lru_prev = s->lru_next = 0;
    s->gen = s->gen_to = s->stage = 0;
    s->stamp = 0;
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    return id;
}

static void rec_free(struct heap *h, struct span *s)
{
    s->state = SPAN_UNUSED;
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    s->next = h->free_recs;
    h->free_recs = span_id(h, s);
}

/* ---- segregated-fit bins ---- */

static void tlsf_mapping(uint32_t n, unsigned *fl, unsigned *sl)
{
    if (n < TLSF_SL_COUNT) {
        *fl = 0;
        *sl = n;
        return;
    }
    unsigned t = 31u - (unsigned)__builtin_clz(n);
    *sl = (n >> (t - TLSF_SL_BITS)) ^ TLSF_SL_COUNT;
    *fl = t - TLSF_SL_BITS + 1;
}

/* The bin from which every span is at least n pages (n rounded up to a bin's start). */
static void tlsf_mapping_up(uint32_t n, unsigned *fl, unsigned *sl)
{
    if (n >= TLSF_SL_COUNT) {
        unsigned t = 31u - (unsigned)__builtin_clz(n);
        uint64_t up = (uint64_t)n + (1u << (t - TLSF_SL_BITS)) - 1;
        n = up > UINT32_MAX ? UINT32_MAX : (uint32_t)up;
    }
    tlsf_mapping(n, fl, sl);
}

static struct tlsf *bins_of(struct heap *h, const struct span *s)
{
    return &h->bins[s->state == SPAN_DIRTY ? 1 : 0];
}

static void bin_insert(struct heap *h, struct span *s)
{
    struct tlsf *t = bins_of(h, s);
    unsigned fl, sl;
    tlsf_mapping(s->npages, &fl, &sl);
    uint32_t id = span_id(h, s);
    s->prev = 0;
    s->next = t->head[fl][sl];
    if (s->next != 0)
        h->recs[s->next].prev = id;
    t->head[fl][sl] = id;
    t->fl_map |= 1u << fl;
    t->sl_map[fl] |= 1u << sl;
    if (s->state == SPAN_DIRTY) {
        h->dirty_bytes += span_bytes(s);
        s->stamp = heap_now_ns();
        s->lru_prev = 0;
        s->lru_next = h->lru_head;
        if (h->lru_head != 0)
            h->recs[h->lru_head].lru_prev = id;
        h->lru_head = id;
        if (h->lru_tail == 0)
            h->lru_tail = id;
    }
}

static void bin_remove(struct heap *h, struct span *s)
{
    struct tlsf *t = bins_of(h, s);
    unsigned fl, sl;
    tlsf_mapping(s->npages, &fl, &sl);
    if (s->prev != 0)
        h->recs[s->prev].next = s->next;
    else
        t->head[fl][sl] = s->next;
    if (s->next != 0)
        h->recs[s->next].prev = s->prev;
    if (t->head[fl][sl] == 0) {
        t->sl_map[fl] &= ~(1u << sl);
        if (t->sl_map[fl] == 0)
            t->fl_map &= ~(1u << fl);
    }
    if (s->state == SPAN_DIRTY) {
        h->dirty_bytes -= span_bytes(s);
        if (s->lru_prev != 0)
            h->recs[s->lru_prev].lru_next = s->lru_next;
        else
            h->lru_head = s->lru_next;
        if (s->lru_next != 0)
            h->recs[s->lru_next].lru_prev = s->lru_prev;
        else
            h->lru_tail = s->lru_prev;
    }
    s->prev = s->next = s->lru_prev = s->lru_next = 0;
}

/* The first page of a block of n pages at alignment align in span s, if it fits there. */
static bool fits(const struct heap *h, const struct span *s, uint32_t n, size_t align,
                 uint32_t *start)
{
    uint32_t b = s->first;
    if (align > heap_page) {
        uintptr_t a = span_addr(h, s);
        uintptr_t u = (a + align - 1) & ~(uintptr_t)(align - 1);
        b += (uint32_t)((u - a) / heap_page);
    }
    if (b - s->first > s->npages || n > s->npages - (b - s->first))
        return false;
    *start = b;
    return true;
}

static struct span *bin_fit(struct heap *h, int which, uint32_t n, size_t align, uint32_t *start)
{
    struct tlsf *t = &h->bins[which];
    if (t->fl_map == 0)
        return NULL;
    unsigned fl, sl;
    /* The bin of n itself holds spans on both sides of n: a few are worth a look. */
    tlsf_mapping(n, &fl, &sl);
    uint32_t id = t->head[fl][sl];
    for (int k = 0; id != 0 && k < 8; k++, id = h->recs[id].next)
        if (fits(h, &h->recs[id], n, align, start))
            return &h->recs[id];
    uint64_t want = (uint64_t)n + (align > heap_page ? align / heap_page - 1 : 0);
    if (want > UINT32_MAX)
        return NULL;
    tlsf_mapping_up((uint32_t)want, &fl, &sl);
    if (fl >= TLSF_FL_COUNT)
        return NULL;
    uint32_t slm = t->sl_map[fl] & (~0u << sl);
    if (slm == 0) {
        uint32_t flm = fl + 1 < 32 ? t->fl_map & (~0u << (fl + 1)) : 0;
        if (flm == 0)
            return NULL;
        fl = (unsigned)__builtin_ctz(flm);
        slm = t->sl_map[fl];
    }
    sl = (unsigned)__builtin_ctz(slm);
    struct span *s = &h->recs[t->head[fl][sl]];
    return fits(h, s, n, align, start) ? s : NULL;
}

/*
 * Makes s a free span of state st (clean or dirty), merged with its neighbours of the
 * same state, and puts it in its bins.  s is marked in the page map on return.
 */
void span_set_free(struct heap *h, struct span *s, enum span_state st)
{
    unmark(h, s);
    s->state = (uint8_t)st;
    s->kind = 0;
    if (s->first > 0) {
        struct span *l = &h->recs[pm_get(h, s->first - 1)];
        if (l->state == st && l != s) {
            bin_remove(h, l);
            unmark(h, l);
            s->first = l->first;
            s->npages += l->npages;
            rec_free(h, l);
        }
    }
    uint32_t end = s->first + s->npages;
    if (end < h->npages) {
        struct span *r = &h->recs[pm_get(h, end)];
        if (r->state == st && r != s) {
            bin_remove(h, r);
            unmark(h, r);
            s->npages += r->npages;
            rec_free(h, r);
        }
    }
    mark(h, s);
    bin_insert(h, s);
}

/* Splits pages [first, first + n) off the front of free span s as a span of their own
 * (same state, in the bins), leaving s the rest; false when no record is left. */
static bool split_front(struct heap *h, struct span *s, uint32_t n)
{
    uint32_t id = rec_new(h);
    if (id == 0)
        return false;
    struct span *f = &h->recs[id];
    f->first = s->first;
    f->npages = n;
    f->state = s->state;
    s->first += n;
    s->npages -= n;
    mark(h, f);
    mark(h, s);
    bin_insert(h, f);
    return true;
}

static bool split_back(struct heap *h, struct span *s, uint32_t n)
{
    uint32_t id = rec_new(h);
    if (id == 0)
        return false;
    struct span *b = &h->recs[id];
    b->npages = s->npages - n;
    b->first = s->first + n;
    b->state = s->state;
    s->npages = n;
    mark(h, b);
    mark(h, s);
    bin_insert(h, b);
    return true;
}

/* MADV_POPULATE_WRITE under vm.overcommit_memory=2 (see heap_carve). */
static bool commit(uintptr_t a, size_t len)
{
    return madvise((void *)a, len, MADV_POPULATE_WRITE) == 0;
}

/*
 * A block for size bytes at user alignment align (0 or a power of two up to
 * HEAP_MAX_ALIGN), carved from a dirty span if one fits, else from a clean one.  Its
 * user pointer, or 0 when the heap has no room (the caller asks glibc).  *zeroed: its
 * pages are known zero.
 */
uintptr_t heap_carve(struct heap *h, size_t size, size_t align, bool *zeroed)
{
    size_t pg = heap_page;
    if (size > (size_t)h->npages * pg)
        return 0;
    uint32_t n = (uint32_t)((size + pg - 1) / pg);
    n = n != 0 ? n : 1;
    uint32_t b = 0;
    struct span *s = bin_fit(h, 1, n, align, &b);
    if (s == NULL)
        s = bin_fit(h, 0, n, align, &b);
    if (s == NULL && h->held_head != 0) {
        heap_release_held(h, true);
        s = bin_fit(h, 1, n, align, &b);
        if (s == NULL)
            s = bin_fit(h, 0, n, align, &b);
    }
    if (s == NULL)
        return 0;
    bin_remove(h, s);
    enum span_state was = (enum span_state)s->state;
    if ((b > s->first && !split_front(h, s, b - s->first)) ||
        (s->npages > n && !split_back(h, s, n))) {
        span_set_free(h, s, was); /* out of records: the span goes back as it was */
        return 0;
    }
    if (was == SPAN_CLEAN && h->strict_commit && !commit(span_addr(h, s), span_bytes(s))) {
        span_set_free(h, s, SPAN_DIRTY); /* whatever it committed stays committed */
        return 0;
    }
    s->state = SPAN_LIVE;
    s->kind = BLK_SHARED;
    s->zeroed = was == SPAN_CLEAN;
    s->uoff = 0;
    s->size = size;
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    mark(h, s);
    cm_fill(h, s, span_id(h, s));
    h->live_bytes += span_bytes(s);
    h->live_blocks++;
    *zeroed = s->zeroed;
    return span_user(h, s);
}

/* Punches dirty spans, oldest first, until at most keep dirty bytes remain. */
void heap_trim(struct heap *h, uint64_t keep)
{
    while (h->dirty_bytes > keep && h->lru_tail != 0) {
        struct span *s = &h->recs[h->lru_tail];
        if (madvise((void *)span_addr(h, s), span_bytes(s), MADV_REMOVE) != 0) {
            heap_complain("madvise(MADV_REMOVE) of freed heap pages", errno, "they stay committed");
            h->retain = UINT64_MAX; /* no point in trying again */
            return;
        }
        bin_remove(h, s);
        span_set_free(h, s, SPAN_CLEAN);
    }
}

/* After a free: the retention bound, then the decay (looked at only here: a program
 * that stops freeing keeps what it had). */
void heap_trim_maybe(struct heap *h)
{
    if (h->retain == UINT64_MAX)
        return; /* punching failed once: the pages stay */
    h->retain = h->live_bytes > HEAP_RETAIN_MIN ? h->live_bytes : HEAP_RETAIN_MIN;
    if (h->dirty_bytes > h->retain)
        heap_trim(h, h->retain - h->retain / 4);
    uint64_t now = heap_now_ns();
    while (h->lru_tail != 0 && h->retain != UINT64_MAX &&
           now - h->recs[h->lru_tail].stamp > HEAP_DECAY_NS)
        heap_trim(h, h->dirty_bytes - span_bytes(&h->recs[h->lru_tail]));
}

/* Drops a live block's traces (coarse map, accounting) before it becomes free. */
static void block_forget(struct heap *h, struct span *s)
{
    uint32_t id = span_id(h, s);
    uint32_t c = (s->first + HEAP_CHUNK_PAGES - 1) / HEAP_CHUNK_PAGES;
    uint32_t last = (s->first + s->npages - 1) / HEAP_CHUNK_PAGES;
    for (; c <= last; c++)
        if (__atomic_load_n(&h->cm[c], __ATOMIC_RELAXED) == id)
            __atomic_store_n(&h->cm[c], 0, __ATOMIC_RELAXED);
    h->live_bytes -= span_bytes(s);
    h->live_blocks--;
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
}

/* A live block in the memfd (shared, exported or cached) goes back to the dirty spans. */
void heap_release(struct heap *h, struct span *s)
{
    block_forget(h, s);
    span_set_free(h, s, SPAN_DIRTY);
    if (h->held_head != 0)
        heap_release_held(h, false);
    heap_trim_maybe(h);
}

/* Called by heap_fork.c for a block it took out of the heap's accounting itself. */
void heap_block_forget(struct heap *h, struct span *s)
{
    block_forget(h, s);
}

void span_held_remove(struct heap *h, struct span *s)
{
    if (s->prev != 0)
        h->recs[s->prev].next = s->next;
    else
        h->held_head = s->next;
    if (s->next != 0)
        h->recs[s->next].prev = s->prev;
    s->prev = s->next = 0;
    h->held_bytes -= span_bytes(s);
}

/* Grows live block s (in the memfd) in place to n user bytes, over the free span after
 * it; false when that span is not free or too small. */
bool heap_grow_in_place(struct heap *h, struct span *s, size_t n)
{
    size_t pg = heap_page;
    uint64_t want = ((uint64_t)s->uoff + n + pg - 1) / pg;
    if (want <= s->npages) {
        s->size = n;
        atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
        return true;
    }
    uint32_t end = s->first + s->npages;
    if (end >= h->npages || want - s->npages > h->npages - end)
        return false;
    uint32_t extra = (uint32_t)(want - s->npages);
    struct span *r = &h->recs[pm_get(h, end)];
    if ((r->state != SPAN_DIRTY && r->state != SPAN_CLEAN) || r->npages < extra)
        return false;
    bin_remove(h, r);
    enum span_state was = (enum span_state)r->state;
    if (r->npages > extra && !split_back(h, r, extra)) {
        span_set_free(h, r, was);
        return false;
    }
    if (was == SPAN_CLEAN && h->strict_commit && !commit(span_addr(h, r), span_bytes(r))) {
        span_set_free(h, r, SPAN_DIRTY);
        return false;
    }
    unmark(h, r);
    rec_free(h, r);
    unmark(h, s);
    s->npages += extra;
    s->size = n;
    s->zeroed = 0;
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    mark(h, s);
    cm_fill(h, s, span_id(h, s));
    h->live_bytes += (uint64_t)extra * pg;
    return true;
}

/* Shrinks live block s (in the memfd) to n user bytes; pages past them go back to the
 * heap when they are min_tail bytes or more. */
void heap_shrink_in_place(struct heap *h, struct span *s, size_t n, size_t min_tail)
{
    size_t pg = heap_page;
    uint32_t keep = (uint32_t)(((uint64_t)s->uoff + (n != 0 ? n : 1) + pg - 1) / pg);
    s->size = n;
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    if (keep >= s->npages || (size_t)(s->npages - keep) * pg < min_tail)
        return;
    uint32_t id = rec_new(h);
    if (id == 0)
        return;
    struct span *t = &h->recs[id];
    t->first = s->first + keep;
    t->npages = s->npages - keep;
    t->state = SPAN_LIVE;
    unmark(h, s);
    s->npages = keep;
    mark(h, s);
    mark(h, t);
    /* The tail's chunks named s: they name nothing now. */
    uint32_t sid = span_id(h, s);
    uint32_t c = (t->first + HEAP_CHUNK_PAGES - 1) / HEAP_CHUNK_PAGES;
    uint32_t last = (t->first + t->npages - 1) / HEAP_CHUNK_PAGES;
    for (; c <= last; c++)
        if (__atomic_load_n(&h->cm[c], __ATOMIC_RELAXED) == sid)
            __atomic_store_n(&h->cm[c], 0, __ATOMIC_RELAXED);
    h->live_bytes -= span_bytes(t);
    span_set_free(h, t, SPAN_DIRTY);
    heap_trim_maybe(h);
}

/* The live block whose user pointer is u, or NULL (also for a cached one's caller to
 * judge: kind BLK_CACHED is returned). */
struct span *heap_block_at(const struct heap *h, uintptr_t u)
{
    if (u < h->lo || u >= h->hi)
        return NULL;
    uint32_t p = (uint32_t)((u - h->lo) / heap_page);
    uint32_t id = pm_get(h, p);
    if (id == 0 || id >= h->used_recs)
        return NULL;
    struct span *s = &h->recs[id];
    if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) != SPAN_LIVE ||
        __atomic_load_n(&s->first, __ATOMIC_RELAXED) != p ||
        __atomic_load_n(&s->uoff, __ATOMIC_RELAXED) !=
            (uint32_t)(u - h->lo - (uintptr_t)p * heap_page))
        return NULL;
    return s;
}

/* The span (live or free) that holds address p of the heap (under heap_lock). */
struct span *heap_block_holding(const struct heap *h, uintptr_t p)
{
    if (p < h->lo || p >= h->hi)
        return NULL;
    uint32_t page = (uint32_t)((p - h->lo) / heap_page);
    uint32_t floor = page - page % HEAP_CHUNK_PAGES;
    for (uint32_t q = page + 1; q-- > floor;) {
        uint32_t id = pm_get(h, q);
        if (id != 0) {
            struct span *s = &h->recs[id];
            return page - s->first < s->npages ? s : NULL;
        }
    }
    uint32_t id = __atomic_load_n(&h->cm[page / HEAP_CHUNK_PAGES], __ATOMIC_RELAXED);
    if (id == 0)
        return NULL;
    struct span *s = &h->recs[id];
    return s->state == SPAN_LIVE && page - s->first < s->npages ? s : NULL;
}

/*
 * The memfd's descriptor is moved to a high number, out of the way of programs that
 * reopen their standard streams or dup2 onto small numbers (bash's `exec 4>log`).  Not
 * past 4096: a number near a large RLIMIT_NOFILE would make the kernel grow the
 * process's descriptor table to it.
 */
static int high_fd(int fd)
{
    struct rlimit rl;
    long top = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        top = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 4096 ? 4096 : (long)rl.rlim_cur;
    long want = top > 512 ? top - 256 : top / 2;
    if (want <= fd)
        return fd;
    int h = fcntl(fd, F_DUPFD_CLOEXEC, (int)want);
    if (h < 0)
        return fd;
    close(fd);
    return h;
}

static bool strict_overcommit(void)
{
    int fd = open("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC);
    char c = '0';
    if (fd >= 0) {
        if (read(fd, &c, 1) != 1)
            c = '0';
        close(fd);
    }
    return c == '2';
}

static const char private_tail[] = "large allocations stay private";

/*
 * Makes a heap of bytes (a page multiple): a sparse memfd mapped shared, its bookkeeping
 * in an anonymous mapping that holds the struct too; one clean span.  NULL, with a
 * message, when it cannot.
 */
struct heap *heap_make(size_t bytes)
{
    size_t pg = heap_page;
    size_t npages = bytes / pg;
    if (npages == 0 || npages > UINT32_MAX - 1) {
        heap_say("arcomm heap: a heap of %zu bytes is out of range (1 page to 16 TiB); %s", bytes,
                 private_tail);
        return NULL;
    }
    size_t nchunks = (npages + HEAP_CHUNK_PAGES - 1) / HEAP_CHUNK_PAGES;
    size_t cap_recs = npages + 16 < HEAP_MAX_RECS ? npages + 16 : HEAP_MAX_RECS;
    size_t head = (sizeof(struct heap) + pg - 1) & ~(pg - 1); /* a page of its own */
    size_t pm_off = head, cm_off = pm_off + ((npages * 4 + 63) & ~(size_t)63);
    size_t recs_off = cm_off + ((nchunks * 4 + 63) & ~(size_t)63);
    size_t book_len = (recs_off + cap_recs * sizeof(struct span) + pg - 1) & ~(pg - 1);
    char *book = mmap(NULL, book_len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (book == MAP_FAILED) {
        heap_complain("mmap of the heap's bookkeeping", errno, private_tail);
        return NULL;
    }
    struct heap *h = (struct heap *)book;
    h->book = book;
    h->book_len = book_len;
    h->pm = (uint32_t *)(book + pm_off);
    h->cm = (uint32_t *)(book + cm_off);
    h->recs = (struct span *)(book + recs_off);
    h->cap_recs = (uint32_t)cap_recs;
    h->used_recs = 1; /* record 0 means "none" */
    h->npages = (uint32_t)npages;
    h->fd = -1;
    h->retain = HEAP_RETAIN_MIN;
    h->gen_low = 1;
    h->strict_commit = strict_overcommit();
    int fd = memfd_create("arcomm-heap", MFD_CLOEXEC);
    if (fd < 0) {
        heap_complain("memfd_create", errno, private_tail);
        goto err_book;
    }
    fd = high_fd(fd);
    struct stat st;
    if (ftruncate(fd, (off_t)bytes) != 0 || fstat(fd, &st) != 0) {
        heap_complain("ftruncate of the heap's memfd", errno, private_tail);
        goto err_close;
    }
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (base == MAP_FAILED) {
        heap_complain("mmap of the heap", errno, private_tail);
        goto err_close;
    }
    h->fd = fd;
    h->dev = st.st_dev;
    h->ino = st.st_ino;
    h->lo = (uintptr_t)base;
    h->hi = (uintptr_t)base + bytes;
    struct span *s = &h->recs[rec_new(h)];
    s->first = 0;
    s->npages = (uint32_t)npages;
    s->state = SPAN_CLEAN;
    mark(h, s);
    bin_insert(h, s);
    return h;
err_close:
    close(fd);
err_book:
    munmap(book, book_len);
    return NULL;
}

/*
 * Unmaps a heap that nothing refers to any more (an inherited one whose last block
 * went).  The page that holds the struct stays, with an empty range: free() of another
 * thread may be reading it (heap_api.c, legacy_of).
 */
void heap_unmake(struct heap *h)
{
    uintptr_t lo = h->lo, hi = h->hi;
    __atomic_store_n(&h->lo, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&h->hi, 0, __ATOMIC_RELEASE);
    munmap((void *)lo, hi - lo);
    if (h->sentinel != NULL)
        munmap(h->sentinel, h->sentinel_len);
    h->sentinel = NULL;
    size_t head = (sizeof(struct heap) + heap_page - 1) & ~(heap_page - 1);
    munmap((char *)h->book + head, h->book_len - head);
}
