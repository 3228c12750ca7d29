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
#include "env_vars.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

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
    case RT_KNOB_CODEC:
        return "codec";
    }
    return "unknown";
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* rt_env_unknown_each's callback: keeps a copy of each name. */
static void collect_unknown(const char *name, void *arg)
{
    struct arinfo *ai = arg;
    if (ai->unknown_count == ai->unknown_cap) {
        size_t cap = ai->unknown_cap ? 2 * ai->unknown_cap : 8;
        char **grown = realloc(ai->unknown_env, cap * sizeof(*grown));
        if (grown == NULL)
            return;
        ai->unknown_env = grown;
        ai->unknown_cap = cap;
    }
    char *copy = strdup(name);
    if (copy != NULL)
        ai->unknown_env[ai->unknown_count++] = copy;
}

void arinfo_warn_unknown_env(struct arinfo *ai)
{
    /* The library's own check (comm_init warns of the same names, once per process). */
    rt_env_unknown_each(collect_unknown, ai);
    if (ai->unknown_count == 0)
        return;
    qsort(ai->unknown_env, ai->unknown_count, sizeof(char *), cmp_str);
    for (size_t i = 0; i < ai->unknown_count; i++) {
        const char *s = rt_env_suggest(ai->unknown_env[i]);
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
        for (size_t i = 0; i < rt_env_other_count; i++) {
            json_object_begin(js, NULL);
            json_string(js, "name", rt_env_other_vars[i].name);
            json_string(js, "component", rt_env_other_vars[i].component);
            json_string(js, "value", getenv(rt_env_other_vars[i].name));
            json_string(js, "default", rt_env_other_vars[i].def);
            json_string(js, "doc", rt_env_other_vars[i].doc);
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
    /* DOC on the row when it leaves the doc 40 columns, else on a line of its own. */
    size_t doc_at = 2 + wname + 2 + wvalue + 2 + wsrc + 2 + 7 + 2;
    bool doc_below = doc_at + 40 > (size_t)ai->width;
    fprintf(ai->out, "  %-*s  %-*s  %-*s  %s%s\n", (int)wname, "NAME", (int)wvalue, "VALUE",
            (int)wsrc, "SOURCE", doc_below ? "TABLE" : "TABLE    ", doc_below ? "" : "DOC");
    for (size_t i = 0; i < rt_knob_count; i++) {
        const struct rt_knob_desc *d = &rt_knob_table[i];
        knob_shown(ai, i, shown, sizeof(shown));
        fprintf(ai->out, "  %-*s  ", (int)wname, d->name);
        arinfo_put_clean(ai->out, shown);
        const char *group = rt_knob_group_name(d->group);
        fprintf(ai->out, "%*s  %-*s  ", (int)(wvalue - strlen(shown)), "", (int)wsrc,
                rt_knob_source_name(ai->knobs.source[i]));
        if (doc_below)
            fprintf(ai->out, "%s\n      %s\n", group, d->doc);
        else
            fprintf(ai->out, "%-7s  %s\n", group, d->doc);
    }
    fprintf(ai->out, "  read by other components (not comm_init):\n");
    for (size_t i = 0; i < rt_env_other_count; i++) {
        const char *v = getenv(rt_env_other_vars[i].name);
        fprintf(ai->out, "  %-*s  ", (int)wname, rt_env_other_vars[i].name);
        if (v != NULL)
            arinfo_put_clean(ai->out, v);
        else
            fprintf(ai->out, "(%s)", rt_env_other_vars[i].def);
        fprintf(ai->out, "  %s: %s\n", rt_env_other_vars[i].component, rt_env_other_vars[i].doc);
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
