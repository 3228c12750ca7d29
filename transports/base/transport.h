/* SPDX-License-Identifier: MIT */
/*
 * The transport ops table: how the runtime reaches a transport.  A capability probe
 * apart from the data operations; transports are listed once, in runtime/transport.c.
 */
#ifndef ARCOMM_BASE_TRANSPORT_H
#define ARCOMM_BASE_TRANSPORT_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>

struct comm;

/* What a probe is asked: can you serve a communicator like this one? */
struct transport_probe {
    int nranks;
    comm_device_t device;
};

struct transport_ops {
    const char *name;
    comm_device_t device;
    /* Can this transport serve these ranks here?  When not, says why in why. */
    bool (*probe)(const struct transport_probe *p, char *why, size_t len);
    /* Rendezvous with the peers and set up per-communicator resources (bounded by the
     * communicator's timeout).  On failure everything it made is undone. */
    comm_status_t (*setup)(struct comm *c);
    /* Frees everything setup made; safe after any error. */
    void (*teardown)(struct comm *c);
    /* Makes this rank's failure visible to its peers, with msg as the reason they
     * report; the first caller's message wins.  in_call: called by the thread making
     * the collective (which may also mark its arrival word); false from comm_abort,
     * which may run beside a blocked collective and touches only atomics. */
    void (*publish_failure)(struct comm *c, comm_status_t status, const char *msg, bool in_call);
    /* Wakes every waiter of this communicator in this process (comm_abort). */
    void (*wake)(struct comm *c);
    comm_status_t (*mem_alloc)(struct comm *c, size_t bytes, void **ptr);
    comm_status_t (*mem_free)(struct comm *c, void *ptr);
};

#endif /* ARCOMM_BASE_TRANSPORT_H */
