/* SPDX-License-Identifier: MIT */
/*
 * The few internal entry points libarcomm exports for the libraries layered on it
 * (libarcomm_mpi): not in arcomm.h, not part of the API, kept small.  They let a
 * backend that lives outside libarcomm (the hierarchical MPI backend) become a
 * communicator that every public function serves: comm_destroy, comm_abort and the
 * collectives of libarcomm then call that backend's ops.
 */
#ifndef ARCOMM_RT_HOOKS_H
#define ARCOMM_RT_HOOKS_H

#include "arcomm.h"

#include <stdint.h>

struct backend_ops;

/* Exported from libarcomm.so, though not public API. */
#define ARCOMM_HOOK __attribute__((visibility("default")))

/*
 * comm_init with the backend given instead of picked: the knobs, the log, the
 * timeout and the checks of cfg are comm_init's; c->xport = xport before ops->setup.
 * Nothing is published to peers on failure (the caller agrees on the outcome with its
 * peers itself).  On success comm_destroy calls ops->teardown, which owns xport then;
 * on failure xport is the caller's still.
 */
ARCOMM_HOOK comm_status_t rt_hook_init_backend(comm_t **comm, const comm_config_t *cfg,
                                               const struct backend_ops *ops, void *xport);

/* Records msg as this thread's comm_last_error(NULL), without logging it (the layered
 * library logged it where it found it): its init failures, seen through libarcomm. */
ARCOMM_HOOK void rt_hook_init_error(const char *msg);

/*
 * For libarcomm_nccl's ncclCommGetAsyncError (added with runtime/nccl): the status a
 * communicator would answer its next call with, read without entering it, so that any
 * thread may ask at any time (PyTorch's watchdog does, while another thread makes the
 * calls): the status that broke it, COMM_ERR_ABORTED after comm_abort, COMM_ERR_PEER
 * when a peer published a failure of its own (not one passed on, nor its comm_destroy),
 * else COMM_OK.  Only atomics are read; the communicator must be alive.  A GPU-side
 * failure not yet seen by a call on this rank shows once a peer published it, or at
 * this rank's next call.
 */
ARCOMM_HOOK comm_status_t rt_hook_comm_state(const comm_t *comm);

/* For libarcomm_nccl's point-to-point (runtime/nccl/p2p.c): the communicator's id, the
 * same on every rank, from which each pair of ranks derives the id of a communicator of
 * its own without an exchange.  COMM_ERR_INVALID for a dead handle. */
ARCOMM_HOOK comm_status_t rt_hook_comm_id(const comm_t *comm, comm_id_t *id);

/*
 * For libarcomm_nccl's ncclCommAbort of a communicator whose ncclCommSplit still runs:
 * comm_split with an abort word (NULL: comm_split itself).  While the split runs, every
 * wait of it polls *abort_flag, the parent's handshakes and the new communicator's
 * comm_init alike; once it is nonzero the split fails with COMM_ERR_ABORTED, the parent
 * is aborted and broken on every rank (its peers' splits and calls return COMM_ERR_PEER
 * at once, not after the timeout), and *newcomm is not written.
 */
ARCOMM_HOOK comm_status_t rt_hook_split(comm_t *comm, int color, int key,
                                        const volatile int *abort_flag, comm_t **newcomm);

/* For the tests of the host paths: how many bulk calls of the communicator ran one-pass,
 * through the staging slots and through CMA (out[0..2]).  COMM_ERR_INVALID for a dead
 * handle or a communicator without the segment. */
ARCOMM_HOOK comm_status_t rt_hook_bulk_calls(const comm_t *comm, uint64_t out[3]);
/* Point-to-point on a host communicator: a channel's eager room, a stage chunk's bytes,
 * and the messages this rank received by how they came (recvs[1..5]: eager, pointer,
 * offset, CMA, staged).  Any output may be NULL. */
ARCOMM_HOOK comm_status_t rt_hook_p2p_info(const comm_t *comm, uint64_t *eager_bytes,
                                           uint64_t *chunk_bytes, uint64_t recvs[6]);

/* For the hierarchical backend's inter-host exchange (collectives/hier/hier_inter.c):
 * out[i] = a[i] op b[i] for count elements of dtype (out may be a or b), with the host
 * reduction's arithmetic (coll_reduce: in the accumulation type, rounded once, integers
 * wrapping, its NaN rules: a is the first source), so hosts combine their partial
 * results as ranks of one host do. */
ARCOMM_HOOK void rt_hook_reduce_pair(void *out, const void *a, const void *b, size_t count,
                                     comm_dtype_t dtype, comm_op_t op);

#endif /* ARCOMM_RT_HOOKS_H */
