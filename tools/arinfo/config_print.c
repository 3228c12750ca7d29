/* SPDX-License-Identifier: MIT */
/*
 * The knobs (--config), and the transports built and the pick a communicator would
 * make (the paths of each collective are in paths_print.c).  Everything here goes
 * through the library's own tables and functions (rt_knob_table, rt_backend_pick):
 * arinfo reports what comm_init would decide, never a copy.
 */
#include "arinfo.h"
#include "backend.h"
#include "coll.h"
#include "comm_internal.h"

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
