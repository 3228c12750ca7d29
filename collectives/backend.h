/* SPDX-License-Identifier: MIT */
/*
 * The backend interface: everything the runtime asks of a communicator's backend (a
 * transport and the collectives built on it), one table per backend, defined where its
 * algorithms live.  The runtime lists the tables once (runtime/backend.c) and calls
 * them; it never switches on the device.
 */
#ifndef ARCOMM_COLL_BACKEND_H
#define ARCOMM_COLL_BACKEND_H

#include "coll.h"
#include "transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * What a communicator of one backend makes of the knobs.  Pure functions of the knobs,
 * built into every library whichever backends are: arinfo --config shows each backend's
 * values, from the formula that backend's setup uses.
 */
struct backend_knobs {
    const char *name; /* the backend's ARCOMM_TRANSPORT spelling */
    uint64_t reads;   /* RT_KNOB_BIT(id) of every knob its communicators read */
    /* Resolves in place the knobs in reads ("auto" to numbers) as a communicator of
     * nranks ranks here uses them (same_process: all ranks threads of one process). */
    void (*used)(struct rt_knobs *k, const struct rt_topo_summary *topo, int nranks,
                 bool same_process);
};

extern const struct backend_knobs coll_host_knobs;    /* backend_host.c */
extern const struct backend_knobs coll_cuda_knobs;    /* cuda/knobs_cuda.c */
extern const struct backend_knobs coll_hexagon_knobs; /* hexagon/knobs_hex.c */
/* Every backend's, built or not, in rt_backends' order. */
extern const struct backend_knobs *const coll_knob_views[3];

/*
 * One send or receive of a group (comm_send, comm_recv, collectives/p2p/): what the
 * runtime validated, then the backend's progress through it.  A group's calls on one
 * communicator are run together, in the order the program made them.
 */
#define COLL_P2P_DONE 3 /* struct coll_p2p.state of a finished call, whoever finished it */
struct coll_p2p {
    bool send;          /* comm_send (else comm_recv) */
    void *buf;          /* the caller's buffer (const for a send) */
    size_t count;       /* elements */
    comm_dtype_t dtype; /* validated */
    int peer;           /* 0 .. nranks-1 (own rank: a self-send, matched by the runtime) */
    void *stream;       /* the caller's stream (device backends), NULL on host */
    /* The backend's progress (zero when posted): */
    int state;            /* the backend's step */
    comm_status_t status; /* the outcome, once state says done */
    uint64_t msg;         /* the pair's message number this call is */
    uint64_t chunk;       /* staged: chunks of this message moved so far */
    void *bounce;         /* device backends: the host copy of buf, freed by them */
};

