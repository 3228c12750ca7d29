/* SPDX-License-Identifier: MIT */
/*
 * The inter-host steps of a communicator made by comm_init_mpi: MPI communicators of
 * its own, nonblocking MPI calls, and one wait that polls them against the
 * communicator's deadline and comm_abort, so that no rank waits forever in MPI.
 * Built into libarcomm_mpi only (libarcomm does not depend on MPI).
 */
#ifndef ARCOMM_MPI_LINK_H
#define ARCOMM_MPI_LINK_H

#include "comm_base.h"

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The MPI communicators of one arcomm communicator (each freed by mpi_link_free). */
struct mpi_link {
    MPI_Comm world; /* a duplicate of the user's communicator: every rank, same ranks */
    MPI_Comm host;  /* the ranks of this rank's host (shared split or ranks-per-host) */
    MPI_Comm slice; /* the ranks with this rank's local index, one per host; slice 0 is
                     * the hosts' leaders */
    MPI_Op sum8;    /* wrapping SUM of 8-bit integers (mpi_link_ops_create), see mpi_link_op */
    /* Failure notices (mpi_link_notice_start): a receive from any rank of world, posted
     * for the communicator's life, polled by every wait; what came; what this rank sent. */
    MPI_Request notice_req;
    int64_t notice_in[4]; /* key, status, rank, call */
    int64_t notice_key;   /* this communicator's (from its id): a notice for an earlier
                           * one, whose MPI context id MPI reused, is dropped */
    bool noticed;         /* a notice came: every later wait fails at once */
    struct mpi_notice_out *notice_out;
    /* A wait on these communicators gave up with requests in flight (mpi_link_wait_for
     * with this link, comm_init_mpi's steps, which send no notices): MPI may still
     * progress them, so the communicators stay until MPI_Finalize (mpi_link_free). */
    bool abandoned;
    /* A check every wait with l makes every RT_LIVENESS_PERIOD_NS (NULL: none): a status
     * other than OK ends the wait with it (watch recorded the message on c). */
    comm_status_t (*watch)(struct comm *c, void *arg);
    void *watch_arg;
};

/* The tag of failure notices on world (a communicator of arcomm's own: no other
 * point-to-point traffic). */
#define MPI_LINK_NOTICE_TAG 0x4172

/* The most requests one step keeps in flight (pipelined segments and the status). */
#define MPI_LINK_MAX_REQS 9

/*
 * What every inter-host step carries beside its data: this rank's status, so that a
 * failure on one host reaches every rank of the step.  MAX over the step's ranks of
 * {-status, failing rank}: the worst status and a rank that had it.
 */
struct mpi_status_word {
    int64_t neg_status; /* -status of this rank (0 = COMM_OK) */
    int64_t rank;       /* this rank when it failed, else -1 */
};

/* The MPI datatype of a dtype (f16 and bf16 have none: MPI_DATATYPE_NULL). */
MPI_Datatype mpi_link_dtype(comm_dtype_t dtype);

/*
 * The MPI op that reduces dtype with op as arcomm does (AVG: a sum, the caller divides;
 * integers wrap).  MPI's predefined ops, except SUM of i8 and u8: Open MPI 4.1's op/avx
 * component adds 8- and 16-bit integers with saturating instructions (vpaddsb/vpaddusb)
 * on every full vector of an element run and wraps the rest, so l->sum8 (a user op that
 * wraps, made by mpi_link_ops_create) serves them.
 */
MPI_Op mpi_link_op(const struct mpi_link *l, comm_op_t op, comm_dtype_t dtype);

/* Makes l's own ops (l->sum8); MPI_OP_NULL stays where it fails (an MPI error code). */
int mpi_link_ops_create(struct mpi_link *l);

/* "MPI_Iallreduce failed: <MPI's error string>" into c's error, status SYSTEM. */
comm_status_t mpi_link_error(struct comm *c, int err, const char *call);

