/* SPDX-License-Identifier: MIT */
/*
 * The device backends' path tables: the CUDA transports' ("cuda", host-staged; "cuda-p2p")
 * and the Hexagon sessions', their defaults with the measurement behind each, the
 * ARCOMM_PATHS rows that override them (paths.c's grammar, the device paths' names), the
 * table resolved for a communicator, and the plan of a call.  No CUDA header here: built
 * into every library, so that comm_paths_query and arinfo show these tables where CUDA is
 * not built and no GPU is present (they are data).
 */
#include "paths_device.h"
#include "backend.h"
#include "cuda/layout.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#define KB(x) ((uint64_t)(x) << 10)
#define BIT   COLL_KIND_BIT
/* The collectives beyond allreduce. */
#define KINDS_OTHER (COLL_KINDS_HOST & ~BIT(COLL_ALLREDUCE))

/* One rank: nothing travels (cuda_single_rank); no ARCOMM_PATHS row reaches it. */
#define LOCAL_ROW                                                                                  \
    {                                                                                              \
        .colls = COLL_KINDS_HOST, .lo = 0, .hi = COLL_BOUND_NONE, .nmin = 1, .nmax = 1,            \
        .path = COLL_PATH_LOCAL,                                                                   \
        .why = "one rank: a device copy, or the op's end; nothing travels"                         \
    }

/*
 * The host-staged transport.  A default kernel row ends below the resolved
 * ARCOMM_COPY_THRESHOLD (1 MiB by default), whatever its own bound: that knob is these
 * rows' default, as ARCOMM_FLAG_THRESHOLD is the host's flag rows'.
 */
static const struct coll_path_row cuda_rows[] = {
    LOCAL_ROW,
    /* The LL kernel: 4.2 us at 8 B on 2 x H200, 45.7 us at 512 KiB (NCCL through host
     * memory 49.0); the copy engines from 1 MiB: 36-70 GB/s busbw at 4-128 MiB. */
    {.colls = BIT(COLL_ALLREDUCE),
     .lo = 0,
     .hi = COLL_BOUND_NONE,
     .nmin = 2,
     .nmax = INT_MAX,
     .path = COLL_PATH_KERNEL,
     .why = "PERFORMANCE.md, GPUs (2 x H200): LL kernel 4.2 us at 8B, 45.7 at 512K; copy from 1M"},
    /* The collectives beyond allreduce through the allreduce that serves them: 16.2-25.7
     * us against 36.0-57.3 on the copy engines (one H200, 8 B, process ranks under MPS),
     * up to 64 KiB of that allreduce. */
    {.colls = KINDS_OTHER,
     .lo = 0,
     .hi = KB(64),
     .staged = true,
     .nmin = 2,
     .nmax = INT_MAX,
     .path = COLL_PATH_KERNEL,
     .why = "PERFORMANCE.md, LL kernel path for small GPU calls: 16-26 us vs 36-57 copy"},
    {.colls = COLL_KINDS_HOST,
     .lo = 0,
     .hi = COLL_BOUND_NONE,
     .nmin = 1,
     .nmax = INT_MAX,
     .path = COLL_PATH_COPY,
     .why = "PERFORMANCE.md, GPUs (2 x H200): copy engines, 128 MiB at 70 GB/s with bf16"},
};

/*
 * cuda-p2p.  Allreduce leaves one-shot at the host-staged transport's
 * ARCOMM_COPY_THRESHOLD, not at a point measured for this transport; the collectives
 * beyond allreduce have one path each.
 */
static const struct coll_path_row cuda_p2p_rows[] = {
    LOCAL_ROW,
    {.colls = BIT(COLL_ALLREDUCE),
     .lo = 0,
     .hi = COLL_BOUND_NONE,
     .nmin = 2,
     .nmax = INT_MAX,
     .path = COLL_PATH_ONESHOT,
     .why = "PERFORMANCE.md, GPUs (one H200, MPS): 16.2 us at 512K; the cuda copy threshold"},
    {.colls = BIT(COLL_ALLREDUCE),
     .lo = 0,
     .hi = COLL_BOUND_NONE,
     .nmin = 2,
     .nmax = INT_MAX,
     .path = COLL_PATH_TWOSHOT,
     .why = "PERFORMANCE.md, GPUs (one H200, MPS): two-shot 276 GB/s busbw at 128M"},
    {.colls = KINDS_OTHER,
     .lo = 0,
     .hi = COLL_BOUND_NONE,
     .nmin = 2,
     .nmax = INT_MAX,
     .path = COLL_PATH_DIRECT,
     .why = "cuda.md, cuda-p2p: one path beyond allreduce (not measured against another)"},
};

