/* SPDX-License-Identifier: MIT */
/* The inter-host steps the hierarchical collectives share (hier_inter.c). */
#ifndef ARCOMM_HIER_INTER_H
#define ARCOMM_HIER_INTER_H

#include "hier.h"
#include "wire.h"

enum hier_inter_kind {
    HIER_INTER_ALLREDUCE, /* in place, in dtype with op */
    HIER_INTER_BCAST,     /* bytes from root */
};

/* One segmented step on mc over n elements of esize bytes at buf. */
struct hier_inter {
    enum hier_inter_kind kind;
    MPI_Comm mc;
    void *buf;
    size_t n, esize;
    comm_dtype_t dtype; /* ALLREDUCE: the work dtype */
    comm_op_t op;       /* ALLREDUCE */
    int root;           /* BCAST: rank in mc */
    const char *what;   /* for messages */
    /* ALLREDUCE of f32 partial sums: NULL (full width), or the wire codec each round's
     * partials travel in (docs/wire.md): every rank of a round encodes its partial once
     * (segment by segment, each just before it is sent), takes the decoded value of its
     * own bytes as its operand, and decodes its partner's, so both combine the same
     * operands; never with recursive halving. */
    const struct wire_row *wire;
};

/* The step, with this rank's status mine carried to every rank of mc: mine when it
 * is not OK, COMM_ERR_PEER when another rank's is not, else how the step went. */
comm_status_t hier_inter_segments(struct comm *c, const struct hier_inter *s, comm_status_t mine,
                                  uint64_t deadline);

/* The elements of one segment of an inter-host step of n elements of esize bytes: the
 * whole message up to HIER_SEG_BYTES (one message a round), else HIER_SEG_BYTES, with
 * HIER_SEGS_IN_FLIGHT of them travelling while the oldest is combined. */
size_t hier_inter_seg_elems(size_t n, size_t esize);

/* A step of one nonblocking call already started (err: what it returned; call: its
 * name) on mc, with the status beside it, waited for. */
comm_status_t hier_inter_one(struct comm *c, MPI_Comm mc, MPI_Request *data, int err,
                             const char *call, comm_status_t mine, uint64_t deadline,
                             const char *what);

/* An intra-host step's failure st (not OK) in this communicator's message, naming what
 * and the intra-host communicator's reason; returns st (OK passes through). */
comm_status_t hier_intra_failed(struct comm *c, comm_status_t st, const char *what);

#endif /* ARCOMM_HIER_INTER_H */
