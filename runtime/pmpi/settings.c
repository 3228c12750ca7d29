/* SPDX-License-Identifier: MIT */
/*
 * The interposition library's two settings, read once at its first intercepted call:
 * ARCOMM_PMPI (on by default; off hands every call to PMPI untouched) and
 * ARCOMM_LOG_LEVEL and ARCOMM_LOG_FILE, which libarcomm reads through its knob table for
 * its communicators and this library reads here for its own lines (which communicators
 * it takes over, the report at MPI_Finalize).  This is the library's only getenv, as comm_init_env
 * is the runtime's for ARCOMM_ID.
 */
#include "pmpi.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The sizes below which Open MPI's own calls were faster than arcomm's on the 2-core
 * development VM, 2 processes (docs/pmpi.md, "Sizes"): its eager small-message reduce and
 * broadcast return before the others have the data, up to 256 bytes there.  Every other
 * call arcomm serves at every size (1.01x-2.5x ahead of Open MPI from 4 bytes,
 * 2026-12-03); eager_threshold sets the broadcasts' and reduces' sizes. */
struct pmpi_settings pmpi_settings = {
    .off = false,
    .log_level = PMPI_LOG_WARN,
    .min_bytes =
        {
            [PMPI_CALL_ALLREDUCE] = 0,
            [PMPI_CALL_REDUCE] = PMPI_REDUCE_MPI_BYTES, /* eager_threshold sets it */
            [PMPI_CALL_BCAST] = PMPI_BCAST_MPI_BYTES,   /* eager_threshold sets it */
            [PMPI_CALL_ALLGATHER] = 0,
            [PMPI_CALL_REDUCE_SCATTER_BLOCK] = 0,
            [PMPI_CALL_ALLTOALL] = 0,
            [PMPI_CALL_BARRIER] = 0,
        },
    .timeout_ms = -1,
    .progress_us = PMPI_PROGRESS_US,
};

/* ARCOMM_LOG_FILE with %h (host name) and %p (pid) expanded; "" is stderr. */
static char log_path[512];
static FILE *log_out;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = {
    [PMPI_LOG_NONE] = "none", [PMPI_LOG_ERROR] = "error", [PMPI_LOG_WARN] = "warn",
    [PMPI_LOG_INFO] = "info", [PMPI_LOG_DEBUG] = "debug",
};

/*
 * Broadcasts (reduces) of fewer bytes than this go to MPI: dflt (PMPI_BCAST_MPI_BYTES,
 * PMPI_REDUCE_MPI_BYTES) by default, ARCOMM_PMPI_MIN_BYTES (min_set) when set.  And arcomm
 * never makes one of the library's broadcasts or reduces eager (PMPI_KNOB_DEFAULTS turns
 * both off): where the user's ARCOMM_BCAST_EAGER (ARCOMM_REDUCE_EAGER) turns it on, the
 * calls up to its size go to MPI too, since an eager root (an eager reduce's non-root)
 * returns before its peers came and a call that ends on some ranks only could not be
 * resolved if it turned out to be split between arcomm and MPI (waits.c).
 */
static size_t eager_threshold(int call, size_t dflt, const char *eager_env, bool min_set)
{
    size_t t = min_set ? pmpi_settings.min_bytes[call] : dflt;
    if (eager_env == NULL || *eager_env == '\0' || strcasecmp(eager_env, "off") == 0 ||
        strcasecmp(eager_env, "never") == 0)
        return t;
    /* As arcomm reads the knob: bytes, or K (its largest value is 512); a value it
     * refuses fails comm_init, which hands every call to MPI anyway. */
    char *end;
    unsigned long long n = strtoull(eager_env, &end, 10);
    if (end == eager_env || n == 0)
        return t;
    if (*end == 'K' || *end == 'k')
        n <<= 10;
    return n >= t ? (size_t)n + 1 : t;
}

