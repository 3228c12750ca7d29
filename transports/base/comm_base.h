/* SPDX-License-Identifier: MIT */
/*
 * The communicator's base, as every layer sees it: identity, status and error
 * reporting, logging, knobs, deadlines.  What a backend keeps of its own lives behind
 * xport (and, for the segment every backend embeds, in struct shm_comm).
 */
#ifndef ARCOMM_BASE_COMM_BASE_H
#define ARCOMM_BASE_COMM_BASE_H

#include "arcomm.h"
#include "knobs.h"
#include "tables.h"
#include "topo.h"
#include "transport.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct backend_ops;

/* Public entry points are the only symbols the shared library exports. */
#define ARCOMM_API __attribute__((visibility("default")))

#define RT_ERRMSG_BYTES 512

/* The largest communicator (arcomm.h's COMM_MAX_RANKS): per-rank bookkeeping is sized
 * for it. */
#define RT_MAX_RANKS COMM_MAX_RANKS

struct comm {
    uint32_t magic; /* runtime/: alive from comm_init to comm_destroy (a cheap misuse check) */
    int rank;
    int nranks;
    comm_device_t device;
    int device_index; /* the config's; -1: the backend derives it from local_rank */
    int local_rank;   /* this rank on its host: the rank, or comm_init_env's ARCOMM_LOCAL_RANK */
    comm_id_t id;
    struct rt_knobs knobs;
    char knob_defaults[RT_KNOB_STR_MAX]; /* the config's (comm_split passes them on) */
    long timeout_ms;                     /* effective: config, else knob; < 0 = never */
    const struct rt_topo_summary *topo;  /* the host, as runtime/ found it (hwloc) */
    int numa_node;                       /* NUMA node this rank ran on at comm_init, -1 unknown */

    const struct backend_ops *ops; /* the backend serving this communicator (collectives/) */
    const char *backend_name;      /* its name (shm, cuda, hexagon), for the layers below */
    void *xport;                   /* the backend's private state */
    struct shm_comm *shm;          /* the segment every backend embeds (shm/shm.h) */

    uint32_t seq; /* number of the next collective call */

    _Atomic int broken;             /* 0, or the status that broke the communicator */
    _Atomic int aborted;            /* set by comm_abort, from any thread */
    const volatile int *init_abort; /* the abort word of the call in progress: the config's
                                     * abort_flag in comm_init, rt_hook_split's in a split;
                                     * else NULL */
    const char *init_abort_what;    /* whose word it is, for the message */
    struct comm *parent;            /* while a split's new communicator joins: the
                                     * communicator being split, whose comm_abort and
                                     * failed or dead peers stop the join (the segment
                                     * transport's shm_parent_check); else NULL */
    _Atomic int published;          /* this rank's failure went out to the peers */
    _Atomic int entered;            /* a thread is inside a call on this communicator */
    _Atomic int misused;            /* two threads entered at once: the next call fails */
    char errmsg[RT_ERRMSG_BYTES];   /* comm_last_error */

    /* comm_set_wait_hook's hook, run by the waits of a call (rt_wait_hook_due).  Written
     * only while no call runs; hook_owner is the communicator whose hook applies: this
     * one, or the communicator of comm_init_mpi that this one serves within a host. */
    comm_wait_hook_fn wait_hook;
    void *wait_hook_arg;
    uint64_t wait_hook_period_ns;
    struct comm *hook_owner;
    char stop_why[96]; /* what the hook returned, once it stopped a call ("" before) */

    FILE *log; /* NULL = stderr */
    bool log_owned;
    struct comm *live_next; /* runtime/: the registry of live communicators (live.c) */
    struct rt_async *async; /* runtime/async.c: the asynchronous calls' queue and progress
                             * thread, made by the first comm_i* call; NULL before */
};

/*
 * Is this rank told to stop: comm_abort, or (while it is in comm_init, or in a split
 * through rt_hook_split) the call's abort word, or (while a split's new communicator
 * joins) comm_abort of the communicator being split?  The first sight of either of the
 * last two counts as comm_abort.  Every wait polls it.
 */