/*
 * Waits until every request of reqs (n of them) completes, polling with MPI_Testall,
 * yielding between polls.  COMM_ERR_ABORTED when comm_abort was called on c (when
 * abortable: a rank carrying its failure to the peers finishes the exchange),
 * COMM_ERR_TIMEOUT past deadline (message names what and the peers in who), SYSTEM
 * when MPI fails, unless a failure notice or l's watch explains it within 3 liveness
 * periods (then COMM_ERR_PEER naming that failure, MPI's error after it).  The requests
 * left pending on an error are abandoned (a nonblocking collective cannot be cancelled;
 * freeing the communicator later is still allowed).
 */
comm_status_t mpi_link_wait(struct comm *c, struct mpi_link *l, MPI_Request *reqs, int n,
                            uint64_t deadline, bool abortable, const char *what);

/*
 * The same wait for anything poll says is done (*done = true; a status other than OK
 * ends the wait with it, poll recorded the message on c): the deadline, comm_abort, the
 * failure notices and the watch bound it as they bound MPI's requests.  The CUDA
 * staging of the hierarchical backend waits for its copies this way (cudaEventQuery).
 */
typedef comm_status_t (*mpi_link_poll_fn)(struct comm *c, void *arg, bool *done);
comm_status_t mpi_link_wait_for(struct comm *c, struct mpi_link *l, mpi_link_poll_fn poll,
                                void *arg, uint64_t deadline, bool abortable, const char *what);

/*
 * Failure notices: the way a failure reaches every rank at once, whatever MPI call each
 * is blocked in.  A nonblocking collective cannot complete without every rank, but a
 * point-to-point message can: a rank whose call failed sends one notice {key, status,
 * rank, call} to every other rank of world, and every wait of mpi_link_wait (given l) polls a
 * receive posted for the communicator's life, ending with COMM_ERR_PEER when a notice
 * came.  mpi_link_notice_start posts the receive (an MPI error code); mpi_link_notify
 * sends this rank's notice once (not when the failure was itself a notice: its sender
 * told everyone); both in the calling thread of a call.
 */
int mpi_link_notice_start(struct mpi_link *l);
void mpi_link_notify(struct comm *c, struct mpi_link *l, comm_status_t status);

/*
 * The buffers of the small nonblocking calls a wait may give up on (call descriptors,
 * status words, ids): a nonblocking collective cannot be cancelled, and a rank that
 * comes after the timeout still completes it, and MPI then writes its result (and reads
 * what was sent) wherever the call put them.  So they are never a caller's stack:
 * mpi_ctl_new gives bytes zeroed on the heap (NULL: out of memory); mpi_ctl_done frees
 * them once the requests completed (completed: the wait returned COMM_OK, or none was
 * started), and otherwise leaves them to MPI, never freed (a few bytes a failed call).
 */
void *mpi_ctl_new(size_t bytes);
void mpi_ctl_done(void *p, bool completed);

/* Starts the status exchange of a step on mc (after its data requests, in the same
 * order on every rank); in and out from mpi_ctl_new. */
int mpi_link_status_start(MPI_Comm mc, int rank, comm_status_t mine, struct mpi_status_word *in,
                          struct mpi_status_word *out, MPI_Request *req);

/*
 * A step's outcome for this rank after its requests completed: st (this rank's own),
 * else COMM_ERR_PEER with a message naming the rank that failed and how, when out says
 * another rank failed; what names the step.
 */
comm_status_t mpi_link_status_check(struct comm *c, comm_status_t st,
                                    const struct mpi_status_word *out, const char *what);

/*
 * SIGPIPE at its default (end the process) becomes ignored, once per process; a handler
 * or an ignore the program set stays.  MPI's TCP transport writes to its peers' sockets
 * without MSG_NOSIGNAL: a rank whose write meets the socket of a peer that died (a
 * transfer to it in flight) would die of SIGPIPE, silently, instead of seeing the broken
 * connection and returning COMM_ERR_PEER with the rest.  Says so at info level on c.
 */
void mpi_link_ignore_sigpipe(const struct comm *c);

/* Frees the communicators, ops and notices of l that exist (skipped once MPI is
 * finalized): the posted receive is cancelled; notices not yet sent are left to MPI. */
void mpi_link_free(struct mpi_link *l);

#endif /* ARCOMM_MPI_LINK_H */
