/* SPDX-License-Identifier: MIT */
/*
 * A rank that comes late to served calls, as a rank busy with checkpoint I/O does:
 * rank 0 sleeps PMPI_LATE_S seconds (from the environment) before an MPI_Barrier and an
 * MPI_Allreduce of 1 MiB while the others wait in them.  MPI has no timeout, so neither
 * may libarcomm_pmpi unless the user set ARCOMM_TIMEOUT_MS: without it the calls must
 * succeed however late rank 0 is (the test runs it past arcomm's own 120 s default);
 * with it (PMPI_LATE_EXPECT=timeout) the waiting ranks get MPI_ERR_OTHER through
 * MPI_ERRORS_RETURN, once the user's timeout has passed and not before.
 */
#include "pmpi_test.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define N (256 * 1024)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &t_size);
    const char *late = getenv("PMPI_LATE_S"), *expect = getenv("PMPI_LATE_EXPECT");
    double late_s = late != NULL ? atof(late) : 5.0;
    bool want_timeout = expect != NULL && strcmp(expect, "timeout") == 0;
    if (want_timeout)
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* The first served call makes the library's communicator, every rank on time. */
    int *in = malloc(N * sizeof(int)), *out = malloc(N * sizeof(int));
    uint64_t s = t_seed(7, t_rank);
    for (int i = 0; i < N; i++)
        in[i] = (int)(t_next(&s) % 2001) - 1000;
    int rc = MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    SERVED(T_ALLREDUCE);
    CHECK(rc == MPI_SUCCESS, "first allreduce: %d", rc);

    if (t_rank == 0)
        usleep((useconds_t)(late_s * 1e6));
    double t0 = now_s();
    rc = MPI_Barrier(MPI_COMM_WORLD);
    double waited = now_s() - t0;
    if (!want_timeout) {
        SERVED(T_BARRIER);
        CHECK(rc == MPI_SUCCESS, "barrier after %.1f s: %d (MPI has no timeout)", waited, rc);
        rc = MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        SERVED(T_ALLREDUCE);
        CHECK(rc == MPI_SUCCESS, "allreduce: %d", rc);
        /* The float64 reference of every element over every rank's input. */
        double *want = calloc(N, sizeof(double));
        for (int r = 0; r < t_size; r++) {
            uint64_t sr = t_seed(7, r);
            for (int i = 0; i < N; i++)
                want[i] += (double)((int)(t_next(&sr) % 2001) - 1000);
        }
        int bad = 0;
        for (int i = 0; i < N && rc == MPI_SUCCESS; i++)
            if ((double)out[i] != want[i] && bad++ == 0)
                CHECK(0, "element %d is %d, expected %.0f", i, out[i], want[i]);
        free(want);
    } else if (t_rank != 0) {
        /* The user asked for a timeout: the waiting ranks get an error once it passed
         * (ARCOMM_TIMEOUT_MS is shorter than rank 0's lateness). */
        CHECK(rc == MPI_ERR_OTHER, "barrier with ARCOMM_TIMEOUT_MS: %d after %.1f s", rc, waited);
        CHECK(waited < late_s, "the timeout ended the wait after %.1f s, not before rank 0 came",
              waited);
    } else {
        /* Rank 0 comes after its peers gave up: the communicator is broken, an error. */
        CHECK(rc == MPI_ERR_OTHER, "late rank 0's barrier: %d", rc);
    }
    free(in);
    free(out);
    int ret = t_finish();
    MPI_Finalize();
    return ret;
}
