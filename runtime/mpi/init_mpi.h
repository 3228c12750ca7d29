/* SPDX-License-Identifier: MIT */
/*
 * What the files of comm_init_mpi share (init_mpi.c: the setup; settings.c: what every
 * rank must agree on before it).  Internal to libarcomm_mpi.
 */
#ifndef ARCOMM_RT_INIT_MPI_H
#define ARCOMM_RT_INIT_MPI_H

#include "arcomm_mpi.h"
#include "comm_base.h"
#include "knobs.h"
#include "tables.h"
#include "mpi/mpi_link.h"

#include <mpi.h>
#include <stdint.h>

/*
 * The first step of comm_init_mpi, collective over mc: every rank's own verdict on its
 * arguments (mine), its device and the settings that must be the same on every rank
 * (ARCOMM_MPI_RANKS_PER_HOST, the RT_KNOB_AGREE knobs), in one
 * MPI_Iallgather bounded by deadline.  The same status on every rank: mine where it
 * failed, else COMM_ERR_PEER naming a rank that failed its own checks, COMM_ERR_INVALID
 * for different devices, COMM_ERR_MISMATCH naming the first setting that differs, the
 * ranks and their values, and the fix; the message on tc.
 */
comm_status_t rt_mpi_agree_settings(struct comm *tc, MPI_Comm mc, comm_status_t mine,
                                    const comm_config_t *cfg, uint64_t deadline);

#endif /* ARCOMM_RT_INIT_MPI_H */
