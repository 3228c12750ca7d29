/* SPDX-License-Identifier: MIT */
/*
 * comm_mem_alloc arenas: each rank owns pool_bytes of the segment and allocates from
 * it alone (so allocation is not collective).  Memory there is reachable by every
 * rank, which lets process ranks take the one-pass bulk path.  The block list lives in
 * this process's heap: peers never need it.
 */
#include "shm.h"

#include <stdlib.h>
#include <string.h>

#define POOL_ALIGN 64

struct shm_pool_block {
    uint64_t offset; /* from the start of this rank's arena */
    uint64_t size;
    int used;
    struct shm_pool_block *next; /* next block by address */
};

static uint8_t *arena(const struct comm *c)
{
    return c->shm->pool + (uint64_t)c->rank * c->shm->pool_bytes;
}

comm_status_t shm_pool_alloc(struct comm *c, size_t bytes, void **ptr)
{
    struct shm_comm *s = c->shm;
    if (s->blocks == NULL && s->pool_bytes > 0) {
        s->blocks = calloc(1, sizeof(*s->blocks));
        if (s->blocks == NULL)
            goto err_nomem_host;
        s->blocks->size = s->pool_bytes;
    }
    uint64_t want = (bytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
    if (want < bytes)
        want = UINT64_MAX;
    for (struct shm_pool_block *b = s->blocks; b != NULL; b = b->next) {
        if (b->used || b->size < want)
            continue;
        /* The arena is sparse: reserve the block's pages now, so that a /dev/shm that
         * fills later fails this call instead of a SIGBUS in some later one. */
        int err = shm_segment_reserve(c, arena(c) + b->offset, (size_t)want);
        if (err != 0) {
            rt_error(c, COMM_ERR_NOMEM,
                     "rank %d: comm_mem_alloc(%zu): reserving its pages in /dev/shm failed: %s; "
                     "free space in /dev/shm or enlarge it",
                     c->rank, bytes, strerror(err));
            return COMM_ERR_NOMEM; /* the block stays free */
        }
        if (b->size > want) {
            struct shm_pool_block *rest = calloc(1, sizeof(*rest));
            if (rest == NULL)
                goto err_nomem_host;
            rest->offset = b->offset + want;
            rest->size = b->size - want;
            rest->next = b->next;
            b->next = rest;
            b->size = want;
        }
        b->used = 1;
        *ptr = arena(c) + b->offset;
        return COMM_OK;
    }
    uint64_t free_bytes = 0, largest = 0;
    for (struct shm_pool_block *b = s->blocks; b != NULL; b = b->next) {
        if (!b->used) {
            free_bytes += b->size;
            largest = b->size > largest ? b->size : largest;
        }
    }
    rt_error(c, COMM_ERR_NOMEM,
             "rank %d: comm_mem_alloc(%zu) does not fit the rank's %llu KiB arena (%llu KiB "
             "free, largest block %llu KiB); raise ARCOMM_MEM_POOL_BYTES",
             c->rank, bytes, (unsigned long long)(s->pool_bytes >> 10),
             (unsigned long long)(free_bytes >> 10), (unsigned long long)(largest >> 10));
    return COMM_ERR_NOMEM;

err_nomem_host:
    rt_error(c, COMM_ERR_NOMEM, "rank %d: out of host memory for the arena's block list", c->rank);
    return COMM_ERR_NOMEM;
}

comm_status_t shm_pool_free(struct comm *c, void *ptr)
{
    struct shm_comm *s = c->shm;
    uint8_t *a = arena(c);
    struct shm_pool_block *prev = NULL;
    for (struct shm_pool_block *b = s->blocks; b != NULL; prev = b, b = b->next) {
        if (a + b->offset != (uint8_t *)ptr)
            continue;
        if (!b->used)
            break;
        b->used = 0;
        struct shm_pool_block *n = b->next;
        if (n != NULL && !n->used) {
            b->size += n->size;
            b->next = n->next;
            free(n);
        }
        if (prev != NULL && !prev->used) {
            prev->size += b->size;
            prev->next = b->next;
            free(b);
        }
        return COMM_OK;
    }
    rt_error(c, COMM_ERR_INVALID,
             "rank %d: comm_mem_free(%p): not a live block from comm_mem_alloc on this rank's "
             "communicator (freed twice, or from another communicator or rank?)",
             c->rank, ptr);
    return COMM_ERR_INVALID;
}

void shm_pool_release(struct comm *c)
{
    struct shm_pool_block *b = c->shm->blocks;
    while (b != NULL) {
        struct shm_pool_block *n = b->next;
        free(b);
        b = n;
    }
    c->shm->blocks = NULL;
}