/* The Hexagon sessions: one path, allreduce only (the backend has no other collective). */
static const struct coll_path_row hexagon_rows[] = {
    {.colls = BIT(COLL_ALLREDUCE),
     .lo = 0,
     .hi = COLL_BOUND_NONE,
     .nmin = 1,
     .nmax = INT_MAX,
     .path = COLL_PATH_SESSION,
     .why = "HEXAGON.md: the sessions' one path"},
};

#define NROWS(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(NROWS(cuda_rows) + COLL_PATHS_OVERRIDES_MAX <= COLL_PATHS_MAX &&
                   NROWS(cuda_p2p_rows) + COLL_PATHS_OVERRIDES_MAX <= COLL_PATHS_MAX &&
                   NROWS(hexagon_rows) + COLL_PATHS_OVERRIDES_MAX <= COLL_PATHS_MAX,
               "a resolved table holds every default row and every override");

const struct coll_path_row *coll_device_path_rows(enum coll_paths_set set, size_t *n)
{
    switch (set) {
    case COLL_PATHS_CUDA:
        *n = NROWS(cuda_rows);
        return cuda_rows;
    case COLL_PATHS_CUDA_P2P:
        *n = NROWS(cuda_p2p_rows);
        return cuda_p2p_rows;
    case COLL_PATHS_HEXAGON:
        *n = NROWS(hexagon_rows);
        return hexagon_rows;
    default:
        *n = 0;
        return NULL;
    }
}

enum coll_paths_set coll_device_paths_set(const char *backend_name)
{
    if (backend_name == NULL)
        return COLL_PATHS_SET_END;
    if (strcmp(backend_name, "cuda") == 0)
        return COLL_PATHS_CUDA;
    if (strcmp(backend_name, "cuda-p2p") == 0)
        return COLL_PATHS_CUDA_P2P;
    if (strcmp(backend_name, "hexagon") == 0)
        return COLL_PATHS_HEXAGON;
    return COLL_PATHS_SET_END;
}

/* The collectives a path serves on its backend. */
static uint32_t path_serves(enum coll_path p)
{
    switch (p) {
    case COLL_PATH_KERNEL:
    case COLL_PATH_COPY:
        return COLL_KINDS_HOST;
    case COLL_PATH_ONESHOT:
    case COLL_PATH_TWOSHOT:
    case COLL_PATH_SESSION:
        return BIT(COLL_ALLREDUCE);
    case COLL_PATH_DIRECT:
        return KINDS_OTHER;
    default:
        return 0;
    }
}

/* The text of ARCOMM_PATHS item 'item' (1-based, empty items counted), for messages. */
static void item_text(const char *text, int item, char *buf, size_t len)
{
    const char *s = text;
    for (int i = 1; i < item && s != NULL; i++) {
        s = strchr(s, ';');
        s = s != NULL ? s + 1 : NULL;
    }
    if (s == NULL) {
        snprintf(buf, len, "?");
        return;
    }
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strcspn(s, ";");
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    snprintf(buf, len, "%.*s", (int)n, s);
}

