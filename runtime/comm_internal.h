/* SPDX-License-Identifier: MIT */
/*
 * What the runtime keeps to itself: handle checks, the registry of live communicators,
 * the list of backends, and the host topology it discovers with hwloc.
 */
#ifndef ARCOMM_RT_COMM_INTERNAL_H
#define ARCOMM_RT_COMM_INTERNAL_H

#include "comm_base.h"
#include "backend.h"

#include <stdbool.h>
#include <stddef.h>

/* struct comm.magic while the communicator is alive, and after comm_destroy. */
#define RT_COMM_LIVE 0x636f6d6du /* "comm" */
#define RT_COMM_DEAD 0x64656164u /* "dead" */

/*
 * Is comm a handle a public function may use?  Not when NULL, nor (a cheap, best-effort
 * check) when its memory no longer says it is alive; the reason goes to
 * comm_last_error(NULL) in this thread.
 */
bool rt_handle_ok(const struct comm *comm, const char *fn);

/*
 * collective.c: the rules every collective call on a communicator follows (comm_split
 * and comm_dup too).  rt_call_enter: the handle is alive and no other thread is inside a
 * call on it (false: refused, reason in comm_last_error(NULL)); rt_call_leave ends the
 * call and returns st.  rt_call_usable: a broken, misused or aborted communicator answers
 * at once (fn, when not NULL, is named in the message).  rt_break: breaks the
 * communicator with status and publishes the failure to every peer.
 */
bool rt_call_enter(struct comm *c, const char *fn);
comm_status_t rt_call_leave(struct comm *c, comm_status_t st);
comm_status_t rt_call_usable(struct comm *c, const char *fn);
comm_status_t rt_break(struct comm *c, comm_status_t status);

/*
 * collective.c, for the asynchronous calls: rt_coll_check is what every backend refuses
 * of a call (reason into msg; reads c's rank and size only, so it may run beside a
 * progress thread); rt_coll_run and rt_barrier_run are the blocking calls' one path
 * (guard, numbering, failure publication), fn naming the entry point in messages.
 */
comm_status_t rt_coll_check(const struct comm *c, const struct coll_call *call, bool add,
                            const char *fn, char *msg, size_t len);
comm_status_t rt_coll_run(struct comm *c, const struct coll_call *call, bool add, const char *fn);
comm_status_t rt_barrier_run(struct comm *c, const char *fn);

/*
 * async.c: the hooks of the asynchronous calls in the rest of the runtime.
 * rt_async_drain: called by rt_call_enter when c has made asynchronous calls: waits for
 * (or, with caller progress, runs) every request still queued, so that a blocking call
 * runs after them; returns at once in the thread running them.  rt_async_outstanding:
 * the requests of c not yet completed by comm_wait or comm_test (0 without any).
 * rt_async_close: stops and joins the progress thread and frees the queue; comm_destroy
 * calls it once nothing is outstanding and c is out of the registry.
 */
struct rt_async;
void rt_async_drain(struct comm *c);
unsigned rt_async_outstanding(struct comm *c);
void rt_async_close(struct comm *c);

/* comm.c: comm_init of a split's new communicator, which watches parent while it joins:
 * parent's comm_abort, and a peer of parent that failed or died, stop the join at once
 * (struct comm.parent) instead of at the timeout. */
comm_status_t rt_init_split_child(comm_t **comm, const comm_config_t *cfg, struct comm *parent);

/* live.c: the communicators alive in this process. */
void rt_live_add(struct comm *c);
enum rt_live_status { RT_LIVE_OK, RT_LIVE_GONE, RT_LIVE_BUSY };
/* Takes c out of the registry: GONE when it is not alive, BUSY (and left in) when a
 * call on it is running in another thread. */
enum rt_live_status rt_live_remove(struct comm *c);
/* Runs fn(c) under the registry lock when c is alive; false when it is not. */
bool rt_live_run(struct comm *c, void (*fn)(struct comm *c));

/* backend.c: the backends built into this library, in order of preference. */
extern const struct backend_ops *const rt_backends[];
extern const size_t rt_backend_count;

/*
 * Picks the backend for a communicator: the one named (by the config or
 * ARCOMM_TRANSPORT) if any, else the first whose probe succeeds.  NULL with a reason
 * in why when none can serve it.
 */
const struct backend_ops *rt_backend_pick(const struct transport_probe *p, const char *name,
                                          char *why, size_t len);

/* topo.c: the host's summary; hwloc is loaded once per process (without I/O devices). */
const struct rt_topo_summary *rt_topo_summary(void);

/* The NUMA node of the CPU this thread runs on now, or -1 when unknown/single node. */
int rt_topo_current_numa_node(void);

#endif /* ARCOMM_RT_COMM_INTERNAL_H */
