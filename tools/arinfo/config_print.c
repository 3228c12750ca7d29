/* SPDX-License-Identifier: MIT */
/*
 * The knobs (--config), the transports built and the pick a communicator would make,
 * and the path of each collective for each message size.  Everything here goes
 * through the library's own tables and functions (rt_knob_table, rt_backend_pick,
 * coll_host_resolve_knobs, coll_host_path): arinfo reports what comm_init would decide,
 * never a copy.
 */
#include "arinfo.h"
#include "backend.h"
#include "coll.h"
#include "comm_internal.h"
#include "shm/cma_calibrate.h"
#include "nt_calibrate.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* Set by arrun for its ranks, read by comm_init_env: not knobs, and not typos. */
static const char *const arrun_vars[] = {
    "ARCOMM_RANK",       "ARCOMM_SIZE", "ARCOMM_LOCAL_RANK",
    "ARCOMM_LOCAL_SIZE", "ARCOMM_ID",   "ARCOMM_DEVICE",
};
#define N_ARRUN_VARS (sizeof(arrun_vars) / sizeof(arrun_vars[0]))

/* Variables of arcomm's other components, read outside the knob table (each by its
 * own component, at its own start): shown by --config, and not typos. */
static const struct {
    const char *name, *component, *def, *doc;
} other_vars[] = {
    {"ARCOMM_PMPI", "libarcomm_pmpi", "on",
     "off (0, no, false): every MPI call goes to Open MPI untouched, nothing counted"},
    {"ARCOMM_PMPI_MIN_BYTES", "libarcomm_pmpi", "per call, measured",
     "smallest message (bytes, K or M suffix) arcomm serves, for every call; smaller ones "
     "go to Open MPI (docs/pmpi.md)"},
    {"ARCOMM_HEAP_BYTES", "libarcomm_heap", "physical memory, at most 1T",
     "address space of the shared heap (K, M, G or T suffix; sparse: memory only for what is "
     "allocated); 0: no heap, every allocation glibc's"},
    {"ARCOMM_HEAP_MIN", "libarcomm_heap", "64K",
     "smallest allocation the shared heap serves (smaller ones are glibc's); peers reach "
     "buffers in the heap in one pass"},
    {"ARCOMM_LIBRARY", "python", "the build tree's, then an installed one",
     "the libarcomm.so the Python package loads"},
    {"ARCOMM_MPI_LIBRARY", "python", "beside the libarcomm loaded, then an installed one",
     "the libarcomm_mpi.so the Python package loads for Comm.from_mpi"},
};
#define N_OTHER_VARS (sizeof(other_vars) / sizeof(other_vars[0]))

/* Switches of arcomm's own test suite (ARCOMM_TEST_QUICK): not the library's. */
#define TEST_PREFIX "ARCOMM_TEST_"

void arinfo_knobs_load(struct arinfo *ai)
{
    char err[512];
    if (rt_knobs_load(&ai->knobs, err, sizeof(err)) != COMM_OK) {
        fprintf(stderr, "arinfo: %s\n", err);
        exit(2);
    }
    ai->resolved = ai->knobs;
    coll_host_resolve_knobs(&ai->resolved, rt_topo_summary(), ai->nranks, false);
    _Static_assert(sizeof(ai->used) / sizeof(ai->used[0]) ==
                       sizeof(coll_knob_views) / sizeof(coll_knob_views[0]),
                   "one knob view per backend");
    for (size_t v = 0; v < sizeof(ai->used) / sizeof(ai->used[0]); v++) {
        ai->used[v] = ai->knobs;
        coll_knob_views[v]->used(&ai->used[v], rt_topo_summary(), ai->nranks, false);
    }
}

#define N_VIEWS (sizeof(coll_knob_views) / sizeof(coll_knob_views[0]))

static bool view_reads(size_t v, size_t knob)
{
    return (coll_knob_views[v]->reads >> knob) & 1u;
}

static const char *device_name(comm_device_t d)
{
    return (unsigned)d < RT_DEVICE_COUNT ? rt_device_name(d) : "unknown";
}

static const char *type_name(enum rt_knob_type t)
{
    switch (t) {
    case RT_KNOB_INT:
        return "int";
    case RT_KNOB_SIZE:
        return "size";
    case RT_KNOB_BOOL:
        return "bool";
    case RT_KNOB_STRING:
        return "string";
    case RT_KNOB_LOGLEVEL:
        return "loglevel";
    }
    return "unknown";
}

