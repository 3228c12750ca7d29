/* SPDX-License-Identifier: MIT */
/*
 * The knob table and its parser.  One place declares every ARCOMM_* variable, its
 * default and its one-line doc; arinfo --config prints this table.
 */
#include "knobs.h"
#include "tables.h"
#include "wire.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KNOB_DESC(group_, id, type_, def_, field, min_, max_, flags_, doc_)                        \
    [RT_KNOB_##id] = {.name = "ARCOMM_" #id,                                                       \
                      .group = group_,                                                             \
                      .type = type_,                                                               \
                      .def = def_,                                                                 \
                      .doc = doc_,                                                                 \
                      .offset = offsetof(struct rt_knobs, field),                                  \
                      .min = min_,                                                                 \
                      .max = max_,                                                                 \
                      .flags = flags_},

/* The sub-tables of knobs.h, in the order of enum rt_knob_id: entry i is knob i. */
#define KNOB_COMMON(...) KNOB_DESC(RT_KNOB_GROUP_COMMON, __VA_ARGS__)
#define KNOB_HOST(...)   KNOB_DESC(RT_KNOB_GROUP_HOST, __VA_ARGS__)
#define KNOB_CUDA(...)   KNOB_DESC(RT_KNOB_GROUP_CUDA, __VA_ARGS__)
#define KNOB_HEX(...)    KNOB_DESC(RT_KNOB_GROUP_HEX, __VA_ARGS__)
const struct rt_knob_desc rt_knob_table[RT_KNOB_COUNT] = {RT_KNOBS_COMMON(
    KNOB_COMMON) RT_KNOBS_HOST(KNOB_HOST) RT_KNOBS_CUDA(KNOB_CUDA) RT_KNOBS_HEX(KNOB_HEX)};

const size_t rt_knob_count = RT_KNOB_COUNT;

/* Each entry's name is its index's: ARCOMM_<id> at RT_KNOB_<id> (a designated
 * initializer per entry, so the order cannot slip), and the table has no hole. */
#define KNOB_COUNT_ONE(id, type, def, field, min, max, flags, doc) +1
_Static_assert(0 RT_KNOBS(KNOB_COUNT_ONE) == RT_KNOB_COUNT, "one table entry per knob");
_Static_assert(sizeof(rt_knob_table) / sizeof(rt_knob_table[0]) == RT_KNOB_COUNT,
               "rt_knob_table is indexed by enum rt_knob_id");

const char *rt_knob_group_name(enum rt_knob_group g)
{
    switch (g) {
    case RT_KNOB_GROUP_HOST:
        return "host";
    case RT_KNOB_GROUP_CUDA:
        return "cuda";
    case RT_KNOB_GROUP_HEX:
        return "hexagon";
    default:
        return "common";
    }
}

const char *rt_knob_source_name(enum rt_knob_source src)
{
    switch (src) {
    case RT_SRC_ENV:
        return "environment";
    case RT_SRC_CONFIG:
        return "config";
    default:
        return "default";
    }
}

bool rt_parse_size(const char *text, size_t *out)
{
    if (strcasecmp(text, "off") == 0 || strcasecmp(text, "never") == 0) {
        *out = RT_SIZE_OFF;
        return true;
    }
    if (strcasecmp(text, "auto") == 0) {
        *out = RT_SIZE_AUTO;
        return true;
    }
    if (!isdigit((unsigned char)text[0]))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0)
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        shift = 10;
        end++;
        break;
    case 'M':
        shift = 20;
        end++;
        break;
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end != '\0')
        return false;
    if (shift && v > (RT_SIZE_AUTO - 1) >> shift)
        return false;
    *out = (size_t)(v << shift);
    return *out < RT_SIZE_AUTO;
}

