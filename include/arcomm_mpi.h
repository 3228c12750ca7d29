/* SPDX-License-Identifier: MIT */
/*
 * arcomm over several hosts, on MPI: link with -larcomm_mpi (pkg-config arcomm-mpi).
 * Reference: docs/api.md (comm_init_mpi); the guide's page: docs/multihost.md.
 */
#ifndef ARCOMM_MPI_H
#define ARCOMM_MPI_H

#include <arcomm.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Collective over mpi_comm: an arcomm communicator over all its ranks, on any number of
 * hosts.  cfg may be NULL; its nranks, rank and id are ignored (taken from mpi_comm).
 * Ranks keep their MPI rank.  Every collective of arcomm works on it (host buffers:
 * comm_allreduce_add too); comm_split and comm_dup make new communicators the same way
 * (a group on one host gets that host's own communicator).
 * cfg->device COMM_DEVICE_CUDA (the same on every rank): CUDA buffers, each rank on GPU
 * cfg->device_index (-1: its index on its host modulo the GPUs it sees); a call is
 * ordered on its stream but returns only after its inter-host step, staged through
 * pinned host memory (it synchronizes the host with the stream); no comm_allreduce_add.
 *
 * The ranks of one host (MPI_COMM_TYPE_SHARED, or every ARCOMM_MPI_RANKS_PER_HOST
 * consecutive ranks when that knob is set) form an intra-host arcomm communicator;
 * the steps between hosts are nonblocking MPI calls on communicators of its own,
 * bounded by the timeout (cfg->timeout_ms, else ARCOMM_TIMEOUT_MS) and comm_abort.
 * comm_transport_name says both levels ("shm+mpi").  MPI must be initialised; call
 * comm_destroy before MPI_Finalize.  *comm is written only on success, and every rank
 * returns the same status (COMM_ERR_PEER on the ranks whose own part went well).
 * Before any other step the ranks compare the settings that must be the same on every
 * rank (ARCOMM_MPI_RANKS_PER_HOST and the knobs every communicator's ranks must share,
 * from the environment or cfg->knob_defaults): when they differ, COMM_ERR_MISMATCH on
 * every rank, naming the knob, the ranks and their values (mpirun passes a variable to
 * the ranks of other hosts only with -x NAME).  comm_init_mpi and the calls of its
 * communicators make their MPI calls in the calling thread: the thread level the
 * program got from MPI_Init_thread applies to them as to its own MPI calls.
 */
comm_status_t comm_init_mpi(comm_t **comm, MPI_Comm mpi_comm, const comm_config_t *cfg);

#ifdef __cplusplus
}
#endif

#endif /* ARCOMM_MPI_H */
