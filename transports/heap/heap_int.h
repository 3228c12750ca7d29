/* SPDX-License-Identifier: MIT */
/*
 * What the files of libarcomm_heap.so share (heap_api.c: the malloc family and the
 * library's entry points; heap_span.c: the blocks and free spans of one heap;
 * heap_fork.c: fork, generations, the heaps a fork child inherits; heap_cache.c: the
 * threads' caches).  docs/heap.md says what the heap promises; this header says how.
 *
 * A heap is one MAP_SHARED mapping of one memfd (the file peers map), its address at
 * base + off mapping the file at off.  Its pages are tiled by spans: live blocks and
 * free spans, each described by a record kept outside the heap (in the heap's own
 * anonymous bookkeeping mapping, never in malloc'd memory and never in the heap's pages,
 * so that a program's stray write cannot derail the allocator and untouched pages stay
 * uncommitted).  A page map holds each span's record at its first and last page, which
 * is how free() finds a block and how a freed block finds its free neighbours.
 */
#ifndef ARCOMM_HEAP_INT_H
#define ARCOMM_HEAP_INT_H

#include "heap_abi.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HEAP_EXPORT __attribute__((visibility("default")))
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14: commits pages without writing them */
#endif
#define HEAP_MAX_ALIGN   (1UL << 20)  /* larger alignments go to glibc */
#define HEAP_DEFAULT_MIN (64UL << 10) /* ARCOMM_HEAP_MIN's default */
#define HEAP_MAX_BYTES   (1ULL << 40) /* ARCOMM_HEAP_BYTES's default is capped here */
#define HEAP_CHUNK_PAGES 512u         /* pages per entry of the coarse map */
#define HEAP_MAX_RECS    (1u << 24)   /* records (spans) a heap can describe */

/* Two-level segregated fit over page counts (TLSF): 8 sub-bins per power of two. */
#define TLSF_SL_BITS  3
#define TLSF_SL_COUNT (1u << TLSF_SL_BITS)
#define TLSF_FL_COUNT 30

/* glibc's own allocator, exported under these names: they never call back into us. */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

enum span_state {
    SPAN_UNUSED = 0, /* a record on the free list of records */
    SPAN_CLEAN,      /* free, its pages known zero (never touched, or punched) */
    SPAN_DIRTY,      /* free, its pages committed (a freed block kept for reuse) */
    SPAN_HELD,       /* free, its memfd pages still seen by fork children (gen..gen_to) */
    SPAN_GONE,       /* free for good: an inherited heap's freed block (reserved, no pages) */
    SPAN_LIVE,       /* a block the program holds */
};

enum block_kind {
    BLK_SHARED = 0, /* in the memfd, reached by peers; no collective used it yet */
    BLK_EXPORTED,   /* in the memfd, and a collective handed it to peers (arcomm_heap_share) */
    BLK_PRIVATE,    /* a private, copy-on-write view of the memfd, since fork `gen` */
    BLK_COPY,       /* a private anonymous copy (a fork child's copy of an exported block) */
    BLK_CACHED,     /* freed into its thread's cache: free to the program, live to the heap */
};

/* One span: a live block or a free range of pages.  64 bytes. */
struct span {
    uint32_t first;  /* first page, from the heap's base */
    uint32_t npages; /* pages (a live block's user bytes end at or before its last page) */
    uint8_t state;   /* enum span_state */
    uint8_t kind;    /* live: enum block_kind */
    uint8_t zeroed;  /* live: its pages were clean when it was carved (calloc skips memset) */
    uint8_t pad;
    uint32_t uoff;     /* live: the user pointer's offset from the first page (< a page) */
    uint64_t size;     /* live: the bytes the program asked for */
    uint32_t prev;     /* free: neighbours in its bin (held: in the held list), 0 at an end */
    uint32_t next;     /* ... ; unused records: the next unused one */
    uint32_t lru_prev; /* dirty: neighbours in the list of dirty spans, newest first */
    uint32_t lru_next;
    uint32_t gen;         /* private: the fork that made it private; held: first fork */
    uint32_t gen_to;      /* held: last fork whose child may see its pages */
    _Atomic uint32_t seq; /* changes whenever the block is freed or changes kind */
    uint32_t stage;       /* fork: an exported block's first page in the staging copy */
    uint64_t stamp;       /* dirty: when it became dirty (heap_now_ns), for the decay */
};
_Static_assert(sizeof(struct span) == 64, "a span record is one cache line");

struct tlsf {
    uint32_t fl_map;                             /* first levels with a non-empty bin */
    uint32_t sl_map[TLSF_FL_COUNT];              /* per first level: non-empty bins */
    uint32_t head[TLSF_FL_COUNT][TLSF_SL_COUNT]; /* first span of each bin, 0: empty */
};

/*
 * One heap: this process's own (heap_cur), or one inherited over fork (a legacy heap:
 * the parent's heap as the child sees it, its live blocks private, nothing allocated
 * from it again).
 */
