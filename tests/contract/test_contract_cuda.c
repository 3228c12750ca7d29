/* SPDX-License-Identifier: MIT */
/*
 * The reproducibility contract on CUDA (docs/api.md, "Reproducible results"): process
 * ranks sharing GPU 0, and thread ranks on GPUs of their own (a CUDA communicator refuses
 * two thread ranks on one GPU; skipped with fewer GPUs than ranks), each path forced by
 * knobs (the kernel path at every size, the copy-engine path at every size and in small
 * chunks, the bf16 wire, the peer-to-peer transport, the int8 and fp8 wire on the
 * copy-engine path and on cuda-p2p's two-shot), allreduce, allreduce_add, reduce at every
 * root and reduce_scatter of device buffers, every element compared bit for bit with the
 * host's rank-order reference of contract_ref.c (with int8 or fp8, for the calls the codec
 * applies to: the rank-order f32 sum of every rank's host-encoded, host-decoded input,
 * contract_ref_cuda.c), and every rank's allreduce outputs with every other's.  Config
 * nccl makes the same calls through arcomm's NCCL face (ncclAllReduce, ncclReduce,
 * ncclReduceScatter on a communicator of ncclCommInitRank).  Skipped (77) without a GPU.
 */
#include "contract_ref.h"
#include "contract_ref_cuda.h"
#include "harness.h"

#include <cuda_runtime_api.h>
#ifdef ARCOMM_TEST_NCCL
#include "nccl.h"
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

struct ccase {
    comm_dtype_t dtype;
    comm_op_t op;
    bool big; /* also at the largest count */
};

