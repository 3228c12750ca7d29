/* SPDX-License-Identifier: MIT */
/*
 * What arbench and arbench-mpi share: the sweep options, the test data, the float64
 * check, the per-call timing and its statistics.  The two programs differ only in the
 * allreduce they time (arcomm or MPI) and in how ranks exchange the few numbers the
 * benchmark itself needs (struct bench_sync), so that both are measured the same way.
 *
 * Only the enums of arcomm.h are used here; nothing in this file calls the library.
 */
#ifndef ARBENCH_BENCH_COMMON_H
#define ARBENCH_BENCH_COMMON_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit codes shared by both programs. */
#define BENCH_EXIT_OK    0
#define BENCH_EXIT_FAIL  1 /* a call failed, or --check found wrong elements */
#define BENCH_EXIT_USAGE 2 /* bad usage, or a device / peer this build lacks */

enum bench_peer { BENCH_PEER_NONE = 0, BENCH_PEER_MPI, BENCH_PEER_NCCL };

/* The command line of both programs; arbench-mpi ignores what it has no use for. */
struct bench_opts {
    int nranks;         /* -n: ranks (threads, or processes with --procs) */
    bool procs;         /* --procs: process ranks under arrun */
    size_t min_bytes;   /* -b: first size, bytes per rank */
    size_t max_bytes;   /* -e: last size */
    double factor;      /* -f: each size is the previous one times this */
    comm_dtype_t dtype; /* -d */
    comm_op_t op;       /* -o */
    bool inplace;       /* --inplace: sendbuf == recvbuf */
    bool check;         /* --check: verify one extra call per size */
    int iters;          /* --iters: timed calls per size; 0 = chosen per size */
    int warmup;         /* --warmup: untimed calls first; -1 = 10% of iters, >= 5 */
    int rounds;         /* --rounds: repeat the sweeps, report the median */
    comm_device_t device;
    enum bench_peer peer;  /* --compare */
    const char *csv_path;  /* --csv */
    const char *json_path; /* --json */
    const char *plot_path; /* --plot */
    bool csv_stdout;       /* --csv-stdout: machine output for a parent arbench */
    bool no_bind;          /* --no-bind: ranks float (default: one core each) */
};

/* What one size measured; identical on every rank once bench_run_size returns. */
struct bench_result {
    size_t bytes;   /* count * element size: bytes per rank */
    size_t count;   /* elements per rank */
    int iters;      /* timed calls */
    double time_us; /* median over calls of the slowest rank's time */
    double p90_us;  /* 90th percentile, same series */
    double algbw;   /* GB/s: bytes / time */
    double busbw;   /* GB/s: algbw * 2(n-1)/n */
    int64_t wrong;  /* --check: see bench_check; -1 when not checked */
};

/*
 * How ranks exchange the benchmark's own numbers (not the data under test).  Every
 * function is collective and acts in place on all ranks: max over ranks for doubles,
 * sum / max / min for int64.  Return 0, or non-zero after printing why.
 */
enum bench_red { BENCH_MAX_F64, BENCH_SUM_I64, BENCH_MAX_I64, BENCH_MIN_I64 };
struct bench_sync {
    int (*reduce)(void *ctx, void *vals, size_t n, enum bench_red red);
    /*
     * Optional: sets *same on every rank to whether all ranks hold the same bytes.
     * When NULL, a 64-bit FNV hash of the bytes is compared through reduce (max == min).
     */
    int (*same_bytes)(void *ctx, const void *buf, size_t bytes, bool *same);
    void *ctx;
};

/*
 * Where the buffers under test live.  A device backend is this table: host memory is
 * built in; CUDA and Hexagon fill in the same entries when they arrive.  The data is
 * made and checked in host memory and copied to and from the device around the calls.
 */
struct bench_device {
    const char *name;
    comm_device_t kind;
    bool host_visible; /* the device buffer is host memory: no staging copies */
    int (*alloc)(void *ctx, size_t bytes, void **ptr);
    void (*free)(void *ctx, void *ptr);
    int (*to_device)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*to_host)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*sync)(void *ctx); /* waits for the calls enqueued so far */
    void *ctx;
};
extern const struct bench_device bench_device_host;

/* The allreduce under test: returns 0, or non-zero after printing why. */
struct bench_coll {
    int (*allreduce)(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                     comm_op_t op);
    void *ctx;
};

/* One rank's view of a run. */
struct bench_rank {
    int rank;
    int nranks;
    const struct bench_opts *opts;
    const struct bench_coll *coll;
    const struct bench_sync *sync;
    const struct bench_device *dev;
    /* f16/bf16 rounded to the output type after every pairwise step (an MPI user op)
     * rather than once after an f32 sum (arcomm's contract): a wider tolerance. */
    bool stepwise_round;
    /* f32 may travel as bf16 (ARCOMM_BF16_THRESHOLD, on by default for CUDA): the check
     * allows one bf16 rounding of every input. */
    bool bf16_wire;
};

void bench_opts_init(struct bench_opts *o);
/*
 * Parses argv into *o.  Returns 0, 1 after -h (usage printed to stdout), 2 after a
 * usage error (message and usage printed to stderr), or BENCH_PARSE_VERSION after
 * --version (the caller prints it).
 */
#define BENCH_PARSE_VERSION 3
int bench_parse_args(struct bench_opts *o, int argc, char **argv, const char *prog,
                     const char *usage);
int bench_parse_size(const char *s, size_t *out);
const char *bench_dtype_name(comm_dtype_t dtype);
const char *bench_op_name(comm_op_t op);
const char *bench_device_name(comm_device_t device);
size_t bench_dtype_size(comm_dtype_t dtype);
/* Writes the sweep arguments of o into argv (at most 24 entries, strings in buf). */
int bench_sweep_args(const struct bench_opts *o, char **argv, char *buf, size_t buflen);

/* The sizes of the sweep, in bytes per rank rounded to whole elements, no repeats. */
size_t bench_sizes(const struct bench_opts *o, size_t *sizes, size_t max);

/* Times one size on this rank (collective: every rank calls it with the same size). */
int bench_run_size(const struct bench_rank *r, size_t bytes, struct bench_result *res);

/* Statistics of n values (sorted in place). */
double bench_median(double *v, size_t n);
double bench_p90(double *v, size_t n);
double bench_busbw(double algbw, int nranks);

/* Test data: element j of rank's input for this size, exactly representable. */
double bench_value(comm_dtype_t dtype, uint64_t seed, int rank, size_t j);
uint64_t bench_seed(size_t bytes, comm_dtype_t dtype, comm_op_t op);
void bench_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed, int rank);
/* Elements of out outside the dtype's tolerance of the float64 reference. */
int64_t bench_check(const void *out, size_t count, comm_dtype_t dtype, comm_op_t op, uint64_t seed,
                    int nranks, bool stepwise_round, bool bf16_wire);
uint64_t bench_fnv1a(const void *buf, size_t bytes);
/* Poison: NaN bytes for floats; for ints a value no sum of bench_value can reach. */
void bench_poison(void *buf, size_t bytes, comm_dtype_t dtype);
/* inout[j] = inout[j] op in[j] for f16 or bf16, in f32 and rounded once (MPI's op). */
void bench_half_reduce(void *inout, const void *in, size_t n, comm_dtype_t dtype, comm_op_t op);

/* Monotonic clock in seconds. */
double bench_now(void);

#endif /* ARBENCH_BENCH_COMMON_H */