/* Edit distance, for "did you mean": knob names are short, so O(n*m) is nothing. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return (size_t)-1;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The closest known name within three edits, or NULL. */
static const char *suggest(const char *name)
{
    const char *best = NULL;
    size_t best_d = 4;
    for (size_t i = 0; i < rt_knob_count + N_ARRUN_VARS; i++) {
        const char *cand =
            i < rt_knob_count ? rt_knob_table[i].name : arrun_vars[i - rt_knob_count];
        size_t d = distance(name, cand);
        if (d < best_d) {
            best_d = d;
            best = cand;
        }
    }
    return best;
}

static bool known_var(const char *name)
{
    if (strncmp(name, TEST_PREFIX, strlen(TEST_PREFIX)) == 0)
        return true;
    for (size_t i = 0; i < rt_knob_count; i++)
        if (strcmp(name, rt_knob_table[i].name) == 0)
            return true;
    for (size_t i = 0; i < N_ARRUN_VARS; i++)
        if (strcmp(name, arrun_vars[i]) == 0)
            return true;
    for (size_t i = 0; i < N_OTHER_VARS; i++)
        if (strcmp(name, other_vars[i].name) == 0)
            return true;
    return false;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void arinfo_warn_unknown_env(struct arinfo *ai)
{
    size_t cap = 0;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "ARCOMM_", 7) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        char *name = strndup(*e, len);
        if (name == NULL)
            break;
        if (known_var(name)) {
            free(name);
            continue;
        }
        if (ai->unknown_count == cap) {
            cap = cap ? 2 * cap : 8;
            char **grown = realloc(ai->unknown_env, cap * sizeof(*grown));
            if (grown == NULL) {
                free(name);
                break;
            }
            ai->unknown_env = grown;
        }
        ai->unknown_env[ai->unknown_count++] = name;
    }
    if (ai->unknown_count == 0)
        return;
    qsort(ai->unknown_env, ai->unknown_count, sizeof(char *), cmp_str);
    for (size_t i = 0; i < ai->unknown_count; i++) {
        const char *s = suggest(ai->unknown_env[i]);
        fprintf(stderr, "arinfo: warning: ");
        arinfo_put_clean(stderr, ai->unknown_env[i]);
        fprintf(stderr, " is set but is no arcomm knob%s%s%s\n", s ? " (did you mean " : "",
                s ? s : "", s ? "?)" : "");
    }
}

void print_transports(struct arinfo *ai)
{
    struct json *js = &ai->js;
    const char *requested = ai->knobs.transport[0] ? ai->knobs.transport : NULL;
    char why[256] = "";
    struct transport_probe want = {.nranks = ai->nranks, .device = COMM_DEVICE_HOST};
    const struct backend_ops *pick = rt_backend_pick(&want, requested, why, sizeof(why));

    if (ai->json)
        json_array_begin(js, "transports");
    else
        arinfo_title(ai, "Transports (built: %zu; probed for %d local rank%s)", rt_backend_count,
                     ai->nranks, ai->nranks == 1 ? "" : "s");
    for (size_t i = 0; i < rt_backend_count; i++) {
        const struct backend_ops *t = rt_backends[i];
        /* Each transport is asked about buffers of its own device: a CUDA transport
         * always refuses host buffers, which would say nothing. */
        struct transport_probe p = {.nranks = ai->nranks, .device = t->device};
        char reason[256] = "";
        bool ok = t->probe(&p, reason, sizeof(reason));
        if (ai->json) {
            json_object_begin(js, NULL);
            json_string(js, "name", t->name);
            json_string(js, "device", device_name(t->device));
            json_bool(js, "probe_ok", ok);
            json_string(js, "probe_reason", ok ? NULL : reason);
            json_bool(js, "picked", t == pick);
            json_object_end(js);
        } else {
            fprintf(ai->out, "  %-8s %-8s %s", t->name, device_name(t->device),
                    ok ? "probe ok" : "probe failed: ");
            if (!ok)
                arinfo_put_clean(ai->out, reason);
            fprintf(ai->out, "%s\n", t == pick ? "  <- picked for host buffers" : "");
        }
    }
    if (ai->json) {
        json_array_end(js);
        json_object_begin(js, "transport_pick");
        json_string(js, "device", "host");
        json_int(js, "nranks", ai->nranks);
        json_string(js, "requested", requested);
        json_string(js, "picked", pick ? pick->name : NULL);
        json_string(js, "reason", pick ? NULL : why);
        json_object_end(js);
        return;
    }
    if (rt_backend_count == 0)
        fprintf(ai->out, "  none\n");
    if (requested) {
        fprintf(ai->out, "  ARCOMM_TRANSPORT=");
        arinfo_put_clean(ai->out, requested);
        fputc('\n', ai->out);
    }
    if (pick == NULL) {
        fprintf(ai->out, "  no transport for host buffers: ");
        arinfo_put_clean(ai->out, why);
        fputc('\n', ai->out);
    }
}

