/* SPDX-License-Identifier: MIT */
/*
 * CUDA buffers on a communicator made by comm_init_mpi, started by mpirun (any number
 * of process ranks, sharing GPUs: rank r on GPU local index modulo the GPUs it sees).
 *
 * First, on any machine (no GPU needed): ranks passing different cfg->device
 * (INVALID on every rank, nothing made), a device comm_init_mpi does not serve
 * (Hexagon: UNSUPPORTED on every rank), a bad device_index on one rank (INVALID there,
 * PEER elsewhere); without a GPU, a CUDA comm_init_mpi fails alike on every rank, leaves
 * nothing in /dev/shm, and a host communicator still works after it; then the program
 * exits 77 (skipped) on every rank.
 *
 * With a GPU: every collective the communicator serves on device buffers, on a stream of
 * the test's own and on the default stream: allreduce, reduce and reduce_scatter of every
 * dtype with sum, max, min and prod (avg for the float types), broadcast, allgather and
 * alltoall, comm_allreduce_add (f32, bf16, f16, f64, i32; residual and bias row, in place
 * and not), counts 0, 1, 97 and about a million; random inputs, float64 (exact for
 * integers) references, outputs poisoned first, every element checked after a
 * cudaStreamSynchronize, and every rank's bits compared for the allreduces,
 * broadcasts and allgathers.  Failures: a count that differs on the last rank (its
 * host is another one under ARCOMM_MPI_RANKS_PER_HOST): MISMATCH on every rank and no
 * byte of any output written; comm_abort before a call (ABORTED, PEER elsewhere, at
 * the next call where the host's CUDA communicator took the call first);
 * comm_allreduce_add on one rank against comm_allreduce (MISMATCH everywhere); a call
 * on a stream being captured on rank 1 (INVALID there, PEER elsewhere).  Exits non-zero
 * on any failure.
 *
 * Every rank on one host (mc_one_host): comm_init_mpi returns the host's CUDA
 * communicator itself (no "+mpi" in its name), whose f32 sums from 1 MiB cross as bf16
 * (ARCOMM_BF16_THRESHOLD's default: checked within bf16's rounding), whose mismatches
 * may surface at the next call (as on any CUDA communicator: expect_mismatch) and whose
 * calls may be captured: instead of the refusal, every rank captures an allreduce into a
 * graph and replays it twice on fresh inputs, each result checked.
 *
 * Built with HIER_FAKE_CUDA against tests/mpi/fake_cuda and libarcomm_mpi_fakecuda
 * (test_mpi_cuda_fake), the same program runs the CUDA path's staging and algorithms
 * on any machine: one "GPU" whose memory is host memory, over a host intra-host
 * communicator.
 */
#include "mpi_check.h"

#include <arcomm_mpi.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP 77
#define BIG  1048573 /* a prime near a million */

/* Built against tests/mpi/fake_cuda (test_mpi_cuda_fake): the same checks with host
 * memory as device memory, over a host intra-host communicator ("shm+mpi"). */
#ifdef HIER_FAKE_CUDA
#define FAKE 1
#else
#define FAKE 0
#endif

static int g_rank, g_size, g_failed;
static comm_t *g_comm;
static cudaStream_t g_stream;
static bool g_default_stream; /* alternate: the test's stream, the default one */
static bool g_direct;         /* one host: the host's own CUDA communicator */

static void fail(const char *what, comm_dtype_t dtype, comm_op_t op, size_t count, const char *why)
{
    if (g_failed++ < 20)
        fprintf(stderr, "rank %d: %s %s op %d count %zu: %s\n", g_rank, what, mc_dtype_name(dtype),
                (int)op, count, why);
}

static void *host_buf(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(p, 0xa5, bytes);
    return p;
}

static void cuda_must(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, cudaGetErrorString(e));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* Device memory holding host's bytes (NULL host: poisoned with 0xa5), written when this
 * returns: cudaMemcpy from pageable memory may return before its DMA ends and cudaMemset
 * is asynchronous, both on the legacy stream, which the test's non-blocking stream does
 * not wait for. */
