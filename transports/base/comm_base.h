/* SPDX-License-Identifier: MIT */
/*
 * The communicator as the runtime, the transports and the collectives see it.
 */
#ifndef ARCOMM_RT_COMM_INTERNAL_H
#define ARCOMM_RT_COMM_INTERNAL_H

#include "arcomm.h"
#include "knobs.h"
#include "transport.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Public entry points are the only symbols the shared library exports. */
#define ARCOMM_API __attribute__((visibility("default")))

#define RT_ERRMSG_BYTES 512

/* struct comm.magic while the communicator is alive, and after comm_destroy. */
#define RT_COMM_LIVE 0x636f6d6du /* "comm" */
#define RT_COMM_DEAD 0x64656164u /* "dead" */

struct comm {
    uint32_t magic; /* RT_COMM_LIVE from comm_init to comm_destroy: a cheap misuse check */
    int rank;
    int nranks;
    comm_device_t device;
    int device_index;
    comm_id_t id;
    struct rt_knobs knobs;
    long timeout_ms; /* effective: config, else knob; < 0 = never */

    const struct transport_ops *ops; /* the transport serving this communicator */
    void *xport;                     /* the transport's private state */
    struct shm_comm *shm;            /* the shared segment, as mapped here (shm.h) */

    uint32_t seq;        /* number of the next collective call */
    uint64_t steps;      /* progress steps this rank has published */
    uint32_t stage_slot; /* staging slot of the next phase (alternates) */
    void *scratch;       /* private scratch of shm slot size (staged path) */
    bool oversubscribed; /* more local ranks than usable cores */
    bool same_process;   /* every rank lives in this process */
    bool same_cpu_check; /* ranks unpinned: waiters check for a peer on their CPU */
    long spin_ns;        /* effective spin phase */

    _Atomic int broken;           /* 0, or the status that broke the communicator */
    _Atomic int aborted;          /* set by comm_abort, from any thread */
    _Atomic int published;        /* this rank's failure went out to the peers */
    _Atomic int entered;          /* a thread is inside a call on this communicator */
    _Atomic int misused;          /* two threads entered at once: the next call fails */
    char errmsg[RT_ERRMSG_BYTES]; /* comm_last_error */

    FILE *log; /* NULL = stderr */
    bool log_owned;
    struct comm *live_next; /* the registry of live communicators (live.c) */
};

/*
 * Is comm a handle a public function may use?  Not when NULL, nor (a cheap, best-effort
 * check) when its memory no longer says it is alive; the reason goes to
 * comm_last_error(NULL) in this thread.
 */
bool rt_handle_ok(const struct comm *comm, const char *fn);

/* live.c: the communicators alive in this process. */
void rt_live_add(struct comm *c);
enum rt_live_status { RT_LIVE_OK, RT_LIVE_GONE, RT_LIVE_BUSY };
/* Takes c out of the registry: GONE when it is not alive, BUSY (and left in) when a
 * call on it is running in another thread. */
enum rt_live_status rt_live_remove(struct comm *c);
/* Runs fn(c) under the registry lock when c is alive; false when it is not. */
bool rt_live_run(struct comm *c, void (*fn)(struct comm *c));

/* Records an error on c (message for comm_last_error) and logs it once. */
void rt_error(struct comm *c, comm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records an init failure for comm_last_error(NULL) in this thread and logs it. */
void rt_init_error(const struct rt_knobs *k, comm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void rt_log(const struct comm *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Marks the communicator broken with status: records the message, publishes the
 * failure to every peer (the transport's fail hook), and returns status.
 */
comm_status_t rt_fail(struct comm *c, comm_status_t status, const char *fmt, ...)
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

#endif /* ARCOMM_RT_COMM_INTERNAL_H */
