/* SPDX-License-Identifier: MIT */
/*
 * libarcomm_nccl without a GPU (CI): nccl.h's ABI (NCCL 2.19's numbers, and where a real
 * nccl.h is at hand, the same numbers as it), the version, the error strings, unique
 * ids and NCCL_COMM_ID, groups, the refusals of what arcomm lacks, and the argument
 * checks that need no GPU.  On a machine with a GPU the checks that would start a
 * communicator are left out (the GPU tests have them).
 */
#include "nccl.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

int abi_numbers_ours(long long *out, int max);
#if NCCL_TEST_HAVE_REAL
int abi_numbers_real(long long *out, int max);
#endif

static bool have_gpu(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static void test_layout(void **state)
{
    (void)state;
    assert_int_equal(sizeof(ncclUniqueId), 128);
    assert_int_equal(NCCL_UNIQUE_ID_BYTES, 128);
    assert_int_equal(ncclSuccess, 0);
    assert_int_equal(ncclUnhandledCudaError, 1);
    assert_int_equal(ncclSystemError, 2);
    assert_int_equal(ncclInternalError, 3);
    assert_int_equal(ncclInvalidArgument, 4);
    assert_int_equal(ncclInvalidUsage, 5);
    assert_int_equal(ncclRemoteError, 6);
    assert_int_equal(ncclInProgress, 7);
    assert_int_equal(ncclNumResults, 8);
    assert_int_equal(ncclInt8, 0);
    assert_int_equal(ncclUint8, 1);
    assert_int_equal(ncclInt32, 2);
    assert_int_equal(ncclUint32, 3);
    assert_int_equal(ncclInt64, 4);
    assert_int_equal(ncclUint64, 5);
    assert_int_equal(ncclFloat16, 6);
    assert_int_equal(ncclFloat32, 7);
    assert_int_equal(ncclFloat64, 8);
    assert_int_equal(ncclBfloat16, 9);
    assert_int_equal(ncclNumTypes, 10);
    assert_int_equal(ncclSum, 0);
    assert_int_equal(ncclProd, 1);
    assert_int_equal(ncclMax, 2);
    assert_int_equal(ncclMin, 3);
    assert_int_equal(ncclAvg, 4);
    assert_int_equal(ncclNumOps, 5);
    assert_int_equal(ncclMaxRedOp, 0x7fffffff);
    assert_int_equal(sizeof(ncclRedOp_t), 4);
    assert_int_equal(ncclScalarDevice, 0);
    assert_int_equal(ncclScalarHostImmediate, 1);
    assert_int_equal(offsetof(ncclConfig_t, size), 0);
    assert_int_equal(offsetof(ncclConfig_t, magic), 8);
    assert_int_equal(offsetof(ncclConfig_t, version), 12);
    assert_int_equal(offsetof(ncclConfig_t, blocking), 16);
    assert_int_equal(offsetof(ncclConfig_t, cgaClusterSize), 20);
    assert_int_equal(offsetof(ncclConfig_t, minCTAs), 24);
    assert_int_equal(offsetof(ncclConfig_t, maxCTAs), 28);
    assert_int_equal(offsetof(ncclConfig_t, netName), 32);
    assert_int_equal(offsetof(ncclConfig_t, splitShare), 40);
    assert_int_equal(sizeof(ncclConfig_t), 48);
    assert_int_equal(NCCL_CONFIG_UNDEF_INT, INT_MIN);
    assert_int_equal(NCCL_SPLIT_NOCOLOR, -1);
}

static void test_initializer(void **state)
{
    (void)state;
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    assert_int_equal(c.size, sizeof(ncclConfig_t));
    assert_int_equal(c.magic, 0xcafebeef);
    assert_int_equal(c.version, 21903);
    assert_int_equal(c.blocking, INT_MIN);
    assert_int_equal(c.cgaClusterSize, INT_MIN);
    assert_int_equal(c.minCTAs, INT_MIN);
    assert_int_equal(c.maxCTAs, INT_MIN);
    assert_null(c.netName);
    assert_int_equal(c.splitShare, INT_MIN);
}

/* The same numbers as a real NCCL's nccl.h (the one of the CUDA toolkit here). */
static void test_same_as_real(void **state)
{
    (void)state;
#if NCCL_TEST_HAVE_REAL
    long long ours[128], real[128];
    int a = abi_numbers_ours(ours, 128), b = abi_numbers_real(real, 128);
    assert_int_equal(a, b);
    for (int i = 0; i < a; i++) {
        if (ours[i] != real[i])
            fail_msg("ABI number %d of abi_list.h: arcomm %lld, real NCCL %lld", i, ours[i],
                     real[i]);
    }
#else
    skip();
#endif
}

static void test_version(void **state)
{
    (void)state;
    int v = 0;
    assert_int_equal(ncclGetVersion(&v), ncclSuccess);
    assert_int_equal(v, NCCL_VERSION_CODE);
    assert_int_equal(NCCL_VERSION_CODE, 21903);
    assert_int_equal(NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), 21903);
    assert_int_equal(NCCL_VERSION(2, 8, 4), 2804);
    assert_int_equal(ncclGetVersion(NULL), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "ncclGetVersion") != NULL);
}