/* A resolved size threshold: bytes, or "off" (RT_SIZE_OFF). */
static void fmt_threshold(size_t v, char *buf, size_t len)
{
    if (v == RT_SIZE_OFF)
        snprintf(buf, len, "off");
    else
        arinfo_fmt_size(v, buf, len);
}

/* Bulk on process ranks: staged, unless every buffer is from comm_mem_alloc. */
static const char bulk_procs_text[] = "bulk: staged (one-pass with comm_mem)";
static const char bulk_cma_text[] = "bulk: cma (one-pass with comm_mem)";

/* The collectives beyond allreduce, in the API's order: the columns of their table. */
static const enum coll_kind other_kinds[] = {
    COLL_BROADCAST, COLL_REDUCE, COLL_ALLGATHER, COLL_REDUCE_SCATTER, COLL_ALLTOALL,
};
#define N_OTHER_KINDS (sizeof(other_kinds) / sizeof(other_kinds[0]))

/* A table cell: the bulk path named by the variant those ranks take with their own
 * buffers (process ranks: staged; thread ranks: one-pass). */
static const char *cell(const char *path, const char *bulk)
{
    return strcmp(path, "bulk") == 0 ? bulk : path;
}

/* Would a communicator of n process ranks here agree that the single copy is fast (as
 * every rank of it asks at join: ARCOMM_CMA_FAST, else this process's calibration)? */
static bool cma_fast(const struct rt_knobs *k, int n)
{
    return k->cma_threshold == RT_SIZE_AUTO && n == 2 && shm_cma_fast_here(k);
}

/* The bulk path of process ranks with private buffers: single-copy CMA where
 * ARCOMM_CMA_THRESHOLD sends the call there (and comm_init found every peer readable
 * through process_vm_readv), else staged. */
static const char *procs_bulk(enum coll_kind kind, const struct rt_knobs *k, size_t bytes, int n)
{
    return coll_host_cma_size(kind, k, bytes, n, cma_fast(k, n)) ? "cma" : "staged";
}

/*
 * The path of every collective beyond allreduce, per size, from coll_host_path (the
 * function coll_host_run picks the path by).  A size is bytes per rank as the API
 * counts them: count x element size, where count is broadcast's and reduce's count,
 * allgather's sendcount, reduce_scatter's recvcount and alltoall's count per block:
 * coll_host_path's bytes_per_rank.  threads: the knobs resolved for thread ranks.
 */
