/* SPDX-License-Identifier: MIT */
/*
 * What libarcomm_heap.so (the shared heap, an LD_PRELOAD allocator: docs/heap.md) exports
 * for libarcomm.  The heap serves the process's large allocations (malloc and its family,
 * from ARCOMM_HEAP_MIN bytes) from one MAP_SHARED memfd mapping, so that peer process
 * ranks can map the same memory (through /proc/<pid>/fd/<fd>) and reach buffers the
 * application allocated with plain malloc: the one-pass path of thread ranks, for process
 * ranks.  libarcomm references both symbols weakly: without the preload they are NULL and
 * nothing changes.
 */
#ifndef ARCOMM_HEAP_ABI_H
#define ARCOMM_HEAP_ABI_H

#include <stdint.h>

struct arcomm_heap_info {
    void *base;     /* first byte of the heap's mapping in this process */
    uint64_t bytes; /* size of the mapping and of the memfd (a multiple of the page size) */
    int fd;         /* the memfd (close-on-exec); offset o of it is base + o here */
    int pad;
    uint64_t min_bytes; /* ARCOMM_HEAP_MIN: allocations of this size and more come from it */
};

/*
 * 1 and *info filled when this process has a shared heap that peers can map (made at
 * the first call of this function or at the first large allocation, whichever comes
 * first; in a child made by fork a heap of its own), 0 when it has none (the heap could
 * not be made, ARCOMM_HEAP_BYTES=0, or the program closed the heap's memfd).
 * Thread-safe.
 */
int arcomm_heap_region(struct arcomm_heap_info *info);

/*
 * 1, and in *offset where p lies in the memfd (p - info.base), when [p, p + len) lies in
 * one live block of this process's shared heap whose pages peers reach through the
 * memfd; the block is then marked as handed to peers, so that a later fork() keeps it
 * shared (the child gets a private copy of it) where it would otherwise make it private
 * to parent and child alike.  0 otherwise: p outside the heap, a range past its block's
 * end, or a block made private by an earlier fork() (the caller stages that buffer).
 * Cheap when asked again about the same block; thread-safe.
 */
int arcomm_heap_share(const void *p, uint64_t len, uint64_t *offset);

/* What arcomm_heap_stats reports: the current heap's pages, by what holds them. */
struct arcomm_heap_stats {
    uint64_t live_bytes; /* in blocks the program holds (whole pages) */
    uint64_t live_blocks;
    uint64_t exported_bytes; /* of live_bytes: blocks a collective handed to peers */
    uint64_t private_bytes;  /* of live_bytes: blocks private to this process since a fork */
    uint64_t cached_bytes;   /* of live_bytes: freed blocks in the threads' caches */
    uint64_t dirty_bytes;    /* freed pages kept committed for reuse */
    uint64_t held_bytes;     /* freed pages a fork child may still see (not reused yet) */
    uint64_t free_spans;     /* free ranges of pages, clean and dirty */
    uint32_t forks;          /* forks that made blocks private (generations) */
    uint32_t forks_alive;    /* of those: whose children may still see the heap's pages */
};

/*
 * 1 and *st filled when this process has a heap (0 otherwise): for tests, benchmarks
 * and diagnostics; it walks the heap under its lock.
 */
int arcomm_heap_stats(struct arcomm_heap_stats *st);

#endif /* ARCOMM_HEAP_ABI_H */
