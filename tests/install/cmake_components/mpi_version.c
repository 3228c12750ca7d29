/* SPDX-License-Identifier: MIT */
/* Built on arcomm::mpi: arcomm_mpi.h (and mpi.h) compile, comm_init_mpi links from
 * libarcomm_mpi and comm_get_version from libarcomm.  Prints "mpi VERSION". */
#include <arcomm_mpi.h>
#include <stdio.h>

int main(void)
{
    int major, minor, patch;
    comm_status_t (*volatile init)(comm_t **, MPI_Comm, const comm_config_t *) = comm_init_mpi;

    comm_get_version(&major, &minor, &patch);
    printf("mpi %d.%d.%d%s\n", major, minor, patch, init ? "" : " (no comm_init_mpi)");
    return init ? 0 : 1;
}
