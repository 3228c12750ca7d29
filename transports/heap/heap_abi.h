/* SPDX-License-Identifier: MIT */
/*
 * The one symbol libarcomm_heap.so (the shared heap, an LD_PRELOAD allocator) exports
 * for libarcomm: where this process's shared heap lies and the memfd behind it.  The
 * heap serves the process's large allocations (malloc and its family, from
 * ARCOMM_HEAP_MIN bytes) from one MAP_SHARED memfd mapping, so that peer process
 * ranks can map the same memory (through /proc/<pid>/fd/<fd>) and reach buffers the
 * application allocated with plain malloc: the one-pass path of thread ranks, for
 * process ranks.  libarcomm references the symbol weakly: without the preload it is
 * NULL and nothing changes.
 */
#ifndef ARCOMM_HEAP_ABI_H
#define ARCOMM_HEAP_ABI_H

#include <stdint.h>

struct arcomm_heap_info {
    void *base;     /* first byte of the heap's mapping in this process */
    uint64_t bytes; /* size of the mapping and of the memfd (a multiple of the page size) */
    int fd;         /* the memfd, open for the life of the process (close-on-exec) */
    int pad;
    uint64_t min_bytes; /* ARCOMM_HEAP_MIN: allocations of this size and more come from it */
};

/*
 * 1 and *info filled when this process has a shared heap (made at the first call of
 * this function or at the first large allocation, whichever comes first; the same
 * answer for the rest of the process's life, and in a child made by fork a heap of
 * its own), 0 when it has none (the heap could not be made, or ARCOMM_HEAP_BYTES=0).
 * Thread-safe.
 */
int arcomm_heap_region(struct arcomm_heap_info *info);

#endif /* ARCOMM_HEAP_ABI_H */
