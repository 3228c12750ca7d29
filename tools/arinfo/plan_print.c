/* SPDX-License-Identifier: MIT */
/*
 * The path table and the plan of a call (arinfo --paths, arinfo --plan COLL SIZE; with
 * --device, a device backend's), read through comm_paths_query (arcomm_paths.h): the rows
 * and the plan function the calls themselves use, never a copy of them.
 */
#include "arcomm_paths.h"
#include "arinfo.h"
#include "coll.h"

#include <stdlib.h>
#include <string.h>

bool arinfo_plan(const struct arinfo *ai, const char *coll, size_t bytes, bool threads, bool shared,
                 comm_paths_plan_t *plan)
{
    comm_paths_query_t q = {
        .collective = coll,
        .bytes = bytes,
        .nranks = ai->nranks,
        .ranks = threads ? COMM_PATHS_THREADS : COMM_PATHS_PROCESSES,
        .buffers = shared ? COMM_PATHS_SHARED : COMM_PATHS_PRIVATE,
    };
    size_t n;
    if (comm_paths_query(NULL, &q, NULL, 0, &n, plan) != COMM_OK) {
        fprintf(stderr, "arinfo: %s\n", comm_last_error(NULL));
        exit(2);
    }
    return strcmp(plan->path, "flag") != 0;
}

/* The rows of a communicator of ai->nranks ranks of one kind. */
static size_t rows_of(const struct arinfo *ai, bool threads, comm_paths_row_t *rows)
{
    comm_paths_query_t q = {
        .nranks = ai->nranks,
        .ranks = threads ? COMM_PATHS_THREADS : COMM_PATHS_PROCESSES,
    };
    size_t n;
    if (comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, NULL) != COMM_OK) {
        fprintf(stderr, "arinfo: %s\n", comm_last_error(NULL));
        exit(2);
    }
    return n < COMM_PATHS_ROWS_MAX ? n : COMM_PATHS_ROWS_MAX;
}

static void fmt_range(const comm_paths_row_t *r, char *buf, size_t len)
{
    char lo[32], hi[32];
    arinfo_fmt_size(r->lo, lo, sizeof(lo));
    if (r->hi == COMM_PATHS_NO_LIMIT)
        hi[0] = '\0';
    else
        arinfo_fmt_size(r->hi, hi, sizeof(hi));
    snprintf(buf, len, "%s-%s%s", lo, hi, r->staged ? " staged" : "");
}

static void fmt_ranks(const comm_paths_row_t *r, char *buf, size_t len)
{
    if (r->max_ranks < 0)
        snprintf(buf, len, "%d-", r->min_ranks);
    else if (r->max_ranks == r->min_ranks)
        snprintf(buf, len, "%d", r->min_ranks);
    else
        snprintf(buf, len, "%d-%d", r->min_ranks, r->max_ranks);
}

static void json_row(struct json *js, const comm_paths_row_t *r)
{
    json_object_begin(js, NULL);
    json_string(js, "collectives", r->collectives);
    json_uint(js, "lo", r->lo);
    if (r->hi == COMM_PATHS_NO_LIMIT)
        json_null(js, "hi");
    else
        json_uint(js, "hi", r->hi);
    json_bool(js, "staged_bytes", r->staged != 0);
    json_int(js, "min_ranks", r->min_ranks);
    if (r->max_ranks < 0)
        json_null(js, "max_ranks");
    else
        json_int(js, "max_ranks", r->max_ranks);
    json_string(js, "ranks", r->ranks);
    json_string(js, "path", r->path);
    json_string(js, "tuned", r->tuned[0] ? r->tuned : NULL);
    json_int(js, "item", r->item);
    json_string(js, "why", r->why[0] ? r->why : NULL);
    json_object_end(js);
}

void print_path_table(struct arinfo *ai)
{
    static comm_paths_row_t rows[COMM_PATHS_ROWS_MAX];
    if (ai->json)
        json_object_begin(&ai->js, "path_table");
    for (int t = 0; t < 2; t++) {
        size_t n = rows_of(ai, t == 1, rows);
        if (ai->json) {
            json_array_begin(&ai->js, t ? "thread_ranks" : "process_ranks");
            for (size_t i = 0; i < n; i++)
                json_row(&ai->js, &rows[i]);
            json_array_end(&ai->js);
            continue;
        }
        arinfo_title(ai,
                     "Path table (host, %d %s rank%s; a call takes the first row it matches; "
                     "ARCOMM_PATHS rows first)",
                     ai->nranks, t ? "thread" : "process", ai->nranks == 1 ? "" : "s");
        fprintf(ai->out, "  %-3s %-11s %-5s %-16s %s\n", "ROW", "PATH", "RANKS", "SIZES",
                "COLLECTIVES");
        for (size_t i = 0; i < n; i++) {
            const comm_paths_row_t *r = &rows[i];
            char range[48], ranks[24], path[24];
            fmt_range(r, range, sizeof(range));
            fmt_ranks(r, ranks, sizeof(ranks));
            snprintf(path, sizeof(path), "%s%s%s", r->path, r->tuned[0] ? "/" : "", r->tuned);
            fprintf(ai->out, "  %-3zu %-11s %-5s %-16s %s\n", i, path, ranks, range,
                    r->collectives);
            if (r->item)
                fprintf(ai->out, "        ARCOMM_PATHS item %d\n", r->item);
            else
                fprintf(ai->out, "        %s\n", r->why);
        }
    }
    if (ai->json)
        json_object_end(&ai->js);
}