static void print_collective_paths(struct arinfo *ai, const struct rt_knobs *threads)
{
    const struct rt_knobs *k = &ai->resolved;
    struct json *js = &ai->js;
    int n = ai->nranks;

    if (ai->json) {
        json_array_begin(js, "collective_paths");
    } else {
        arinfo_title(ai,
                     "Collective paths (host buffers, %d rank%s; SIZE: bytes per rank, the "
                     "call's count x the element size)",
                     n, n == 1 ? "" : "s");
        fprintf(ai->out,
                "  count: broadcast's and reduce's count, allgather's sendcount, "
                "reduce_scatter's recvcount, alltoall's count per block; flag path while what "
                "a rank stages fits the flag threshold: SIZE, or SIZE x %d ranks for "
                "reduce_scatter and alltoall\n",
                n);
        fprintf(ai->out, "  bulk: process ranks staged, or cma (process_vm_readv, where "
                         "ARCOMM_CMA_THRESHOLD says and every peer is readable), one-pass when "
                         "the buffers peers touch come from comm_mem_alloc or lie in every "
                         "rank's shared heap; thread ranks one-pass\n");
        fprintf(ai->out, "  %-10s %-8s", "SIZE", "RANKS");
        for (size_t c = 0; c < N_OTHER_KINDS; c++) {
            char head[32];
            const char *name = coll_kind_name(other_kinds[c]);
            size_t i = 0;
            for (; name[i] && i + 1 < sizeof(head); i++)
                head[i] = (char)toupper((unsigned char)name[i]);
            head[i] = '\0';
            fprintf(ai->out, c + 1 < N_OTHER_KINDS ? " %-15s" : " %s", head);
        }
        fputc('\n', ai->out);
    }
    for (size_t i = 0; i < ai->nsizes; i++) {
        size_t bytes = ai->sizes[i];
        char size[32];
        arinfo_fmt_size(bytes, size, sizeof(size));
        if (ai->json) {
            for (size_t c = 0; c < N_OTHER_KINDS; c++) {
                enum coll_kind kind = other_kinds[c];
                json_object_begin(js, NULL);
                json_string(js, "size", size);
                json_uint(js, "bytes", bytes);
                json_string(js, "collective", coll_kind_name(kind));
                json_string(js, "device", "host");
                json_uint(js, "flag_stage_bytes", coll_host_flag_bytes(kind, bytes, n));
                json_string(js, "path", coll_host_path(kind, k, bytes, n));
                json_string(js, "path_thread_ranks", coll_host_path(kind, threads, bytes, n));
                json_string(js, "process_ranks_bulk", procs_bulk(kind, k, bytes, n));
                json_object_end(js);
            }
            continue;
        }
        for (int t = 0; t < 2; t++) {
            fprintf(ai->out, "  %-10s %-8s", t ? "" : size, t ? "thread" : "process");
            for (size_t c = 0; c < N_OTHER_KINDS; c++) {
                const char *path =
                    t ? cell(coll_host_path(other_kinds[c], threads, bytes, n), "one-pass")
                      : cell(coll_host_path(other_kinds[c], k, bytes, n),
                             procs_bulk(other_kinds[c], k, bytes, n));
                fprintf(ai->out, c + 1 < N_OTHER_KINDS ? " %-15s" : " %s", path);
            }
            fputc('\n', ai->out);
        }
    }
    if (ai->json)
        json_array_end(js);
}

static const char *const nt_outcome_names[] = {
    [COLL_NT_MEASURED] = "measured",
    [COLL_NT_NO_CROSSOVER] = "no_crossover",
    [COLL_NT_FAILED] = "failed",
    [COLL_NT_SKIPPED] = "skipped",
};

/* GB/s of one calibration pass (bytes read and written over its time). */
static double nt_gbps(size_t footprint, double ns)
{
    return ns > 0 ? (double)footprint / ns : 0;
}

/*
 * ARCOMM_NT_THRESHOLD and where its value comes from: set in the environment, or
 * "auto", then the calibration's result or the last-level cache, and why (text: one
 * line, and the ladder the calibration measured; JSON: streaming_stores).
 */
static void print_streaming(struct arinfo *ai)
{
    const struct rt_knobs *k = &ai->resolved;
    struct json *js = &ai->js;
    char nt[32], step[32];
    fmt_threshold(k->nt_threshold, nt, sizeof(nt));
    bool automatic = ai->knobs.nt_threshold == RT_SIZE_AUTO;
    const struct coll_nt_calibration *cal = automatic ? coll_nt_calibration() : NULL;
    const char *origin = NULL;
    if (cal)
        (void)coll_nt_auto_threshold(rt_topo_summary(), cal, &origin);
    bool ran = cal && (cal->outcome == COLL_NT_MEASURED || cal->outcome == COLL_NT_NO_CROSSOVER);
    if (ai->json) {
        json_object_begin(js, "streaming_stores");
        json_string(js, "threshold", nt);
        if (k->nt_threshold == RT_SIZE_OFF)
            json_null(js, "threshold_bytes");
        else
            json_uint(js, "threshold_bytes", k->nt_threshold);
        json_string(js, "source", automatic ? "auto" : "set");
        json_string(js, "origin", origin);
        if (cal) {
            json_object_begin(js, "calibration");
            json_string(js, "outcome", nt_outcome_names[cal->outcome]);
            if (cal->outcome == COLL_NT_MEASURED)
                json_uint(js, "crossover_bytes", cal->crossover);
            else
                json_null(js, "crossover_bytes");
            json_string(js, "why", cal->why);
            if (ran)
                json_double(js, "wall_ms", cal->wall_ms, 2);
            else
                json_null(js, "wall_ms");
            json_array_begin(js, "ladder");
            for (int i = 0; i < cal->nsamples; i++) {
                const struct coll_nt_sample *s = &cal->samples[i];
                json_object_begin(js, NULL);
                json_uint(js, "footprint_bytes", s->footprint);
                json_double(js, "cached_gbps", nt_gbps(s->footprint, s->cached_ns), 2);
                json_double(js, "streaming_gbps", nt_gbps(s->footprint, s->stream_ns), 2);
                json_object_end(js);
            }
            json_array_end(js);
            json_object_end(js);
        } else {
            json_null(js, "calibration");
        }
        json_object_end(js);
        return;
    }
    if (automatic)
        fprintf(ai->out, "  streaming-store threshold: auto: %s (%s)\n", nt, origin);
    else
        fprintf(ai->out, "  streaming-store threshold: set: %s\n", nt);
    if (cal && cal->outcome == COLL_NT_FAILED)
        fprintf(ai->out, "  calibration failed: %s\n", cal->why);
    if (!ran)
        return;
    fprintf(ai->out,
            "  calibration (%.1f ms; GB/s cached / streaming per footprint):", cal->wall_ms);
    for (int i = 0; i < cal->nsamples; i++) {
        const struct coll_nt_sample *s = &cal->samples[i];
        arinfo_fmt_size(s->footprint, step, sizeof(step));
        fprintf(ai->out, " %s %.1f/%.1f", step, nt_gbps(s->footprint, s->cached_ns),
                nt_gbps(s->footprint, s->stream_ns));
    }
    fputc('\n', ai->out);
}

