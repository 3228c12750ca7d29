/* SPDX-License-Identifier: MIT */
/*
 * One rank's part of test_cuda_coll (the runs are in test_cuda_coll.c, the cases and
 * what a rank must hold after one in test_cuda_coll_cases.c).
 *
 * Before each case the rank poisons every output buffer (and a guard past it); after it,
 * it checks every element it holds against the expectation.  What a call must not write
 * (the guard, a non-root's recvbuf, the other blocks of an in-place reduce_scatter) must
 * still hold what it held.  Also a rank's part of the failures: integer AVG
 * (COMM_ERR_UNSUPPORTED), the mismatch scenarios (ranks that disagree on the collective
 * or the root) and a call no peer makes (ended at the timeout, or at comm_abort).
 */
#include "test_cuda_coll.h"
#include "arcomm.h"
#include "transport_check.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- one rank's part of a case ---- */

size_t cc_cap_for(const struct ccase *cases, size_t n, int nranks)
{
    size_t cap = 4096;
    for (size_t i = 0; i < n; i++) {
        size_t e = cc_send_elems(&cases[i], nranks);
        if (cc_recv_elems(&cases[i], nranks) > e)
            e = cc_recv_elems(&cases[i], nranks);
        size_t b = (e + cases[i].offset) * cc_dsize(cases[i].dtype) + GUARD;
        if (b > cap)
            cap = b;
    }
    return (cap + 4095) / 4096 * 4096;
}

void cc_rank_alloc(struct rank *r, size_t cap)
{
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    cuda_ok(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), "stream");
    r->cap = cap;
    cuda_ok(cudaMalloc((void **)&r->da, cap), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&r->db, cap), "cudaMalloc");
    r->host = malloc(cap);
}

void cc_rank_free(struct rank *r)
{
    cudaSetDevice(r->device);
    cudaFree(r->da);
    cudaFree(r->db);
    cudaStreamDestroy(r->stream);
    free(r->host);
}

comm_t *cc_init_comm(int rank, int nranks, int device, const char *id, int timeout_ms)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = nranks;
    cfg.rank = rank;
    snprintf(cfg.id.str, sizeof(cfg.id.str), "%s", id);
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = device;
    cfg.timeout_ms = timeout_ms;
    comm_t *c = NULL;
    comm_status_t st = comm_init(&c, &cfg);
    if (st != COMM_OK) {
        fprintf(stderr, "FAIL: rank %d comm_init: %s: %s\n", rank, comm_status_string(st),
                comm_last_error(NULL));
        exit(1);
    }
    transport_check(c, rank);
    return c;
}

/* Poisons both buffers, uploads this rank's input where the case wants it. */
void cc_stage(struct rank *r, const struct ccase *k)
{
    int n = r->nranks, me = r->rank;
    size_t es = cc_dsize(k->dtype), off = k->offset * es;
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    cuda_ok(cudaMemset(r->da, 0xff, r->cap), "poison"); /* NaN in every float type */
    cuda_ok(cudaMemset(r->db, 0xff, r->cap), "poison");
    r->input = k->count ? cc_make_input(k, n, me) : NULL;
    size_t sbytes = cc_send_elems(k, n) * es;
    r->send = r->da + off;
    r->recv = r->db + off;
    if (k->inplace) {
        switch (k->kind) {
        case K_ALLGATHER:
            r->send = r->db + off + (size_t)me * k->count * es;
            break;
        case K_REDUCE_SCATTER:
            r->send = r->db + off;
            r->recv = r->db + off + (size_t)me * k->count * es;
            break;
        case K_BROADCAST:
        case K_REDUCE:
            if (me == k->root)
                r->send = r->recv;
            break;
        default:
            r->send = r->recv;
            break;
        }
    }
    if (k->count)
        cuda_ok(cudaMemcpy(r->send, r->input, sbytes, cudaMemcpyHostToDevice), "upload");
    if (k->null_bufs && k->kind == K_BROADCAST && me != k->root)
        r->send = NULL;
    if (k->null_bufs && k->kind == K_REDUCE && me != k->root)
        r->recv = NULL;
    if (k->count == 0)
        r->send = r->recv = NULL;
    /* cudaMemcpy from pageable memory may return before its DMA ends, and the legacy
     * stream does not order the non-blocking stream the collective runs on. */
    cuda_ok(cudaStreamSynchronize(0), "waiting for the uploads");
}

