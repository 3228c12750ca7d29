/* SPDX-License-Identifier: MIT */
/*
 * The arrival handshake that starts every host collective, and what the host paths
 * share: names, slicing, knob resolution.
 */
#include "coll.h"

#include <stdio.h>
#include <string.h>

static const char *path_name(unsigned path)
{
    switch (path) {
    case SHM_PATH_FLAG:
        return "allreduce/flag";
    case SHM_PATH_BULK:
        return "allreduce/bulk";
    case SHM_PATH_BARRIER:
        return "barrier";
    }
    return "?";
}

void coll_arrive(struct comm *c, const struct shm_arrival *mine)
{
    struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, c->rank);
    a->count = mine->count;
    a->dtype = mine->dtype;
    a->op = mine->op;
    a->path = mine->path;
    a->flags = mine->flags;
    a->send = mine->send;
    a->recv = mine->recv;
    a->addend = mine->addend;
    a->addend_count = mine->addend_count;
    atomic_store_explicit(&a->status, COMM_OK, memory_order_relaxed);
    atomic_store_explicit(&a->seq, c->seq, memory_order_release);
    shm_ring(c->shm);
    shm_note_cpu(c);
}

struct arrivals_arg {
    int next; /* first peer not yet seen: peers already seen are not polled again */
};

static int arrivals_ready(struct comm *c, void *arg)
{
    struct arrivals_arg *w = arg;
    for (; w->next < c->nranks; w->next++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, w->next);
        if (!shm_seq_reached(atomic_load_explicit(&a->seq, memory_order_acquire), c->seq))
            return 0;
        int32_t st = atomic_load_explicit(&a->status, memory_order_relaxed);
        /* A peer that found a mismatch in this call saw every arrival of it: this rank
         * will find the same mismatch itself, and report it as such, not as PEER. */
        if (st != COMM_OK && st != COMM_ERR_MISMATCH)
            return shm_peer_failed(c, w->next, st);
    }
    return 1;
}

static bool arrival_behind(struct comm *c, void *arg, int p)
{
    (void)arg;
    const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
    return !shm_seq_reached(atomic_load_explicit(&a->seq, memory_order_acquire), c->seq);
}

static void describe(const struct shm_arrival *a, char *buf, size_t len)
{
    if (a->path == SHM_PATH_BARRIER)
        snprintf(buf, len, "comm_barrier");
    else if (a->flags & SHM_BUF_ADD)
        snprintf(buf, len, "%s count %llu dtype %s with addend_count %llu", path_name(a->path),
                 (unsigned long long)a->count, rt_dtype_name(a->dtype),
                 (unsigned long long)a->addend_count);
    else
        snprintf(buf, len, "%s count %llu dtype %s op %s", path_name(a->path),
                 (unsigned long long)a->count, rt_dtype_name(a->dtype), rt_op_name(a->op));
}

comm_status_t coll_wait_arrivals(struct comm *c, const char *what)
{
    struct arrivals_arg w = {.next = 0};
    comm_status_t st = shm_wait_for(c, arrivals_ready, arrival_behind, &w, what, "arrive");
    if (st != COMM_OK)
        return st;
    const struct shm_arrival *mine = shm_arrival_at(c->shm, c->seq, c->rank);
    for (int p = 0; p < c->nranks; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        if (a->count == mine->count && a->dtype == mine->dtype && a->op == mine->op &&
            a->path == mine->path && (a->flags & SHM_BUF_ADD) == (mine->flags & SHM_BUF_ADD) &&
            a->addend_count == mine->addend_count)
            continue;
        /* Values no rank publishes are not a disagreement but a corrupted segment. */
        if (a->dtype >= RT_DTYPE_COUNT || a->op >= RT_OP_COUNT || a->path < SHM_PATH_FLAG ||
            a->path > SHM_PATH_BARRIER) {
            rt_error(c, COMM_ERR_PEER,
                     "rank %d: peer rank %d published dtype %u, op %u, path %u in call %u, "
                     "values no rank of this library publishes: the segment is corrupted (a "
                     "stray write by another process of this user?); restart the job",
                     c->rank, p, a->dtype, a->op, a->path, c->seq);
            return COMM_ERR_PEER;
        }
        char m[96], t[96];
        describe(mine, m, sizeof(m));
        describe(a, t, sizeof(t));
        const char *hint = a->path != mine->path && a->count == mine->count
                               ? " (the same size takes different paths: set the same "
                                 "ARCOMM_FLAG_THRESHOLD on every rank)"
                               : "";
        rt_error(c, COMM_ERR_MISMATCH,
                 "rank %d: ranks disagree in call %u: rank %d made %s, rank %d made %s; every "
                 "rank must make the same calls with the same count, dtype and op%s",
                 c->rank, c->seq, c->rank, m, p, t, hint);
        return COMM_ERR_MISMATCH;
    }
    return COMM_OK;
}

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
    coll_arrive(c, &mine);
    comm_status_t st = coll_wait_arrivals(c, "comm_barrier");
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}