/*
 * The shared heap (libarcomm_heap.so, LD_PRELOAD or arrun --shared-heap): whether this
 * process has one, which says whether process ranks started like arinfo reach each
 * other's malloc'd buffers.
 */
static void print_shared_heap(struct arinfo *ai)
{
    struct shm_heap_own own;
    bool have = shm_heap_own(&own);
    if (ai->json) {
        json_object_begin(&ai->js, "shared_heap");
        json_bool(&ai->js, "preloaded", have);
        if (have) {
            json_uint(&ai->js, "bytes", own.bytes);
            json_uint(&ai->js, "min_bytes", own.min_bytes);
        } else {
            json_null(&ai->js, "bytes");
            json_null(&ai->js, "min_bytes");
        }
        json_object_end(&ai->js);
        return;
    }
    if (have) {
        char size[32], min[32];
        snprintf(size, sizeof(size), "%.1f GiB", (double)own.bytes / (1u << 30));
        arinfo_fmt_size(own.min_bytes, min, sizeof(min));
        fprintf(ai->out,
                "  shared heap: libarcomm_heap.so preloaded here (%s of address space): "
                "process ranks that all run with it take the one-pass path on buffers from "
                "malloc of ARCOMM_HEAP_MIN (%s) bytes or more, and leave an automatic flag "
                "path there\n",
                size, min);
    } else {
        fprintf(ai->out, "  shared heap: not preloaded here: process ranks stage (or copy "
                         "through CMA) the buffers they allocate themselves; arrun "
                         "--shared-heap or LD_PRELOAD=libarcomm_heap.so gives them the "
                         "one-pass path\n");
    }
}

static const char *const cma_outcome_names[] = {
    [SHM_CMA_MEASURED] = "measured",
    [SHM_CMA_FAILED] = "failed",
    [SHM_CMA_SKIPPED] = "skipped",
};

/*
 * ARCOMM_CMA_THRESHOLD: a value set, or "auto" and what this process measured of the
 * single copy (cma_calibrate.h), which decides the windows where process ranks' bulk
 * calls take it (text: one line; JSON: single_copy).
 */