static void test_error_strings(void **state)
{
    (void)state;
    for (int i = 0; i < ncclNumResults; i++) {
        const char *s = ncclGetErrorString((ncclResult_t)i);
        assert_non_null(s);
        assert_true(s[0] != '\0');
        for (int j = 0; j < i; j++)
            assert_string_not_equal(s, ncclGetErrorString((ncclResult_t)j));
    }
    assert_string_equal(ncclGetErrorString(ncclSuccess), "no error");
    assert_string_equal(ncclGetErrorString((ncclResult_t)99), "unknown result code");
}

static void test_unique_id(void **state)
{
    (void)state;
    const char *saved = getenv("NCCL_COMM_ID");
    char keep[256] = "";
    if (saved)
        snprintf(keep, sizeof(keep), "%s", saved);
    unsetenv("NCCL_COMM_ID");
    ncclUniqueId a, b, c, d, e;
    assert_int_equal(ncclGetUniqueId(&a), ncclSuccess);
    assert_int_equal(ncclGetUniqueId(&b), ncclSuccess);
    assert_memory_not_equal(&a, &b, sizeof(a));
    assert_memory_equal(a.internal, "arcnccl1", 8);
    assert_memory_equal(a.internal + 8, "arc1-", 5);
    /* NCCL_COMM_ID: every process of the user gets the same id from the same value. */
    setenv("NCCL_COMM_ID", "127.0.0.1:29500", 1);
    assert_int_equal(ncclGetUniqueId(&c), ncclSuccess);
    assert_int_equal(ncclGetUniqueId(&d), ncclSuccess);
    assert_memory_equal(&c, &d, sizeof(c));
    setenv("NCCL_COMM_ID", "127.0.0.1:29501", 1);
    assert_int_equal(ncclGetUniqueId(&e), ncclSuccess);
    assert_memory_not_equal(&c, &e, sizeof(c));
    if (saved)
        setenv("NCCL_COMM_ID", keep, 1);
    else
        unsetenv("NCCL_COMM_ID");
    assert_int_equal(ncclGetUniqueId(NULL), ncclInvalidArgument);
}

static void test_groups(void **state)
{
    (void)state;
    assert_int_equal(ncclGroupEnd(), ncclInvalidUsage);
    assert_true(strstr(ncclGetLastError(NULL), "ncclGroupStart") != NULL);
    assert_int_equal(ncclGroupStart(), ncclSuccess);
    assert_int_equal(ncclGroupStart(), ncclSuccess);
    assert_int_equal(ncclGroupEnd(), ncclSuccess);
    /* A failure inside the group is the group's result too. */
    assert_int_equal(ncclAllReduce(NULL, NULL, 1, ncclFloat, ncclSum, NULL, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclGroupEnd(), ncclInvalidArgument);
    /* And is forgotten after it. */
    assert_int_equal(ncclGroupStart(), ncclSuccess);
    assert_int_equal(ncclGroupEnd(), ncclSuccess);
}

/* One kind of communicator per group, as in NCCL: an init of the other kind fails
 * (before any GPU work: the kind is the group's from its first call on), and so does the
 * group; the next group starts afresh.  1-rank inits, so that with a GPU nothing waits. */
static void test_group_kinds(void **state)
{
    (void)state;
    ncclUniqueId a, b;
    assert_int_equal(ncclGetUniqueId(&a), ncclSuccess);
    assert_int_equal(ncclGetUniqueId(&b), ncclSuccess);
    ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER, nonblocking = NCCL_CONFIG_INITIALIZER;
    blocking.blocking = 1;
    nonblocking.blocking = 0;
    ncclComm_t x = NULL, y = NULL;
    assert_int_equal(ncclGroupStart(), ncclSuccess);
    ncclResult_t first = ncclCommInitRankConfig(&x, 1, a, 0, &blocking);
    assert_int_equal(first, have_gpu() ? ncclSuccess : ncclUnhandledCudaError);
    assert_int_equal(ncclCommInitRankConfig(&y, 1, b, 0, &nonblocking), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "nonblocking communicator in a group of blocking") !=
                NULL);
    assert_null(y);
    assert_int_equal(ncclGroupEnd(), have_gpu() ? ncclInvalidArgument : first);
    if (x != NULL)
        assert_int_equal(ncclCommDestroy(x), ncclSuccess);
    /* The other way round, in a new group: the kind was forgotten. */
    x = NULL;
    assert_int_equal(ncclGroupStart(), ncclSuccess);
    first = ncclCommInitRankConfig(&y, 1, b, 0, &nonblocking);
    assert_int_equal(first, have_gpu() ? ncclSuccess : ncclUnhandledCudaError);
    assert_int_equal(ncclCommInitRankConfig(&x, 1, a, 0, &blocking), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "blocking communicator in a group of nonblocking") !=
                NULL);
    ncclResult_t end = ncclGroupEnd();
    assert_int_equal(end, have_gpu() ? ncclInvalidArgument : first);
    if (y != NULL) {
        ncclResult_t async = ncclInProgress;
        for (int i = 0; i < 20000 && async == ncclInProgress; i++) {
            assert_int_equal(ncclCommGetAsyncError(y, &async), ncclSuccess);
            usleep(1000);
        }
        assert_int_equal(async, ncclSuccess);
        assert_int_equal(ncclCommDestroy(y), ncclSuccess);
    }
}

