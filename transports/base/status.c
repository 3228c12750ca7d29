/* SPDX-License-Identifier: MIT */
/*
 * Error recording, logging and deadlines.  An error is logged once, where it is
 * first detected, and kept for comm_last_error.  The caller of the failing call receives
 * it there, so the log line is at info level: at the default level (warn) an error
 * reaches the user once, from the caller, not twice.  What no caller receives (a peer
 * seen failing by a watcher, a fallback taken) is logged at warn by its finder.
 */
#include "comm_base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* comm_last_error(NULL): why this thread's last comm_init/comm_id_new failed. */
static _Thread_local char init_errmsg[RT_ERRMSG_BYTES];

const char *rt_init_errmsg(void)
{
    return init_errmsg;
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

uint64_t rt_deadline_after(uint64_t now, uint64_t ns)
{
    if (ns == RT_NEVER)
        return RT_NEVER;
    return ns >= RT_NEVER - 1 - now ? RT_NEVER - 1 : now + ns;
}

uint64_t rt_deadline_in(uint64_t ns)
{
    return ns == RT_NEVER ? RT_NEVER : rt_deadline_after(rt_now_ns(), ns);
}

uint64_t rt_comm_deadline(const struct comm *c)
{
    return rt_deadline_in(rt_ms_to_ns(c->timeout_ms));
}

static void vlog(FILE *out, int level, const char *fmt, va_list ap)
{
    char line[RT_ERRMSG_BYTES + 64];
    int n = snprintf(line, sizeof(line), "arcomm %s: ", rt_log_level_name(level));
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
    rt_log(c, RT_LOG_INFO, "%s (%s)", c->errmsg, rt_status_string(status));
}

/* The level ARCOMM_LOG_LEVEL names, before the knobs are parsed (the default when it
 * names none: rt_knobs_load then refuses it, with its own message). */
static int env_log_level(void)
{
    int level = rt_log_level_parse(getenv("ARCOMM_LOG_LEVEL"));
    return level >= 0 ? level : RT_LOG_WARN;
}

void rt_init_error(const struct rt_knobs *k, comm_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_errmsg, sizeof(init_errmsg), fmt, ap);
    va_end(ap);
    /* Before a communicator exists the knobs may not be parsed yet: the level comes
     * from ARCOMM_LOG_LEVEL itself.  Info, as rt_error's: the caller has the message. */
    if ((k == NULL ? env_log_level() : k->log_level) >= RT_LOG_INFO) {
        char line[RT_ERRMSG_BYTES + 64];
        snprintf(line, sizeof(line), "arcomm info: %s (%s)\n", init_errmsg,
                 rt_status_string(status));
        fputs(line, stderr);
    }
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

_Thread_local bool rt_wait_hook_off;

bool rt_wait_hook_run(struct comm *c, uint64_t now, uint64_t *next)
{
    if (rt_wait_hook_off)
        return false;
    struct comm *o = c->hook_owner != NULL ? c->hook_owner : c;
    if (o->wait_hook == NULL || now < *next)
        return false;
    int r = o->wait_hook(o, o->wait_hook_arg);
    /* A slow hook must not run back to back: the period counts from its return. */
    *next = rt_now_ns() + o->wait_hook_period_ns;
    if (r == 0)
        return false;
    snprintf(c->stop_why, sizeof(c->stop_why),
             "the wait hook (comm_set_wait_hook) returned %d, which stops the call", r);
    atomic_store(&c->aborted, 1);
    return true;
}
