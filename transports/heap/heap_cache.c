/* SPDX-License-Identifier: MIT */
/*
 * The threads' caches: a few blocks each thread freed, handed back to its next
 * allocation of about the same size without the heap's lock, so that threads that
 * allocate and free large buffers (numpy temporaries, per-request buffers of a server)
 * do not queue on one mutex.  A cached block stays live to the heap (BLK_CACHED) and
 * free to the program: a second free of it is caught.
 *
 * Each cache has a lock of its own, uncontended except when a fork or an exiting
 * thread's flush takes it.  Lock order: the registry, the caches (in registry order),
 * heap_lock.  A fork empties every cache into the heap first (heap_fork.c), so that the
 * child inherits no block that only a thread it does not have knows about.
 */
#include "heap_int.h"

#include <string.h>
#include <sys/mman.h>

/*
 * Small: the cache is for the blocks whose lock trip costs most against what the program
 * does with them (a block of 256 KiB is 64 pages to touch), and every byte in it is
 * committed memory no other thread can use.  tools/heap-bench.sh measured 4 MiB of
 * blocks up to 2 MiB at 1.4-1.5x glibc's peak on threads allocating 64 KiB-1 MiB, and
 * this at 1.0-1.2x, no slower there (docs/PERFORMANCE.md, "Shared heap").
 */
#define CACHE_SLOTS     8
#define CACHE_MAX_PAGES 64u          /* blocks up to 256 KiB */
#define CACHE_MAX_BYTES (1ull << 20) /* per thread */

struct cache_slot {
    uintptr_t u;
    uint32_t id;
    uint32_t npages;
};

