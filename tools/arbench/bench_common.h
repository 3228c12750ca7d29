/* SPDX-License-Identifier: MIT */
/*
 * What arbench and arbench-mpi share: the sweep options, the test data, the float64
 * check, the per-call timing and its statistics, the memcpy ceiling.  The two programs
 * differ only in the collectives they time (arcomm or MPI) and in how ranks exchange the
 * few numbers the benchmark itself needs (struct bench_sync), so that both are measured
 * the same way.
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

/* The collective a sweep times (--coll); BENCH_COLL_ALL runs each in turn. */
enum bench_coll_kind {
    BENCH_ALLREDUCE = 0,
    BENCH_BROADCAST,
    BENCH_REDUCE,
    BENCH_ALLGATHER,
    BENCH_REDUCE_SCATTER,
    BENCH_ALLTOALL,
    BENCH_NCOLLS,
    BENCH_COLL_ALL = BENCH_NCOLLS,
};
/* Broadcast's and reduce's root, as nccl-tests' default (-r 0). */
#define BENCH_ROOT 0

/* The command line of both programs; arbench-mpi ignores what it has no use for. */
struct bench_opts {
    int nranks;                /* -n: ranks (threads, or processes with --procs) */
    enum bench_coll_kind coll; /* --coll (default allreduce) */
    bool procs;                /* --procs: process ranks under arrun */
    bool mpi;                  /* --mpi: process ranks started by mpirun, comm_init_mpi */
    size_t min_bytes;          /* -b: first size (bench_coll_bytes: nccl-tests' size) */
    size_t max_bytes;          /* -e: last size */
    double factor;             /* -f: each size is the previous one times this */
    comm_dtype_t dtype;        /* -d */
    comm_op_t op;              /* -o */
    bool inplace;              /* --inplace: sendbuf == recvbuf */
    bool check;                /* --check: verify one extra call per size */
    int iters;                 /* --iters: timed calls per size; 0 = chosen per size */
    int warmup;                /* --warmup: untimed calls first; -1 = 10% of iters, >= 5 */
    int rounds;                /* --rounds: repeat the sweeps, report the median */
    comm_device_t device;
    enum bench_peer peer;  /* --compare */
    const char *csv_path;  /* --csv */
    const char *json_path; /* --json */
    const char *plot_path; /* --plot */
    bool csv_stdout;       /* --csv-stdout: machine output for a parent arbench */
    bool no_bind;          /* --no-bind: ranks float (default: one core each) */
    bool mem_alloc;        /* --mem-alloc: buffers from comm_mem_alloc (host) */
    bool shared_heap;      /* --shared-heap: process ranks under arrun --shared-heap */
    bool graph;            /* --graph: each timed call a replay of a CUDA graph of one call */
    bool fresh; /* --fresh: before each call (untimed) every rank writes its input and reads
                 * its output, as an application producing and consuming them does */
    const char *transport; /* --transport: the communicator under test's (NULL: automatic) */
};

/* What one size measured; identical on every rank once bench_run_size returns. */
struct bench_result {
    size_t bytes;   /* the size as nccl-tests names it: see bench_coll_bytes */
    size_t count;   /* bytes / element size (the API's count is count / n for
                       allgather, reduce_scatter and alltoall) */
    int iters;      /* timed calls */
    double time_us; /* median over calls of the slowest rank's time */
    double p90_us;  /* 90th percentile, same series */
    double mean_us; /* mean, same series: what calls cost in all (a path taken now and
                       then, slower, shows here and not in the median) */
    double algbw;   /* GB/s: bytes / time */
    double busbw;   /* GB/s: algbw * bench_bus_factor */
    int64_t wrong;  /* --check: see bench_run_size; -1 when not checked */
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
    /* --graph (NULL where there are no graphs): capture the calls enqueued between
     * graph_begin and graph_end into a graph; graph_replay launches it and waits. */
    int (*graph_begin)(void *ctx);
    int (*graph_end)(void *ctx);
    int (*graph_replay)(void *ctx);
    void *ctx;
};
extern const struct bench_device bench_device_host;