static bool parse_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"1", "y", "yes", "on", "true"};
    static const char *const no[] = {"0", "n", "no", "off", "false"};
    for (size_t i = 0; i < 5; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static bool parse_long(const char *text, long *out)
{
    errno = 0;
    char *end;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0')
        return false;
    *out = v;
    return true;
}

static const char *accepted_forms(enum rt_knob_type type)
{
    switch (type) {
    case RT_KNOB_INT:
        return "a decimal integer from -9223372036854775808 to 9223372036854775807";
    case RT_KNOB_SIZE:
        return "bytes such as 4096, 64K, 1M, 2G, or off, or auto";
    case RT_KNOB_BOOL:
        return "1/0, yes/no, on/off or true/false";
    case RT_KNOB_STRING:
        return "at most 255 characters";
    case RT_KNOB_LOGLEVEL:
        return "none, error, warn, info, debug or trace";
    case RT_KNOB_CODEC:
        return "none, bf16, int8 or fp8";
    }
    return "";
}

static bool knob_parse(const struct rt_knob_desc *d, const char *text, struct rt_knobs *k)
{
    void *field = (char *)k + d->offset;
    switch (d->type) {
    case RT_KNOB_INT:
        return parse_long(text, field);
    case RT_KNOB_SIZE:
        return rt_parse_size(text, field);
    case RT_KNOB_BOOL:
        return parse_bool(text, field);
    case RT_KNOB_STRING:
        if (strlen(text) >= RT_KNOB_STR_MAX)
            return false;
        strcpy(field, text);
        return true;
    case RT_KNOB_LOGLEVEL: {
        int level = rt_log_level_parse(text);
        if (level < 0)
            return false;
        *(int *)field = level;
        return true;
    }
    case RT_KNOB_CODEC: {
        int codec = wire_parse(text);
        if (codec < 0)
            return false;
        *(int *)field = codec;
        return true;
    }
    }
    return false;
}

static void format_size(size_t v, char *buf, size_t len);

/* The range of d as text: "1..8", "4K..1G", "4K.." (no upper bound). */
static void format_range(const struct rt_knob_desc *d, char *buf, size_t len)
{
    char lo[32], hi[32];
    if (d->type == RT_KNOB_SIZE) {
        format_size((size_t)(d->min > 0 ? d->min : 0), lo, sizeof(lo));
        format_size((size_t)d->max, hi, sizeof(hi));
    } else {
        snprintf(lo, sizeof(lo), "%lld", (long long)d->min);
        snprintf(hi, sizeof(hi), "%lld", (long long)d->max);
    }
    snprintf(buf, len, "%s..%s", d->min == RT_KNOB_NOMIN ? "" : lo,
             d->max == RT_KNOB_NOMAX ? "" : hi);
}

/* Checks the parsed value of d against the descriptor's range (text is what was set). */
static bool knob_in_range(const struct rt_knob_desc *d, const struct rt_knobs *k, const char *text,
                          char *err, size_t errlen)
{
    const void *field = (const char *)k + d->offset;
    bool ok = true;
    if (d->type == RT_KNOB_INT) {
        long v = *(const long *)field;
        ok = (d->min == RT_KNOB_NOMIN || v >= d->min) && (d->max == RT_KNOB_NOMAX || v <= d->max);
    } else if (d->type == RT_KNOB_SIZE) {
        size_t v = *(const size_t *)field;
        if (v == RT_SIZE_OFF)
            ok = !(d->flags & RT_KNOB_NO_OFF);
        else if (v == RT_SIZE_AUTO)
            ok = !(d->flags & RT_KNOB_NO_AUTO);
        else
            ok = (d->min <= 0 || v >= (uint64_t)d->min) &&
                 (d->max == RT_KNOB_NOMAX || v <= (uint64_t)d->max);
    }
    if (!ok) {
        char range[80];
        format_range(d, range, sizeof(range));
        snprintf(err, errlen, "%s=%.64s is out of range %s (%s)", d->name, text, range, d->doc);
    }
    return ok;
}

/*
 * The value defaults gives knob d ("NAME=VALUE" items, separated by commas, semicolons
 * or blanks), copied into val; false when it names d nowhere.  Every NAME must be a
 * knob: one that is not fails the whole list (*bad set, err says which).
 */
static bool default_of(const char *defaults, const struct rt_knob_desc *d, char *val, size_t vlen,
                       bool *bad, char *err, size_t errlen)
{
    bool found = false;
    const char *p = defaults;
    while (p != NULL && *p != '\0') {
        p += strspn(p, ",; \t\n");
        size_t len = strcspn(p, ",; \t\n");
        if (len == 0)
            break;
        const char *eq = memchr(p, '=', len);
        size_t nlen = eq != NULL ? (size_t)(eq - p) : len;
        const struct rt_knob_desc *named = NULL;
        for (size_t i = 0; i < rt_knob_count && named == NULL; i++)
            if (strlen(rt_knob_table[i].name) == nlen &&
                strncmp(rt_knob_table[i].name, p, nlen) == 0)
                named = &rt_knob_table[i];
        if (eq == NULL || named == NULL || len - nlen - 1 >= vlen) {
            snprintf(err, errlen,
                     "the config's knob_defaults item \"%.*s\" is not NAME=VALUE with NAME an "
                     "ARCOMM_* knob (arinfo --knobs lists them) and VALUE under %zu characters",
                     (int)(len < 80 ? len : 80), p, vlen);
            *bad = true;
            return false;
        }
        if (named == d) { /* the last item naming d wins */
            memcpy(val, eq + 1, len - nlen - 1);
            val[len - nlen - 1] = '\0';
            found = true;
        }
        p += len;
    }
    return found;
}

comm_status_t rt_knobs_load(struct rt_knobs *k, char *err, size_t errlen)
{
    return rt_knobs_load_with(k, NULL, err, errlen);
}

comm_status_t rt_knobs_load_with(struct rt_knobs *k, const char *defaults, char *err, size_t errlen)
{
    memset(k, 0, sizeof(*k));
    for (size_t i = 0; i < rt_knob_count; i++) {
        const struct rt_knob_desc *d = &rt_knob_table[i];
        if (!knob_parse(d, d->def, k)) {
            /* A table bug, caught by the knob unit test. */
            snprintf(err, errlen, "knob %s: default \"%s\" does not parse", d->name, d->def);
            return COMM_ERR_INVALID;
        }
        if (!knob_in_range(d, k, d->def, err, errlen))
            return COMM_ERR_INVALID;
        k->source[i] = RT_SRC_DEFAULT;
        char given[RT_KNOB_STR_MAX];
        bool bad = false;
        if (default_of(defaults, d, given, sizeof(given), &bad, err, errlen)) {
            if (!knob_parse(d, given, k)) {
                snprintf(err, errlen,
                         "the config's knob_defaults sets %s=\"%.64s\", which is not valid: "
                         "expected %s (%s)",
                         d->name, given, accepted_forms(d->type), d->doc);
                return COMM_ERR_INVALID;
            }
            if (!knob_in_range(d, k, given, err, errlen))
                return COMM_ERR_INVALID;
            if ((d->flags & RT_KNOB_AUTO_DEFAULT) &&
                *(size_t *)((char *)k + d->offset) == RT_SIZE_AUTO)
                knob_parse(d, d->def, k);
            k->source[i] = RT_SRC_CONFIG;
        } else if (bad) {
            return COMM_ERR_INVALID;
        }
        const char *env = getenv(d->name);
        if (env == NULL)
            continue;
        if (!knob_parse(d, env, k)) {
            snprintf(err, errlen, "%s=\"%.64s\" is not valid: expected %s (%s)", d->name, env,
                     accepted_forms(d->type), d->doc);
            return COMM_ERR_INVALID;
        }
        if (!knob_in_range(d, k, env, err, errlen))
            return COMM_ERR_INVALID;
        /* Such an "auto" is the table's default: stated once, here. */
        if ((d->flags & RT_KNOB_AUTO_DEFAULT) && *(size_t *)((char *)k + d->offset) == RT_SIZE_AUTO)
            knob_parse(d, d->def, k);
        k->source[i] = RT_SRC_ENV;
    }
    return COMM_OK;
}

long rt_knobs_spin_ns(const struct rt_knobs *k, bool oversubscribed)
{
    if (k->spin_ns >= 0)
        return k->spin_ns;
    return oversubscribed ? 0 : RT_KNOB_SPIN_NS_AUTO;
}

size_t rt_knob_min_slot_bytes(int nranks)
{
    /* The staged path splits a slot into one region per rank, cache-line aligned, and
     * each region must hold at least one element of every type (8 bytes). */
    size_t per_rank = (size_t)(nranks > 0 ? nranks : 1) * 64;
    return per_rank > 4096 ? per_rank : 4096;
}

comm_status_t rt_knobs_check(const struct rt_knobs *k, int nranks, char *err, size_t errlen)
{
    /* Not in the table's range: the smallest slot depends on nranks. */
    size_t min = rt_knob_min_slot_bytes(nranks);
    size_t slot = k->shm_slot_bytes;
    if (slot == RT_SIZE_OFF || slot == RT_SIZE_AUTO || slot < min) {
        char text[32];
        rt_knob_format(k, RT_KNOB_SHM_SLOT_BYTES, text, sizeof(text));
        snprintf(err, errlen,
                 "ARCOMM_SHM_SLOT_BYTES=%s is not valid for %d ranks: the staging slot needs "
                 "at least %zu bytes (one page, and 64 bytes per rank); set a size such as 1M",
                 text, nranks, min);
        return COMM_ERR_INVALID;
    }
    const char *a = k->small_alg;
    if (strcmp(a, "flat") != 0 && strcmp(a, "gather") != 0 && strcmp(a, "auto") != 0) {
        snprintf(err, errlen,
                 "ARCOMM_SMALL_ALGO=%s is not valid: use flat, gather or auto (the same on "
                 "every rank)",
                 a);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

uint64_t rt_knob_value(const struct rt_knobs *k, size_t i)
{
    const struct rt_knob_desc *d = &rt_knob_table[i];
    const void *field = (const char *)k + d->offset;
    switch (d->type) {
    case RT_KNOB_INT:
        return (uint64_t) * (const long *)field;
    case RT_KNOB_SIZE:
        return (uint64_t) * (const size_t *)field;
    case RT_KNOB_BOOL:
        return *(const bool *)field;
    case RT_KNOB_CODEC:
        return (uint64_t) * (const int *)field;
    case RT_KNOB_STRING:
        /* A string the ranks must agree on (ARCOMM_PATHS) is compared by a digest of its
         * text (FNV-1a): the segment header carries numbers. */
        if (d->flags & RT_KNOB_AGREE) {
            uint64_t h = 0xcbf29ce484222325ull;
            for (const unsigned char *p = field; *p != '\0'; p++)
                h = (h ^ *p) * 0x100000001b3ull;
            return h;
        }
        return 0;
    default:
        return 0;
    }
}

void rt_knob_set_value(struct rt_knobs *k, size_t i, uint64_t v)
{
    const struct rt_knob_desc *d = &rt_knob_table[i];
    void *field = (char *)k + d->offset;
    switch (d->type) {
    case RT_KNOB_INT:
        *(long *)field = (long)v;
        break;
    case RT_KNOB_SIZE:
        *(size_t *)field = (size_t)v;
        break;
    case RT_KNOB_BOOL:
        *(bool *)field = v != 0;
        break;
    case RT_KNOB_CODEC:
        *(int *)field = (int)v;
        break;
    case RT_KNOB_STRING:
        /* Only the digest travels: a peer's value reads as what can be said of it. */
        if (d->flags & RT_KNOB_AGREE)
            snprintf(field, RT_KNOB_STR_MAX, "another (digest %016llx)", (unsigned long long)v);
        break;
    default:
        break;
    }
}

static void format_size(size_t v, char *buf, size_t len)
{
    if (v == RT_SIZE_OFF)
        snprintf(buf, len, "off");
    else if (v == RT_SIZE_AUTO)
        snprintf(buf, len, "auto");
    else if (v != 0 && v % (1u << 30) == 0)
        snprintf(buf, len, "%zuG", v >> 30);
    else if (v != 0 && v % (1u << 20) == 0)
        snprintf(buf, len, "%zuM", v >> 20);
    else if (v != 0 && v % (1u << 10) == 0)
        snprintf(buf, len, "%zuK", v >> 10);
    else
        snprintf(buf, len, "%zu", v);
}

void rt_knob_format(const struct rt_knobs *k, size_t i, char *buf, size_t len)
{
    const struct rt_knob_desc *d = &rt_knob_table[i];
    const void *field = (const char *)k + d->offset;
    switch (d->type) {
    case RT_KNOB_INT:
        snprintf(buf, len, "%ld", *(const long *)field);
        break;
    case RT_KNOB_SIZE:
        format_size(*(const size_t *)field, buf, len);
        break;
    case RT_KNOB_BOOL:
        snprintf(buf, len, "%s", *(const bool *)field ? "1" : "0");
        break;
    case RT_KNOB_STRING:
        snprintf(buf, len, "%s", (const char *)field);
        break;
    case RT_KNOB_LOGLEVEL:
        snprintf(buf, len, "%s", rt_log_level_name(*(const int *)field));
        break;
    case RT_KNOB_CODEC:
        snprintf(buf, len, "%s", wire_name(*(const int *)field));
        break;
    }
}
