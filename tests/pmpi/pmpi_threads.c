/* SPDX-License-Identifier: MIT */
/*
 * Threads and the lifetime of a communicator's state, under MPI_THREAD_MULTIPLE:
 *  - four threads, each on a communicator of its own (made by MPI_Comm_dup, split and
 *    create, their first calls at the same time), make served calls at once, checked;
 *  - MPI_Comm_free of a communicator while another thread of rank 0 waits inside a
 *    served MPI_Allreduce on it: MPI lets pending operations complete normally, so the
 *    call must succeed, with the right sum, once the other ranks come (they come only
 *    after the free);
 *  - MPI_Finalize while another thread of rank 0 waits inside a served call the other
 *    ranks never make (an erroneous program): MPI_Finalize must return, and the call
 *    with an error, touching no freed memory (run it under ASan) and no MPI after
 *    MPI_Finalize.
 * The verdict of the first two comes before MPI_Finalize (run_pmpi.sh); the last one's
 * is the exit status.
 */
#include "pmpi_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NTHREADS 4
#define ROUNDS   40

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- calls on different communicators at once ---- */

struct worker {
    MPI_Comm comm;
    int index;
    int failures;
    uint64_t served[T_NCALL];
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    int n, me;
    PMPI_Comm_size(w->comm, &n);
    PMPI_Comm_rank(w->comm, &me);
    int count = 1000 + 777 * w->index;
    int *in = malloc((size_t)count * sizeof(int)), *out = malloc((size_t)count * sizeof(int));
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < count; i++)
            in[i] = (me + 1) * (i % 13 + round + w->index);
        int rc = MPI_Allreduce(in, out, count, MPI_INT, MPI_SUM, w->comm);
        w->served[T_ALLREDUCE]++;
        for (int i = 0; i < count; i++) {
            if (rc != MPI_SUCCESS || out[i] != n * (n + 1) / 2 * (i % 13 + round + w->index)) {
                w->failures++;
                break;
            }
        }
        int root = round % n;
        for (int i = 0; i < count; i++)
            out[i] = me == root ? i * 7 + round : -1;
        rc = MPI_Bcast(out, count, MPI_INT, root, w->comm);
        w->served[T_BCAST]++;
        for (int i = 0; i < count; i++) {
            if (rc != MPI_SUCCESS || out[i] != i * 7 + round) {
                w->failures++;
                break;
            }
        }
    }
    free(in);
    free(out);
    return NULL;
}

static void test_concurrent(void)
{
    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    MPI_Group world;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    for (int i = 0; i < NTHREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].index = i;
        if (i == 0)
            MPI_Comm_dup(MPI_COMM_WORLD, &w[i].comm);
        else if (i == 1)
            MPI_Comm_split(MPI_COMM_WORLD, 0, -t_rank, &w[i].comm);
        else
            MPI_Comm_create(MPI_COMM_WORLD, world, &w[i].comm);
    }
    MPI_Group_free(&world);
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK(w[i].failures == 0, "thread %d: %d wrong results", i, w[i].failures);
        for (int c = 0; c < T_NCALL; c++)
            t_served[c] += w[i].served[c];
        MPI_Comm_free(&w[i].comm);
    }
}

/* ---- a call in flight while its communicator goes ---- */

struct inflight {
    MPI_Comm comm;
    int count;
    atomic_int calling; /* set just before the call */
    atomic_int tid;
    int rc;
    int *out;
};

static void *inflight_main(void *arg)
{
    struct inflight *f = arg;
    int *in = malloc((size_t)f->count * sizeof(int));
    for (int i = 0; i < f->count; i++)
        in[i] = (t_rank + 1) * (i % 29);
    atomic_store(&f->tid, (int)syscall(SYS_gettid));
    atomic_store(&f->calling, 1);
    f->rc = MPI_Allreduce(in, f->out, f->count, MPI_INT, MPI_SUM, f->comm);
    free(in);
    return NULL;
}

/* The voluntary context switches of thread tid (it went to sleep), or -1 once it is gone. */
static long sleeps(int tid)
{
    char path[64], line[128];
    snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
    FILE *fp = fopen(path, "r");
    long n = -1;
    if (fp == NULL)
        return -1;
    while (fgets(line, sizeof(line), fp) != NULL)
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
            break;
    fclose(fp);
    return n;
}