static inline bool rt_abort_requested(struct comm *c)
{
    if (atomic_load_explicit(&c->aborted, memory_order_relaxed))
        return true;
    if ((c->init_abort == NULL || __atomic_load_n(c->init_abort, __ATOMIC_RELAXED) == 0) &&
        (c->parent == NULL || !atomic_load_explicit(&c->parent->aborted, memory_order_relaxed)))
        return false;
    atomic_store(&c->aborted, 1);
    return true;
}

/* What stopped an aborted rank, for its message. */
static inline const char *rt_abort_cause(const struct comm *c)
{
    if (c->stop_why[0] != '\0')
        return c->stop_why;
    if (c->init_abort != NULL && __atomic_load_n(c->init_abort, __ATOMIC_RELAXED) != 0)
        return c->init_abort_what;
    if (c->parent != NULL && atomic_load_explicit(&c->parent->aborted, memory_order_relaxed))
        return "comm_abort was called on the communicator it is being split from";
    return "comm_abort was called";
}

/* Records an error on c (message for comm_last_error) and logs it once. */
void rt_error(struct comm *c, comm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records an init failure for comm_last_error(NULL) in this thread and logs it. */
void rt_init_error(const struct rt_knobs *k, comm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same, without logging (the failure was logged where it was found). */
void rt_init_error_quiet(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void rt_init_error_clear(void);
/* This thread's last init failure: comm_last_error(NULL). */
const char *rt_init_errmsg(void);

void rt_log(const struct comm *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

uint64_t rt_now_ns(void);

/*
 * Time limits.  A timeout in ms (< 0 = never) becomes a duration in ns and then an
 * absolute deadline on CLOCK_MONOTONIC.  RT_NEVER is the one "never" of both, and the
 * arithmetic saturates, so no limit wraps whatever the knob says.
 */
#define RT_NEVER UINT64_MAX
/* The duration of a timeout in ms: RT_NEVER when ms < 0, saturating. */
uint64_t rt_ms_to_ns(long ms);
/* The deadline ns from now: RT_NEVER when ns is RT_NEVER, saturating. */
uint64_t rt_deadline_in(uint64_t ns);
/* The deadline ns after now (a clock reading the caller already has). */
uint64_t rt_deadline_after(uint64_t now, uint64_t ns);
/* How often a waiter checks that its peers' processes still live (every waiter). */
#define RT_LIVENESS_PERIOD_NS 100000000ull
/* The deadline of the communicator's timeout, from now. */
uint64_t rt_comm_deadline(const struct comm *c);
/* Has the deadline passed at now?  Never for RT_NEVER. */
static inline bool rt_passed(uint64_t deadline, uint64_t now)
{
    return deadline != RT_NEVER && now >= deadline;
}
/* Time left until the deadline (0 once passed, RT_NEVER for RT_NEVER). */
static inline uint64_t rt_left_ns(uint64_t deadline, uint64_t now)
{
    return deadline == RT_NEVER ? RT_NEVER : now >= deadline ? 0 : deadline - now;
}

/*
 * The wait hook's turn in a wait (comm_set_wait_hook): once now reaches *next (which a
 * wait starts at rt_wait_hook_first), the hook of c's owner runs and *next moves one
 * period on.  True when the hook asked the call to stop: c is then aborted, and
 * rt_abort_cause names the hook; the wait reports it as it reports comm_abort.
 */
bool rt_wait_hook_run(struct comm *c, uint64_t now, uint64_t *next);
/* Set in a thread that must never run a wait hook: an asynchronous call's progress thread
 * (runtime/async.c), since the hook belongs to the caller's thread (an interpreter's
 * signal handlers, an MPI library's progress); that thread's comm_wait runs it instead. */
extern _Thread_local bool rt_wait_hook_off;
/* When a wait that starts at now first runs the hook: RT_NEVER without one. */
static inline uint64_t rt_wait_hook_first(const struct comm *c, uint64_t now)
{
    if (rt_wait_hook_off)
        return RT_NEVER;
    const struct comm *o = c->hook_owner != NULL ? c->hook_owner : c;
    return o->wait_hook == NULL ? RT_NEVER : now + o->wait_hook_period_ns;
}

#endif /* ARCOMM_BASE_COMM_BASE_H */
