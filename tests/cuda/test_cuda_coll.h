/* SPDX-License-Identifier: MIT */
/*
 * What the three files of test_cuda_coll share: test_cuda_coll.c (the runs and main),
 * test_cuda_coll_cases.c (the cases and what each rank must hold) and
 * test_cuda_coll_rank.c (one rank's part of a case and of each failure).
 */
#ifndef ARCOMM_TESTS_CUDA_TEST_CUDA_COLL_H
#define ARCOMM_TESTS_CUDA_TEST_CUDA_COLL_H

#include "arcomm.h"
#include "cuda_check.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The collectives beyond allreduce come from the runtime (runtime/collective.c): weak,
 * so that this program links (and says what is missing) against a library without them. */
#pragma weak comm_broadcast
#pragma weak comm_reduce
#pragma weak comm_allgather
#pragma weak comm_reduce_scatter
#pragma weak comm_alltoall

#define MAX_RANKS  8
#define MAX_CASES  256
#define GUARD      256 /* bytes past every output that no call may write */
#define N_MISMATCH 4   /* mismatch scenarios (communicators of their own) */
#define N_LONELY   2   /* a call no peer makes: timeout, abort (likewise) */
#define N_IDS      (1 + N_MISMATCH + N_LONELY)

/* Knob sets (cc_config_env in test_cuda_coll_cases.c). */
#define N_CONFIGS 3

/* ---- test_cuda_coll_cases.c ---- */

enum kind { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL };
extern const char *const kind_names[];

struct ccase {
    enum kind kind;
    comm_dtype_t dtype;
    comm_op_t op;
    size_t count; /* the API's per-rank count */
    int root;
    bool inplace;
    bool null_bufs; /* broadcast: non-roots pass sendbuf NULL; reduce: recvbuf NULL */
    size_t offset;  /* elements past a 256-byte aligned base (odd: unaligned) */
    uint64_t seed;
};

extern const char *const config_names[N_CONFIGS];

size_t cc_dsize(comm_dtype_t t);
bool cc_is_float(comm_dtype_t t);
size_t cc_send_elems(const struct ccase *k, int n);
size_t cc_recv_elems(const struct ccase *k, int n);
bool cc_same_everywhere(enum kind k);
void cc_config_env(int config);
size_t cc_make_cases(struct ccase *out, int nranks, uint64_t seed);
void cc_describe(const struct ccase *k, char *buf, size_t len);
void *cc_make_input(const struct ccase *k, int n, int p);
double cc_as_double(const void *b, size_t i, comm_dtype_t t);
void *cc_expected(const struct ccase *k, int n, int r, int config, void *const *in, double **ref,
                  double **bound);

/* ---- test_cuda_coll_rank.c ---- */

struct rank {
    int rank, nranks, device;
    comm_t *comm;
    cudaStream_t stream;
    uint8_t *da, *db; /* device buffers: sendbuf (out of place), recvbuf / in place */
    size_t cap;       /* bytes of each */
    uint8_t *host;    /* cap bytes */
    /* The current case. */
    void *send, *recv;
    void *input;    /* this rank's sendbuf contents */
    const char *id; /* thread ranks: the communicator to join */
};

extern const char *const mismatch_names[N_MISMATCH];
extern const char *const lonely_names[N_LONELY];

size_t cc_cap_for(const struct ccase *cases, size_t n, int nranks);
void cc_rank_alloc(struct rank *r, size_t cap);
void cc_rank_free(struct rank *r);
comm_t *cc_init_comm(int rank, int nranks, int device, const char *id, int timeout_ms);
void cc_stage(struct rank *r, const struct ccase *k);
comm_status_t cc_enqueue(struct rank *r, const struct ccase *k);
long cc_check(struct rank *r, const struct ccase *k, int config, uint64_t *hash);
void cc_check_unsupported(struct rank *r);
comm_status_t cc_mismatch_call(struct rank *r, int s);
comm_status_t cc_mismatch_outcome(struct rank *r);
uint64_t cc_now_ms(void);
int cc_lonely_timeout_ms(int s);
bool cc_lonely_call(struct rank *r, int s);

#endif /* ARCOMM_TESTS_CUDA_TEST_CUDA_COLL_H */