struct cache {
    pthread_mutex_t lock;
    struct cache *next; /* in the registry */
    bool live;          /* a thread owns it */
    uint32_t n;
    uint64_t bytes;
    struct cache_slot slot[CACHE_SLOTS]; /* oldest first */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cache *reg_head;
static pthread_key_t cache_key;
static bool key_ok;
static __thread struct cache *my_cache __attribute__((tls_model("initial-exec")));
static __thread bool my_cache_gone __attribute__((tls_model("initial-exec")));

/* Empties c into the heap (c's lock and heap_lock held). */
static void cache_empty(struct cache *c)
{
    struct heap *h = heap_cur;
    for (uint32_t i = 0; i < c->n; i++) {
        struct span *s = &h->recs[c->slot[i].id];
        s->kind = BLK_SHARED;
        heap_release(h, s);
    }
    c->n = 0;
    c->bytes = 0;
}

/* A thread's exit: its cache goes back to the heap, and is free for another thread. */
static void cache_destroy(void *arg)
{
    struct cache *c = arg;
    pthread_mutex_lock(&c->lock);
    if (c->n != 0) {
        pthread_mutex_lock(&heap_lock);
        if (heap_cur != NULL)
            cache_empty(c);
        c->n = 0;
        c->bytes = 0;
        pthread_mutex_unlock(&heap_lock);
    }
    c->live = false;
    pthread_mutex_unlock(&c->lock);
    my_cache = NULL;
    my_cache_gone = true; /* frees by later destructors go to the heap directly */
}

static struct cache *cache_new(void)
{
    if (!key_ok || my_cache_gone)
        return NULL;
    pthread_mutex_lock(&reg_lock);
    struct cache *c = reg_head;
    while (c != NULL && c->live)
        c = c->next;
    if (c == NULL) {
        /* A page of caches at a time, never given back (threads come and go). */
        size_t per = heap_page / sizeof(struct cache);
        struct cache *p =
            mmap(NULL, heap_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED || per == 0) {
            pthread_mutex_unlock(&reg_lock);
            return NULL;
        }
        for (size_t i = per; i-- > 0;) {
            pthread_mutex_init(&p[i].lock, NULL);
            p[i].next = reg_head;
            reg_head = &p[i];
        }
        c = reg_head;
    }
    c->live = true;
    c->n = 0;
    c->bytes = 0;
    pthread_mutex_unlock(&reg_lock);
    my_cache = c;
    pthread_setspecific(cache_key, c);
    return c;
}

void *heap_cache_get(size_t size)
{
    struct cache *c = my_cache;
    if (c == NULL || size > (size_t)CACHE_MAX_PAGES * heap_page)
        return NULL;
    uint32_t need = (uint32_t)((size + heap_page - 1) / heap_page);
    uint32_t most = need + need / 8;
    void *p = NULL;
    pthread_mutex_lock(&c->lock);
    for (uint32_t i = c->n; i-- > 0;) {
        struct cache_slot *e = &c->slot[i];
        if (e->npages < need || e->npages > most)
            continue;
        struct span *s = &heap_cur->recs[e->id];
        s->kind = BLK_SHARED;
        s->size = size;
        s->zeroed = 0;
        atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
        p = (void *)e->u;
        c->bytes -= (uint64_t)e->npages * heap_page;
        memmove(e, e + 1, (c->n - i - 1) * sizeof(*e));
        c->n--;
        break;
    }
    pthread_mutex_unlock(&c->lock);
    return p;
}

bool heap_cache_put(struct heap *h, struct span *s)
{
    uint32_t npages = __atomic_load_n(&s->npages, __ATOMIC_RELAXED);
    uint8_t kind = __atomic_load_n(&s->kind, __ATOMIC_RELAXED);
    if (npages > CACHE_MAX_PAGES || (kind != BLK_SHARED && kind != BLK_EXPORTED))
        return false;
    struct cache *c = my_cache != NULL ? my_cache : cache_new();
    if (c == NULL)
        return false;
    uint64_t bytes = (uint64_t)npages * heap_page;
    pthread_mutex_lock(&c->lock);
    if (h != heap_cur || s->state != SPAN_LIVE || s->kind != kind) {
        pthread_mutex_unlock(&c->lock);
        return false;
    }
    if (c->n == CACHE_SLOTS || c->bytes + bytes > CACHE_MAX_BYTES) {
        /* Full: the oldest go back to the heap. */
        pthread_mutex_lock(&heap_lock);
        uint32_t k = 0;
        while (k < c->n && (c->n - k == CACHE_SLOTS || c->bytes + bytes > CACHE_MAX_BYTES)) {
            struct span *o = &h->recs[c->slot[k].id];
            c->bytes -= (uint64_t)c->slot[k].npages * heap_page;
            o->kind = BLK_SHARED;
            heap_release(h, o);
            k++;
        }
        pthread_mutex_unlock(&heap_lock);
        memmove(&c->slot[0], &c->slot[k], (c->n - k) * sizeof(c->slot[0]));
        c->n -= k;
    }
    s->kind = BLK_CACHED;
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    c->slot[c->n++] =
        (struct cache_slot){.u = span_user(h, s), .id = span_id(h, s), .npages = npages};
    c->bytes += bytes;
    pthread_mutex_unlock(&c->lock);
    return true;
}

/* Fork: every cache's lock, in the registry's order (heap_lock comes after). */
void heap_cache_lock_all(void)
{
    pthread_mutex_lock(&reg_lock);
    for (struct cache *c = reg_head; c != NULL; c = c->next)
        pthread_mutex_lock(&c->lock);
}

/* Fork, with every lock held: the cached blocks go back to the heap. */
void heap_cache_flush_all(void)
{
    for (struct cache *c = reg_head; c != NULL; c = c->next)
        if (c->n != 0)
            cache_empty(c);
}

/*
 * After a fork: the parent unlocks; the child has only the forking thread, so every
 * lock is made anew and every other thread's cache is free for new threads (they were
 * emptied before the fork, or, after a fork without our handlers, their blocks belong
 * to the inherited heap, which never reuses them).
 */
void heap_cache_unlock_all(bool child)
{
    if (!child) {
        for (struct cache *c = reg_head; c != NULL; c = c->next)
            pthread_mutex_unlock(&c->lock);
        pthread_mutex_unlock(&reg_lock);
        return;
    }
    pthread_mutex_init(&reg_lock, NULL);
    for (struct cache *c = reg_head; c != NULL; c = c->next) {
        pthread_mutex_init(&c->lock, NULL);
        c->live = c == my_cache;
        c->n = 0;
        c->bytes = 0;
    }
}

void heap_cache_init(void)
{
    key_ok = pthread_key_create(&cache_key, cache_destroy) == 0;
}