void print_plan(struct arinfo *ai)
{
    static const struct {
        const char *key, *text;
        bool threads, shared;
    } kinds[] = {
        {"thread_ranks", "threads", true, false},
        {"process_ranks_private", "processes", false, false},
        {"process_ranks_shared", "processes, shared", false, true},
    };
    static comm_paths_row_t rows[COMM_PATHS_ROWS_MAX];
    char size[32];
    arinfo_fmt_size(ai->plan_bytes, size, sizeof(size));
    if (ai->json) {
        json_object_begin(&ai->js, "plan");
        json_string(&ai->js, "collective", ai->plan_coll);
        json_uint(&ai->js, "bytes", ai->plan_bytes);
        json_int(&ai->js, "nranks", ai->nranks);
    } else {
        arinfo_title(ai,
                     "Plan: %s of %s per rank, %d rank%s (PATH, then the first row of the "
                     "path table it matches; processes, shared: buffers from comm_mem_alloc or "
                     "the shared heap)",
                     ai->plan_coll, size, ai->nranks, ai->nranks == 1 ? "" : "s");
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        comm_paths_plan_t plan;
        arinfo_plan(ai, ai->plan_coll, ai->plan_bytes, kinds[i].threads, kinds[i].shared, &plan);
        size_t n = rows_of(ai, kinds[i].threads, rows);
        const comm_paths_row_t *r = plan.row >= 0 && (size_t)plan.row < n ? &rows[plan.row] : NULL;
        if (ai->json) {
            json_object_begin(&ai->js, kinds[i].key);
            json_string(&ai->js, "path", plan.path);
            json_string(&ai->js, "row_path", plan.row_path);
            json_int(&ai->js, "row", plan.row);
            json_object_end(&ai->js);
            continue;
        }
        char range[48] = "", by[256] = "no row matches: one-pass";
        if (r != NULL) {
            fmt_range(r, range, sizeof(range));
            snprintf(by, sizeof(by), "row %d (%s %s %s)", plan.row, r->collectives, range, r->path);
        }
        fprintf(ai->out, "  %-18s %-9s %s", kinds[i].text, plan.path, by);
        if (r != NULL && r->item)
            fprintf(ai->out, ": ARCOMM_PATHS item %d", r->item);
        else if (r != NULL)
            fprintf(ai->out, ": %s", r->why);
        fputc('\n', ai->out);
    }
    if (ai->json)
        json_object_end(&ai->js);
}

/* --- --device: a device backend's table (no device needed: the rows are data) --- */

static size_t device_rows(const struct arinfo *ai, comm_paths_row_t *rows)
{
    comm_paths_query_t q = {.nranks = ai->nranks, .ranks = (comm_paths_ranks_t)ai->device_ranks};
    size_t n;
    if (comm_paths_query(NULL, &q, rows, COMM_PATHS_ROWS_MAX, &n, NULL) != COMM_OK) {
        fprintf(stderr, "arinfo: %s\n", comm_last_error(NULL));
        exit(2);
    }
    return n < COMM_PATHS_ROWS_MAX ? n : COMM_PATHS_ROWS_MAX;
}

static void device_plan(const struct arinfo *ai, const char *coll, size_t bytes,
                        comm_paths_plan_t *plan)
{
    comm_paths_query_t q = {
        .collective = coll,
        .bytes = bytes,
        .nranks = ai->nranks,
        .ranks = (comm_paths_ranks_t)ai->device_ranks,
    };
    size_t n;
    if (comm_paths_query(NULL, &q, NULL, 0, &n, plan) != COMM_OK) {
        fprintf(stderr, "arinfo: %s\n", comm_last_error(NULL));
        exit(2);
    }
}

static void device_table(struct arinfo *ai)
{
    static comm_paths_row_t rows[COMM_PATHS_ROWS_MAX];
    size_t n = device_rows(ai, rows);
    if (ai->json) {
        json_array_begin(&ai->js, "path_table");
        for (size_t i = 0; i < n; i++)
            json_row(&ai->js, &rows[i]);
        json_array_end(&ai->js);
        return;
    }
    arinfo_title(ai,
                 "Path table (%s, %d rank%s; a call takes the first row it matches; "
                 "ARCOMM_PATHS rows after the one-rank row)",
                 ai->device, ai->nranks, ai->nranks == 1 ? "" : "s");
    fprintf(ai->out, "  %-3s %-9s %-5s %-16s %s\n", "ROW", "PATH", "RANKS", "SIZES", "COLLECTIVES");
    for (size_t i = 0; i < n; i++) {
        const comm_paths_row_t *r = &rows[i];
        char range[48], ranks[24];
        fmt_range(r, range, sizeof(range));
        fmt_ranks(r, ranks, sizeof(ranks));
        fprintf(ai->out, "  %-3zu %-9s %-5s %-16s ", i, r->path, ranks, range);
        /* ", " between the names: a long list wraps under its column. */
        for (const char *c = r->collectives; *c != '\0'; c++)
            fputs(*c == ',' ? ", " : (char[2]){*c, '\0'}, ai->out);
        fputc('\n', ai->out);
        if (r->item)
            fprintf(ai->out, "        ARCOMM_PATHS item %d\n", r->item);
        else
            fprintf(ai->out, "        %s\n", r->why);
    }
}

