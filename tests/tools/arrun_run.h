/* SPDX-License-Identifier: MIT */
/*
 * The harness of test_arrun: runs the arrun binary with a rank program, collects its
 * exit status, timing and output, and checks that nothing outlives the job.
 */
#ifndef ARCOMM_TEST_ARRUN_RUN_H
#define ARCOMM_TEST_ARRUN_RUN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#define MAX_ARGS  32
#define RUN_LIMIT 30.0 /* seconds: a run past this is a hung arrun, and a failed test */

/* Set by main from argv. */
extern const char *arrun_path, *helper_path, *allreduce_path;

struct run_opts {
    const char *env;        /* "NAME=VALUE" set for arrun, or NULL */
    const char *stdin_text; /* arrun's stdin (a pipe holding this text), or NULL: /dev/null */
    int signo;              /* sent to arrun signal_after seconds after the start */
    double signal_after;
    bool leak_fd;       /* give arrun an fd without FD_CLOEXEC, as a careless parent would */
    const char *cpus;   /* arrun's affinity ("1", "0,2"), as taskset -c gives it; NULL: ours */
    bool close_stdin;   /* start arrun with fd 0 closed */
    const char *cgroup; /* a cgroup's cgroup.procs that arrun starts in, or NULL */
    long nofile;        /* arrun's soft RLIMIT_NOFILE; 0: ours */
    long nofile_hard;   /* and its hard one; 0: ours */
    /* Called after every read of arrun's output (out: stdout so far) until it returns true:
     * signals to send once the ranks said something, checks while the job runs. */
    bool (*watch)(int arrun_pid, const char *out, void *arg);
    void *watch_arg;
};

struct run {
    int status;  /* exit status, or 128 + signal */
    double secs; /* from fork to the end of arrun and of its output */
    char *out, *err;
    size_t out_len, err_len;
};

struct env_line {
    int rank, size, local_rank, local_size, fds, pgid;
    char id[128], cpus[2048];
};

double now_s(void);
void run_free(struct run *r);
void run_arrun(struct run *r, const struct run_opts *ro, ...);
bool pid_gone(int pid, double wait_s);
int check_pids_gone(const char *out, double wait_s);
void check_no_segments(const char *id);
void check_ids_leave_nothing(const char *out);
bool id_well_formed(const char *id);
void parse_env(const char *out, int nranks, struct env_line *lines);

#endif