static void print_single_copy(struct arinfo *ai)
{
    const struct rt_knobs *k = &ai->resolved;
    struct json *js = &ai->js;
    bool automatic = k->cma_threshold == RT_SIZE_AUTO;
    bool set_fast = k->cma_fast >= 0; /* ARCOMM_CMA_FAST: no calibration */
    const struct shm_cma_calibration *cal = automatic && !set_fast ? shm_cma_calibration() : NULL;
    bool measured = cal && cal->outcome == SHM_CMA_MEASURED;
    double rv = measured ? (double)SHM_CMA_CAL_BYTES / cal->readv_ns : 0;
    double mc = measured ? (double)SHM_CMA_CAL_BYTES / cal->memcpy_ns : 0;
    bool fast = automatic && shm_cma_fast_here(k);
    char thr[32];
    fmt_threshold(k->cma_threshold, thr, sizeof(thr));
    if (ai->json) {
        json_object_begin(js, "single_copy");
        json_string(js, "threshold", automatic ? "auto" : thr);
        json_string(js, "source", automatic ? "auto" : "set");
        if (automatic)
            json_bool(js, "fast", fast);
        else
            json_null(js, "fast");
        json_string(js, "fast_source", !automatic ? NULL : set_fast ? "set" : "measured");
        if (cal) {
            json_object_begin(js, "calibration");
            json_string(js, "outcome", cma_outcome_names[cal->outcome]);
            json_string(js, "why", cal->why);
            if (measured) {
                json_double(js, "readv_gbps", rv, 2);
                json_double(js, "memcpy_gbps", mc, 2);
                json_double(js, "ratio", shm_cma_ratio(cal), 3);
                json_double(js, "wall_ms", cal->wall_ms, 2);
            } else {
                json_null(js, "readv_gbps");
                json_null(js, "memcpy_gbps");
                json_null(js, "ratio");
                json_null(js, "wall_ms");
            }
            json_double(js, "fast_ratio", SHM_CMA_FAST_RATIO, 2);
            json_bool(js, "fast", shm_cma_is_fast(cal));
            json_object_end(js);
        } else {
            json_null(js, "calibration");
        }
        json_object_end(js);
        return;
    }
    if (!automatic) {
        fprintf(ai->out, "  single copy (CMA) for process ranks: set: %s%s\n",
                k->cma_threshold == RT_SIZE_OFF ? "" : "every bulk call from ", thr);
        return;
    }
    fprintf(ai->out, "  single copy (CMA) for 2 process ranks: auto: ");
    if (set_fast)
        fprintf(ai->out, "ARCOMM_CMA_FAST=%ld: ", k->cma_fast);
    else if (measured)
        fprintf(ai->out,
                "readv %.1f GB/s, %.2f of memcpy's %.1f (%s %.2f; %.1f ms at first use): ", rv,
                shm_cma_ratio(cal), mc, fast ? ">=" : "<", SHM_CMA_FAST_RATIO, cal->wall_ms);
    else
        fprintf(ai->out, "%s: ", cal->outcome == SHM_CMA_FAILED ? cal->why : "not measured");
    fprintf(ai->out,
            "%s; in them each call takes the path measured faster (%d calls in %d on "
            "the other)%s\n",
            fast ? "bulk calls from 512K per rank (allreduce up to 16M, reduce and reduce_scatter "
                   "up to 8M)"
                 : "allgather 1M-4M per rank only",
            COLL_CMA_BURST, COLL_CMA_EXPLORE,
            fast ? "; calls the flag path would take, from 16K per rank: the "
                   "flag path or CMA as rank 0 measures them, for every rank"
                 : "");
}

