/* SPDX-License-Identifier: MIT */
/*
 * The host backend's own state (backend_host.c makes it at setup, in c->xport): what only
 * the host collectives read, kept out of the segment every backend embeds.
 */
#ifndef ARCOMM_COLL_HOST_H
#define ARCOMM_COLL_HOST_H

#include "paths.h"

struct coll_host {
    struct coll_paths_overrides overrides; /* ARCOMM_PATHS, parsed at setup */
    struct coll_paths table;               /* the path table, resolved once the ranks met */
    uint32_t stage_slot; /* staging slot of the next phase that writes staging (alternates;
                          * every rank's alike) */
    void *scratch;       /* private scratch of slot size (allreduce's staged bf16 path) */
    void *cma_scratch;   /* private scratch of the CMA reductions (host_paths.c) */
    void *cma_tune;      /* the measured times of the staged and CMA paths (host_paths.c) */
};

/* The host backend's state of a host communicator (never another backend's). */
static inline struct coll_host *coll_host_of(const struct comm *c)
{
    return (struct coll_host *)c->xport;
}

#endif /* ARCOMM_COLL_HOST_H */
