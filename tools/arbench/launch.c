/* SPDX-License-Identifier: MIT */
/*
 * arbench's child sweeps: the process ranks (this program again under arrun) and the
 * MPI peer (arbench-mpi under mpirun), each read back as one sweep's CSV.
 */
#include "bench_launch.h"
#include "bench_report.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef ARBENCH_MPIRUN
#define ARBENCH_MPIRUN "mpirun"
#endif
#ifndef ARBENCH_MPI_FROM_BINDIR
#define ARBENCH_MPI_FROM_BINDIR "../libexec/arcomm"
#endif

/* The directory of this executable, for finding arrun and arbench-mpi beside it. */
static int self_dir(char *buf, size_t len, char *exe, size_t exe_len)
{
    ssize_t n = readlink("/proc/self/exe", exe, exe_len - 1);
    if (n <= 0) {
        perror("arbench: readlink /proc/self/exe");
        return -1;
    }
    exe[n] = '\0';
    snprintf(buf, len, "%s", exe);
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    return 0;
}

/* Runs argv with its stdout read as one sweep's CSV; stderr passes through. */
static int run_child(char **argv, struct bench_result *res, size_t max, char *transport)
{
    int fds[2];
    if (pipe(fds)) {
        perror("arbench: pipe");
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("arbench: fork");
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "arbench: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    int n = f ? bench_csv_read(f, res, max, transport, 64) : -1;
    if (f)
        fclose(f);
    else
        close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != BENCH_EXIT_FAIL)) {
        fprintf(stderr, "arbench: %s %s %d\n", argv[0],
                WIFEXITED(st) ? "exited with status" : "was killed by signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        return -1;
    }
    if (n < 0)
        fprintf(stderr, "arbench: no results from %s\n", argv[0]);
    return n;
}

/* arrun beside us: ../arrun/arrun in the build tree, arrun when installed, else PATH. */
int bench_run_procs(const struct bench_opts *o, struct bench_result *res, size_t nsizes,
                    char *transport)
{
    char dir[PATH_MAX], exe[PATH_MAX], arrun[PATH_MAX + 16], nbuf[16], sweep[1024];
    char *argv[40];
    int k = 0;

    if (self_dir(dir, sizeof(dir), exe, sizeof(exe)))
        return -1;
    snprintf(arrun, sizeof(arrun), "%s/../arrun/arrun", dir);
    if (access(arrun, X_OK)) {
        snprintf(arrun, sizeof(arrun), "%s/arrun", dir);
        if (access(arrun, X_OK))
            snprintf(arrun, sizeof(arrun), "arrun");
    }
    snprintf(nbuf, sizeof(nbuf), "%d", o->nranks);
    argv[k++] = arrun;
    argv[k++] = "-n";
    argv[k++] = nbuf;
    if (o->no_bind) {
        argv[k++] = "--bind";
        argv[k++] = "none";
    }
    if (o->shared_heap)
        argv[k++] = "--shared-heap";
    argv[k++] = "--";
    argv[k++] = exe;
    k += bench_sweep_args(o, argv + k, sweep, sizeof(sweep));
    argv[k++] = "--device";
    argv[k++] = (char *)bench_device_name(o->device);
    argv[k++] = "--csv-stdout";
    argv[k] = NULL;
    int n = run_child(argv, res, nsizes, transport);
    return n == (int)nsizes ? 0 : -1;
}

int bench_run_mpi(const struct bench_opts *o, struct bench_result *res, size_t nsizes)
{
    char dir[PATH_MAX], exe[PATH_MAX], prog[2 * PATH_MAX + 64], nbuf[16], sweep[1024], tr[64];
    char *argv[40];
    int k = 0;

    if (self_dir(dir, sizeof(dir), exe, sizeof(exe)))
        return -1;
    /* Installed: the libexec directory, relative to bin; in the build tree: beside us. */
    snprintf(prog, sizeof(prog), "%s/%s/arbench-mpi", dir, ARBENCH_MPI_FROM_BINDIR);
    if (ARBENCH_MPI_FROM_BINDIR[0] == '/')
        snprintf(prog, sizeof(prog), "%s/arbench-mpi", ARBENCH_MPI_FROM_BINDIR);
    if (access(prog, X_OK)) {
        char beside[PATH_MAX + 16];
        snprintf(beside, sizeof(beside), "%s/arbench-mpi", dir);
        if (access(beside, X_OK)) {
            fprintf(stderr,
                    "arbench: --compare mpi: neither %s nor %s exists (arcomm built without "
                    "Open MPI? install libopenmpi-dev and rebuild)\n",
                    prog, beside);
            return -1;
        }
        snprintf(prog, sizeof(prog), "%s", beside);
    }
    snprintf(nbuf, sizeof(nbuf), "%d", o->nranks);
    /* A build-time mpirun path when it still exists, else whatever PATH has. */
    argv[k++] = access(ARBENCH_MPIRUN, X_OK) == 0 ? ARBENCH_MPIRUN : "mpirun";
    argv[k++] = "--allow-run-as-root";
    argv[k++] = "--oversubscribe";
    if (o->no_bind) {
        argv[k++] = "--bind-to";
        argv[k++] = "none";
    }
    argv[k++] = "-np";
    argv[k++] = nbuf;
    argv[k++] = prog;
    k += bench_sweep_args(o, argv + k, sweep, sizeof(sweep));
    argv[k++] = "--csv-stdout";
    argv[k] = NULL;
    int n = run_child(argv, res, nsizes, tr);
    return n == (int)nsizes ? 0 : -1;
}
