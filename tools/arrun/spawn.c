/* SPDX-License-Identifier: MIT */
/*
 * arrun: one rank's process.  Between fork and exec the child joins the job's process
 * group, asks to die with arrun, takes its stdio, its cpuset and its ARCOMM_*
 * environment, and drops every other fd.  arrun is single-threaded, so the child may
 * call malloc-using functions (setenv, hwloc) safely before exec.
 */
#include "arrun.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

/* Tells the parent why exec failed; the pipe closes on a successful exec. */
static void __attribute__((noreturn)) child_fail(int report_fd, int err)
{
    ssize_t w = write(report_fd, &err, sizeof(err));
    (void)w; /* nothing more can be done: the parent then sees EOF and a rank exiting 127 */
    _exit(127);
}

static void set_env_int(const char *name, int value)
{
    char text[16];
    snprintf(text, sizeof(text), "%d", value);
    setenv(name, text, 1);
}

/* "0-3,8" for the cpus this process may run on (what sched_getaffinity says). */
static void affinity_list(char *buf, size_t cap)
{
    cpu_set_t set;
    size_t len = 0;

    buf[0] = '\0';
    if (sched_getaffinity(0, sizeof(set), &set) < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    for (int c = 0; c < CPU_SETSIZE && len + 24 < cap; c++) {
        int last = c;
        if (!CPU_ISSET(c, &set))
            continue;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set))
            last++;
        if (last == c)
            len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? "," : "", c);
        else
            len += (size_t)snprintf(buf + len, cap - len, "%s%d-%d", len ? "," : "", c, last);
        c = last;
    }
}

/* No fd of arrun's, nor any stray one arrun inherited, reaches the program. */
static void cloexec_from_3(void)
{
    if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) == 0)
        return;
    /* Kernels before 5.11: mark them one by one. */
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = 3; fd < max; fd++)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static void __attribute__((noreturn))
child_exec(const struct arrun_spawn *sp, int rank, int report_fd, int out_fd, int err_fd)
{
    const struct arrun_opts *o = sp->opts;

    /* Undo what arrun set up for itself: its blocked signals, its ignored SIGPIPE, its
     * raised fd limit (a program using select() needs fds below 1024). */
    signal(SIGPIPE, sp->pipe_ignored ? SIG_IGN : SIG_DFL);
    sigprocmask(SIG_SETMASK, sp->orig_mask, NULL);
    if (sp->nofile != NULL)
        setrlimit(RLIMIT_NOFILE, sp->nofile);

    /*
     * Die with arrun, also when it is SIGKILLed.  If arrun died before the prctl took
     * effect, this child was already reparented: end it now rather than run orphaned.
     */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != sp->parent)
        _exit(127);

    /* One group for the whole job, not arrun's, so that killpg() reaches every rank. */
    if (setpgid(0, sp->pgid) < 0)
        child_fail(report_fd, errno);

    /*
     * Bound and reported before stdout and stderr are the rank's: a warning or the
     * --report-bindings line goes to arrun's own stderr, unlabelled, before exec.
     */
    if (sp->binding->sets) {
        /*
         * Only this thread exists now; the binding is inherited by exec and by every
         * thread the program starts, so binding the thread binds the whole rank.
         */
        if (hwloc_set_cpubind(sp->binding->topo, sp->binding->sets[rank], HWLOC_CPUBIND_THREAD) < 0)
            arrun_msg("warning: rank %d: cannot bind to its cpus: %s", rank, strerror(errno));
    }
    if (o->report_bindings) {
        char pus[1024];
        affinity_list(pus, sizeof(pus));
        arrun_msg("rank %d (pid %d): %s (PUs %s)", rank, (int)getpid(),
                  sp->binding->where ? sp->binding->where[rank] : "not bound", pus);
    }

    if (rank > 0 || sp->stdin_null) {
        int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0)
            child_fail(report_fd, errno);
    }
    if (out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0)
        child_fail(report_fd, errno);
    if (err_fd >= 0 && dup2(err_fd, STDERR_FILENO) < 0)
        child_fail(report_fd, errno);
    cloexec_from_3();

    /* -x first, so that arrun's per-rank values below cannot be overridden. */
    for (int i = 0; i < o->nenv; i++)
        setenv(o->env[i].name, o->env[i].value, 1);
    /* Thread pools size themselves from it; a value the user gave wins. */
    if (o->cpus_per_rank > 0) {
        char text[16];
        snprintf(text, sizeof(text), "%d", o->cpus_per_rank);
        setenv("OMP_NUM_THREADS", text, 0);
    }

    set_env_int("ARCOMM_RANK", rank);
    set_env_int("ARCOMM_SIZE", o->nranks);
    /* One host: local and global numbering are the same. */
    set_env_int("ARCOMM_LOCAL_RANK", rank);
    set_env_int("ARCOMM_LOCAL_SIZE", o->nranks);
    setenv("ARCOMM_ID", sp->id, 1);
    /* torchrun's names for the same numbers, so its programs start unchanged. */
    set_env_int("RANK", rank);
    set_env_int("WORLD_SIZE", o->nranks);
    set_env_int("LOCAL_RANK", rank);
    set_env_int("LOCAL_WORLD_SIZE", o->nranks);

    execv(o->path, o->argv);
    child_fail(report_fd, errno);
}

