/* SPDX-License-Identifier: MIT */
/*
 * The arrival handshake that starts every host collective, and what the host paths
 * share: names, slicing, knob resolution.
 */
#include "coll.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {
    [COLL_ALLREDUCE] = "allreduce",
    [COLL_BROADCAST] = "broadcast",
    [COLL_REDUCE] = "reduce",
    [COLL_ALLGATHER] = "allgather",
    [COLL_REDUCE_SCATTER] = "reduce_scatter",
    [COLL_ALLTOALL] = "alltoall",
    [COLL_BARRIER] = "barrier",
    [COLL_SPLIT] = "comm_split",
};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == COLL_KIND_END,
               "a name for every collective");

const char *coll_kind_name(enum coll_kind kind)
{
    return kind >= COLL_ALLREDUCE && kind < COLL_KIND_END ? kind_names[kind] : "?";
}

const char *coll_host_path(enum coll_kind kind, const struct rt_knobs *k, size_t bytes_per_rank,
                           int nranks)
{
    return coll_host_kind_flag(kind, k, bytes_per_rank, nranks) ? "flag" : "bulk";
}

static const char *path_name(unsigned path)
{
    switch (path) {
    case SHM_PATH_FLAG:
        return "flag";
    case SHM_PATH_BULK:
        return "bulk";
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
    a->coll = mine->coll;
    a->root = mine->root;
    a->flags = mine->flags;
    a->align = mine->align;
    /* An inline message takes the place of the buffer fields; written last before the
     * word, so that the line is written in one burst (a waiter polling it in between
     * would take it away from this core and back). */
    if (mine->flags & SHM_BUF_INLINE) {
        memcpy(a->data, mine->data, SHM_INLINE_BYTES);
    } else {
        a->send = mine->send;
        a->recv = mine->recv;
        a->addend = mine->addend;
        a->addend_count = mine->addend_count;
    }
    atomic_store_explicit(&a->status, COMM_OK, memory_order_relaxed);
    atomic_exchange(&a->seq, c->seq);
    shm_ring_after_rmw(c->shm);
    shm_note_cpu(c);
}

struct arrivals_arg {
    int next; /* first peer not yet seen: peers already seen are not polled again */
};

static comm_status_t eager_mismatch(struct comm *c, int p);

/* Did peer p make an eager call (broadcast_eager.c, reduce_eager.c) where this rank
 * synchronises? */
static bool peer_went_eager(const struct comm *c, int p)
{
    const struct shm_comm *s = c->shm;
    if (!coll_eager_on(&c->knobs))
        return false;
    const struct shm_eager *e = shm_eager_at(s, p, s->eager_calls);
    return atomic_load_explicit(&e->tag, memory_order_acquire) == s->eager_calls + 1 &&
           e->seq == c->seq;
}

static int arrivals_ready(struct comm *c, void *arg)
{
    struct arrivals_arg *w = arg;
    for (; w->next < c->nranks; w->next++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, w->next);
        if (!shm_seq_reached(atomic_load_explicit(&a->seq, memory_order_acquire), c->seq))
            return peer_went_eager(c, w->next) ? eager_mismatch(c, w->next) : 0;
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

/* Appends to buf (len bytes, NUL-terminated) at *n, never past its end. */
static void append(char *buf, size_t len, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *n, const char *fmt, ...)
{
    if (*n >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *n, len - *n, fmt, ap);
    va_end(ap);
    *n = w < 0 ? len : *n + (size_t)w;
}

/* "broadcast count 10 dtype f32 root 0": the call as the API names it; with_path adds
 * the path it took. */
static void describe(const struct shm_arrival *a, bool with_path, char *buf, size_t len)
{
    size_t n = 0;
    enum coll_kind kind = (enum coll_kind)a->coll;
    buf[0] = '\0';
    if (kind == COLL_SPLIT) { /* comm_split and comm_dup: barrier-shaped handshakes */
        append(buf, len, &n, "comm_split");
        return;
    }
    if (kind == COLL_BARRIER || a->path == SHM_PATH_BARRIER) {
        append(buf, len, &n, "comm_barrier");
        return;
    }
    append(buf, len, &n, "%s%s count %llu dtype %s", coll_kind_name(kind),
           a->flags & SHM_BUF_ADD ? "_add" : "", (unsigned long long)a->count,
           rt_dtype_name(a->dtype));
    if (a->flags & SHM_BUF_ADD)
        append(buf, len, &n, " with addend_count %llu", (unsigned long long)a->addend_count);
    else if (coll_kind_reduces(kind))
        append(buf, len, &n, " op %s", rt_op_name(a->op));
    if (coll_kind_rooted(kind))
        append(buf, len, &n, " root %d", (int)a->root);
    if (with_path)
        append(buf, len, &n, " (%s path)", path_name(a->path));
}

/* Peer p made an eager call where this rank made the call its own arrival says. */
static comm_status_t eager_mismatch(struct comm *c, int p)
{
    const struct shm_eager *e = shm_eager_at(c->shm, p, c->shm->eager_calls);
    char mine[160], theirs[128];
    bool bcast = e->coll != COLL_REDUCE;
    describe(shm_arrival_at(c->shm, c->seq, c->rank), false, mine, sizeof(mine));
    coll_eager_describe_entry(theirs, sizeof(theirs), e);
    rt_error(c, COMM_ERR_MISMATCH,
             "rank %d: collective call %u mismatch: this rank called %s, rank %d made an eager "
             "%s (%s: up to %zu bytes): every rank must make the same calls in the same order",
             c->rank, c->seq, mine, p, theirs, bcast ? "ARCOMM_BCAST_EAGER" : "ARCOMM_REDUCE_EAGER",
             bcast ? c->knobs.bcast_eager : c->knobs.reduce_eager);
    return COMM_ERR_MISMATCH;
}

/* Values no rank of this library publishes: a corrupted segment, not a disagreement. */
static bool arrival_corrupt(const struct comm *c, const struct shm_arrival *a)
{
    return a->dtype >= RT_DTYPE_COUNT || a->op >= RT_OP_COUNT || a->path < SHM_PATH_FLAG ||
           a->path > SHM_PATH_BARRIER || a->coll < COLL_ALLREDUCE || a->coll >= COLL_KIND_END ||
           a->root < 0 || a->root >= c->nranks;
}

/* Waits for every peer's arrival at call c->seq and checks they agree with this rank's. */
static comm_status_t wait_arrivals(struct comm *c, const char *what)
{
    struct arrivals_arg w = {.next = 0};
    comm_status_t st = shm_wait_for(c, arrivals_ready, arrival_behind, &w, what, "arrive");
    if (st != COMM_OK)
        return st;
    const struct shm_arrival *mine = shm_arrival_at(c->shm, c->seq, c->rank);
    for (int p = 0; p < c->nranks; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        if (a->count == mine->count && a->dtype == mine->dtype && a->op == mine->op &&
            a->path == mine->path && a->coll == mine->coll && a->root == mine->root &&
            (a->flags & (SHM_BUF_ADD | SHM_BUF_INLINE)) ==
                (mine->flags & (SHM_BUF_ADD | SHM_BUF_INLINE)) &&
            (!(mine->flags & SHM_BUF_ADD) || a->addend_count == mine->addend_count))
            continue;
        if (arrival_corrupt(c, a)) {
            rt_error(c, COMM_ERR_PEER,
                     "rank %d: peer rank %d published collective %u, dtype %u, op %u, path %u, "
                     "root %d in call %u, values no rank of this library publishes: the segment "
                     "is corrupted (a stray write by another process of this user?); restart "
                     "the job",
                     c->rank, p, a->coll, a->dtype, a->op, a->path, (int)a->root, c->seq);
            return COMM_ERR_PEER;
        }
        /* Show the paths only when they are what differs. */
        bool paths = a->path != mine->path && a->coll == mine->coll && a->count == mine->count;
        char m[160], t[160];
        describe(mine, paths, m, sizeof(m));
        describe(a, paths, t, sizeof(t));
        const char *hint = paths ? " (the same size takes different paths: set the same "
                                   "ARCOMM_FLAG_THRESHOLD on every rank)"
                                 : "";
        rt_error(c, COMM_ERR_MISMATCH,
                 "rank %d: ranks disagree in call %u: rank %d made %s, rank %d made %s; every "
                 "rank must make the same collectives in the same order with the same count, "
                 "dtype, op and root%s",
                 c->rank, c->seq, c->rank, m, p, t, hint);
        return COMM_ERR_MISMATCH;
    }
    return COMM_OK;
}

comm_status_t coll_wait_arrivals(struct comm *c, const char *what)
{
    return wait_arrivals(c, what);
}

comm_status_t coll_meet(struct comm *c, const struct shm_arrival *mine, const char *what)
{
    coll_arrive(c, mine);
    return wait_arrivals(c, what);
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
    comm_status_t st = coll_settle(c);
    if (st != COMM_OK)
        return st;
    struct shm_arrival mine = {.path = SHM_PATH_BARRIER, .coll = COLL_BARRIER};
    st = coll_meet(c, &mine, "comm_barrier");
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}
