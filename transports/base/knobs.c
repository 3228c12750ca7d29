/* SPDX-License-Identifier: MIT */
/*
 * The knob table and its parser.  One place declares every ARCOMM_* variable, its
 * default and its one-line doc; arinfo --config prints this table.
 */
#include "knobs.h"
#include "tables.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KNOB(n, t, d, f, doc_)                                                                     \
    {                                                                                              \
        .name = n, .type = t, .def = d, .doc = doc_, .offset = offsetof(struct rt_knobs, f)        \
    }
/* A knob every rank must set alike (RT_KNOB_AGREE): README.md's knob section says why
 * for each. */
#define KNOB_AGREE(n, t, d, f, doc_)                                                               \
    {                                                                                              \
        .name = n, .type = t, .def = d, .doc = doc_, .offset = offsetof(struct rt_knobs, f),       \
        .flags = RT_KNOB_AGREE                                                                     \
    }

/*
 * Defaults measured on the 2-core development machine (docs/PERFORMANCE.md says how):
 * the flag path wins up to about 16 KiB between two ranks; staging slots of 1 MiB keep
 * a pipelined round within L2 while still amortising the two synchronisations.
 */
const struct rt_knob_desc rt_knob_table[] = {
    KNOB("ARCOMM_LOG_LEVEL", RT_KNOB_LOGLEVEL, "warn", log_level,
         "log verbosity: none, error, warn, info, debug, trace"),
    KNOB("ARCOMM_LOG_FILE", RT_KNOB_STRING, "", log_file,
         "log destination (empty = stderr); %h expands to the host name, %p to the pid"),
    KNOB("ARCOMM_TIMEOUT_MS", RT_KNOB_INT, "120000", timeout_ms,
         "how long a rank waits for its peers before COMM_ERR_TIMEOUT; < 0 = never"),
    KNOB("ARCOMM_TRANSPORT", RT_KNOB_STRING, "", transport,
         "transport to use (shm, ...); empty = the first whose probe succeeds"),
    KNOB_AGREE("ARCOMM_FLAG_THRESHOLD", RT_KNOB_SIZE, "auto", flag_threshold,
               "host: messages up to this many bytes take the one-round-trip flag path"),
    KNOB_AGREE(
        "ARCOMM_BF16_THRESHOLD", RT_KNOB_SIZE, "auto", bf16_threshold,
        "f32 messages of at least this many bytes travel as bf16 (off on host, on for cuda)"),
    KNOB_AGREE("ARCOMM_SHM_SLOT_BYTES", RT_KNOB_SIZE, "1M", shm_slot_bytes,
               "size of each of the two staging slots of every rank in the shared segment"),
    KNOB("ARCOMM_MEM_POOL_BYTES", RT_KNOB_SIZE, "64M", mem_pool_bytes,
         "comm_mem_alloc arena of every rank in the shared segment (sparse until used)"),
    KNOB("ARCOMM_NT_THRESHOLD", RT_KNOB_SIZE, "auto", nt_threshold,
         "one-pass calls moving this many bytes (all ranks' inputs and outputs) stream their "
         "stores"),
    KNOB("ARCOMM_SPIN_NS", RT_KNOB_INT, "-1", spin_ns,
         "busy-poll this long before yielding (-1 = 50 us; 0 when ranks outnumber cores)"),
    KNOB("ARCOMM_YIELD_NS", RT_KNOB_INT, "1000000", yield_ns,
         "after spinning, sched_yield for this long before sleeping on a futex"),
    KNOB("ARCOMM_NUMA", RT_KNOB_BOOL, "1", numa,
         "bind each rank's staging memory to the NUMA node of the rank that writes it"),
    KNOB_AGREE("ARCOMM_COPY_THRESHOLD", RT_KNOB_SIZE, "auto", copy_threshold,
               "cuda: messages of at least this many bytes take the copy-engine path"),
    KNOB_AGREE("ARCOMM_COPY_CHUNK_BYTES", RT_KNOB_SIZE, "auto", copy_chunk_bytes,
               "cuda: copy-engine chunk (auto = clamp(bytes/2, 512K, 4M))"),
    KNOB_AGREE("ARCOMM_CUDA_STAGING_BYTES", RT_KNOB_SIZE, "32M", cuda_staging_bytes,
               "cuda: pinned host staging of the copy-engine path, per rank"),
    KNOB_AGREE("ARCOMM_CUDA_BLOCKS", RT_KNOB_INT, "0", cuda_blocks,
               "cuda: kernel-path blocks at most (0 = auto: 128)"),
    KNOB("ARCOMM_HEX_THREADS", RT_KNOB_INT, "4", hex_threads,
         "hexagon: HVX worker threads of each HTP session (1..8)"),
    KNOB("ARCOMM_HEX_VTCM_BYTES", RT_KNOB_SIZE, "8M", hex_vtcm_bytes,
         "hexagon: VTCM of each HTP session; blocks shrink to fit it"),
    KNOB("ARCOMM_HEX_FENCE_TIMEOUT_MS", RT_KNOB_INT, "-1", hex_fence_timeout_ms,
         "hexagon: how long a session waits at a fence (-1 = ARCOMM_TIMEOUT_MS, never more)"),
    KNOB("ARCOMM_HEX_MEM", RT_KNOB_STRING, "auto", hex_mem,
         "hexagon: buffer memory: auto (rpcmem, else dma-heap, else memfd), or one of them"),
    KNOB("ARCOMM_HEX_SEQ_START", RT_KNOB_INT, "0", hex_seq_start,
         "hexagon: fence sequence a new session starts from (tests use it to cross 2^32)"),
};

