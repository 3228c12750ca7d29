/* SPDX-License-Identifier: MIT */
/*
 * arbench's side of the library under test: the collectives through arcomm's API
 * (struct bench_coll over a communicator and a stream), the buffers' device (host
 * memory, comm_mem_alloc segments, CUDA), and the thread-rank runs (threads.c: the
 * sweeps, the memcpy ceiling and the exchange floor).  arbench.c holds the options, the
 * process ranks and the launcher.
 */
#ifndef ARBENCH_ARCOMM_SIDE_H
#define ARBENCH_ARCOMM_SIDE_H

#include "bench_common.h"
#include "bench_report.h"

#include <stdbool.h>
#include <stddef.h>

/* The library under test, and the stream its calls are ordered on (NULL on the host). */
struct arcomm_ctx {
    comm_t *comm;
    void *stream;
};

/* The collectives of x's communicator, on x's stream. */
struct bench_coll bench_arcomm_coll(struct arcomm_ctx *x);

/*
 * The buffer backend of one rank: host memory, or (CUDA builds) the device memory of
 * GPU ordinal with its own stream.  0, or an exit code.
 */
int bench_device_open(comm_device_t kind, int ordinal, struct bench_device *out);
/* A process rank's GPU: its index on its host, or, with fewer GPUs than ranks, that
 * index modulo the GPUs (process ranks may share a GPU; thread ranks may not). */
int bench_device_ordinal(comm_device_t kind, int local);
/* The buffers under test from comm's comm_mem_alloc (--mem-alloc, host). */
void bench_device_use_segment(struct bench_device *dev, comm_t *comm);
/* 0 when this build and host can serve kind, else an exit code (said on stderr). */
int bench_device_check(comm_device_t kind);
void bench_device_close(struct bench_device *d);
/* The stream the device's calls are ordered on (NULL on the host). */
void *bench_device_stream(const struct bench_device *d);
/* comm_init failed with st: said once per process; the exit code. */
int bench_init_failed(comm_status_t st);

/* threads.c: the sweep over sizes with o->nranks thread ranks (rank 0's results in
 * res; live: rows printed as they come, or NULL; transport: the transport's name out;
 * nccl: NCCL instead of arcomm), 0 or an exit code. */
int bench_run_threads(const struct bench_opts *o, const size_t *sizes, size_t nsizes,
                      struct bench_result *res, struct bench_report *live, char *transport,
                      bool nccl);
/* threads.c: the memcpy ceiling of o->nranks pinned threads at bytes (GB/s), and the
 * exchange floor (us per round). */
int bench_measure_ceiling(const struct bench_opts *o, size_t bytes, double *gbs, double *floor_us);

#endif /* ARBENCH_ARCOMM_SIDE_H */
