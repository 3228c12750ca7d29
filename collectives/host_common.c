/* SPDX-License-Identifier: MIT */
/*
 * What the host paths share: slicing, and the segment's barrier (every backend's).
 */
#include "coll.h"

void coll_slice(size_t count, size_t esize, int nranks, int r, size_t *lo, size_t *hi)
{
    /* Cut at 64-byte multiples so ranks writing neighbouring slices of one output do
     * not share a cache line (when the buffer is line aligned). */
    size_t align = esize >= 64 ? 1 : 64 / esize;
    size_t chunk = (count + (size_t)nranks - 1) / (size_t)nranks;
    chunk = (chunk + align - 1) / align * align;
    size_t l = chunk * (size_t)r;
    *lo = l < count ? l : count;
    *hi = count - *lo < chunk ? count : *lo + chunk;
}

comm_status_t coll_host_barrier(struct comm *c)
{
    struct shm_arrival mine = {.path = SHM_PATH_BARRIER};
    shm_arrive(c, &mine);
    comm_status_t st = shm_wait_arrivals(c, "comm_barrier");
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}