/*
 * The collectives under test, with arcomm's arguments (counts are elements per rank, as
 * in NCCL): each returns 0, or non-zero after printing why.  An entry a peer lacks is
 * NULL.  A buffer the collective does not read on this rank is passed as NULL (broadcast's
 * sendbuf off the root; reduce's recvbuf off the root when in place).
 */
struct bench_coll {
    int (*allreduce)(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                     comm_op_t op);
    int (*broadcast)(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                     int root);
    int (*reduce)(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                  comm_op_t op, int root);
    int (*allgather)(void *ctx, const void *send, void *recv, size_t sendcount, comm_dtype_t dtype);
    int (*reduce_scatter)(void *ctx, const void *send, void *recv, size_t recvcount,
                          comm_dtype_t dtype, comm_op_t op);
    int (*alltoall)(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype);
    void *ctx;
};
/* Whether c has an entry for kind. */
bool bench_coll_has(const struct bench_coll *c, enum bench_coll_kind kind);

/* The wire codecs (docs/wire.md) as the checks see them. */
enum bench_wire { BENCH_WIRE_NONE, BENCH_WIRE_BF16, BENCH_WIRE_INT8, BENCH_WIRE_FP8 };

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
    /* The wire codec the reductions may travel in (bench_wire_of): the check allows its
     * error bound (bf16: one bf16 rounding of every f32 input). */
    enum bench_wire wire;
    /* The library promises one reduction order for every collective (arcomm): --check
     * compares reduce's and reduce_scatter's bits with the allreduce of the same inputs. */
    bool fixed_order;
    /* In-place reduce_scatter leaves the result at the start of the buffer (MPI's
     * MPI_IN_PLACE form), not at block rank (arcomm's and NCCL's). */
    bool rs_inplace_at_start;
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
const char *bench_coll_name(enum bench_coll_kind coll); /* "allreduce", ..., "all" */
size_t bench_dtype_size(comm_dtype_t dtype);
bool bench_dtype_is_float(comm_dtype_t dtype);
/* Whether the collective reduces (takes -o); the others move data only. */
bool bench_coll_reduces(enum bench_coll_kind coll);
/* Writes the sweep arguments of o into argv (at most 24 entries, strings in buf). */
int bench_sweep_args(const struct bench_opts *o, char **argv, char *buf, size_t buflen);

/*
 * The sizes of the sweep (o->coll, o->nranks), no repeats.  A size is nccl-tests' size:
 * allreduce, broadcast, reduce: count * element size; allgather: the receive buffer,
 * n * sendcount * element size; reduce_scatter: the send buffer, n * recvcount * element
 * size; alltoall: each rank's send (and receive) buffer, n * count * element size.  So
 * sizes are whole elements, and whole multiples of n elements for the last three.
 */
size_t bench_sizes(const struct bench_opts *o, size_t *sizes, size_t max);

/* Times one size on this rank (collective: every rank calls it with the same size). */
int bench_run_size(const struct bench_rank *r, size_t bytes, struct bench_result *res);

/* Statistics of n values (sorted in place). */
double bench_median(double *v, size_t n);
double bench_p90(double *v, size_t n);
/* nccl-tests' busbw factor: allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall
 * (n-1)/n; broadcast, reduce 1. */
double bench_bus_factor(enum bench_coll_kind coll, int nranks);
double bench_busbw(double algbw, enum bench_coll_kind coll, int nranks);

