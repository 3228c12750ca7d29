/* SPDX-License-Identifier: MIT */
/*
 * Whether single-copy transfers (process_vm_readv/writev, "CMA") are fast on this host:
 * the second half of ARCOMM_CMA_THRESHOLD=auto's choice for process ranks.  The kernel
 * pins every 4 KiB page it copies, and what that costs against a plain memcpy differs by
 * machine: on the AMD development VM a 128 KiB-piece readv moved 0.2-0.28 of memcpy's
 * bytes per second and CMA lost to the staging slots for everything but allgather; on
 * the Intel one 0.55-0.79, and CMA won for most collectives from 512 KiB per rank
 * (docs/PERFORMANCE.md, "single copy by measurement").  So the ratio is measured once per
 * process, when its first communicator of 2 process ranks joins (about 10 ms), the
 * ranks agree on the answer there, and the rule that reads it is kept apart so that it
 * can be tested on made-up numbers.
 */
#ifndef ARCOMM_SHM_CMA_CALIBRATE_H
#define ARCOMM_SHM_CMA_CALIBRATE_H

#include "knobs.h"

#include <stdbool.h>
#include <stddef.h>

/* What is copied: SHM_CMA_CAL_BYTES in pieces of SHM_CMA_CAL_PIECE (the chunk of a CMA
 * reduction), three times each way, the best pass of each kept. */
#define SHM_CMA_CAL_BYTES ((size_t)8 << 20)
#define SHM_CMA_CAL_PIECE ((size_t)128 << 10)

/* readv must move at least this fraction of memcpy's rate to count as fast: a single
 * copy that runs at half the speed of each of the staging path's two copies breaks even.
 * The two machines measured sit at 0.2-0.28 and 0.59-0.79. */
#define SHM_CMA_FAST_RATIO 0.45

enum shm_cma_outcome {
    SHM_CMA_MEASURED, /* readv_ns and memcpy_ns hold the best passes */
    SHM_CMA_FAILED,   /* could not measure (why says what failed): taken as slow */
    SHM_CMA_SKIPPED,  /* shm_cma_calibration_skip was called first: taken as slow */
};

/* What the calibration found; one per process, never changed once made. */
struct shm_cma_calibration {
    enum shm_cma_outcome outcome;
    double readv_ns;  /* best pass of process_vm_readv (this process) */
    double memcpy_ns; /* best pass of memcpy, same pieces */
    double wall_ms;   /* what it cost, allocation and first touch included */
    const char *why;  /* SHM_CMA_FAILED: what failed; else NULL */
};

/* The rule: measured, and readv at least SHM_CMA_FAST_RATIO of memcpy's rate. */
bool shm_cma_is_fast(const struct shm_cma_calibration *cal);

/* readv's rate over memcpy's (0 unless measured). */
double shm_cma_ratio(const struct shm_cma_calibration *cal);

/* The calibration, run on first use in this process and cached (thread-safe).  Never
 * fails: one that cannot run says so in outcome and why. */
const struct shm_cma_calibration *shm_cma_calibration(void);

/* Is the single copy fast for a communicator with these knobs: ARCOMM_CMA_FAST where
 * set (no calibration), else the calibration's answer.  Each rank asks at join, for 2
 * process ranks with ARCOMM_CMA_THRESHOLD=auto; the communicator takes it as fast only
 * if every rank found it fast (struct shm_comm.cma_fast). */
bool shm_cma_fast_here(const struct rt_knobs *k);

/* Makes the calibration (if it has not run yet) record SHM_CMA_SKIPPED without
 * measuring: for tools and tests whose output must not depend on the machine's timing. */
void shm_cma_calibration_skip(void);

#endif /* ARCOMM_SHM_CMA_CALIBRATE_H */