/* Waits until f's thread is inside its call, waiting: it set calling just before the call,
 * which takes no sleep to reach arcomm's wait, and that wait sleeps on a futex (then wakes
 * every 100 us for the wait hook): 20 sleeps after the flag. */
static void wait_blocked(struct inflight *f)
{
    while (!atomic_load(&f->calling))
        sleep_ms(1);
    int tid = atomic_load(&f->tid);
    long first = sleeps(tid), now = first;
    for (int tries = 0; tries < 2000 && now >= 0 && now < first + 20; tries++) {
        sleep_ms(5);
        now = sleeps(tid);
    }
}

static void test_free_in_flight(void)
{
    struct inflight f = {.count = 50000};
    MPI_Comm_dup(MPI_COMM_WORLD, &f.comm);
    f.out = malloc((size_t)f.count * sizeof(int));
    /* Every rank's state is made (a first served call), then rank 0's thread waits in an
     * allreduce the others join only after rank 0 freed the communicator. */
    CHECK(MPI_Barrier(f.comm) == MPI_SUCCESS, "barrier");
    SERVED(T_BARRIER);
    int go = 1;
    if (t_rank == 0) {
        pthread_t th;
        pthread_create(&th, NULL, inflight_main, &f);
        wait_blocked(&f);
        MPI_Comm comm = f.comm;
        CHECK(MPI_Comm_free(&comm) == MPI_SUCCESS, "MPI_Comm_free");
        for (int r = 1; r < t_size; r++)
            PMPI_Send(&go, 1, MPI_INT, r, 99, MPI_COMM_WORLD);
        pthread_join(th, NULL);
    } else {
        PMPI_Recv(&go, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int *in = malloc((size_t)f.count * sizeof(int));
        for (int i = 0; i < f.count; i++)
            in[i] = (t_rank + 1) * (i % 29);
        f.rc = MPI_Allreduce(in, f.out, f.count, MPI_INT, MPI_SUM, f.comm);
        free(in);
        MPI_Comm_free(&f.comm);
    }
    SERVED(T_ALLREDUCE);
    CHECK(f.rc == MPI_SUCCESS, "allreduce in flight across MPI_Comm_free: %d", f.rc);
    int bad = 0;
    for (int i = 0; i < f.count; i++)
        bad += f.out[i] != t_size * (t_size + 1) / 2 * (i % 29);
    CHECK(f.rc != MPI_SUCCESS || bad == 0, "allreduce across MPI_Comm_free: %d wrong elements",
          bad);
    free(f.out);
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    PMPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &t_size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (t_rank == 0)
            printf("MPI_THREAD_MULTIPLE not provided (%d): skipped\n", provided);
        MPI_Finalize();
        return 77;
    }
    test_concurrent();
    /* One rank has no peer to wait for: its calls never wait. */
    if (t_size > 1)
        test_free_in_flight();

    /* MPI_Finalize while rank 0's thread waits in a call the others never make. */
    struct inflight f = {.count = 1000};
    MPI_Comm_dup(MPI_COMM_WORLD, &f.comm);
    MPI_Comm_set_errhandler(f.comm, MPI_ERRORS_RETURN);
    f.out = malloc((size_t)f.count * sizeof(int));
    CHECK(MPI_Barrier(f.comm) == MPI_SUCCESS, "barrier");
    SERVED(T_BARRIER);
    int rc = t_finish();
    pthread_t th;
    bool inflight = t_rank == 0 && t_size > 1;
    if (inflight) {
        pthread_create(&th, NULL, inflight_main, &f);
        wait_blocked(&f);
        for (int r = 1; r < t_size; r++)
            PMPI_Send(&rc, 1, MPI_INT, r, 98, MPI_COMM_WORLD);
    } else if (t_size > 1) {
        /* The others leave a little after rank 0 began MPI_Finalize (their leaving would
         * end rank 0's call too): rank 0's MPI_Finalize itself must end it. */
        int x;
        PMPI_Recv(&x, 1, MPI_INT, 0, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        sleep_ms(500);
    }
    MPI_Finalize();
    if (inflight) {
        pthread_join(th, NULL);
        if (f.rc == MPI_SUCCESS) {
            fprintf(stderr, "rank 0: an allreduce no other rank made succeeded\n");
            rc = 1;
        }
    }
    free(f.out);
    return rc;
}