static void *dev_buf(const void *host, size_t bytes)
{
    void *d = NULL;
    cuda_must(cudaMalloc(&d, bytes ? bytes : 1), "cudaMalloc");
    if (host != NULL)
        cuda_must(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (to device)");
    else
        cuda_must(cudaMemset(d, 0xa5, bytes ? bytes : 1), "cudaMemset");
    cuda_must(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after the upload)");
    return d;
}

/* The stream of the next call, and the wait for it before the result is read. */
static void *next_stream(void)
{
    g_default_stream = !g_default_stream;
    return g_default_stream ? NULL : (void *)g_stream;
}

static void *to_host(const void *d, size_t bytes, void *stream)
{
    cuda_must(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
    void *h = host_buf(bytes);
    if (bytes > 0)
        cuda_must(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
    return h;
}

static bool call_ok(comm_status_t st, const char *what, comm_dtype_t dtype, comm_op_t op,
                    size_t count)
{
    if (st == COMM_OK)
        return true;
    char why[600];
    snprintf(why, sizeof(why), "%s: %s", comm_status_string(st), comm_last_error(g_comm));
    fail(what, dtype, op, count, why);
    return false;
}

static void check_reduced(const char *what, const void *out, size_t n, size_t first, uint64_t seed,
                          comm_dtype_t dtype, comm_op_t op)
{
    char why[128];
    if (mc_first_wrong(out, n, first, seed, g_size, dtype, op, why, sizeof(why)))
        fail(what, dtype, op, n, why);
}

static void same_bits(const char *what, const void *out, size_t bytes, comm_dtype_t dtype,
                      comm_op_t op, size_t count)
{
    if (!mc_same_everywhere(mc_hash(out, bytes)))
        fail(what, dtype, op, count, "ranks hold different bits");
}

/* Rank r's input of case seed from element first, n elements, in host memory. */
static void *input(size_t n, uint64_t seed, int r, comm_dtype_t dt, comm_op_t op, size_t first)
{
    void *h = host_buf(n * comm_dtype_size(dt));
    mc_fill(h, n, seed, r, dt, op, first);
    return h;
}

/* A sum plus this rank's own addend (a residual, ac == n, or a bias row, ac divides n):
 * every element against the float64 sum plus the addend, rounded once. */
static void t_allreduce_add(comm_dtype_t dt, size_t n, size_t ac, uint64_t seed, bool in_place)
{
    size_t es = comm_dtype_size(dt);
    void *hin = input(n, seed, g_rank, dt, COMM_SUM, 0);
    void *hadd = input(ac, seed + 1000003, g_rank, dt, COMM_SUM, 0);
    void *send = dev_buf(hin, n * es), *recv = in_place ? send : dev_buf(NULL, n * es);
    void *add = dev_buf(hadd, ac * es);
    void *s = next_stream();
    comm_status_t st = comm_allreduce_add(g_comm, send, recv, add, ac, n, dt, s);
    void *out = to_host(recv, n * es, s);
    char why[128];
    if (call_ok(st, "allreduce_add", dt, COMM_SUM, n) &&
        mc_first_wrong_add(out, hadd, n, ac, seed, g_size, dt, why, sizeof(why)))
        fail("allreduce_add", dt, COMM_SUM, n, why);
    free(out);
    free(hadd);
    free(hin);
    cudaFree(add);
    if (!in_place)
        cudaFree(recv);
    cudaFree(send);
}

static void t_allreduce(comm_dtype_t dt, comm_op_t op, size_t n, uint64_t seed, bool in_place)
{
    size_t es = comm_dtype_size(dt);
    void *hin = input(n, seed, g_rank, dt, op, 0);
    void *send = dev_buf(hin, n * es), *recv = in_place ? send : dev_buf(NULL, n * es);
    void *s = next_stream();
    comm_status_t st = comm_allreduce(g_comm, send, recv, n, dt, op, s);
    void *out = to_host(recv, n * es, s);
    char why[160];
    if (call_ok(st, "allreduce", dt, op, n)) {
        if (g_direct && dt == COMM_F32 && op == COMM_SUM && n * es >= (1u << 20)) {
            if (mc_first_wrong_bf16_wire(out, n, seed, g_size, why, sizeof(why)))
                fail("allreduce", dt, op, n, why);
        } else {
            check_reduced("allreduce", out, n, 0, seed, dt, op);
        }
    }
    same_bits("allreduce", out, n * es, dt, op, n);
    free(out);
    free(hin);
    if (!in_place)
        cudaFree(recv);
    cudaFree(send);
}

static void t_reduce(comm_dtype_t dt, comm_op_t op, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt);
    int root = (int)(seed % (uint64_t)g_size);
    void *hin = input(n, seed, g_rank, dt, op, 0);
    void *send = dev_buf(hin, n * es), *recv = g_rank == root ? dev_buf(NULL, n * es) : NULL;
    void *s = next_stream();
    comm_status_t st = comm_reduce(g_comm, send, recv, n, dt, op, root, s);
    cuda_must(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
    if (call_ok(st, "reduce", dt, op, n) && recv != NULL) {
        void *out = to_host(recv, n * es, s);
        check_reduced("reduce", out, n, 0, seed, dt, op);
        free(out);
    }
    free(hin);
    cudaFree(recv);
    cudaFree(send);
}

static void t_reduce_scatter(comm_dtype_t dt, comm_op_t op, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt), all = n * (size_t)g_size;
    void *hin = input(all, seed, g_rank, dt, op, 0);
    void *send = dev_buf(hin, all * es), *recv = dev_buf(NULL, n * es);
    void *s = next_stream();
    comm_status_t st = comm_reduce_scatter(g_comm, send, recv, n, dt, op, s);
    void *out = to_host(recv, n * es, s);
    if (call_ok(st, "reduce_scatter", dt, op, n))
        check_reduced("reduce_scatter", out, n, (size_t)g_rank * n, seed, dt, op);
    free(out);
    free(hin);
    cudaFree(recv);
    cudaFree(send);
}

static bool block_is(const void *got, size_t n, uint64_t seed, int r, comm_dtype_t dt, size_t first)
{
    void *want = input(n, seed, r, dt, COMM_SUM, first);
    bool ok = memcmp(got, want, n * comm_dtype_size(dt)) == 0;
    free(want);
    return ok;
}

static void t_broadcast(comm_dtype_t dt, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt);
    int root = (int)(seed % (uint64_t)g_size);
    void *hin = input(n, seed, root, dt, COMM_SUM, 0);
    void *send = g_rank == root ? dev_buf(hin, n * es) : NULL, *recv = dev_buf(NULL, n * es);
    void *s = next_stream();
    comm_status_t st = comm_broadcast(g_comm, send, recv, n, dt, root, s);
    void *out = to_host(recv, n * es, s);
    if (call_ok(st, "broadcast", dt, COMM_SUM, n) && memcmp(out, hin, n * es) != 0)
        fail("broadcast", dt, COMM_SUM, n, "wrong data");
    same_bits("broadcast", out, n * es, dt, COMM_SUM, n);
    free(out);
    free(hin);
    cudaFree(recv);
    cudaFree(send);
}

static void t_allgather(comm_dtype_t dt, size_t n, uint64_t seed, bool in_place)
{
    size_t es = comm_dtype_size(dt), all = (size_t)g_size * n;
    void *hin = input(n, seed, g_rank, dt, COMM_SUM, 0);
    char *recv = dev_buf(NULL, all * es), *send;
    if (in_place) {
        send = recv + (size_t)g_rank * n * es;
        if (n > 0)
            cuda_must(cudaMemcpy(send, hin, n * es, cudaMemcpyHostToDevice), "cudaMemcpy");
        cuda_must(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after the upload)");
    } else {
        send = dev_buf(hin, n * es);
    }
    void *s = next_stream();
    comm_status_t st = comm_allgather(g_comm, send, recv, n, dt, s);
    void *out = to_host(recv, all * es, s);
    if (call_ok(st, "allgather", dt, COMM_SUM, n))
        for (int r = 0; r < g_size; r++)
            if (!block_is((char *)out + (size_t)r * n * es, n, seed, r, dt, 0)) {
                fail("allgather", dt, COMM_SUM, n, "a rank's block is wrong");
                break;
            }
    same_bits("allgather", out, all * es, dt, COMM_SUM, n);
    free(out);
    free(hin);
    if (!in_place)
        cudaFree(send);
    cudaFree(recv);
}

static void t_alltoall(comm_dtype_t dt, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt), all = (size_t)g_size * n;
    void *hin = input(all, seed, g_rank, dt, COMM_SUM, 0);
    void *send = dev_buf(hin, all * es), *recv = dev_buf(NULL, all * es);
    void *s = next_stream();
    comm_status_t st = comm_alltoall(g_comm, send, recv, n, dt, s);
    void *out = to_host(recv, all * es, s);
    if (call_ok(st, "alltoall", dt, COMM_SUM, n))
        for (int r = 0; r < g_size; r++)
            if (!block_is((char *)out + (size_t)r * n * es, n, seed, r, dt, (size_t)g_rank * n)) {
                fail("alltoall", dt, COMM_SUM, n, "a rank's block is wrong");
                break;
            }
    free(out);
    free(hin);
    cudaFree(recv);
    cudaFree(send);
}

