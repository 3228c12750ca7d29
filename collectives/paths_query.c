/* SPDX-License-Identifier: MIT */
/*
 * comm_paths_query (arcomm_paths.h): the path table of a communicator (host, CUDA or
 * Hexagon), or of a configuration without one, and the plan of a call, through the same
 * rows and the same plan functions the calls use (coll_paths_plan, coll_device_paths_plan).
 */
#include "arcomm_paths.h"
#include "backend.h"
#include "host.h"
#include "paths_device.h"
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

/* The set a query's ranks name, COLL_PATHS_HOST for host ranks, COLL_PATHS_SET_END for
 * no value of comm_paths_ranks_t. */
static enum coll_paths_set set_of_ranks(comm_paths_ranks_t r)
{
    switch (r) {
    case COMM_PATHS_RANKS_DEFAULT:
    case COMM_PATHS_THREADS:
    case COMM_PATHS_PROCESSES:
        return COLL_PATHS_HOST;
    case COMM_PATHS_CUDA:
        return COLL_PATHS_CUDA;
    case COMM_PATHS_CUDA_P2P:
        return COLL_PATHS_CUDA_P2P;
    case COMM_PATHS_HEXAGON:
        return COLL_PATHS_HEXAGON;
    default:
        return COLL_PATHS_SET_END;
    }
}

/* A device table: comm's (its knobs as set, agreed at join, and the rank count: the
 * formula its setup resolved the calls' table with), or a configuration's from the
 * environment (set, q->nranks process ranks). */
static comm_status_t device_query(comm_t *comm, enum coll_paths_set set,
                                  const comm_paths_query_t *q, enum coll_kind kind,
                                  comm_paths_row_t *rows, size_t cap, size_t *nrows,
                                  comm_paths_plan_t *plan)
{
    static _Thread_local struct coll_paths table;
    static _Thread_local struct coll_paths_overrides ov;
    struct rt_knobs k;
    const struct rt_knobs *kp = &k;
    int n = q->nranks;
    bool threads = false;
    char why[320];
    if (comm != NULL) {
        kp = &comm->knobs;
        n = comm->nranks;
        threads = comm->shm != NULL && comm->shm->same_process;
    } else {
        comm_status_t st = rt_knobs_load(&k, why, sizeof(why));
        if (st != COMM_OK) {
            rt_init_error(NULL, st, "comm_paths_query: %s", why);
            return st;
        }
    }
    comm_status_t st = coll_device_paths_parse(set, kp->paths, &ov, why, sizeof(why));
    if (st != COMM_OK) {
        rt_init_error(NULL, st, "comm_paths_query: %s", why);
        return st;
    }
    struct coll_device_paths_config cfg;
    coll_device_paths_config(set, kp, n, threads, &cfg);
    coll_device_paths_resolve(&cfg, &ov, &table);
    for (int i = 0; i < table.nrows && (size_t)i < cap; i++)
        row_out(&table.row[i], &rows[i]);
    *nrows = (size_t)table.nrows;
    if (kind == COLL_KIND_END)
        return COMM_OK;
    struct coll_plan_ask ask = {.kind = kind, .bytes = q->bytes, .plain = true};
    struct coll_plan p;
    coll_device_paths_plan(&table, &ask, &p);
    memset(plan, 0, sizeof(*plan));
    plan->row = p.row;
    snprintf(plan->row_path, sizeof(plan->row_path), "%s", coll_path_name(p.path));
    snprintf(plan->path, sizeof(plan->path), "%s", coll_path_name(p.path));
    return COMM_OK;
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
    enum coll_paths_set set = set_of_ranks(q->ranks);
    if (set == COLL_PATHS_SET_END) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "comm_paths_query: ranks %d is no comm_paths_ranks_t: use "
                      "COMM_PATHS_RANKS_DEFAULT, COMM_PATHS_THREADS, COMM_PATHS_PROCESSES, "
                      "COMM_PATHS_CUDA, COMM_PATHS_CUDA_P2P or COMM_PATHS_HEXAGON",
                      (int)q->ranks);
        return COMM_ERR_INVALID;
    }
    if (comm != NULL && comm->ops != &coll_host_backend) {
        enum coll_paths_set has = coll_device_paths_set(comm->ops->name);
        if (has == COLL_PATHS_SET_END) {
            rt_init_error(NULL, COMM_ERR_UNSUPPORTED,
                          "comm_paths_query: the communicator's backend (%s) has no path table: "
                          "host (shm), cuda, cuda-p2p and hexagon communicators have one",
                          comm->backend_name ? comm->backend_name : "?");
            return COMM_ERR_UNSUPPORTED;
        }
        if ((q->nranks != 0 && q->nranks != comm->nranks) ||
            (q->ranks != COMM_PATHS_RANKS_DEFAULT && set != has)) {
            rt_init_error(NULL, COMM_ERR_INVALID,
                          "comm_paths_query: the communicator has %d ranks on the %s backend, "
                          "the query asks for %d ranks of the %s table: leave nranks 0 and "
                          "ranks COMM_PATHS_RANKS_DEFAULT",
                          comm->nranks, coll_paths_set_name(has), q->nranks,
                          coll_paths_set_name(set));
            return COMM_ERR_INVALID;
        }
        return device_query(comm, has, q, kind, rows, cap, nrows, plan);
    }
    if (comm == NULL && set != COLL_PATHS_HOST) {
        if (q->nranks < 1 || q->nranks > RT_MAX_RANKS) {
            rt_init_error(NULL, COMM_ERR_INVALID,
                          "comm_paths_query: without a communicator nranks must be 1 to %d (it "
                          "is %d)",
                          RT_MAX_RANKS, q->nranks);
            return COMM_ERR_INVALID;
        }
        return device_query(NULL, set, q, kind, rows, cap, nrows, plan);
    }
    /* Large: a table and a configuration's knobs. */
    static _Thread_local struct coll_paths table;
    static _Thread_local struct coll_paths_overrides ov;
    const struct coll_paths *t;
    bool threads;
    struct rt_knobs k;
    if (comm != NULL) {
        if (comm->xport == NULL) {
            rt_init_error(NULL, COMM_ERR_UNSUPPORTED,
                          "comm_paths_query: the communicator has no host backend state");
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