static int label_pipe(int fds[2])
{
    /* Non-blocking read end: arrun drains whatever is there and returns to poll(). */
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    if (fcntl(fds[0], F_SETFL, O_NONBLOCK) < 0) {
        int err = -errno;
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    return 0;
}

int arrun_spawn_rank(const struct arrun_spawn *sp, int rank, struct arrun_rank *r)
{
    int report[2], out[2] = {-1, -1}, err[2] = {-1, -1}, file_out = -1, file_err = -1;
    int status, child_errno = 0;
    ssize_t n;
    pid_t pid;

    if (pipe2(report, O_CLOEXEC) < 0) {
        status = -errno;
        arrun_msg("cannot make a pipe for rank %d: %s", rank, strerror(errno));
        return status;
    }
    if (sp->opts->output_dir) {
        status = arrun_output_open(sp->opts, rank, &file_out, &file_err);
        if (status < 0)
            goto err_close;
        /* Without --label the rank writes its files itself; arrun is not in the way. */
        if (!sp->opts->label) {
            out[1] = file_out;
            err[1] = file_err;
            file_out = file_err = -1;
        }
    }
    if (sp->opts->label) {
        status = label_pipe(out);
        if (status == 0)
            status = label_pipe(err);
        if (status < 0) {
            arrun_msg("cannot make the output pipes of rank %d: %s", rank, strerror(-status));
            goto err_close;
        }
    }

    pid = fork();
    if (pid < 0) {
        status = -errno;
        arrun_msg("cannot start rank %d: fork: %s", rank, strerror(errno));
        goto err_close;
    }
    if (pid == 0) {
        close(report[0]);
        child_exec(sp, rank, report[1], out[1], err[1]);
    }
    r->pid = pid;
    /* Before anything else: from now on, arrun dying would leave this group behind. */
    if (sp->pgid == 0 && sp->watch)
        arrun_watch_group(sp->watch, pid);

    /* The write ends belong to the child now; EOF on report means exec succeeded. */
    close(report[1]);
    report[1] = -1;
    if (out[1] >= 0) {
        close(out[1]);
        close(err[1]);
        out[1] = err[1] = -1;
    }
    do {
        n = read(report[0], &child_errno, sizeof(child_errno));
    } while (n < 0 && errno == EINTR);
    close(report[0]);
    report[0] = -1;
    if (n == (ssize_t)sizeof(child_errno)) {
        status = -child_errno;
        arrun_msg("rank %d: cannot run %s: %s", rank, sp->opts->path, strerror(child_errno));
        goto err_close;
    }

    if (sp->opts->label) {
        int rc_out = label_stream_init(&r->out, rank, out[0], STDOUT_FILENO, file_out);
        int rc_err;

        file_out = -1; /* the stream owns it now */
        rc_err = label_stream_init(&r->err, rank, err[0], STDERR_FILENO, file_err);
        file_err = -1;
        if (rc_out < 0 || rc_err < 0) {
            status = -ENOMEM;
            arrun_msg("out of memory for the output of rank %d", rank);
            goto err_close;
        }
    }
    return 0;

err_close:
    /* Closes what is still ours; a stream that took an fd owns it (label_stream_free). */
    if (report[0] >= 0)
        close(report[0]);
    if (report[1] >= 0)
        close(report[1]);
    if (r->out.fd != out[0] && out[0] >= 0)
        close(out[0]);
    if (out[1] >= 0)
        close(out[1]);
    if (r->err.fd != err[0] && err[0] >= 0)
        close(err[0]);
    if (err[1] >= 0)
        close(err[1]);
    if (file_out >= 0)
        close(file_out);
    if (file_err >= 0)
        close(file_err);
    return status;
}