comm_status_t coll_device_paths_parse(enum coll_paths_set set, const char *text,
                                      struct coll_paths_overrides *out, char *err, size_t errlen)
{
    comm_status_t st = coll_paths_parse_for(set, text, out, err, errlen);
    if (st != COMM_OK)
        return st;
    for (int i = 0; i < out->n; i++) {
        const struct coll_path_row *r = &out->row[i];
        uint32_t extra = r->colls & ~path_serves(r->path);
        if (extra == 0)
            continue;
        char it[128], names[96] = "";
        size_t n = 0;
        item_text(text, r->item, it, sizeof(it));
        for (int k = COLL_ALLREDUCE; k <= COLL_ALLTOALL && n < sizeof(names); k++)
            if (path_serves(r->path) & BIT(k))
                n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", n ? "," : "",
                                      coll_kind_name((enum coll_kind)k));
        snprintf(err, errlen,
                 "ARCOMM_PATHS item %d \"%s\": path \"%s\" of the %s backend serves %s only: "
                 "name those collectives, not *",
                 r->item, it, coll_path_name(r->path), coll_paths_set_name(set), names);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

void coll_device_paths_config(enum coll_paths_set set, const struct rt_knobs *set_knobs, int nranks,
                              bool threads, struct coll_device_paths_config *out)
{
    memset(out, 0, sizeof(*out));
    out->set = set;
    out->nranks = nranks;
    out->threads = threads;
    out->copy_threshold = UINT64_MAX;
    if (set != COLL_PATHS_CUDA && set != COLL_PATHS_CUDA_P2P)
        return;
    /* The knobs as coll_cuda_knobs resolves them for the backends' setup (backend.c). */
    struct rt_knobs k = *set_knobs;
    coll_cuda_knobs.used(&k, NULL, nranks, threads);
    out->copy_threshold =
        k.cuda.copy_threshold == RT_SIZE_OFF ? UINT64_MAX : (uint64_t)k.cuda.copy_threshold;
    /* The copy ring (transport.c): CUDA_PATHS_TSLOTS slots of the largest chunk per peer,
     * the chunk as cuda_setup's geometry has it. */
    uint64_t chunk_knob = k.cuda.copy_chunk_bytes == RT_SIZE_AUTO ? 0 : k.cuda.copy_chunk_bytes;
    struct cuda_geometry g = cuda_geometry_compute(
        k.cuda.staging_bytes, chunk_knob > CUDA_CHUNK_MAX ? chunk_knob : CUDA_CHUNK_MAX);
    uint64_t peers = nranks > 1 ? (uint64_t)nranks - 1 : 1;
    out->ring = peers * CUDA_PATHS_TSLOTS * g.chunk_max;
}

/* Can row r apply to the communicator cfg describes?  Makes its bounds concrete. */
static bool resolve_row(const struct coll_device_paths_config *cfg, struct coll_path_row *r)
{
    /* A CUDA path moves data between ranks: one rank takes the local row. */
    if (r->item != 0 && r->nmin < 2 && cfg->set != COLL_PATHS_HEXAGON)
        r->nmin = 2;
    if (cfg->nranks < r->nmin || cfg->nranks > r->nmax)
        return false;
    if ((r->ranks == COLL_RANKS_THREADS && !cfg->threads) ||
        (r->ranks == COLL_RANKS_PROCS && cfg->threads))
        return false;
    /* A default kernel or one-shot row is ARCOMM_COPY_THRESHOLD's default: it ends below
     * the knob, resolved (0: no call takes it). */
    if (r->item == 0 && (r->path == COLL_PATH_KERNEL || r->path == COLL_PATH_ONESHOT) &&
        cfg->copy_threshold != UINT64_MAX) {
        if (cfg->copy_threshold == 0)
            return false;
        if (r->hi > cfg->copy_threshold - 1)
            r->hi = cfg->copy_threshold - 1;
    }
    return r->lo <= r->hi;
}

void coll_device_paths_resolve(const struct coll_device_paths_config *cfg,
                               const struct coll_paths_overrides *ov, struct coll_paths *out)
{
    size_t n;
    const struct coll_path_row *rows = coll_device_path_rows(cfg->set, &n);
    memset(out, 0, sizeof(*out));
    out->nranks = cfg->nranks;
    out->room = cfg->ring / 2;
    /* The local row first: no override reaches one rank. */
    for (size_t i = 0; i < n && rows[i].path == COLL_PATH_LOCAL; i++) {
        struct coll_path_row r = rows[i];
        if (resolve_row(cfg, &r))
            out->row[out->nrows++] = r;
    }
    for (int i = 0; ov != NULL && i < ov->n; i++) {
        struct coll_path_row r = ov->row[i];
        if (resolve_row(cfg, &r))
            out->row[out->nrows++] = r;
    }
    for (size_t i = 0; i < n; i++) {
        struct coll_path_row r = rows[i];
        if (r.path != COLL_PATH_LOCAL && resolve_row(cfg, &r))
            out->row[out->nrows++] = r;
    }
}

uint64_t coll_cuda_ll_bytes(enum coll_kind kind, uint64_t bytes, int nranks)
{
    uint64_t n = (uint64_t)nranks,
             f = kind == COLL_ALLTOALL                                   ? n * n
                 : kind == COLL_ALLGATHER || kind == COLL_REDUCE_SCATTER ? n
                                                                         : 1,
             v;
    return __builtin_mul_overflow(f, bytes, &v) ? UINT64_MAX : v;
}

void coll_device_paths_plan(const struct coll_paths *t, const struct coll_plan_ask *ask,
                            struct coll_plan *plan)
{
    uint64_t ll = coll_cuda_ll_bytes(ask->kind, ask->bytes, t->nranks);
    memset(plan, 0, sizeof(*plan));
    plan->row = -1;
    plan->path = COLL_PATH_NONE;
    for (int i = 0; i < t->nrows; i++) {
        const struct coll_path_row *r = &t->row[i];
        uint64_t v = r->staged ? ll : ask->bytes;
        if (!(r->colls & BIT(ask->kind)) || v < r->lo || v > r->hi)
            continue;
        /* The kernel path of a collective beyond allreduce stages the allreduce's input
         * and output in the copy ring. */
        if (r->path == COLL_PATH_KERNEL && ask->kind != COLL_ALLREDUCE && ll > t->room)
            continue;
        plan->path = r->path;
        plan->row = i;
        return;
    }
}
