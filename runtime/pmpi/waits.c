/* SPDX-License-Identifier: MIT */
/*
 * What a served call does while it waits for its peers: arcomm's wait hook
 * (comm_set_wait_hook) runs this from the waiting thread once the call has waited
 * PMPI_PROGRESS_US, then about as often, never in a call whose peers are all there.
 *
 * MPI requires that a process blocked in an MPI call keeps its other operations
 * progressing: a rank waiting in a served MPI_Barrier may be the one that must forward
 * a pending MPI_Ibcast, or push the fragments of a pending MPI_Isend its peer waits to
 * receive before it comes to the barrier.  So the hook drives MPI's progress engine:
 * MPI_Iprobe on MPI_COMM_SELF, which matches nothing and runs Open MPI's opal_progress,
 * legal at every thread level since it runs in the thread of the program's own MPI call.
 * One pass moves a few fragments and costs 0.05 us when there is nothing to move, so
 * each turn makes PMPI_PROGRESS_PASSES of them: about 1 us per PMPI_PROGRESS_US of a
 * waiting rank's time, and MPI's pending work moves about as fast as in MPI's own waits
 * (docs/pmpi.md, "Waiting").
 */
#include "pmpi.h"

static int wait_hook(comm_t *arc, void *arg)
{
    (void)arc;
    struct pmpi_comm *pc = arg;
    /* After MPI_Finalize began in another thread (an erroneous program), no MPI. */
    if (!pmpi_comm_final(pc)) {
        int flag;
        for (int i = 0; i < PMPI_PROGRESS_PASSES; i++)
            PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    }
    return 0;
}

comm_status_t pmpi_waits_init(struct pmpi_comm *pc, comm_t *arc)
{
    return comm_set_wait_hook(arc, wait_hook, pc, PMPI_PROGRESS_US);
}
