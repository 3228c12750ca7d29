/* SPDX-License-Identifier: MIT */
/*
 * A rank SIGKILLed while every rank loops over a collective of a communicator made by
 * comm_init_mpi: every surviving rank, on every host, must return within the timeout
 * (plus the time the failure takes to come) with COMM_ERR_PEER or COMM_ERR_TIMEOUT,
 * never hang.  Run by run_mpi_kill.sh under an mpirun that keeps the job alive after a
 * process dies (--enable-recovery, --mca orte_abort_on_non_zero_status 0); each survivor
 * prints one "survivor:" line, which the script checks, then leaves with _exit (no
 * MPI_Finalize: its fence would wait for the dead rank).
 *   test_mpi_kill VICTIM COLLECTIVE COUNT   (collective: allreduce, broadcast, allgather)
 */
#include <arcomm_mpi.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 3000
#define KILL_MS    400

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *killer(void *arg)
{
    (void)arg;
    usleep(KILL_MS * 1000);
    raise(SIGKILL);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* As a program that means to outlive a dead rank must: Open MPI 4.1 reports a
     * nonblocking collective whose transfer to the dead rank failed through
     * MPI_COMM_WORLD's handler, whatever communicator the collective ran on. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int victim = argc > 1 ? atoi(argv[1]) : size - 1;
    const char *coll = argc > 2 ? argv[2] : "allreduce";
    size_t count = argc > 3 ? (size_t)atol(argv[3]) : 4099;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.timeout_ms = TIMEOUT_MS;
    comm_t *c = NULL;
    if (comm_init_mpi(&c, MPI_COMM_WORLD, &cfg) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init_mpi: %s\n", rank, comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char host[64] = "";
    gethostname(host, sizeof(host));
    size_t n = count * (size_t)size;
    float *send = malloc(n * 4), *recv = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        send[i] = (float)(i % 7);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ms();
    pthread_t t;
    if (rank == victim)
        pthread_create(&t, NULL, killer, NULL);
    comm_status_t st = COMM_OK;
    long calls = 0;
    double last_ok = t0;
    while (st == COMM_OK) {
        if (strcmp(coll, "broadcast") == 0)
            st = comm_broadcast(c, send, recv, count, COMM_F32, (int)(calls % size), NULL);
        else if (strcmp(coll, "allgather") == 0)
            st = comm_allgather(c, send, recv, count, COMM_F32, NULL);
        else
            st = comm_allreduce(c, send, recv, count, COMM_F32, COMM_SUM, NULL);
        if (st == COMM_OK) {
            calls++;
            last_ok = now_ms();
        }
    }
    double end = now_ms();
    /* From the kill (the victim's KILL_MS after the common start) to this return. */
    printf("survivor: rank %d on %s: %s after %ld calls, %.0f ms after the kill (last call "
           "ended %.0f ms after it): %s\n",
           rank, host, comm_status_string(st), calls, end - t0 - KILL_MS, last_ok - t0 - KILL_MS,
           comm_last_error(c));
    fflush(stdout);
    _exit(0);
}