comm_status_t cc_enqueue(struct rank *r, const struct ccase *k)
{
    void *s = r->stream;
    switch (k->kind) {
    case K_ALLREDUCE:
        return comm_allreduce(r->comm, r->send, r->recv, k->count, k->dtype, k->op, s);
    case K_BROADCAST:
        return comm_broadcast(r->comm, r->send, r->recv, k->count, k->dtype, k->root, s);
    case K_REDUCE:
        return comm_reduce(r->comm, r->send, r->recv, k->count, k->dtype, k->op, k->root, s);
    case K_ALLGATHER:
        return comm_allgather(r->comm, r->send, r->recv, k->count, k->dtype, s);
    case K_REDUCE_SCATTER:
        return comm_reduce_scatter(r->comm, r->send, r->recv, k->count, k->dtype, k->op, s);
    case K_ALLTOALL:
        return comm_alltoall(r->comm, r->send, r->recv, k->count, k->dtype, s);
    }
    return COMM_ERR_INVALID;
}

static bool all_poison(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xff)
            return false;
    return true;
}

/*
 * Waits for rank r's call, downloads and checks everything; returns the wrong elements
 * (and writes the hash of its output).
 */
long cc_check(struct rank *r, const struct ccase *k, int config, uint64_t *hash)
{
    int n = r->nranks, me = r->rank;
    size_t es = cc_dsize(k->dtype), off = k->offset * es;
    size_t rbytes = cc_recv_elems(k, n) * es;
    char what[160];
    cc_describe(k, what, sizeof(what));
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    cuda_ok(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
    /* All of db from the output's start (in-place reduce_scatter: from its sendbuf's, the
     * output is block me): output, guard, the rest. */
    size_t span = r->cap - off;
    cuda_ok(cudaMemcpy(r->host, r->db + off, span, cudaMemcpyDeviceToHost), "download");
    const uint8_t *out = r->host;
    if (k->kind == K_REDUCE_SCATTER && k->inplace)
        out = r->host + (size_t)me * k->count * es;
    size_t out_end = (size_t)(out - r->host) + rbytes;
    *hash = 0xcbf29ce484222325ull;
    long wrong = 0;

    if (k->count == 0) {
        CHECK(all_poison(r->host, span), "rank %d: %s wrote memory", me, what);
        free(r->input);
        return 0;
    }
    void *in[MAX_RANKS];
    for (int p = 0; p < n; p++)
        in[p] = p == me ? r->input : cc_make_input(k, n, p);
    double *ref, *bound;
    uint8_t *want = cc_expected(k, n, me, config, in, &ref, &bound);
    if (want == NULL) {
        /* A reduce's non-root: its recvbuf (when it passed one) is not written. */
        CHECK(all_poison(r->host, span), "rank %d: %s wrote the recvbuf of a non-root", me, what);
    } else {
        for (size_t i = 0; i < cc_recv_elems(k, n); i++) {
            bool bits_ok = memcmp(out + i * es, want + i * es, es) == 0;
            bool ref_ok = true;
            if (ref != NULL) {
                double v = cc_as_double(out, i, k->dtype);
                ref_ok = fabs(v - ref[i]) <= bound[i];
            }
            if (bits_ok && ref_ok)
                continue;
            if (wrong++ < 3) {
                uint64_t got = 0, exp = 0;
                memcpy(&got, out + i * es, es);
                memcpy(&exp, want + i * es, es);
                fprintf(stderr, "  rank %d %s: [%zu] = 0x%llx (%.9g), expected 0x%llx (%.9g)%s%s\n",
                        me, what, i, (unsigned long long)got,
                        cc_is_float(k->dtype) ? cc_as_double(out, i, k->dtype) : 0.0,
                        (unsigned long long)exp,
                        cc_is_float(k->dtype) ? cc_as_double(want, i, k->dtype) : 0.0,
                        bits_ok ? "" : " (bits differ)",
                        ref_ok ? "" : " (outside the float64 bound)");
            }
        }
        for (size_t i = 0; i < rbytes; i++)
            *hash = (*hash ^ out[i]) * 0x100000001b3ull;
        /* In place, the other blocks of sendbuf keep the input. */
        size_t used = out_end;
        if (k->kind == K_REDUCE_SCATTER && k->inplace) {
            size_t blk = k->count * es;
            for (int p = 0; p < n; p++)
                CHECK(p == me || memcmp(r->host + (size_t)p * blk,
                                        (const uint8_t *)r->input + (size_t)p * blk, blk) == 0,
                      "rank %d: %s changed block %d of its sendbuf", me, what, p);
            used = (size_t)n * blk;
        }
        /* Past the output (the guard and the rest of the buffer): the poison. */
        CHECK(all_poison(r->host + used, span - used), "rank %d: %s wrote past its recvbuf", me,
              what);
    }
    CHECK(wrong == 0, "rank %d: %s: %ld wrong elements", me, what, wrong);
    for (int p = 0; p < n; p++)
        free(in[p]);
    free(want);
    free(ref);
    free(bound);
    return wrong;
}

/* AVG of an integer type: COMM_ERR_UNSUPPORTED on every rank, and the communicator stays
 * usable (the cases run on it next). */
void cc_check_unsupported(struct rank *r)
{
    comm_status_t st = comm_allreduce(r->comm, r->db, r->db, 16, COMM_I32, COMM_AVG, r->stream);
    CHECK(st == COMM_ERR_UNSUPPORTED, "rank %d: allreduce i32 avg returned %s (%s)", r->rank,
          comm_status_string(st), comm_last_error(r->comm));
    st = comm_reduce_scatter(r->comm, r->da, r->db, 16, COMM_U8, COMM_AVG, r->stream);
    CHECK(st == COMM_ERR_UNSUPPORTED, "rank %d: reduce_scatter u8 avg returned %s (%s)", r->rank,
          comm_status_string(st), comm_last_error(r->comm));
}

/* ---- mismatches: each scenario on a communicator of its own ---- */

/* Rank r's call in scenario s: the ranks disagree on the collective or the root. */
comm_status_t cc_mismatch_call(struct rank *r, int s)
{
    void *a = r->da, *b = r->db, *st = r->stream;
    comm_t *c = r->comm;
    bool first = r->rank == 0;
    switch (s) {
    case 0: /* broadcast against allgather, one chunk */
        return first ? comm_broadcast(c, a, b, 1000, COMM_F32, 0, st)
                     : comm_allgather(c, a, b, 1000, COMM_F32, st);
    case 1: /* broadcast from root 0 against from the last rank, many chunks */
        return comm_broadcast(c, a, b, 300007, COMM_F32, first ? 0 : r->nranks - 1, st);
    case 2: /* a kernel-path allreduce against a reduce */
        return first ? comm_allreduce(c, a, b, 1000, COMM_F32, COMM_SUM, st)
                     : comm_reduce(c, a, b, 1000, COMM_F32, COMM_SUM, 0, st);
    default: /* reduce_scatter against alltoall */
        return first ? comm_reduce_scatter(c, a, b, 65537, COMM_F32, COMM_SUM, st)
                     : comm_alltoall(c, a, b, 65537, COMM_F32, st);
    }
}

const char *const mismatch_names[N_MISMATCH] = {"broadcast vs allgather",
                                                "broadcast roots 0 vs last", "allreduce vs reduce",
                                                "reduce_scatter vs alltoall"};

/* After the mismatched call: the next call says why (MISMATCH, or PEER: a peer said it
 * first).  Returns the status. */
comm_status_t cc_mismatch_outcome(struct rank *r)
{
    cuda_ok(cudaSetDevice(r->device), "set");
    cuda_ok(cudaStreamSynchronize(r->stream), "sync after a mismatched call");
    comm_status_t st = comm_barrier(r->comm);
    CHECK(st == COMM_ERR_MISMATCH || st == COMM_ERR_PEER,
          "mismatch: rank %d's next call returned %s (%s)", r->rank, comm_status_string(st),
          comm_last_error(r->comm));
    return st;
}

uint64_t cc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- a call no peer makes: the GPU's wait ends at the timeout, or at comm_abort ---- */

struct abort_arg {
    comm_t *comm;
    int delay_ms;
};

static void *abort_later(void *arg)
{
    struct abort_arg *a = arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)a->delay_ms * 1000000};
    nanosleep(&ts, NULL);
    comm_abort(a->comm);
    return NULL;
}