struct heap {
    uintptr_t lo, hi; /* the mapping */
    uint32_t npages;
    bool legacy;
    int fd;    /* the memfd, held at a high number; -1 once it was lost */
    dev_t dev; /* with ino: the memfd's identity, checked before every use of fd */
    ino_t ino;
    uint32_t *pm;      /* [npages]: a span's record id at its first and last page, else 0 */
    uint32_t *cm;      /* [npages / 512]: the live block holding the chunk's first page */
    struct span *recs; /* [HEAP_MAX_RECS or fewer]: record 0 is never used */
    uint32_t cap_recs, used_recs, free_recs;
    void *book; /* the bookkeeping mapping (pm, cm, recs) */
    size_t book_len;
    struct tlsf bins[2];         /* free spans: [0] clean, [1] dirty */
    uint32_t lru_head, lru_tail; /* dirty spans, newest first */
    uint32_t held_head;
    uint64_t live_bytes, dirty_bytes, held_bytes;
    uint64_t live_blocks;
    uint64_t retain;    /* dirty bytes kept for reuse before the oldest are punched */
    bool strict_commit; /* vm.overcommit_memory=2: commit pages when a block is carved */
    /* Forks of this heap (heap_fork.c); generation g holds the OFD read lock on byte g. */
    uint32_t gen;     /* the last generation made (0: none) */
    uint32_t gen_low; /* every generation below it is released */
    uint8_t *gen_rel; /* [cap_gen]: 1 where generation g was seen released */
    size_t cap_gen;
    uint64_t next_release_ns; /* when held spans may be checked again */
    /* Legacy: the mapping that keeps the generation's lock alive (see heap_fork.c). */
    void *sentinel;
    size_t sentinel_len;
    char *stage; /* fork: the staging copy of the exported blocks (prepare to child) */
    size_t stage_len;
};

/* heap_api.c */
extern size_t heap_page;                   /* the page size */
extern pthread_mutex_t heap_lock;          /* every heap's state, and the fork */
extern _Atomic int heap_state;             /* 0: not made yet, 1: active, -1: none */
extern _Atomic uintptr_t heap_lo, heap_hi; /* the current heap's range (0 without one) */
extern struct heap *heap_cur;              /* the current heap (under heap_lock) */
/*
 * Inherited heaps, read without the lock by free() (slots of dropped heaps are NULL; the
 * array grows only in a fork child's handler, where no other thread runs).
 */
extern struct heap **heap_legacy;
extern size_t heap_n_legacy, heap_cap_legacy;
extern volatile uint8_t *heap_canary; /* 1 in this process, 0 in a fork child (WIPEONFORK) */
extern __thread bool heap_in_fork __attribute__((tls_model("initial-exec")));
__attribute__((format(printf, 1, 2))) void heap_say(const char *fmt, ...);
void heap_complain(const char *what, int err, const char *then);
_Noreturn void heap_bad(const char *fn, uintptr_t p);
bool heap_vec_reserve(void **arr, size_t *cap, size_t want, size_t elem);
uint64_t heap_now_ns(void);
bool heap_fd_ok(struct heap *h);
void heap_share_forget(void);

/* heap_span.c */
struct heap *heap_make(size_t bytes);
void heap_unmake(struct heap *h);
uintptr_t heap_carve(struct heap *h, size_t size, size_t align, bool *zeroed);
void heap_release(struct heap *h, struct span *s);
void heap_block_forget(struct heap *h, struct span *s);
bool heap_grow_in_place(struct heap *h, struct span *s, size_t n);
void heap_shrink_in_place(struct heap *h, struct span *s, size_t n, size_t min_tail);
struct span *heap_block_at(const struct heap *h, uintptr_t u);
struct span *heap_block_holding(const struct heap *h, uintptr_t p);
void heap_trim(struct heap *h, uint64_t keep);
void heap_trim_maybe(struct heap *h);
static inline uintptr_t span_addr(const struct heap *h, const struct span *s)
{
    return h->lo + (uintptr_t)s->first * heap_page;
}
static inline uintptr_t span_user(const struct heap *h, const struct span *s)
{
    return span_addr(h, s) + s->uoff;
}
static inline size_t span_bytes(const struct span *s)
{
    return (size_t)s->npages * heap_page;
}
static inline uint32_t span_id(const struct heap *h, const struct span *s)
{
    return (uint32_t)(s - h->recs);
}
/* Walks the spans in address order (they tile the heap). */
static inline struct span *span_first(const struct heap *h)
{
    return &h->recs[h->pm[0]];
}
static inline struct span *span_next(const struct heap *h, const struct span *s)
{
    uint32_t p = s->first + s->npages;
    return p < h->npages ? &h->recs[h->pm[p]] : NULL;
}
/* Span bookkeeping that heap_fork.c needs too. */
void span_set_free(struct heap *h, struct span *s, enum span_state st);
void span_held_remove(struct heap *h, struct span *s);

/* heap_fork.c */
void heap_atfork_register(void);
void heap_fork_child_unhandled(void);
bool heap_gens_released(struct heap *h, uint32_t from, uint32_t to, bool force);
void heap_release_held(struct heap *h, bool force);
int heap_thaw(struct heap *h, struct span *s);
void heap_free_private(struct heap *h, struct span *s);
void heap_legacy_release(struct heap *h, struct span *s);
void heap_defer_free(void *p);

/* heap_cache.c */
void *heap_cache_get(size_t size);
bool heap_cache_put(struct heap *h, struct span *s);
void heap_cache_flush_all(void);
void heap_cache_lock_all(void);
void heap_cache_unlock_all(bool child);
void heap_cache_init(void);

#endif /* ARCOMM_HEAP_INT_H */
