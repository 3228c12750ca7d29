/* SPDX-License-Identifier: MIT */
/*
 * comm_paths_query (arcomm_paths.h): the host path table of a communicator, or of a
 * configuration without one, and the plan of a call, through the same rows and the same
 * coll_paths_plan the calls use.
 */
#include "arcomm_paths.h"
#include "backend.h"
#include "host.h"
#include "shm/cma_calibrate.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static void colls_text(uint32_t colls, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    if ((colls & COLL_KINDS_HOST) == COLL_KINDS_HOST) {
        snprintf(buf, len, "*");
        return;
    }
    for (int k = COLL_ALLREDUCE; k <= COLL_ALLTOALL; k++) {
        if (!(colls & COLL_KIND_BIT(k)) || n >= len)
            continue;
        int w = snprintf(buf + n, len - n, "%s%s", n ? "," : "", coll_kind_name((enum coll_kind)k));
        n = w < 0 ? len : n + (size_t)w;
    }
}

static void row_out(const struct coll_path_row *r, comm_paths_row_t *o)
{
    memset(o, 0, sizeof(*o));
    colls_text(r->colls, o->collectives, sizeof(o->collectives));
    o->lo = r->lo;
    o->hi = r->hi == COLL_BOUND_NONE ? COMM_PATHS_NO_LIMIT : r->hi;
    o->staged = r->staged;
    o->min_ranks = r->nmin;
    o->max_ranks = r->nmax == INT_MAX ? -1 : r->nmax;
    snprintf(o->ranks, sizeof(o->ranks), "%s", coll_ranks_name(r->ranks));
    snprintf(o->path, sizeof(o->path), "%s", coll_path_name(r->path));
    snprintf(o->tuned, sizeof(o->tuned), "%s",
             r->tune == COLL_TUNE_BULK     ? "bulk"
             : r->tune == COLL_TUNE_CHOICE ? "choice"
                                           : "");
    o->item = r->item;
    snprintf(o->why, sizeof(o->why), "%s", r->why ? r->why : "");
}

static enum coll_kind kind_named(const char *name)
{
    for (int k = COLL_ALLREDUCE; k <= COLL_ALLTOALL; k++)
        if (strcmp(name, coll_kind_name((enum coll_kind)k)) == 0)
            return (enum coll_kind)k;
    return COLL_KIND_END;
}

/* The path a call of row path takes with these buffers (the bulk handshake's answer,
 * as every rank would publish them). */
static enum coll_path taken(enum coll_path p, bool threads, comm_paths_buffers_t b, bool offer)
{
    bool reach = threads || b == COMM_PATHS_SHARED;
    switch (p) {
    case COLL_PATH_ONEPASS:
        return reach ? COLL_PATH_ONEPASS : COLL_PATH_STAGED;
    case COLL_PATH_CMA:
        return reach ? COLL_PATH_ONEPASS : offer ? COLL_PATH_CMA : COLL_PATH_STAGED;
    default:
        return p;
    }
}

ARCOMM_API comm_status_t comm_paths_query(comm_t *comm, const comm_paths_query_t *q,
                                          comm_paths_row_t *rows, size_t cap, size_t *nrows,
                                          comm_paths_plan_t *plan)
{
    if (q == NULL || nrows == NULL || (rows == NULL && cap != 0) ||
        (q->collective != NULL && plan == NULL)) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "comm_paths_query: q and nrows must not be NULL, rows not NULL with cap "
                      "%zu, plan not NULL with a collective",
                      cap);
        return COMM_ERR_INVALID;
    }
    enum coll_kind kind = COLL_KIND_END;
    if (q->collective != NULL && (kind = kind_named(q->collective)) == COLL_KIND_END) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "comm_paths_query: unknown collective \"%s\": use allreduce, broadcast, "
                      "reduce, allgather, reduce_scatter or alltoall",
                      q->collective);
        return COMM_ERR_INVALID;
    }
    /* Large: a table and a configuration's knobs. */
    static _Thread_local struct coll_paths table;
    static _Thread_local struct coll_paths_overrides ov;
    const struct coll_paths *t;
    bool threads;
    struct rt_knobs k;
    if (comm != NULL) {
        if (comm->ops != &coll_host_backend || comm->xport == NULL) {
            rt_init_error(NULL, COMM_ERR_UNSUPPORTED,
                          "comm_paths_query: the communicator's backend (%s) has no path table: "
                          "only host communicators (shm) have one",
                          comm->backend_name ? comm->backend_name : "?");
            return COMM_ERR_UNSUPPORTED;
        }
        threads = comm->shm->same_process;
        if ((q->nranks != 0 && q->nranks != comm->nranks) ||
            (q->ranks == COMM_PATHS_THREADS && !threads) ||
            (q->ranks == COMM_PATHS_PROCESSES && threads)) {
            rt_init_error(NULL, COMM_ERR_INVALID,
                          "comm_paths_query: the communicator has %d %s ranks, the query asks "
                          "for %d %s: leave nranks 0 and ranks COMM_PATHS_RANKS_DEFAULT",
                          comm->nranks, threads ? "thread" : "process", q->nranks,
                          q->ranks == COMM_PATHS_THREADS ? "thread" : "process");
            return COMM_ERR_INVALID;
        }
        t = &coll_host_of(comm)->table;
    } else {
        if (q->nranks < 1 || q->nranks > RT_MAX_RANKS) {
            rt_init_error(NULL, COMM_ERR_INVALID,
                          "comm_paths_query: without a communicator nranks must be 1 to %d (it "
                          "is %d)",
                          RT_MAX_RANKS, q->nranks);
            return COMM_ERR_INVALID;
        }
        char why[320];
        comm_status_t st = rt_knobs_load(&k, why, sizeof(why));
        if (st == COMM_OK)
            st = coll_paths_parse(k.paths, &ov, why, sizeof(why));
        if (st != COMM_OK) {
            rt_init_error(NULL, st, "comm_paths_query: %s", why);
            return st;
        }
        threads = q->ranks == COMM_PATHS_THREADS;
        /* The streaming-store point is no path choice: left unmeasured here. */
        k.nt_threshold = RT_SIZE_OFF;
        coll_host_knobs.used(&k, NULL, q->nranks, threads);
        struct coll_paths_config cfg = {
            .nranks = q->nranks,
            .threads = threads,
            .cma = !threads,
            .cma_fast = !threads && q->nranks == 2 && k.cma_threshold == RT_SIZE_AUTO &&
                        shm_cma_fast_here(&k),
            .k = &k,
        };
        coll_paths_resolve(&cfg, &ov, &table);
        t = &table;
    }
    for (int i = 0; i < t->nrows && (size_t)i < cap; i++)
        row_out(&t->row[i], &rows[i]);
    *nrows = (size_t)t->nrows;
    if (kind == COLL_KIND_END)
        return COMM_OK;
    struct coll_plan_ask ask = {.kind = kind, .bytes = q->bytes, .plain = true};
    struct coll_plan p;
    coll_paths_plan(NULL, t, &ask, &p);
    memset(plan, 0, sizeof(*plan));
    plan->row = p.row;
    snprintf(plan->row_path, sizeof(plan->row_path), "%s", coll_path_name(p.path));
    snprintf(plan->path, sizeof(plan->path), "%s",
             coll_path_name(taken(p.path, threads, q->buffers, p.offer_cma)));
    return COMM_OK;
}