const size_t rt_knob_count = sizeof(rt_knob_table) / sizeof(rt_knob_table[0]);

_Static_assert(sizeof(rt_knob_table) / sizeof(rt_knob_table[0]) <=
                   sizeof(((struct rt_knobs *)0)->source) / sizeof(enum rt_knob_source),
               "struct rt_knobs.source must have a slot for every knob");

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

int rt_knob_find(const char *name)
{
    for (size_t i = 0; i < rt_knob_count; i++)
        if (strcmp(rt_knob_table[i].name, name) == 0)
            return (int)i;
    return -1;
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
    case RT_KNOB_LOGLEVEL:
        for (int i = 0; i < RT_LOG_LEVEL_COUNT; i++) {
            if (strcasecmp(text, rt_log_level_name(i)) == 0) {
                *(int *)field = i;
                return true;
            }
        }
        return false;
    }
    return false;
}

comm_status_t rt_knobs_load(struct rt_knobs *k, char *err, size_t errlen)
{
    memset(k, 0, sizeof(*k));
    for (size_t i = 0; i < rt_knob_count; i++) {
        const struct rt_knob_desc *d = &rt_knob_table[i];
        if (!knob_parse(d, d->def, k)) {
            /* A table bug, caught by the knob unit test. */
            snprintf(err, errlen, "knob %s: default \"%s\" does not parse", d->name, d->def);
            return COMM_ERR_INVALID;
        }
        k->source[i] = RT_SRC_DEFAULT;
        const char *env = getenv(d->name);
        if (env == NULL)
            continue;
        if (!knob_parse(d, env, k)) {
            snprintf(err, errlen, "%s=\"%.64s\" is not valid: expected %s (%s)", d->name, env,
                     accepted_forms(d->type), d->doc);
            return COMM_ERR_INVALID;
        }
        k->source[i] = RT_SRC_ENV;
    }
    return COMM_OK;
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
    size_t min = rt_knob_min_slot_bytes(nranks);
    size_t slot = k->shm_slot_bytes;
    if (slot == RT_SIZE_OFF || slot == RT_SIZE_AUTO || slot < min) {
        char text[32];
        rt_knob_format(k, (size_t)rt_knob_find("ARCOMM_SHM_SLOT_BYTES"), text, sizeof(text));
        snprintf(err, errlen,
                 "ARCOMM_SHM_SLOT_BYTES=%s is not valid for %d ranks: the staging slot needs "
                 "at least %zu bytes (one page, and 64 bytes per rank); set a size such as 1M",
                 text, nranks, min);
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
    }
}