static comm_t *fresh(comm_device_t dev, int device_index, comm_status_t *st)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.device = dev;
    cfg.device_index = device_index;
    cfg.timeout_ms = 30000; /* process ranks time-slice one GPU: calls are slow */
    comm_t *c = NULL;
    *st = comm_init_mpi(&c, MPI_COMM_WORLD, &cfg);
    return c;
}

static void expect(const char *what, comm_status_t got, comm_status_t want, const comm_t *c)
{
    if (got != want) {
        char why[700];
        snprintf(why, sizeof(why), "got %s, expected %s: %s", comm_status_string(got),
                 comm_status_string(want), comm_last_error(c));
        fail(what, COMM_F32, COMM_SUM, 0, why);
    }
}

/*
 * A mismatched call on g_stream: MISMATCH on every rank of the hierarchical communicator.
 * The host's CUDA communicator (one host) may return at the enqueue, as on one host
 * without MPI: the device finds the mismatch and the next call says it (MISMATCH, or
 * PEER where a peer said it first; test_cuda_coll's rule).  Some rank says MISMATCH.
 */
static void expect_mismatch(const char *what, comm_status_t st, comm_t *c)
{
    if (g_direct && st == COMM_OK) {
        cuda_must(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize (after a mismatch)");
        st = comm_barrier(c);
        if (st != COMM_ERR_MISMATCH && st != COMM_ERR_PEER)
            expect(what, st, COMM_ERR_MISMATCH, c);
    } else {
        expect(what, st, COMM_ERR_MISMATCH, c);
    }
    int said = st == COMM_ERR_MISMATCH;
    MPI_Allreduce(MPI_IN_PLACE, &said, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (said == 0)
        fail(what, COMM_F32, COMM_SUM, 0, "no rank returned COMM_ERR_MISMATCH");
}

/* What needs no GPU: the arguments comm_init_mpi refuses, the same way on every rank. */
static void t_refusals(void)
{
    comm_status_t st;
    /* Rank 0 asks for CUDA, the others for the host. */
    comm_t *c = fresh(g_rank == 0 ? COMM_DEVICE_CUDA : COMM_DEVICE_HOST, -1, &st);
    expect("different devices", st, COMM_ERR_INVALID, NULL);
    if (c != NULL) {
        fail("different devices", COMM_F32, COMM_SUM, 0, "*comm was written");
        comm_destroy(c);
    }
    c = fresh(COMM_DEVICE_HEXAGON, -1, &st);
    expect("hexagon buffers", st, COMM_ERR_UNSUPPORTED, NULL);
    if (c != NULL)
        comm_destroy(c);
    c = fresh(COMM_DEVICE_CUDA, g_rank == 0 ? -5 : -1, &st);
    expect("a bad device_index on rank 0", st, g_rank == 0 ? COMM_ERR_INVALID : COMM_ERR_PEER,
           NULL);
    if (c != NULL)
        comm_destroy(c);
}

/* No GPU: CUDA fails alike everywhere, and a host communicator works after it. */
static void t_no_gpu(void)
{
    comm_status_t st;
    comm_t *c = fresh(COMM_DEVICE_CUDA, -1, &st);
    comm_status_t lo = st, hi = st;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (st == COMM_OK || c != NULL)
        fail("CUDA without a GPU", COMM_F32, COMM_SUM, 0, "comm_init_mpi succeeded");
    if (lo != hi)
        fail("CUDA without a GPU", COMM_F32, COMM_SUM, 0, "the ranks returned different statuses");
    if (c != NULL)
        comm_destroy(c);
    c = fresh(COMM_DEVICE_HOST, -1, &st);
    float x = 1, y = 0;
    if (st != COMM_OK || comm_allreduce(c, &x, &y, 1, COMM_F32, COMM_SUM, NULL) != COMM_OK ||
        y != (float)g_size)
        fail("a host communicator after it", COMM_F32, COMM_SUM, 1, comm_last_error(c));
    if (c != NULL)
        comm_destroy(c);
}

/* Several hosts: rank 1 calls on a stream being captured into a graph, which the
 * hierarchical communicator refuses (INVALID there, PEER elsewhere). */
static void t_capture_refused(void *send, void *recv, size_t n)
{
    comm_status_t st;
    comm_t *c = fresh(COMM_DEVICE_CUDA, -1, &st);
    cudaStream_t cs;
    cuda_must(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "cudaStreamCreate");
    if (g_rank == 1)
        cuda_must(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed), "BeginCapture");
    st = comm_allreduce(c, send, recv, n, COMM_F32, COMM_SUM, cs);
    if (g_rank == 1) {
        cudaGraph_t graph = NULL;
        cuda_must(cudaStreamEndCapture(cs, &graph), "cudaStreamEndCapture");
        if (graph != NULL)
            cudaGraphDestroy(graph);
    }
    expect("a call on a capturing stream (rank 1)", st,
           g_rank == 1 ? COMM_ERR_INVALID : COMM_ERR_PEER, c);
    cudaStreamSynchronize(cs);
    comm_destroy(c);
    cudaStreamDestroy(cs);
}

/* One host: every rank captures an allreduce into a graph and replays it twice, with
 * fresh inputs before each replay: every result checked (a replay is a fresh call). */
static void t_graph(void *send, void *recv, size_t n)
{
#if FAKE
    (void)send, (void)recv, (void)n;
#else
    comm_status_t st;
    size_t es = sizeof(float);
    comm_t *c = fresh(COMM_DEVICE_CUDA, -1, &st);
    if (st != COMM_OK) {
        fail("graph capture", COMM_F32, COMM_SUM, n, comm_last_error(NULL));
        return;
    }
    cudaStream_t cs;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cuda_must(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_must(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), "BeginCapture");
    st = comm_allreduce(c, send, recv, n, COMM_F32, COMM_SUM, cs);
    cuda_must(cudaStreamEndCapture(cs, &graph), "cudaStreamEndCapture");
    expect("an allreduce captured into a graph", st, COMM_OK, c);
    if (st == COMM_OK)
        cuda_must(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (uint64_t k = 0; k < 2 && st == COMM_OK; k++) {
        uint64_t seed = 9100 + k;
        void *hin = input(n, seed, g_rank, COMM_F32, COMM_SUM, 0);
        cuda_must(cudaMemcpy(send, hin, n * es, cudaMemcpyHostToDevice), "cudaMemcpy");
        cuda_must(cudaMemset(recv, 0xa5, n * es), "cudaMemset");
        cuda_must(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before the replay)");
        cuda_must(cudaGraphLaunch(exec, cs), "cudaGraphLaunch");
        void *out = to_host(recv, n * es, cs);
        check_reduced(k == 0 ? "graph replay 1" : "graph replay 2", out, n, 0, seed, COMM_F32,
                      COMM_SUM);
        same_bits("graph replay", out, n * es, COMM_F32, COMM_SUM, n);
        free(out);
        free(hin);
    }
    if (exec != NULL)
        cudaGraphExecDestroy(exec);
    if (graph != NULL)
        cudaGraphDestroy(graph);
    if (comm_destroy(c) != COMM_OK)
        fail("comm_destroy after the replays", COMM_F32, COMM_SUM, n, comm_last_error(NULL));
    cudaStreamDestroy(cs);
#endif
}

/* The failures of a CUDA communicator: a fresh one for each (a failure breaks it). */
static void t_failures(void)
{
    comm_status_t st;
    size_t n = 4099, es = sizeof(float);
    void *hin = input(n, 77, g_rank, COMM_F32, COMM_SUM, 0);
    void *send = dev_buf(hin, n * es), *recv = dev_buf(NULL, n * es);

    /* The last rank passes a different count: MISMATCH everywhere, recv untouched. */
    comm_t *c = fresh(COMM_DEVICE_CUDA, -1, &st);
    if (st != COMM_OK) {
        fail("failures", COMM_F32, COMM_SUM, 0, comm_last_error(NULL));
        goto out;
    }
    st = comm_allreduce(c, send, recv, g_rank == g_size - 1 ? n - 1 : n, COMM_F32, COMM_SUM,
                        g_stream);
    expect_mismatch("a count mismatch across hosts", st, c);
    void *out = to_host(recv, n * es, g_stream);
    for (size_t i = 0; i < n * es; i++)
        if (((unsigned char *)out)[i] != 0xa5) {
            fail("a count mismatch across hosts", COMM_F32, COMM_SUM, n, "recvbuf was written");
            break;
        }
    free(out);
    st = comm_allreduce(c, send, recv, n, COMM_F32, COMM_SUM, g_stream);
    if (st == COMM_OK)
        fail("after a mismatch", COMM_F32, COMM_SUM, n, "the communicator still works");
    comm_destroy(c);

    /* Rank 0 aborts before a call. */
    c = fresh(COMM_DEVICE_CUDA, -1, &st);
    if (g_rank == 0)
        comm_abort(c);
    st = comm_allreduce(c, send, recv, n, COMM_F32, COMM_SUM, g_stream);
    if (g_direct && g_rank != 0 && st == COMM_OK) {
        /* Enqueued before this rank saw the abort: the device sees it, the next call says. */
        cuda_must(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize (after an abort)");
        st = comm_barrier(c);
    }
    expect("comm_abort before a call", st, g_rank == 0 ? COMM_ERR_ABORTED : COMM_ERR_PEER, c);
    cudaStreamSynchronize(g_stream);
    comm_destroy(c);

    /* comm_allreduce_add on one rank, comm_allreduce on the others: MISMATCH everywhere
     * (the addend is part of the call). */
    c = fresh(COMM_DEVICE_CUDA, -1, &st);
    if (g_rank == 0)
        st = comm_allreduce_add(c, send, recv, send, n, n, COMM_F32, g_stream);
    else
        st = comm_allreduce(c, send, recv, n, COMM_F32, COMM_SUM, g_stream);
    expect_mismatch("comm_allreduce_add against comm_allreduce", st, c);
    cudaStreamSynchronize(g_stream);
    comm_destroy(c);

    if (g_direct)
        t_graph(send, recv, n);
    else
        t_capture_refused(send, recv, n);
out:
    free(hin);
    cudaFree(recv);
    cudaFree(send);
}

/* Rank r's element-wise result of one reduction (kind: 0 allreduce, 1 reduce to root 0,
 * 2 reduce_scatter, 3 allreduce_add of a residual) of n elements (reduce_scatter: n
 * a rank) on comm c, from host input hin; device buffers when dev.  NULL where this rank
 * gets no result (reduce off the root); *st the call's status. */
static void *wire_call(comm_t *c, bool dev, int kind, const void *hin, const void *hadd,
                       comm_dtype_t dt, comm_op_t op, size_t n, comm_status_t *st)
{
    size_t es = comm_dtype_size(dt), in_n = kind == 2 ? n * (size_t)g_size : n;
    bool gets = kind != 1 || g_rank == 0;
    void *s = dev ? next_stream() : NULL;
    void *send = dev ? dev_buf(hin, in_n * es) : (void *)hin;
    void *recv = !gets ? NULL : dev ? dev_buf(NULL, n * es) : host_buf(n * es);
    void *add = kind == 3 ? (dev ? dev_buf(hadd, n * es) : (void *)hadd) : NULL;
    *st = kind == 0   ? comm_allreduce(c, send, recv, n, dt, op, s)
          : kind == 1 ? comm_reduce(c, send, recv, n, dt, op, 0, s)
          : kind == 2 ? comm_reduce_scatter(c, send, recv, n, dt, op, s)
                      : comm_allreduce_add(c, send, recv, add, n, n, dt, s);
    void *out = recv;
    if (dev) {
        out = gets ? to_host(recv, n * es, s) : NULL;
        if (!gets)
            cuda_must(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
        cudaFree(send);
        cudaFree(recv);
        cudaFree(add);
    }
    return out;
}

/*
 * ARCOMM_WIRE=int8 or fp8 with ARCOMM_WIRE_THRESHOLD=0 (tests mpi-cuda*-wire-*): the
 * hosts' partial sums of CUDA buffers travel in the codec as those of host buffers do, so
 * every reduction of CUDA buffers (allreduce, reduce, reduce_scatter, allreduce_add; f32,
 * f16, bf16; sum and avg) gives the bits a host communicator's gives for the same inputs
 * (whose codec arithmetic tests wire-mpi-* check against a model of the formats and a
 * float64 bound), on every rank; and somewhere an f32 sum differs from the full-width
 * reference, or the codec never ran.
 */
static void t_wire(uint64_t seed)
{
    comm_status_t st;
    comm_t *host = fresh(COMM_DEVICE_HOST, -1, &st);
    if (st != COMM_OK) {
        fail("comm_init_mpi (host, for the wire reference)", COMM_F32, COMM_SUM, 0,
             comm_last_error(NULL));
        return;
    }
    static const comm_dtype_t dts[] = {COMM_F32, COMM_F16, COMM_BF16};
    static const comm_op_t ops[] = {COMM_SUM, COMM_AVG};
    static const char *const kinds[] = {"allreduce", "reduce", "reduce_scatter", "allreduce_add"};
    /* The last, allreduce of f32 sums only: more than 16 chunks of 1 MiB, so the leader's
     * chunks are n / 16 elements, rounded to whole blocks. */
    const size_t counts[] = {1, 97, 64 * 37 + 5, BIG / (size_t)g_size, 16 * 262144 + 1000};
    const size_t ncounts = sizeof(counts) / sizeof(counts[0]);
    bool narrowed = false;
    for (size_t d = 0; d < 3; d++)
        for (size_t o = 0; o < 2; o++)
            for (int kind = 0; kind < 4; kind++)
                for (size_t k = 0; k < ncounts; k++) {
                    if (k + 1 == ncounts && (kind != 0 || d != 0 || o != 0))
                        continue;
                    comm_dtype_t dt = dts[d];
                    comm_op_t op = kind == 3 ? COMM_SUM : ops[o];
                    if (kind == 3 && o == 1)
                        continue;
                    size_t n = counts[k], es = comm_dtype_size(dt);
                    size_t in_n = kind == 2 ? n * (size_t)g_size : n;
                    void *hin = input(in_n, seed, g_rank, dt, op, 0);
                    void *hadd = input(n, seed + 7, g_rank, dt, op, 0);
                    comm_status_t sh, sc;
                    void *want = wire_call(host, false, kind, hin, hadd, dt, op, n, &sh);
                    void *got = wire_call(g_comm, true, kind, hin, hadd, dt, op, n, &sc);
                    char why[700];
                    if (sh != COMM_OK || sc != COMM_OK) {
                        snprintf(why, sizeof(why), "%s: %s",
                                 sh != COMM_OK ? "the host reference" : "CUDA buffers",
                                 comm_last_error(sh != COMM_OK ? host : g_comm));
                        fail(kinds[kind], dt, op, n, why);
                    } else if (got != NULL) {
                        size_t i = 0;
                        while (i < n &&
                               memcmp((char *)got + i * es, (char *)want + i * es, es) == 0)
                            i++;
                        if (i < n) {
                            snprintf(why, sizeof(why),
                                     "element %zu: not the host communicator's bits "
                                     "(got %.9g, host %.9g)",
                                     i, mc_load(got, i, dt), mc_load(want, i, dt));
                            fail(kinds[kind], dt, op, n, why);
                        }
                        if (kind == 0 && dt == COMM_F32 && op == COMM_SUM &&
                            mc_first_wrong(got, n, 0, seed, g_size, dt, op, why, sizeof(why)))
                            narrowed = true;
                    }
                    if (kind == 0) /* the others: a block a rank, a rank's own addend */
                        same_bits(kinds[kind], got, n * es, dt, op, n);
                    free(got);
                    free(want);
                    free(hadd);
                    free(hin);
                    seed++;
                }
    int any = narrowed;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any)
        fail("allreduce", COMM_F32, COMM_SUM, BIG,
             "every result is the full-width one: the codec never applied between hosts");
    comm_destroy(host);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mc_shm_begin();

    t_refusals();
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess)
        ngpu = 0;
    int min_gpu = ngpu;
    MPI_Allreduce(MPI_IN_PLACE, &min_gpu, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (min_gpu == 0) {
        t_no_gpu();
        int left = mc_shm_end(), failed = g_failed;
        MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &left, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (g_rank == 0)
            printf("%s: the checks without a GPU (%d failed, %d problems in /dev/shm); no GPU: "
                   "the CUDA collectives skipped\n",
                   failed + left ? "FAIL" : "ok", failed, left);
        MPI_Finalize();
        return failed + left ? 1 : SKIP;
    }

    cuda_must(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    g_direct = !FAKE && mc_one_host();
    comm_status_t st;
    g_comm = fresh(COMM_DEVICE_CUDA, -1, &st);
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init_mpi (CUDA): %s: %s\n", g_rank, comm_status_string(st),
                comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *name = comm_transport_name(g_comm);
    bool hier = strstr(name, "+mpi") != NULL;
    if (comm_rank(g_comm) != g_rank || comm_size(g_comm) != g_size || hier == g_direct ||
        (!FAKE && strstr(name, "cuda") == NULL))
        fail(g_direct ? "identity (one host: the host's CUDA communicator)"
                      : "identity (the hierarchical communicator)",
             COMM_F32, COMM_SUM, 0, name);
    if (g_rank == 0)
        printf("# %d ranks, %d GPUs visible to rank 0, transport %s\n", g_size, ngpu, name);
    const char *codec = getenv("ARCOMM_WIRE");
    if (codec != NULL && (strcmp(codec, "int8") == 0 || strcmp(codec, "fp8") == 0)) {
        /* The codec changes the reductions' bits: only its own checks run. */
        if (g_direct)
            fail("the wire test", COMM_F32, COMM_SUM, 0, "needs several hosts (one host here)");
        else
            t_wire(1);
        comm_destroy(g_comm);
        cudaStreamDestroy(g_stream);
        return mc_finish(g_failed);
    }

    static const comm_dtype_t types[] = {COMM_F32, COMM_F64, COMM_F16, COMM_BF16, COMM_I32,
                                         COMM_I64, COMM_I8,  COMM_U8,  COMM_U32,  COMM_U64};
    static const comm_op_t ops[] = {COMM_SUM, COMM_MAX, COMM_MIN, COMM_PROD};
    static const size_t counts[] = {1, 97};
    uint64_t seed = 1;
    for (size_t d = 0; d < sizeof(types) / sizeof(types[0]); d++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                t_allreduce(types[d], ops[o], counts[k], seed++, false);
                t_reduce(types[d], ops[o], counts[k], seed++);
                t_reduce_scatter(types[d], ops[o], counts[k], seed++);
            }
    static const comm_dtype_t floats[] = {COMM_F32, COMM_F64, COMM_F16, COMM_BF16};
    for (size_t d = 0; d < sizeof(floats) / sizeof(floats[0]); d++) {
        t_allreduce(floats[d], COMM_AVG, 97, seed++, false);
        t_reduce(floats[d], COMM_AVG, 97, seed++);
        t_reduce_scatter(floats[d], COMM_AVG, 97, seed++);
    }
    t_allreduce(COMM_F32, COMM_SUM, 0, seed++, false);
    t_reduce(COMM_F32, COMM_SUM, 0, seed++);
    t_reduce_scatter(COMM_F32, COMM_SUM, 0, seed++);
    t_allreduce(COMM_F32, COMM_SUM, 97, seed++, true);
    static const comm_dtype_t moved[] = {COMM_F32, COMM_BF16, COMM_I8, COMM_F64};
    static const size_t move_counts[] = {0, 1, 97};
    for (size_t d = 0; d < sizeof(moved) / sizeof(moved[0]); d++)
        for (size_t k = 0; k < sizeof(move_counts) / sizeof(move_counts[0]); k++) {
            t_broadcast(moved[d], move_counts[k], seed++);
            t_allgather(moved[d], move_counts[k], seed++, false);
            t_alltoall(moved[d], move_counts[k], seed++);
        }
    t_allgather(COMM_F32, 97, seed++, true);
    static const comm_dtype_t add_types[] = {COMM_F32, COMM_BF16, COMM_F16, COMM_F64, COMM_I32};
    for (size_t d = 0; d < sizeof(add_types) / sizeof(add_types[0]); d++) {
        t_allreduce_add(add_types[d], 97, 97, seed++, false);
        t_allreduce_add(add_types[d], 96, 8, seed++, true);
        t_allreduce_add(add_types[d], 0, 1, seed++, false);
    }
    if (comm_barrier(g_comm) != COMM_OK)
        fail("barrier", COMM_U8, COMM_SUM, 0, comm_last_error(g_comm));
    void *mem = NULL; /* as on one host: CUDA buffers are the caller's cudaMalloc */
    if (comm_mem_alloc(g_comm, 64, &mem) != COMM_ERR_UNSUPPORTED)
        fail("comm_mem_alloc", COMM_U8, COMM_SUM, 64, "expected COMM_ERR_UNSUPPORTED");

    /* About a million elements: the segmented MPI steps, buffers that grow. */
    t_allreduce(COMM_F32, COMM_SUM, BIG, seed++, false);
    t_allreduce(COMM_BF16, COMM_SUM, BIG, seed++, false);
    t_allreduce(COMM_I32, COMM_SUM, BIG, seed++, true);
    t_allreduce_add(COMM_BF16, BIG - 1, 4, seed++, false);
    t_reduce(COMM_F64, COMM_SUM, BIG, seed++);
    t_reduce_scatter(COMM_F32, COMM_SUM, BIG / (size_t)g_size, seed++);
    t_broadcast(COMM_F64, BIG, seed++);
    t_allgather(COMM_I32, BIG / (size_t)g_size, seed++, false);
    t_alltoall(COMM_F32, BIG / (size_t)g_size, seed++);

    /* A dup (comm_split's handshakes and join over MPI where there are several hosts):
     * the same ranks, CUDA buffers, the same transport; the parent's calls after it. */
    comm_t *parent = g_comm, *dup = NULL;
    st = comm_dup(parent, &dup);
    if (st != COMM_OK || strcmp(comm_transport_name(dup), name) != 0) {
        fail("comm_dup", COMM_F32, COMM_SUM, 0,
             st != COMM_OK ? comm_last_error(parent) : comm_transport_name(dup));
    } else {
        g_comm = dup;
        t_allreduce(COMM_F32, COMM_SUM, 97, seed++, false);
        t_allgather(COMM_BF16, 97, seed++, false);
        g_comm = parent;
        comm_destroy(dup);
        t_allreduce(COMM_F32, COMM_SUM, 97, seed++, false);
    }
    if (comm_destroy(g_comm) != COMM_OK)
        fail("comm_destroy", COMM_F32, COMM_SUM, 0, comm_last_error(NULL));

    if (g_size > 1)
        t_failures();
    cudaStreamDestroy(g_stream);
    return mc_finish(g_failed);
}