const char *const lonely_names[N_LONELY] = {"allgather no peer makes (timeout)",
                                            "reduce no peer makes (comm_abort)"};
/* The communicator's timeout in scenario s. */
int cc_lonely_timeout_ms(int s)
{
    return s == 0 ? 1000 : 60000;
}

/*
 * Rank 0 makes a multi-chunk call that no peer makes: scenario 0 waits for its GPU to
 * give up at the timeout, scenario 1 aborts it after 200 ms; either way the stream is
 * free within seconds and the next call says why.  The peers wait (3 s, so that rank 0
 * fails first, deterministically), then their next call hears of rank 0's failure.
 * Returns whether this rank saw what it should.
 */
bool cc_lonely_call(struct rank *r, int s)
{
    int before = g_fail;
    cuda_ok(cudaSetDevice(r->device), "set");
    if (r->rank != 0) {
        struct timespec ts = {.tv_sec = 3, .tv_nsec = 0};
        nanosleep(&ts, NULL);
        comm_status_t st = comm_barrier(r->comm);
        CHECK(st == COMM_ERR_PEER, "%s: rank %d's next call returned %s (%s)", lonely_names[s],
              r->rank, comm_status_string(st), comm_last_error(r->comm));
        return g_fail == before;
    }
    uint64_t t0 = cc_now_ms();
    comm_status_t st = s == 0 ? comm_allgather(r->comm, r->da, r->db, 300007, COMM_F32, r->stream)
                              : comm_reduce(r->comm, r->da, r->db, 300007, COMM_F32, COMM_SUM,
                                            r->nranks - 1, r->stream);
    CHECK(st == COMM_OK, "%s: rank 0's enqueue returned %s (%s)", lonely_names[s],
          comm_status_string(st), comm_last_error(r->comm));
    pthread_t t;
    struct abort_arg a = {.comm = r->comm, .delay_ms = 200};
    if (s == 1)
        pthread_create(&t, NULL, abort_later, &a);
    cuda_ok(cudaStreamSynchronize(r->stream), "sync after a call no peer made");
    uint64_t took = cc_now_ms() - t0;
    if (s == 1)
        pthread_join(t, NULL);
    CHECK(took < 5000, "%s: rank 0's GPU waited %llu ms", lonely_names[s],
          (unsigned long long)took);
    st = comm_barrier(r->comm);
    const char *msg = comm_last_error(r->comm);
    comm_status_t want = s == 0 ? COMM_ERR_TIMEOUT : COMM_ERR_ABORTED;
    CHECK(st == want && (s != 0 || strstr(msg, "rank 1") != NULL),
          "%s: rank 0's next call returned %s (%s)", lonely_names[s], comm_status_string(st), msg);
    fprintf(stderr, "     %s: %llu ms, then %s: %s\n", lonely_names[s], (unsigned long long)took,
            comm_status_string(st), msg);
    return g_fail == before;
}
