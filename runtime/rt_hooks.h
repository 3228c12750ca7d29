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

#endif /* ARCOMM_RT_HOOKS_H */