void print_paths(struct arinfo *ai)
{
    const struct rt_knobs *k = &ai->resolved;
    struct json *js = &ai->js;
    char flag[32], flag_threads[32], bf16[32], nt[32];
    fmt_threshold(k->flag_threshold, flag, sizeof(flag));
    /* Thread ranks of one process have their own default (the one-pass path wins early). */
    struct rt_knobs threads = ai->knobs;
    coll_host_resolve_knobs(&threads, rt_topo_summary(), ai->nranks, true);
    fmt_threshold(threads.flag_threshold, flag_threads, sizeof(flag_threads));
    fmt_threshold(k->bf16_threshold, bf16, sizeof(bf16));
    fmt_threshold(k->nt_threshold, nt, sizeof(nt));

    if (ai->json) {
        json_array_begin(js, "paths");
    } else {
        arinfo_title(ai, "Allreduce paths (host buffers, %d rank%s)", ai->nranks,
                     ai->nranks == 1 ? "" : "s");
        fprintf(ai->out,
                "  flag path up to %s (thread ranks of one process: up to %s); f32 travels as "
                "bf16 from %s; one-pass calls moving %s or more (all ranks' inputs and outputs) "
                "use streaming stores\n",
                flag, flag_threads, bf16, nt);
        print_streaming(ai);
        print_single_copy(ai);
        print_shared_heap(ai);
        fprintf(ai->out, "  %-10s %-12s %-38s %s\n", "SIZE", "F32 AS BF16", "PROCESS RANKS",
                "THREAD RANKS");
    }
    for (size_t i = 0; i < ai->nsizes; i++) {
        size_t bytes = ai->sizes[i];
        char size[32];
        arinfo_fmt_size(bytes, size, sizeof(size));
        const char *path = coll_host_path_name(k, bytes);
        bool bulk = strcmp(path, "bulk") == 0;
        bool narrow = coll_narrows(k, COMM_F32, bytes);
        if (ai->json) {
            json_object_begin(js, NULL);
            json_string(js, "size", size);
            json_uint(js, "bytes", bytes);
            json_string(js, "device", "host");
            json_string(js, "path", path);
            json_string(js, "path_thread_ranks", coll_host_path_name(&threads, bytes));
            if (bulk) {
                json_object_begin(js, "bulk_variant");
                json_string(js, "thread_ranks_or_comm_mem", "one-pass");
                json_string(js, "process_ranks", procs_bulk(COLL_ALLREDUCE, k, bytes, ai->nranks));
                json_object_end(js);
            } else {
                json_null(js, "bulk_variant");
            }
            json_bool(js, "f32_as_bf16", narrow);
            json_bool(js, "one_pass_streaming_stores",
                      bulk && coll_host_streams(k, ai->nranks, bytes));
            json_object_end(js);
        } else {
            const char *tpath = coll_host_path_name(&threads, bytes);
            fprintf(ai->out, "  %-10s %-12s %-38s %s\n", size, narrow ? "yes" : "no",
                    !bulk ? path
                    : strcmp(procs_bulk(COLL_ALLREDUCE, k, bytes, ai->nranks), "cma") == 0
                        ? bulk_cma_text
                        : bulk_procs_text,
                    strcmp(tpath, "bulk") == 0 ? "bulk: one-pass" : tpath);
        }
    }
    if (ai->json)
        json_array_end(js);
    print_collective_paths(ai, &threads);
    if (ai->json) {
        print_streaming(ai);
        print_single_copy(ai);
        print_shared_heap(ai);
    }
}

/* The value as loaded, and as the library will use it (the first backend that reads the
 * knob: the host's for the common and host knobs). */
static void knob_values(struct arinfo *ai, size_t i, char *value, size_t vlen, char *eff,
                        size_t elen)
{
    rt_knob_format(&ai->knobs, i, value, vlen);
    for (size_t v = 0; v < N_VIEWS; v++)
        if (view_reads(v, i)) {
            rt_knob_format(&ai->used[v], i, eff, elen);
            return;
        }
    snprintf(eff, elen, "%s", value);
}

/* Do the backends that read knob i use different values of it? */
static bool backends_differ(struct arinfo *ai, size_t i)
{
    char first[RT_KNOB_STR_MAX] = "", other[RT_KNOB_STR_MAX];
    bool seen = false;
    for (size_t v = 0; v < N_VIEWS; v++) {
        if (!view_reads(v, i))
            continue;
        rt_knob_format(&ai->used[v], i, seen ? other : first, RT_KNOB_STR_MAX);
        if (seen && strcmp(first, other) != 0)
            return true;
        seen = true;
    }
    return false;
}

/* The VALUE column: "16K (auto)" when the library resolved an automatic value, and
 * each backend's value when they differ ("auto (shm: off, cuda: 1M)"). */
static void knob_shown(struct arinfo *ai, size_t i, char *buf, size_t len)
{
    char value[RT_KNOB_STR_MAX], eff[RT_KNOB_STR_MAX];
    knob_values(ai, i, value, sizeof(value), eff, sizeof(eff));
    if (backends_differ(ai, i)) {
        size_t used = (size_t)snprintf(buf, len, "%s (", value);
        const char *sep = "";
        for (size_t v = 0; v < N_VIEWS && used < len; v++) {
            if (!view_reads(v, i))
                continue;
            rt_knob_format(&ai->used[v], i, eff, sizeof(eff));
            used += (size_t)snprintf(buf + used, len - used, "%s%s: %s", sep,
                                     coll_knob_views[v]->name, eff);
            sep = ", ";
        }
        if (used < len)
            snprintf(buf + used, len - used, ")");
    } else if (strcmp(value, eff) == 0) {
        snprintf(buf, len, "%s", value[0] ? value : "\"\"");
    } else if (strcmp(value, "auto") == 0) {
        snprintf(buf, len, "%s (auto)", eff);
    } else {
        snprintf(buf, len, "%s (effective %s)", value, eff);
    }
}