/*
 * The least memory traffic of one call, in bytes over all ranks (reads + writes), for
 * thread ranks with the one-pass schemes: every input byte that matters read once and
 * every output byte written once, straight between the ranks' buffers.  S is the row's
 * size (bench_sizes), n the ranks:
 *   allreduce       2 n S      each rank reads its slice of n inputs (S) and writes it
 *                              into n outputs (S)
 *   broadcast       S + W S    root's input read once, written to W outputs (W = n out
 *                              of place, n - 1 in place: root's buffer is already it)
 *   reduce          (n + 1) S  n inputs read, root's output written
 *   allgather       S + W S    each rank's block (S/n) read once, written to n outputs
 *                              (W = n; n - 1 in place: each own block is in place)
 *   reduce_scatter  (n + 1) S  n inputs of S read, n blocks of S/n written
 *   alltoall        2 n S      every send buffer read, every receive buffer written
 * The ceiling column is this traffic / time / the memcpy ceiling (bench_ceiling).
 */
double bench_min_traffic(enum bench_coll_kind coll, int nranks, bool inplace, size_t bytes);

/*
 * The memcpy ceiling (collective): every rank at once copies bytes between two buffers
 * of its own, repeated in batches of >= 20 ms; the result (identical on every rank) is
 * the median over 5 batches of n * 2 * bytes * copies / time (read + write counted, the
 * slowest rank's time), in GB/s.  0, or non-zero after printing why.
 */
int bench_ceiling(const struct bench_rank *r, size_t bytes, double *gbs);

/* Test data: element j of rank's input for this size, exactly representable. */
double bench_value(comm_dtype_t dtype, uint64_t seed, int rank, size_t j);
uint64_t bench_seed(size_t bytes, comm_dtype_t dtype, comm_op_t op);
/* The wire codec a run's reductions may travel in, by ARCOMM_WIRE (default bf16):
 * bf16 where it narrows by default or by a threshold knob set (CUDA's f32 from 1 MiB;
 * the host and between hosts when ARCOMM_BF16_THRESHOLD or ARCOMM_WIRE_THRESHOLD is
 * set); int8 and fp8 wherever they are named; none for NCCL's runs. */
enum bench_wire bench_wire_of(comm_device_t device, bool nccl);

/* May --check compare reduce's and reduce_scatter's bits with allreduce's?  Not for NCCL,
 * nor for CUDA buffers with int8 or fp8 on the wire (on one host only allreduce's
 * copy-engine path carries them, docs/wire.md). */
bool bench_fixed_order(comm_device_t device, bool nccl);

/* buf[j] = bench_value(dtype, seed, rank, first + j) for j < count. */
void bench_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed, int rank, size_t first);
/* Rounds f32 values to bf16 in place (round to nearest even), kept as f32. */
void bench_round_bf16(float *buf, size_t count);
/* Elements of out outside the dtype's tolerance of the float64 reference
 * op over ranks r of bench_value(seed, r, first + j). */
int64_t bench_check_reduce(const void *out, size_t count, comm_dtype_t dtype, comm_op_t op,
                           uint64_t seed, int nranks, size_t first, bool stepwise_round,
                           enum bench_wire wire);
/* Elements of out that are not bit for bit bench_value(seed, src_rank, first + j). */
int64_t bench_check_exact(const void *out, size_t count, comm_dtype_t dtype, uint64_t seed,
                          int src_rank, size_t first);
uint64_t bench_fnv1a(const void *buf, size_t bytes);
/* Poison: NaN bytes for floats; for ints a value no sum of bench_value can reach. */
void bench_poison(void *buf, size_t bytes, comm_dtype_t dtype);
/* Elements of buf that no longer hold bench_poison's bytes. */
int64_t bench_count_written(const void *buf, size_t count, comm_dtype_t dtype);
/* inout[j] = inout[j] op in[j] for f16 or bf16, in f32 and rounded once (MPI's op). */
void bench_half_reduce(void *inout, const void *in, size_t n, comm_dtype_t dtype, comm_op_t op);

/* Monotonic clock in seconds. */
double bench_now(void);

#endif /* ARBENCH_BENCH_COMMON_H */