struct backend_ops {
    const char *name; /* ARCOMM_TRANSPORT's spelling */
    comm_device_t device;
    const struct backend_knobs *knobs; /* what its communicators read of the knobs */
    /* Can this backend serve these ranks here?  When not, says why in why. */
    bool (*probe)(const struct transport_probe *p, char *why, size_t len);
    /* Rendezvous with the peers and set up per-communicator resources (bounded by the
     * communicator's timeout).  On failure everything it made is undone. */
    comm_status_t (*setup)(struct comm *c);
    /* Frees everything setup made; safe after any error. */
    void (*teardown)(struct comm *c);
    /* After setup: turns the "auto" knobs the backend's paths read into numbers for
     * these ranks.  NULL when setup already resolved all it uses into its own state. */
    void (*resolve_knobs)(struct comm *c);
    /* What this backend refuses of a call the runtime found well formed (fn names the
     * entry point in messages): COMM_ERR_UNSUPPORTED leaves the communicator usable. */
    comm_status_t (*validate)(struct comm *c, const struct coll_call *call, const char *fn);
    /* The collectives, on a validated call; a call that succeeds has been published
     * as complete in the segment's failure words. */
    comm_status_t (*allreduce)(struct comm *c, const struct coll_call *call);
    comm_status_t (*allreduce_add)(struct comm *c, const struct coll_call *call);
    comm_status_t (*barrier)(struct comm *c);
    /* The collectives beyond allreduce, on a validated call (call->kind says which).
     * NULL: the backend does not have it; the runtime returns COMM_ERR_UNSUPPORTED on
     * every rank alike, before anything is exchanged, and the communicator stays usable. */
    comm_status_t (*broadcast)(struct comm *c, const struct coll_call *call);
    comm_status_t (*reduce)(struct comm *c, const struct coll_call *call);
    comm_status_t (*allgather)(struct comm *c, const struct coll_call *call);
    comm_status_t (*reduce_scatter)(struct comm *c, const struct coll_call *call);
    comm_status_t (*alltoall)(struct comm *c, const struct coll_call *call);
    /*
     * Point-to-point (comm_send, comm_recv, comm_group_end), on validated calls; NULL:
     * the backend has none (COMM_ERR_UNSUPPORTED, the communicator stays usable).
     * p2p runs ops[0..n) to completion together (bounded, aborted, peers watched like
     * every wait), the sends and receives between one pair in order; returns the first
     * failure, each call's in ops[i].status.  p2p_poll makes one pass without waiting,
     * for a group whose thread drives several communicators: 1 when every call is done
     * (the first failure in the return value's place: < 0), 0 when some still waits.
     * p2p_end lets go of what the calls hold (after p2p or polls, failed or not).
     */
    comm_status_t (*p2p)(struct comm *c, struct coll_p2p *ops, size_t n);
    int (*p2p_poll)(struct comm *c, struct coll_p2p *ops, size_t n);
    void (*p2p_end)(struct comm *c, struct coll_p2p *ops, size_t n);
    /* A send to oneself into its matching receive (same count and dtype, checked by the
     * runtime); NULL: a host copy. */
    comm_status_t (*p2p_self)(struct comm *c, const struct coll_p2p *send, struct coll_p2p *recv);
    /* Makes this rank's failure visible to its peers, with msg as the reason they
     * report; the first caller's message wins.  in_call: called by the thread making
     * the collective (which may also mark its arrival word); false from comm_abort,
     * which may run beside a blocked collective and touches only atomics. */
    void (*publish_failure)(struct comm *c, comm_status_t status, const char *msg, bool in_call);
    /* Wakes every waiter of this communicator in this process (comm_abort). */
    void (*wake)(struct comm *c);
    comm_status_t (*mem_alloc)(struct comm *c, size_t bytes, void **ptr);
    comm_status_t (*mem_free)(struct comm *c, void *ptr);
    /*
     * comm_split and comm_dup of a communicator without the shared segment whose
     * arrival words carry the split's handshakes (runtime/split.c); NULL: the segment's.
     * split_handshake: one handshake, call c->seq: (a, b) out from this rank, every
     * rank's into all_a and all_b (either may be NULL), bounded; a rank making another
     * call at this number gets COMM_ERR_MISMATCH, as every rank does.  split_join: made
     * by every rank, color < 0 (COMM_SPLIT_NONE) too: the new communicator of this
     * rank's group into *out (ranked by key, then rank), or none for color < 0; the
     * same status on every rank of a group, its message in comm_last_error(NULL).
     */
    comm_status_t (*split_handshake)(struct comm *c, uint64_t count, int64_t a, int64_t b,
                                     int64_t *all_a, int64_t *all_b, const char *what);
    comm_status_t (*split_join)(struct comm *c, int color, int key, struct comm **out);
};

/* The backends; which are built is runtime/backend.c's list. */
extern const struct backend_ops coll_host_backend;     /* backend_host.c */
extern const struct backend_ops coll_cuda_backend;     /* cuda/backend.c */
extern const struct backend_ops coll_cuda_p2p_backend; /* cuda/backend_p2p.c */
extern const struct backend_ops coll_hexagon_backend;  /* hexagon/allreduce_hex.c */

#endif /* ARCOMM_COLL_BACKEND_H */