static void settings_read(void)
{
    const char *v = getenv("ARCOMM_PMPI");
    if (v != NULL && (strcasecmp(v, "off") == 0 || strcmp(v, "0") == 0 ||
                      strcasecmp(v, "no") == 0 || strcasecmp(v, "false") == 0))
        pmpi_settings.off = true;
    v = getenv("ARCOMM_LOG_LEVEL");
    if (v != NULL) {
        for (int l = 0; l < (int)(sizeof(level_names) / sizeof(level_names[0])); l++)
            if (strcasecmp(v, level_names[l]) == 0)
                pmpi_settings.log_level = l;
        if (strcasecmp(v, "trace") == 0)
            pmpi_settings.log_level = PMPI_LOG_DEBUG;
    }
    v = getenv("ARCOMM_TIMEOUT_MS");
    if (v != NULL && *v != '\0') {
        char *end;
        long ms = strtol(v, &end, 10);
        if (end != v && *end == '\0')
            pmpi_settings.timeout_ms = ms;
    }
    v = getenv("ARCOMM_PMPI_PROGRESS_US");
    if (v != NULL && *v != '\0') {
        char *end;
        unsigned long us = strtoul(v, &end, 10);
        if (end != v && *end == '\0' && us >= 1 && us <= PMPI_PROGRESS_US_MAX)
            pmpi_settings.progress_us = (unsigned)us;
        else
            fprintf(stderr,
                    "arcomm warn: pmpi: ARCOMM_PMPI_PROGRESS_US=%s is not a number of "
                    "microseconds from 1 to %d: %u applies\n",
                    v, PMPI_PROGRESS_US_MAX, pmpi_settings.progress_us);
    }
    bool min_set = false;
    v = getenv("ARCOMM_PMPI_MIN_BYTES");
    if (v != NULL && *v != '\0') {
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        unsigned shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : 0;
        if (end != v && (end[shift ? 1 : 0] == '\0')) {
            for (int i = 0; i < PMPI_CALL_COUNT; i++)
                pmpi_settings.min_bytes[i] = (size_t)(n << shift);
            min_set = true;
        } else {
            fprintf(stderr,
                    "arcomm warn: pmpi: ARCOMM_PMPI_MIN_BYTES=%s is not a size "
                    "(bytes, K or M suffix): the defaults apply\n",
                    v);
        }
    }
    pmpi_settings.min_bytes[PMPI_CALL_BCAST] = eager_threshold(
        PMPI_CALL_BCAST, PMPI_BCAST_MPI_BYTES, getenv("ARCOMM_BCAST_EAGER"), min_set);
    pmpi_settings.min_bytes[PMPI_CALL_REDUCE] = eager_threshold(
        PMPI_CALL_REDUCE, PMPI_REDUCE_MPI_BYTES, getenv("ARCOMM_REDUCE_EAGER"), min_set);
    v = getenv("ARCOMM_LOG_FILE");
    size_t o = 0;
    for (; v != NULL && *v != '\0' && o + 64 < sizeof(log_path); v++) {
        if (v[0] == '%' && v[1] == 'p') {
            o += (size_t)snprintf(log_path + o, sizeof(log_path) - o, "%ld", (long)getpid());
            v++;
        } else if (v[0] == '%' && v[1] == 'h') {
            gethostname(log_path + o, sizeof(log_path) - o - 1);
            log_path[sizeof(log_path) - 1] = '\0';
            o = strlen(log_path);
            v++;
        } else {
            log_path[o++] = *v;
        }
    }
    log_path[o] = '\0';
}

void pmpi_settings_load(void)
{
    pthread_once(&settings_once, settings_read);
}

void pmpi_log(int level, const char *fmt, ...)
{
    if (level > pmpi_settings.log_level)
        return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "arcomm %s: pmpi: ", level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len] = '\n';
    /* One write per line, so that the lines of several ranks never interleave. */
    pthread_mutex_lock(&log_lock);
    if (log_out == NULL && log_path[0] != '\0')
        log_out = fopen(log_path, "a");
    FILE *out = log_out != NULL ? log_out : stderr;
    fwrite(line, 1, len + 1, out);
    fflush(out);
    pthread_mutex_unlock(&log_lock);
}

const char *pmpi_call_name(enum pmpi_call call)
{
    static const char *const names[PMPI_CALL_COUNT] = {
        [PMPI_CALL_ALLREDUCE] = "allreduce",
        [PMPI_CALL_REDUCE] = "reduce",
        [PMPI_CALL_BCAST] = "bcast",
        [PMPI_CALL_ALLGATHER] = "allgather",
        [PMPI_CALL_REDUCE_SCATTER_BLOCK] = "reduce_scatter_block",
        [PMPI_CALL_ALLTOALL] = "alltoall",
        [PMPI_CALL_BARRIER] = "barrier",
    };
    return call < PMPI_CALL_COUNT ? names[call] : "?";
}