void print_config(struct arinfo *ai)
{
    char value[RT_KNOB_STR_MAX], eff[RT_KNOB_STR_MAX], shown[2 * RT_KNOB_STR_MAX + 32];
    struct json *js = &ai->js;
    if (ai->json) {
        json_array_begin(js, "config");
        for (size_t i = 0; i < rt_knob_count; i++) {
            const struct rt_knob_desc *d = &rt_knob_table[i];
            knob_values(ai, i, value, sizeof(value), eff, sizeof(eff));
            json_object_begin(js, NULL);
            json_string(js, "name", d->name);
            json_string(js, "type", type_name(d->type));
            json_string(js, "value", value);
            json_string(js, "effective", eff);
            json_string(js, "default", d->def);
            json_string(js, "source", rt_knob_source_name(ai->knobs.source[i]));
            json_string(js, "table", rt_knob_group_name(d->group));
            json_object_begin(js, "used_by");
            for (size_t v = 0; v < N_VIEWS; v++) {
                if (!view_reads(v, i))
                    continue;
                rt_knob_format(&ai->used[v], i, eff, sizeof(eff));
                json_string(js, coll_knob_views[v]->name, eff);
            }
            json_object_end(js);
            json_string(js, "doc", d->doc);
            json_object_end(js);
        }
        json_array_end(js);
        json_array_begin(js, "other_variables");
        for (size_t i = 0; i < N_OTHER_VARS; i++) {
            json_object_begin(js, NULL);
            json_string(js, "name", other_vars[i].name);
            json_string(js, "component", other_vars[i].component);
            json_string(js, "value", getenv(other_vars[i].name));
            json_string(js, "default", other_vars[i].def);
            json_string(js, "doc", other_vars[i].doc);
            json_object_end(js);
        }
        json_array_end(js);
        json_array_begin_inline(js, "unknown_environment");
        for (size_t i = 0; i < ai->unknown_count; i++)
            json_string(js, NULL, ai->unknown_env[i]);
        json_array_end(js);
        return;
    }

    /* Column widths from the content, so that the DOC column lines up. */
    size_t wname = strlen("NAME"), wvalue = strlen("VALUE"), wsrc = strlen("SOURCE");
    for (size_t i = 0; i < rt_knob_count; i++) {
        knob_shown(ai, i, shown, sizeof(shown));
        size_t n = strlen(rt_knob_table[i].name), v = strlen(shown);
        size_t src = strlen(rt_knob_source_name(ai->knobs.source[i]));
        wname = n > wname ? n : wname;
        wvalue = v > wvalue ? v : wvalue;
        wsrc = src > wsrc ? src : wsrc;
    }
    arinfo_title(ai, "Knobs (%zu; values for %d rank%s)", rt_knob_count, ai->nranks,
                 ai->nranks == 1 ? "" : "s");
    /* TABLE: the knob's sub-table.  VALUE: what the communicators of the backends that
     * read the knob use (each backend's, when they differ). */
    fprintf(ai->out, "  %-*s  %-*s  %-*s  %-7s  %s\n", (int)wname, "NAME", (int)wvalue, "VALUE",
            (int)wsrc, "SOURCE", "TABLE", "DOC");
    for (size_t i = 0; i < rt_knob_count; i++) {
        const struct rt_knob_desc *d = &rt_knob_table[i];
        knob_shown(ai, i, shown, sizeof(shown));
        fprintf(ai->out, "  %-*s  ", (int)wname, d->name);
        arinfo_put_clean(ai->out, shown);
        fprintf(ai->out, "%*s  %-*s  %-7s  %s\n", (int)(wvalue - strlen(shown)), "", (int)wsrc,
                rt_knob_source_name(ai->knobs.source[i]), rt_knob_group_name(d->group), d->doc);
    }
    fprintf(ai->out, "  read by other components (not comm_init):\n");
    for (size_t i = 0; i < N_OTHER_VARS; i++) {
        const char *v = getenv(other_vars[i].name);
        fprintf(ai->out, "  %-*s  ", (int)wname, other_vars[i].name);
        if (v != NULL)
            arinfo_put_clean(ai->out, v);
        else
            fprintf(ai->out, "(%s)", other_vars[i].def);
        fprintf(ai->out, "  %s: %s\n", other_vars[i].component, other_vars[i].doc);
    }
    if (ai->unknown_count > 0) {
        fprintf(ai->out, "  not knobs, yet set:");
        for (size_t i = 0; i < ai->unknown_count; i++) {
            fputc(' ', ai->out);
            arinfo_put_clean(ai->out, ai->unknown_env[i]);
        }
        fputc('\n', ai->out);
    }
}