static const struct ccase cases[] = {
    {COMM_F32, COMM_SUM, true},   {COMM_F32, COMM_AVG, false}, {COMM_F32, COMM_MAX, false},
    {COMM_F32, COMM_PROD, false}, {COMM_F16, COMM_SUM, false}, {COMM_BF16, COMM_SUM, true},
    {COMM_BF16, COMM_AVG, false}, {COMM_F64, COMM_SUM, false}, {COMM_I32, COMM_SUM, false},
    {COMM_U8, COMM_SUM, false},   {COMM_F16, COMM_AVG, false},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* Around the kernel path's sizes, past the copy threshold (1 MiB of f32 at 262144), many
 * chunks; the largest only for the cases marked big. */
static const size_t counts[] = {1, 7, 4099, 65537, 300007, 3145739};
#define NCOUNTS   (sizeof(counts) / sizeof(counts[0]))
#define BIG_COUNT 3145739

struct config {
    const char *name;
    const char *knobs[4][2]; /* name, value; NULL ends */
    bool narrow;             /* f32 sums travel as bf16 from the first byte */
    bool nccl;               /* through the NCCL face */
    const char *codec;       /* "int8", "fp8": allreduces it applies to travel in it */
};

static const struct config configs[] = {
    {.name = "default", .knobs = {{"ARCOMM_BF16_THRESHOLD", "off"}}},
    {.name = "kernel",
     .knobs = {{"ARCOMM_BF16_THRESHOLD", "off"}, {"ARCOMM_COPY_THRESHOLD", "off"}}},
    {.name = "copy", .knobs = {{"ARCOMM_BF16_THRESHOLD", "off"}, {"ARCOMM_COPY_THRESHOLD", "0"}}},
    {.name = "copy-chunks",
     .knobs = {{"ARCOMM_BF16_THRESHOLD", "off"},
               {"ARCOMM_COPY_THRESHOLD", "0"},
               {"ARCOMM_COPY_CHUNK_BYTES", "64K"}}},
    {.name = "bf16", .knobs = {{"ARCOMM_BF16_THRESHOLD", "0"}}, .narrow = true},
    {.name = "p2p", .knobs = {{"ARCOMM_BF16_THRESHOLD", "off"}, {"ARCOMM_TRANSPORT", "cuda-p2p"}}},
    {.name = "p2p-bf16",
     .knobs = {{"ARCOMM_BF16_THRESHOLD", "0"}, {"ARCOMM_TRANSPORT", "cuda-p2p"}},
     .narrow = true},
    {.name = "nccl", .knobs = {{"ARCOMM_BF16_THRESHOLD", "off"}}, .nccl = true},
    /* A block codec from the first byte on the large path from the first byte: the copy
     * engines, or cuda-p2p's two-shot. */
    {.name = "copy-int8",
     .knobs = {{"ARCOMM_WIRE", "int8"},
               {"ARCOMM_WIRE_THRESHOLD", "0"},
               {"ARCOMM_COPY_THRESHOLD", "0"}},
     .codec = "int8"},
    {.name = "copy-fp8",
     .knobs = {{"ARCOMM_WIRE", "fp8"},
               {"ARCOMM_WIRE_THRESHOLD", "0"},
               {"ARCOMM_COPY_THRESHOLD", "0"}},
     .codec = "fp8"},
    {.name = "p2p-int8",
     .knobs = {{"ARCOMM_WIRE", "int8"},
               {"ARCOMM_WIRE_THRESHOLD", "0"},
               {"ARCOMM_COPY_THRESHOLD", "0"},
               {"ARCOMM_TRANSPORT", "cuda-p2p"}},
     .codec = "int8"},
    {.name = "p2p-fp8",
     .knobs = {{"ARCOMM_WIRE", "fp8"},
               {"ARCOMM_WIRE_THRESHOLD", "0"},
               {"ARCOMM_COPY_THRESHOLD", "0"},
               {"ARCOMM_TRANSPORT", "cuda-p2p"}},
     .codec = "fp8"},
};
#define NCONFIGS (sizeof(configs) / sizeof(configs[0]))

struct run {
    const struct config *cfg;
    uint64_t seed;
    bool spread; /* thread ranks: rank r on GPU r (one GPU serves processes only) */
#ifdef ARCOMM_TEST_NCCL
    ncclUniqueId uid; /* made by the parent (no CUDA there), for config nccl */
#endif
    void *refs[NCASES][NCOUNTS];
    void *narrow_refs[NCASES][NCOUNTS]; /* f32 sums with the bf16 wire; the codec's calls */
};

static bool count_used(const struct ccase *cs, size_t k)
{
    return counts[k] != BIG_COUNT || (cs->big && !h_quick());
}

static uint64_t case_seed(const struct run *run, size_t c, size_t k)
{
    return run->seed + c * 131 + k * 7;
}

/* Does the allreduce of this case travel narrowed (bf16, or the config's codec)? */
static bool narrowed(const struct config *cfg, const struct ccase *cs)
{
    if (cfg->codec != NULL)
        return cref_wire_applies(cfg->codec, cs->dtype, cs->op);
    return cfg->narrow && cs->dtype == COMM_F32 && cs->op == COMM_SUM;
}

/* The reference of an allreduce (addend: NULL, or allreduce_add's) of this case into out:
 * through the config's codec where it applies, else the full-width contract's. */
static bool allreduce_ref(const struct config *cfg, const struct ccase *cs, int nranks,
                          uint64_t seed, size_t count, const void *addend, void *out)
{
    struct cref_layout lay = {.nranks = nranks, .per_host = 0};
    if (cfg->codec != NULL && narrowed(cfg, cs))
        return cref_wire_reduce(cfg->codec, nranks, cs->dtype, cs->op, seed, count, addend,
                                addend ? count : 0, out);
    cref_reduce(&lay, cs->dtype, cs->op, seed, count, 0, count, narrowed(cfg, cs), addend,
                addend ? count : 0, out);
    return true;
}

#define CU(r, call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            h_fail(r, "rank %d: %s: %s", (r)->rank, #call, cudaGetErrorString(e_));                \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* got (host copy of a device output) against want, bit for bit. */
static void compare(struct h_rank *r, const char *what, const struct ccase *cs, size_t count,
                    const void *got, const void *want, size_t n)
{
    char why[160], bits[80];
    size_t j = cref_first_diff(got, want, n, cs->dtype, why, sizeof(why));
    if (j < n) {
        cref_bits(got, want, j, cs->dtype, bits, sizeof(bits));
        h_fail(r, "rank %d of %d: %s %s %s count %zu: %s (%s)", r->rank, r->nranks, what,
               cref_dtype_name(cs->dtype), cref_op_name(cs->op), count, why, bits);
    }
}

/* The calls, on arcomm's API or through the NCCL face (nc non-NULL). */
struct calls {
    comm_t *comm;
    void *nc; /* ncclComm_t of config nccl */
};

static const char *last_error(const struct calls *k);

static bool ok(struct h_rank *r, const struct calls *k, comm_status_t st, const char *what,
               const struct ccase *cs, size_t count)
{
    if (st != COMM_OK)
        h_fail(r, "rank %d: %s %s %s count %zu: %s: %s", r->rank, what, cref_dtype_name(cs->dtype),
               cref_op_name(cs->op), count, comm_status_string(st), last_error(k));
    return st == COMM_OK;
}

#ifdef ARCOMM_TEST_NCCL
static ncclDataType_t nccl_dtype(comm_dtype_t t)
{
    switch (t) {
    case COMM_F32:
        return ncclFloat32;
    case COMM_F16:
        return ncclFloat16;
    case COMM_BF16:
        return ncclBfloat16;
    case COMM_F64:
        return ncclFloat64;
    case COMM_I32:
        return ncclInt32;
    default:
        return ncclUint8;
    }
}

static ncclRedOp_t nccl_op(comm_op_t op)
{
    return op == COMM_AVG    ? ncclAvg
           : op == COMM_MAX  ? ncclMax
           : op == COMM_PROD ? ncclProd
                             : ncclSum;
}

/* An NCCL result as a status whose message ncclGetLastError holds. */
static comm_status_t nccl_st(ncclResult_t e)
{
    return e == ncclSuccess ? COMM_OK : COMM_ERR_INVALID;
}
#endif

static comm_status_t do_allreduce(const struct calls *k, const void *s, void *d, size_t n,
                                  comm_dtype_t t, comm_op_t op, cudaStream_t st)
{
#ifdef ARCOMM_TEST_NCCL
    if (k->nc != NULL)
        return nccl_st(ncclAllReduce(s, d, n, nccl_dtype(t), nccl_op(op), k->nc, st));
#endif
    return comm_allreduce(k->comm, s, d, n, t, op, st);
}

static comm_status_t do_reduce(const struct calls *k, const void *s, void *d, size_t n,
                               comm_dtype_t t, comm_op_t op, int root, cudaStream_t st)
{
#ifdef ARCOMM_TEST_NCCL
    if (k->nc != NULL)
        return nccl_st(ncclReduce(s, d, n, nccl_dtype(t), nccl_op(op), root, k->nc, st));
#endif
    return comm_reduce(k->comm, s, d, n, t, op, root, st);
}

static comm_status_t do_reduce_scatter(const struct calls *k, const void *s, void *d, size_t n,
                                       comm_dtype_t t, comm_op_t op, cudaStream_t st)
{
#ifdef ARCOMM_TEST_NCCL
    if (k->nc != NULL)
        return nccl_st(ncclReduceScatter(s, d, n, nccl_dtype(t), nccl_op(op), k->nc, st));
#endif
    return comm_reduce_scatter(k->comm, s, d, n, t, op, st);
}

static const char *last_error(const struct calls *k)
{
#ifdef ARCOMM_TEST_NCCL
    if (k->nc != NULL)
        return ncclGetLastError(k->nc);
#endif
    return comm_last_error(k->comm);
}

static void body(struct h_rank *r)
{
    const struct run *run = r->arg;
    const struct config *cfg = run->cfg;
    int n = r->nranks;
    uint64_t *hashes = (uint64_t *)r->out;
    size_t nh = 0, maxb = 0;
    void *dsend = NULL, *drecv = NULL, *dadd = NULL, *hin = NULL, *hout = NULL, *want = NULL,
         *hadd = NULL;
    cudaStream_t s = NULL;
    struct calls k0 = {0}, *kk = &k0;
    for (size_t k = 0; k < NCOUNTS; k++)
        maxb = counts[k] * 8 > maxb ? counts[k] * 8 : maxb;

    int dev = run->spread ? r->rank : 0;
    CU(r, cudaSetDevice(dev));
    comm_config_t cc;
    comm_config_init(&cc);
    cc.nranks = n;
    cc.rank = r->rank;
    cc.id = r->id;
    cc.device = COMM_DEVICE_CUDA;
    cc.device_index = dev;
    cc.timeout_ms = 120000;
    comm_status_t st = COMM_OK;
#ifdef ARCOMM_TEST_NCCL
    if (cfg->nccl) {
        ncclComm_t nc = NULL;
        ncclResult_t e = ncclCommInitRank(&nc, n, run->uid, r->rank);
        if (e != ncclSuccess) {
            h_fail(r, "rank %d: ncclCommInitRank on GPU 0: %s: %s", r->rank, ncclGetErrorString(e),
                   ncclGetLastError(NULL));
            return;
        }
        kk->nc = nc;
    }
#endif
    if (kk->nc == NULL && (st = comm_init(&r->comm, &cc)) != COMM_OK) {
        h_fail(r, "rank %d: comm_init on GPU %d: %s: %s", r->rank, dev, comm_status_string(st),
               comm_last_error(NULL));
        return;
    }
    kk->comm = r->comm;
    __atomic_store_n(&r->ready, 1, __ATOMIC_RELEASE);
    CU(r, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(r, cudaMalloc(&dsend, maxb));
    CU(r, cudaMalloc(&drecv, maxb));
    CU(r, cudaMalloc(&dadd, maxb));
    hin = malloc(maxb);
    hout = malloc(maxb);
    want = malloc(maxb);
    hadd = malloc(maxb);
    if (hin == NULL || hout == NULL || want == NULL || hadd == NULL) {
        h_fail(r, "out of memory");
        goto out;
    }
    for (size_t c = 0; c < NCASES && r->errors == 0; c++) {
        const struct ccase *cs = &cases[c];
        size_t es = comm_dtype_size(cs->dtype);
        for (size_t k = 0; k < NCOUNTS && r->errors == 0; k++) {
            if (!count_used(cs, k))
                continue;
            size_t count = counts[k], bytes = count * es;
            uint64_t seed = case_seed(run, c, k);
            const void *ref = run->refs[c][k];
            cref_fill(hin, count, cs->dtype, cs->op, seed, r->rank);
            CU(r, cudaMemcpyAsync(dsend, hin, bytes, cudaMemcpyHostToDevice, s));

            /* allreduce */
            CU(r, cudaMemsetAsync(drecv, 0xff, bytes, s));
            if (ok(r, kk, do_allreduce(kk, dsend, drecv, count, cs->dtype, cs->op, s), "allreduce",
                   cs, count)) {
                CU(r, cudaStreamSynchronize(s));
                CU(r, cudaMemcpy(hout, drecv, bytes, cudaMemcpyDeviceToHost));
                compare(r, "allreduce", cs, count, hout,
                        narrowed(cfg, cs) ? run->narrow_refs[c][k] : ref, count);
                hashes[nh++] = h_hash(hout, bytes);
            }

            /* allreduce in place */
            if (count <= 65537) {
                CU(r, cudaMemcpyAsync(drecv, hin, bytes, cudaMemcpyHostToDevice, s));
                if (ok(r, kk, do_allreduce(kk, drecv, drecv, count, cs->dtype, cs->op, s),
                       "allreduce in place", cs, count)) {
                    CU(r, cudaStreamSynchronize(s));
                    CU(r, cudaMemcpy(hout, drecv, bytes, cudaMemcpyDeviceToHost));
                    compare(r, "allreduce in place", cs, count, hout,
                            narrowed(cfg, cs) ? run->narrow_refs[c][k] : ref, count);
                }
            }

            /* reduce: every root at the small counts, one (moving with the case) else */
            for (int root = 0; root < n; root++) {
                if (count > 4099 && root != (int)((c + k) % (size_t)n))
                    continue;
                CU(r, cudaMemsetAsync(drecv, 0xff, bytes, s));
                if (ok(r, kk,
                       do_reduce(kk, dsend, r->rank == root ? drecv : NULL, count, cs->dtype,
                                 cs->op, root, s),
                       "reduce", cs, count) &&
                    r->rank == root) {
                    CU(r, cudaStreamSynchronize(s));
                    CU(r, cudaMemcpy(hout, drecv, bytes, cudaMemcpyDeviceToHost));
                    compare(r, "reduce", cs, count, hout, ref, count);
                }
            }

            /* reduce_scatter: block r of the first n * (count / n) elements */
            size_t rc = count / (size_t)n;
            if (rc > 0) {
                CU(r, cudaMemsetAsync(drecv, 0xff, rc * es, s));
                if (ok(r, kk, do_reduce_scatter(kk, dsend, drecv, rc, cs->dtype, cs->op, s),
                       "reduce_scatter", cs, count)) {
                    CU(r, cudaStreamSynchronize(s));
                    CU(r, cudaMemcpy(hout, drecv, rc * es, cudaMemcpyDeviceToHost));
                    compare(r, "reduce_scatter", cs, count, hout,
                            (const char *)ref + (size_t)r->rank * rc * es, rc);
                }
            }

            /* allreduce_add of this rank's own residual, up to 65537 */
            if (cs->op == COMM_SUM && count <= 65537 && cs->dtype != COMM_U8 &&
                cs->dtype != COMM_I32 && kk->nc == NULL) {
                cref_fill(hadd, count, cs->dtype, COMM_SUM, seed + 99, 100 + r->rank);
                CU(r, cudaMemcpyAsync(dadd, hadd, bytes, cudaMemcpyHostToDevice, s));
                if (!allreduce_ref(cfg, cs, n, seed, count, hadd, want)) {
                    h_fail(r, "rank %d: the allreduce_add reference: out of memory", r->rank);
                    goto out;
                }
                CU(r, cudaMemsetAsync(drecv, 0xff, bytes, s));
                if (ok(r, kk,
                       comm_allreduce_add(r->comm, dsend, drecv, dadd, count, count, cs->dtype, s),
                       "allreduce_add", cs, count)) {
                    CU(r, cudaStreamSynchronize(s));
                    CU(r, cudaMemcpy(hout, drecv, bytes, cudaMemcpyDeviceToHost));
                    compare(r, "allreduce_add", cs, count, hout, want, count);
                }
            }
        }
    }
out:
    r->out_len = nh * sizeof(uint64_t);
    if (s != NULL)
        (void)cudaStreamDestroy(s);
    (void)cudaFree(dsend);
    (void)cudaFree(drecv);
    (void)cudaFree(dadd);
    free(hin);
    free(hout);
    free(want);
    free(hadd);
    if (kk->nc == NULL && r->comm == NULL)
        return; /* neither was made */
#ifdef ARCOMM_TEST_NCCL
    if (kk->nc != NULL) {
        ncclResult_t e = ncclCommDestroy(kk->nc);
        if (e != ncclSuccess)
            h_fail(r, "rank %d: ncclCommDestroy: %s", r->rank, ncclGetLastError(NULL));
        return;
    }
#endif
    st = comm_destroy(r->comm);
    if (st != COMM_OK)
        h_fail(r, "rank %d: comm_destroy: %s", r->rank, comm_last_error(NULL));
}

static int g_ngpus; /* as a child process counted them */

static void run_config(const struct config *cfg, int nranks, bool procs)
{
    struct run *run = calloc(1, sizeof(*run));
    assert_non_null(run);
    run->cfg = cfg;
    run->seed = 0xc0da + (uint64_t)nranks * 1000 + (uint64_t)(cfg - configs) * 100000;
    run->spread = !procs;
    if (run->spread && g_ngpus < nranks) {
        /* A CUDA communicator refuses two thread ranks on one GPU (their waiting kernels
         * could block each other): nothing to run here. */
        printf("%s: %d thread ranks need %d GPUs, %d present: skipped\n", cfg->name, nranks, nranks,
               g_ngpus);
        free(run);
        skip();
    }
    struct cref_layout lay = {.nranks = nranks, .per_host = 0};
    for (size_t c = 0; c < NCASES; c++) {
        for (size_t k = 0; k < NCOUNTS; k++) {
            if (!count_used(&cases[c], k))
                continue;
            size_t count = counts[k], es = comm_dtype_size(cases[c].dtype);
            uint64_t seed = case_seed(run, c, k);
            run->refs[c][k] = malloc(count * es);
            assert_non_null(run->refs[c][k]);
            cref_reduce(&lay, cases[c].dtype, cases[c].op, seed, count, 0, count, false, NULL, 0,
                        run->refs[c][k]);
            if (narrowed(cfg, &cases[c])) {
                run->narrow_refs[c][k] = malloc(count * es);
                assert_non_null(run->narrow_refs[c][k]);
                assert_true(allreduce_ref(cfg, &cases[c], nranks, seed, count, NULL,
                                          run->narrow_refs[c][k]));
            }
        }
    }
#ifdef ARCOMM_TEST_NCCL
    if (cfg->nccl)
        assert_int_equal(ncclGetUniqueId(&run->uid), ncclSuccess);
#endif
    for (size_t i = 0; i < 4 && cfg->knobs[i][0] != NULL; i++)
        h_env_push(cfg->knobs[i][0], cfg->knobs[i][1]);
    struct h_job job = {.nranks = nranks,
                        .procs = procs,
                        .no_init = true,
                        .body = body,
                        .arg = run,
                        .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    for (int r = 0; r < nranks; r++)
        if (res[r].errors)
            fail_msg("%s, %d %s ranks on GPU %s: %ld errors; first: %s", cfg->name, nranks,
                     procs ? "process" : "thread", run->spread ? "0..n-1" : "0", res[r].errors,
                     res[r].first_error);
    assert_true(res[0].out_len > 0);
    for (int r = 1; r < nranks; r++) {
        assert_int_equal(res[r].out_len, res[0].out_len);
        if (memcmp(res[r].out, res[0].out, res[0].out_len) != 0)
            fail_msg("%s: rank %d's allreduce results differ from rank 0's", cfg->name, r);
    }
    for (size_t c = 0; c < NCASES; c++)
        for (size_t k = 0; k < NCOUNTS; k++) {
            free(run->refs[c][k]);
            free(run->narrow_refs[c][k]);
        }
    free(run);
    assert_int_equal(h_shm_leftovers(), 0);
}

static const struct config *g_cfg;

#define RANKS_TEST(name, n, procs)                                                                 \
    static void name(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        run_config(g_cfg, n, procs);                                                               \
    }
RANKS_TEST(procs_2, 2, true)
RANKS_TEST(procs_3, 3, true)
RANKS_TEST(procs_4, 4, true)
RANKS_TEST(threads_2, 2, false)

/* How many GPUs a child process sees (0 without CUDA; at most 100).  The parent itself
 * never touches CUDA: its ranks are forked. */
static int gpu_count(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? (n < 100 ? n : 100) : 0);
    }
    int ws = 0;
    if (pid <= 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws))
        return 0;
    return WEXITSTATUS(ws);
}

/* test_contract_cuda CONFIG: one of configs[] by name (a meson test each). */
int main(int argc, char **argv)
{
    for (size_t i = 0; argc > 1 && i < NCONFIGS; i++)
        if (strcmp(argv[1], configs[i].name) == 0)
            g_cfg = &configs[i];
    if (g_cfg == NULL) {
        fprintf(stderr, "usage: %s CONFIG (", argv[0]);
        for (size_t i = 0; i < NCONFIGS; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", configs[i].name);
        fprintf(stderr, ")\n");
        return 2;
    }
#ifndef ARCOMM_TEST_NCCL
    if (g_cfg->nccl) {
        printf("built without arcomm's NCCL face: skipped\n");
        return 77;
    }
#endif
    g_ngpus = gpu_count();
    if (g_ngpus == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    const struct CMUnitTest all[] = {
        cmocka_unit_test(procs_2),
        cmocka_unit_test(procs_3),
        cmocka_unit_test(procs_4),
        cmocka_unit_test(threads_2),
    };
    return _cmocka_run_group_tests(g_cfg->name, all, sizeof(all) / sizeof(all[0]), NULL, NULL);
}