void print_device_paths(struct arinfo *ai)
{
    if (ai->json) {
        json_object_begin(&ai->js, "device_paths");
        json_string(&ai->js, "device", ai->device);
        json_array_begin(&ai->js, "collective_paths");
    } else {
        arinfo_title(ai,
                     "Collective paths (%s, %d rank%s; SIZE: bytes per rank, the call's count x "
                     "the element size)",
                     ai->device, ai->nranks, ai->nranks == 1 ? "" : "s");
        fprintf(ai->out, "  %-10s", "SIZE");
        for (int k = COLL_ALLREDUCE; k <= COLL_ALLTOALL; k++) {
            char head[32];
            const char *name = coll_kind_name((enum coll_kind)k);
            size_t i = 0;
            for (; name[i] && i + 1 < sizeof(head); i++)
                head[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 'a' + 'A' : name[i]);
            head[i] = '\0';
            fprintf(ai->out, k < COLL_ALLTOALL ? " %-9s" : " %s", head);
        }
        fputc('\n', ai->out);
    }
    for (size_t i = 0; i < ai->nsizes; i++) {
        char size[32];
        arinfo_fmt_size(ai->sizes[i], size, sizeof(size));
        if (!ai->json)
            fprintf(ai->out, "  %-10s", size);
        for (int k = COLL_ALLREDUCE; k <= COLL_ALLTOALL; k++) {
            comm_paths_plan_t plan;
            const char *coll = coll_kind_name((enum coll_kind)k);
            device_plan(ai, coll, ai->sizes[i], &plan);
            if (ai->json) {
                json_object_begin(&ai->js, NULL);
                json_string(&ai->js, "size", size);
                json_uint(&ai->js, "bytes", ai->sizes[i]);
                json_string(&ai->js, "collective", coll);
                json_string(&ai->js, "path", plan.path);
                json_int(&ai->js, "row", plan.row);
                json_object_end(&ai->js);
            } else {
                /* Column widths as the titles', "reduce_scatter" wider than the rest. */
                int w = k == COLL_REDUCE_SCATTER ? 14 : 9;
                fprintf(ai->out, k < COLL_ALLTOALL ? " %-*s" : " %.*s", k < COLL_ALLTOALL ? w : 12,
                        plan.path);
            }
        }
        if (!ai->json)
            fputc('\n', ai->out);
    }
    if (ai->json)
        json_array_end(&ai->js);
    device_table(ai);
    if (ai->json)
        json_object_end(&ai->js);
}

void print_device_plan(struct arinfo *ai)
{
    static comm_paths_row_t rows[COMM_PATHS_ROWS_MAX];
    comm_paths_plan_t plan;
    char size[32];
    arinfo_fmt_size(ai->plan_bytes, size, sizeof(size));
    device_plan(ai, ai->plan_coll, ai->plan_bytes, &plan);
    size_t n = device_rows(ai, rows);
    const comm_paths_row_t *r = plan.row >= 0 && (size_t)plan.row < n ? &rows[plan.row] : NULL;
    if (ai->json) {
        json_object_begin(&ai->js, "plan");
        json_string(&ai->js, "collective", ai->plan_coll);
        json_uint(&ai->js, "bytes", ai->plan_bytes);
        json_int(&ai->js, "nranks", ai->nranks);
        json_string(&ai->js, "device", ai->device);
        json_string(&ai->js, "path", plan.path);
        json_int(&ai->js, "row", plan.row);
        json_object_end(&ai->js);
        return;
    }
    arinfo_title(ai,
                 "Plan: %s of %s per rank, %d rank%s on %s (PATH, then the first row of the "
                 "path table it matches)",
                 ai->plan_coll, size, ai->nranks, ai->nranks == 1 ? "" : "s", ai->device);
    if (r == NULL) {
        fprintf(ai->out, "  %-9s no row matches: %s has no path for %s\n", plan.path, ai->device,
                ai->plan_coll);
        return;
    }
    char range[48];
    fmt_range(r, range, sizeof(range));
    fprintf(ai->out, "  %-9s row %d (%s %s %s)", plan.path, plan.row, r->collectives, range,
            r->path);
    if (r->item)
        fprintf(ai->out, ": ARCOMM_PATHS item %d\n", r->item);
    else
        fprintf(ai->out, ": %s\n", r->why);
}
