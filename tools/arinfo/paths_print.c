/* SPDX-License-Identifier: MIT */
/*
 * The paths section: for each message size, the path each collective takes on thread
 * ranks and on process ranks, with the single copy, streaming stores and the shared
 * heap as this host would set them.  The paths come from the library's path table
 * through comm_paths_query (plan_print.c), the thresholds from its own functions
 * (coll_host_resolve_knobs, the calibrations): arinfo reports what comm_init and the
 * calls would decide, never a copy.
 */
#include "arcomm_paths.h"
#include "arinfo.h"
#include "coll.h"
#include "comm_internal.h"
#include "shm/cma_calibrate.h"
#include "nt_calibrate.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

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

/* The plan of a call of kind moving bytes per rank on ai->nranks process or thread ranks
 * with private buffers (plan_print.c): "flag", "one-pass", "cma" or "staged". */
static const char *path_of(const struct arinfo *ai, enum coll_kind kind, size_t bytes, bool threads,
                           comm_paths_plan_t *plan)
{
    arinfo_plan(ai, coll_kind_name(kind), bytes, threads, false, plan);
    return plan->path;
}

/* "flag" or "bulk", as the JSON has it. */
static const char *flag_or_bulk(const char *path)
{
    return strcmp(path, "flag") == 0 ? "flag" : "bulk";
}

/* The bulk path of process ranks with private buffers: the plan's, "staged" for a flag
 * call. */
static const char *procs_bulk_of(const char *path)
{
    return strcmp(path, "flag") == 0 ? "staged" : path;
}

/*
 * The path of every collective beyond allreduce, per size, from the path table's plan
 * (the function every host call is planned by).  A size is bytes per rank as the API
 * counts them: count x element size, where count is broadcast's and reduce's count,
 * allgather's sendcount, reduce_scatter's recvcount and alltoall's count per block:
 * comm_paths_query's bytes.
 */
/* A column of the table: as wide as its title, and at least as a path ("one-pass"), so
 * that the table fits 80 columns. */
static int column_width(size_t c)
{
    int w = (int)strlen(coll_kind_name(other_kinds[c]));
    return w < 8 ? 8 : w;
}

static void print_collective_paths(struct arinfo *ai)
{
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
            /* No trailing blanks: golden files compare whole lines. */
            fprintf(ai->out, " %-*s", c + 1 < N_OTHER_KINDS ? column_width(c) : 0, head);
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
                comm_paths_plan_t pp, tp;
                const char *procs = path_of(ai, kind, bytes, false, &pp);
                const char *thr = path_of(ai, kind, bytes, true, &tp);
                json_uint(js, "flag_stage_bytes", coll_host_flag_bytes(kind, bytes, n));
                json_string(js, "path", flag_or_bulk(procs));
                json_string(js, "path_thread_ranks", flag_or_bulk(thr));
                json_string(js, "process_ranks_bulk", procs_bulk_of(procs));
                json_object_end(js);
            }
            continue;
        }
        for (int t = 0; t < 2; t++) {
            fprintf(ai->out, "  %-10s %-8s", t ? "" : size, t ? "thread" : "process");
            for (size_t c = 0; c < N_OTHER_KINDS; c++) {
                comm_paths_plan_t plan;
                const char *path = path_of(ai, other_kinds[c], bytes, t == 1, &plan);
                fprintf(ai->out, " %-*s", c + 1 < N_OTHER_KINDS ? column_width(c) : 0, path);
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
            "%s; in them each call takes the path measured faster (%d calls on the other "
            "at calls %d, %d, ... and every %d from %d on)%s\n",
            fast ? "bulk calls from 512K per rank (allreduce up to 16M, reduce and reduce_scatter "
                   "up to 8M)"
                 : "allgather 1M-4M per rank only",
            COLL_CMA_BURST, COLL_CMA_EXPLORE, 2 * COLL_CMA_EXPLORE, COLL_CMA_EXPLORE_MAX,
            COLL_CMA_EXPLORE_MAX,
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
    /* ARCOMM_WIRE=bf16 (the host's only codec) from its threshold; otherwise never. */
    fmt_threshold(k->wire == WIRE_BF16 ? coll_wire_threshold(k) : RT_SIZE_OFF, bf16, sizeof(bf16));
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
        comm_paths_plan_t pp, tp;
        const char *procs = path_of(ai, COLL_ALLREDUCE, bytes, false, &pp);
        const char *tpath = path_of(ai, COLL_ALLREDUCE, bytes, true, &tp);
        const char *path = flag_or_bulk(procs);
        bool bulk = strcmp(path, "bulk") == 0;
        bool narrow = coll_narrows(k, COMM_F32, COMM_SUM, bytes);
        if (ai->json) {
            json_object_begin(js, NULL);
            json_string(js, "size", size);
            json_uint(js, "bytes", bytes);
            json_string(js, "device", "host");
            json_string(js, "path", path);
            json_string(js, "path_thread_ranks", flag_or_bulk(tpath));
            if (bulk) {
                json_object_begin(js, "bulk_variant");
                json_string(js, "thread_ranks_or_comm_mem", "one-pass");
                json_string(js, "process_ranks", procs_bulk_of(procs));
                json_object_end(js);
            } else {
                json_null(js, "bulk_variant");
            }
            json_bool(js, "f32_as_bf16", narrow);
            json_bool(js, "one_pass_streaming_stores",
                      bulk && coll_host_streams(k, ai->nranks, bytes));
            json_object_end(js);
        } else {
            fprintf(ai->out, "  %-10s %-12s %-38s %s\n", size, narrow ? "yes" : "no",
                    !bulk                       ? path
                    : strcmp(procs, "cma") == 0 ? bulk_cma_text
                                                : bulk_procs_text,
                    strcmp(tpath, "flag") != 0 ? "bulk: one-pass" : tpath);
        }
    }
    if (ai->json)
        json_array_end(js);
    print_collective_paths(ai);
    print_path_table(ai);
    if (ai->json) {
        print_streaming(ai);
        print_single_copy(ai);
        print_shared_heap(ai);
    }
}
