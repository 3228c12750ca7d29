/* SPDX-License-Identifier: MIT */
/*
 * Status strings, error recording and logging.  An error is logged once, where it is
 * first detected, and kept for comm_last_error.
 */
#include "comm_base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* comm_last_error(NULL): why this thread's last comm_init/comm_id_new failed. */
static _Thread_local char init_errmsg[RT_ERRMSG_BYTES];

ARCOMM_API const char *comm_status_string(comm_status_t status)
{
    switch (status) {
    case COMM_OK:
        return "COMM_OK: success";
    case COMM_ERR_INVALID:
        return "COMM_ERR_INVALID: bad argument or configuration";
    case COMM_ERR_NOMEM:
        return "COMM_ERR_NOMEM: out of memory";
    case COMM_ERR_UNSUPPORTED:
        return "COMM_ERR_UNSUPPORTED: dtype, op, device or transport not available";
    case COMM_ERR_SYSTEM:
        return "COMM_ERR_SYSTEM: an OS, driver or runtime call failed";
    case COMM_ERR_TIMEOUT:
        return "COMM_ERR_TIMEOUT: a peer did not arrive within the timeout";
    case COMM_ERR_PEER:
        return "COMM_ERR_PEER: a peer failed, exited or aborted";
    case COMM_ERR_MISMATCH:
        return "COMM_ERR_MISMATCH: ranks disagree on count, dtype or op";
    case COMM_ERR_ABORTED:
        return "COMM_ERR_ABORTED: comm_abort was called on this communicator";
    }
    return "unknown comm_status_t value";
}

ARCOMM_API const char *comm_last_error(const comm_t *comm)
{
    return comm != NULL ? comm->errmsg : init_errmsg;
}

uint64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t rt_ms_to_ns(long ms)
{
    if (ms < 0)
        return RT_NEVER;
    return (unsigned long)ms >= (RT_NEVER - 1) / 1000000u ? RT_NEVER - 1 : (uint64_t)ms * 1000000u;
}

uint64_t rt_deadline_in(uint64_t ns)
{
    if (ns == RT_NEVER)
        return RT_NEVER;
    uint64_t now = rt_now_ns();
    return ns >= RT_NEVER - 1 - now ? RT_NEVER - 1 : now + ns;
}

uint64_t rt_comm_deadline(const struct comm *c)
{
    return rt_deadline_in(rt_ms_to_ns(c->timeout_ms));
}

static const char *level_name(int level)
{
    static const char *const names[] = {"none", "error", "warn", "info", "debug", "trace"};
    return level >= 0 && level <= RT_LOG_TRACE ? names[level] : "?";
}

static void vlog(FILE *out, int level, const char *fmt, va_list ap)
{
    char line[RT_ERRMSG_BYTES + 64];
    int n = snprintf(line, sizeof(line), "arcomm %s: ", level_name(level));
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    size_t len = strlen(line);
    line[len] = '\n';
    /* One write per line, so lines of several ranks never interleave mid-line. */
    fwrite(line, 1, len + 1, out);
    fflush(out);
}

void rt_log(const struct comm *c, int level, const char *fmt, ...)
{
    if (c == NULL || level > c->knobs.log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(c->log ? c->log : stderr, level, fmt, ap);
    va_end(ap);
}

void rt_error(struct comm *c, comm_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
    va_end(ap);
    rt_log(c, RT_LOG_ERROR, "%s (%s)", c->errmsg, comm_status_string(status));
}

void rt_init_error(const struct rt_knobs *k, comm_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_errmsg, sizeof(init_errmsg), fmt, ap);
    va_end(ap);
    /* Before a communicator exists the knobs may not be parsed yet: log at the default
     * level (errors shown) unless they, or ARCOMM_LOG_LEVEL=none, say otherwise. */
    const char *env = k == NULL ? getenv("ARCOMM_LOG_LEVEL") : NULL;
    bool quiet = env != NULL && strcasecmp(env, "none") == 0;
    if (k == NULL ? !quiet : k->log_level >= RT_LOG_ERROR) {
        char line[RT_ERRMSG_BYTES + 64];
        snprintf(line, sizeof(line), "arcomm error: %s (%s)\n", init_errmsg,
                 comm_status_string(status));
        fputs(line, stderr);
    }
}

bool rt_handle_ok(const struct comm *comm, const char *fn)
{
    if (comm == NULL) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "%s: comm is NULL; pass the communicator comm_init made", fn);
        return false;
    }
    if (comm->magic != RT_COMM_LIVE) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "%s: %p is not a live communicator (used after comm_destroy, or not made "
                      "by comm_init)",
                      fn, (const void *)comm);
        return false;
    }
    return true;
}

void rt_init_error_clear(void)
{
    init_errmsg[0] = '\0';
}

void rt_init_error_quiet(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_errmsg, sizeof(init_errmsg), fmt, ap);
    va_end(ap);
}