/* NCCL 2.28's, beyond 2.19's nccl.h: one defined by the library only to refuse, and
 * gather and scatter, served (groups of sends and receives). */
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

static void test_refusals(void **state)
{
    (void)state;
    assert_int_equal(ncclCommSuspend(NULL, 0), ncclInvalidUsage);
    assert_true(strstr(ncclGetLastError(NULL), "ncclCommSuspend") != NULL);
    /* Served: a NULL communicator is the caller's mistake, said as such. */
    assert_int_equal(ncclSend(NULL, 1, ncclFloat, 1, NULL, NULL), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "ncclSend") != NULL);
    assert_int_equal(ncclRecv(NULL, 1, ncclFloat, 1, NULL, NULL), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "not a live communicator") != NULL);
    assert_int_equal(ncclGather(NULL, NULL, 1, ncclFloat, 0, NULL, NULL), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "ncclGather") != NULL);
    assert_int_equal(ncclScatter(NULL, NULL, 1, ncclFloat, 0, NULL, NULL), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "ncclScatter") != NULL);
}

/* Argument checks that come before any GPU work. */
static void test_arguments(void **state)
{
    (void)state;
    ncclUniqueId id, zero;
    memset(&zero, 0, sizeof(zero));
    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
    ncclComm_t comm = NULL;
    assert_int_equal(ncclCommInitRank(NULL, 2, id, 0), ncclInvalidArgument);
    assert_int_equal(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
    assert_int_equal(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
    assert_int_equal(ncclCommInitRank(&comm, 2, zero, 0), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "ncclUniqueId") != NULL);
    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    bad.magic = 0;
    assert_int_equal(ncclCommInitRankConfig(&comm, 2, id, 0, &bad), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER") != NULL);
    ncclConfig_t two = NCCL_CONFIG_INITIALIZER;
    two.blocking = 2;
    assert_int_equal(ncclCommInitRankConfig(&comm, 2, id, 0, &two), ncclInvalidArgument);
    assert_null(comm);
    assert_int_equal(ncclCommInitAll(NULL, 1, NULL), ncclInvalidArgument);
    assert_int_equal(ncclCommInitAll(&comm, 0, NULL), ncclInvalidArgument);
    ncclResult_t async;
    assert_int_equal(ncclCommGetAsyncError(NULL, &async), ncclInvalidArgument);
    int x;
    assert_int_equal(ncclCommCount(NULL, &x), ncclInvalidArgument);
    assert_int_equal(ncclCommCuDevice(NULL, &x), ncclInvalidArgument);
    assert_int_equal(ncclCommUserRank(NULL, &x), ncclInvalidArgument);
    assert_int_equal(ncclCommFinalize(NULL), ncclInvalidArgument);
    assert_int_equal(ncclCommDestroy(NULL), ncclSuccess);
    assert_int_equal(ncclCommAbort(NULL), ncclSuccess);
    /* A handle that is no communicator of this library. */
    long fake[64] = {0};
    assert_int_equal(ncclCommCount((ncclComm_t)fake, &x), ncclInvalidArgument);
    assert_true(strstr(ncclGetLastError(NULL), "not a live communicator") != NULL);
    ncclRedOp_t op;
    float s = 1;
    assert_int_equal(
        ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, (ncclComm_t)fake),
        ncclInvalidArgument);
    assert_int_equal(ncclMemAlloc(NULL, 8), ncclInvalidArgument);
    void *p = &x;
    assert_int_equal(ncclMemAlloc(&p, 0), ncclSuccess);
    assert_null(p);
    assert_int_equal(ncclMemFree(NULL), ncclSuccess);
    if (!have_gpu()) {
        /* No GPU: an init fails at once with a reason (no rank waits for a peer). */
        assert_int_not_equal(ncclCommInitRank(&comm, 2, id, 0), ncclSuccess);
        assert_true(ncclGetLastError(NULL)[0] != '\0');
        ncclComm_t all[2];
        assert_int_not_equal(ncclCommInitAll(all, 2, NULL), ncclSuccess);
        assert_true(ncclGetLastError(NULL)[0] != '\0');
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),        cmocka_unit_test(test_initializer),
        cmocka_unit_test(test_same_as_real),  cmocka_unit_test(test_version),
        cmocka_unit_test(test_error_strings), cmocka_unit_test(test_unique_id),
        cmocka_unit_test(test_groups),        cmocka_unit_test(test_group_kinds),
        cmocka_unit_test(test_refusals),      cmocka_unit_test(test_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
