/* SPDX-License-Identifier: MIT */
/*
 * arrun — starts the N ranks of one arcomm job on this host and watches them.
 *
 * arrun makes a fresh communicator id, forks N copies of the program with the ARCOMM_*
 * environment comm_init_env reads, binds each through hwloc, and then waits.  The first
 * rank to fail ends the job: the others get SIGTERM, then SIGKILL after a grace period,
 * and arrun exits with the failed rank's status.  Whatever way the job ends, no rank,
 * no segment name and no fd outlives arrun.
 *
 * The ranks share one process group (not arrun's), so killpg() reaches them and
 * whatever they started.  If arrun itself is SIGKILLed, the ranks die by PDEATHSIG and
 * a watcher process (watch.c) kills the rest of the group and removes the job's names.  Ranks are
 * left as zombies until the very end: an unreaped rank keeps the group's id from being reused,
 * which makes every killpg() safe.
 */
#include "arrun.h"

#include <arcomm.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ARRUN_DRAIN_S 1.0 /* how long output is still read once every rank is gone */

void arrun_msg(const char *fmt, ...)
{
    char buf[1024];
    size_t n = (size_t)snprintf(buf, sizeof(buf), "arrun: ");
    va_list ap;
    int m;

    va_start(ap, fmt);
    m = vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
    va_end(ap);
    if (m > 0)
        n += (size_t)m;
    if (n > sizeof(buf) - 2)
        n = sizeof(buf) - 2; /* truncated: keep room for the newline */
    buf[n++] = '\n';

    for (const char *p = buf; n > 0;) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *plural(int n)
{
    return n == 1 ? "" : "s";
}

/* ---- the job ------------------------------------------------------------------------- */

enum job_phase {
    JOB_RUNNING, /* every rank that exited so far exited 0 */
    JOB_ENDING,  /* the ranks were told to stop (SIGTERM or the forwarded signal) */
    JOB_KILLING, /* SIGKILL sent */
};

struct job {
    const struct arrun_opts *opts;
    struct arrun_rank *ranks;
    int nstarted; /* ranks forked, 0 .. nranks */
    int nalive;   /* started and not seen exiting */
    pid_t pgid;   /* the ranks' process group: rank 0's pid */
    int sigfd;    /* SIGCHLD, the signals that end the job, those passed on (job_read_signals) */
    enum job_phase phase;
    int exit_code;             /* what arrun exits with */
    double deadline;           /* --timeout, on the monotonic clock; 0 = none */
    double kill_at;            /* JOB_ENDING: when SIGKILL follows */
    struct arrun_watch *watch; /* the watcher, told when the group is no longer ours */
};

static void job_signal(struct job *j, int signo)
{
    if (j->nstarted == 0 || j->pgid <= 0)
        return;
    if (killpg(j->pgid, signo) < 0 && errno != ESRCH)
        arrun_msg("cannot send signal %d to the ranks: %s", signo, strerror(errno));
}

/* The first cause to end the job sets arrun's exit status; later ones change nothing. */
static void job_end(struct job *j, int exit_code, int signo)
{
    if (j->phase != JOB_RUNNING)
        return;
    j->exit_code = exit_code;
    j->phase = JOB_ENDING;
    j->kill_at = now_s() + j->opts->grace_s;
    job_signal(j, signo);
}

static void report_failure(struct job *j, int rank)
{
    const struct arrun_rank *r = &j->ranks[rank];
    char how[160], rest[64] = "";

    if (r->signo)
        snprintf(how, sizeof(how), "was killed by signal %d (%s)%s", r->signo, strsignal(r->signo),
                 r->core ? ", core dumped" : "");
    else
        snprintf(how, sizeof(how), "exited with status %d", r->code);
    if (j->nalive > 0)
        snprintf(rest, sizeof(rest), "; ending the other %d rank%s", j->nalive, plural(j->nalive));
    arrun_msg("rank %d (pid %d) %s%s", rank, (int)r->pid, how, rest);
}

/*
 * Looks at every rank still running.  WNOWAIT leaves an exited rank a zombie (see the
 * top of this file); its SIGCHLD has been consumed, so it is not seen twice.
 */
static void job_check_ranks(struct job *j)
{
    for (int i = 0; i < j->nstarted; i++) {
        struct arrun_rank *r = &j->ranks[i];
        siginfo_t si;

        if (r->exited)
            continue;
        memset(&si, 0, sizeof(si));
        /* No EINTR here: every signal arrun handles is blocked. */
        if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
            /* Only if someone else reaped our child: count it as failed, say so. */
            arrun_msg("cannot wait for rank %d (pid %d): %s", i, (int)r->pid, strerror(errno));
            si.si_pid = r->pid;
            si.si_code = CLD_EXITED;
            si.si_status = ARRUN_EXIT_ERROR;
        }
        if (si.si_pid == 0)
            continue;
        r->exited = true;
        j->nalive--;
        if (si.si_code == CLD_EXITED) {
            r->code = si.si_status;
        } else {
            r->signo = si.si_status;
            r->core = si.si_code == CLD_DUMPED;
        }
        if (j->opts->verbose >= 2)
            arrun_msg("rank %d (pid %d) ended: %s %d", i, (int)r->pid,
                      r->signo ? "signal" : "status", r->signo ? r->signo : r->code);
        if ((r->code != 0 || r->signo != 0) && j->phase == JOB_RUNNING) {
            report_failure(j, i);
            job_end(j, r->signo ? 128 + r->signo : r->code, SIGTERM);
        }
    }
}

/*
 * What mpirun passes on without ending the job: SIGUSR1 and SIGUSR2 go to every rank
 * (a program's "checkpoint now", "dump your state"); SIGTSTP (Ctrl-Z) stops the ranks'
 * whole group with SIGSTOP and then arrun itself, and SIGCONT (the shell's fg or bg)
 * continues the group.
 * Without this the default actions applied to arrun alone: SIGUSR1 killed it, and with
 * it the whole job; Ctrl-Z stopped arrun while the ranks ran on.
 */
static void job_pass_on(struct job *j, int signo)
{
    if (j->opts->verbose >= 2)
        arrun_msg("got signal %d (%s); passing it on to the ranks", signo, strsignal(signo));
    if (signo == SIGUSR1 || signo == SIGUSR2) {
        /* To the ranks themselves, as mpirun does: what they started (a shell's `sleep`)
         * would die of it.  A rank not reaped yet keeps its pid, so this reaches it. */
        for (int i = 0; i < j->nstarted; i++)
            if (!j->ranks[i].exited && kill(j->ranks[i].pid, signo) < 0 && errno != ESRCH)
                arrun_msg("cannot send signal %d to rank %d: %s", signo, i, strerror(errno));
        return;
    }
    if (signo == SIGCONT) {
        job_signal(j, signo);
        return;
    }
    /* SIGSTOP, not SIGTSTP: a rank cannot ignore it, so the job stops as a whole. */
    job_signal(j, SIGSTOP);
    raise(SIGSTOP);
    /* Here once continued: the SIGCONT that did it is read next, and passed on. */
}

static bool passed_on(int signo)
{
    return signo == SIGUSR1 || signo == SIGUSR2 || signo == SIGTSTP || signo == SIGCONT;
}

static void job_read_signals(struct job *j)
{
    struct signalfd_siginfo si;
    bool child = false;

    while (read(j->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        int signo = (int)si.ssi_signo;

        if (signo == SIGCHLD) {
            child = true;
        } else if (passed_on(signo)) {
            /* Once the ranks are being killed, stopping them would only delay it. */
            if (j->phase != JOB_KILLING)
                job_pass_on(j, signo);
        } else if (j->phase == JOB_RUNNING) {
            arrun_msg("got signal %d (%s); ending %d rank%s", signo, strsignal(signo), j->nalive,
                      plural(j->nalive));
            job_end(j, 128 + signo, signo);
        } else if (j->phase == JOB_ENDING) {
            /* Asked again while ranks are still stopping: no more patience. */
            arrun_msg("got signal %d (%s) again; killing the ranks", signo, strsignal(signo));
            job_signal(j, SIGKILL);
            j->phase = JOB_KILLING;
        }
    }
    if (child)
        job_check_ranks(j);
}

/* Reads the ranks' output pipes that poll() marked; drops those whose reader is gone. */
static void job_pump_output(struct job *j, const struct pollfd *pfds, int npfds)
{
    for (int k = 1; k < npfds; k++) {
        if (!pfds[k].revents)
            continue;
        for (int i = 0; i < j->nstarted; i++) {
            struct label_stream *s[2] = {&j->ranks[i].out, &j->ranks[i].err};
            for (int m = 0; m < 2; m++) {
                if (s[m]->fd != pfds[k].fd)
                    continue;
                label_stream_pump(s[m]);
                /*
                 * arrun's own stdout or stderr is closed (| head): closing the pipe
                 * gives the rank EPIPE, as it would get without --label.  Not while
                 * its --output-filename file still takes the output.
                 */
                if (s[m]->fd >= 0 && s[m]->copy < 0 && label_dest_broken(s[m]->dest)) {
                    close(s[m]->fd);
                    s[m]->fd = -1;
                }
            }
        }
    }
}

static int job_fill_pollfds(struct job *j, struct pollfd *pfds, bool with_signals)
{
    int n = 0;

    if (with_signals)
        pfds[n++] = (struct pollfd){.fd = j->sigfd, .events = POLLIN};
    else
        pfds[n++] = (struct pollfd){.fd = -1}; /* keeps index 0 for the signalfd */
    for (int i = 0; i < j->nstarted; i++) {
        if (j->ranks[i].out.fd >= 0)
            pfds[n++] = (struct pollfd){.fd = j->ranks[i].out.fd, .events = POLLIN};
        if (j->ranks[i].err.fd >= 0)
            pfds[n++] = (struct pollfd){.fd = j->ranks[i].err.fd, .events = POLLIN};
    }
    return n;
}

static int ms_until(double t)
{
    double ms = ceil((t - now_s()) * 1000.0);
    return ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Runs until every started rank has exited; returns -1 if arrun cannot go on waiting. */
static int job_wait(struct job *j, struct pollfd *pfds)
{
    while (j->nalive > 0) {
        int npfds = job_fill_pollfds(j, pfds, true);
        int timeout = -1;

        if (j->phase == JOB_RUNNING && j->deadline > 0)
            timeout = ms_until(j->deadline);
        else if (j->phase == JOB_ENDING)
            timeout = ms_until(j->kill_at);

        if (poll(pfds, (nfds_t)npfds, timeout) < 0) {
            if (errno == EINTR)
                continue;
            arrun_msg("poll: %s; killing the ranks", strerror(errno));
            job_end(j, ARRUN_EXIT_ERROR, SIGKILL);
            return -1;
        }
        job_pump_output(j, pfds, npfds);
        if (pfds[0].revents)
            job_read_signals(j);

        if (j->phase == JOB_RUNNING && j->deadline > 0 && now_s() >= j->deadline && j->nalive > 0) {
            arrun_msg("job timed out after %g s; ending %d rank%s", j->opts->timeout_s, j->nalive,
                      plural(j->nalive));
            job_end(j, ARRUN_EXIT_TIMEOUT, SIGTERM);
        }
        if (j->phase == JOB_ENDING && now_s() >= j->kill_at && j->nalive > 0) {
            arrun_msg("%d rank%s still running %g s after being told to stop; killing %s",
                      j->nalive, plural(j->nalive), j->opts->grace_s,
                      j->nalive == 1 ? "it" : "them");
            job_signal(j, SIGKILL);
            j->phase = JOB_KILLING;
        }
    }
    return 0;
}

/* Every rank has exited: end what they left running, take their last output, reap. */
static void job_finish(struct job *j, struct pollfd *pfds)
{
    double until = now_s() + ARRUN_DRAIN_S;

    /* Processes the ranks started and left behind are still in the group. */
    job_signal(j, SIGKILL);

    for (;;) {
        int npfds = job_fill_pollfds(j, pfds, false);
        if (npfds == 1 || now_s() >= until)
            break;
        if (poll(pfds, (nfds_t)npfds, ms_until(until)) < 0 && errno != EINTR)
            break;
        job_pump_output(j, pfds, npfds);
    }
    for (int i = 0; i < j->nstarted; i++) {
        label_stream_finish(&j->ranks[i].out);
        label_stream_finish(&j->ranks[i].err);
    }

    /* Once the ranks are reaped the group's id may be reused: the watcher forgets it. */
    arrun_watch_group(j->watch, 0);
    for (int i = 0; i < j->nstarted; i++) {
        while (waitpid(j->ranks[i].pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}

static int run_job(const struct arrun_opts *opts, const char *id, struct arrun_binding *binding,
                   const struct rlimit *nofile)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, dfl = {.sa_handler = SIG_DFL}, old_pipe;
    sigset_t watched, orig_mask;
    struct pollfd *pfds = NULL;
    struct arrun_watch watch = {.pid = -1, .fd = -1};
    struct job j = {.opts = opts, .sigfd = -1, .watch = &watch};
    struct arrun_spawn sp = {
        .opts = opts,
        .binding = binding,
        .id = id,
        .parent = getpid(),
        .orig_mask = &orig_mask,
        .stdin_null = isatty(STDIN_FILENO),
        .watch = &watch,
        .nofile = nofile,
    };
    int status = ARRUN_EXIT_ERROR;

    /*
     * Signals arrive through a signalfd, in the poll() loop, never in a handler.
     * SIGCHLD must not be ignored (inherited SIG_IGN would reap the ranks for us);
     * SIGPIPE is ignored so that a closed output makes write() fail instead.
     */
    sigemptyset(&watched);
    sigaddset(&watched, SIGCHLD);
    sigaddset(&watched, SIGINT);
    sigaddset(&watched, SIGTERM);
    sigaddset(&watched, SIGHUP);
    sigaddset(&watched, SIGUSR1);
    sigaddset(&watched, SIGUSR2);
    sigaddset(&watched, SIGTSTP);
    sigaddset(&watched, SIGCONT);
    sigaction(SIGCHLD, &dfl, NULL);
    sigaction(SIGPIPE, &ign, &old_pipe);
    sp.pipe_ignored = old_pipe.sa_handler == SIG_IGN;
    if (sigprocmask(SIG_BLOCK, &watched, &orig_mask) < 0) {
        arrun_msg("sigprocmask: %s", strerror(errno));
        return ARRUN_EXIT_ERROR;
    }
    j.sigfd = signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
    if (j.sigfd < 0) {
        arrun_msg("signalfd: %s", strerror(errno));
        goto err_mask;
    }

    j.ranks = calloc((size_t)opts->nranks, sizeof(*j.ranks));
    pfds = calloc(2 * (size_t)opts->nranks + 1, sizeof(*pfds));
    if (!j.ranks || !pfds) {
        arrun_msg("out of memory for %d ranks", opts->nranks);
        goto err_free;
    }
    for (int i = 0; i < opts->nranks; i++)
        j.ranks[i].out.fd = j.ranks[i].err.fd = j.ranks[i].out.copy = j.ranks[i].err.copy = -1;

    /* Without a watcher the job still runs; only a SIGKILLed arrun would leave more. */
    arrun_watch_start(&watch, opts, id, &orig_mask);

    if (opts->timeout_s > 0)
        j.deadline = now_s() + opts->timeout_s;
    for (int i = 0; i < opts->nranks; i++) {
        struct arrun_rank *r = &j.ranks[i];
        int rc;

        sp.pgid = j.pgid; /* 0 for rank 0: it makes the group */
        rc = arrun_spawn_rank(&sp, i, r);
        if (r->pid > 0) {
            if (i == 0)
                j.pgid = r->pid;
            j.nstarted = i + 1;
            j.nalive++;
        }
        if (rc < 0) {
            /* Like a shell: 127 when the file is gone, 126 when it cannot be run. */
            int code = r->pid <= 0 ? ARRUN_EXIT_ERROR : rc == -ENOENT ? 127 : 126;
            int others = j.nalive - (r->pid > 0 ? 1 : 0);
            if (others > 0)
                arrun_msg("ending the %d rank%s already started", others, plural(others));
            job_end(&j, code, SIGTERM);
            break;
        }
    }

    job_wait(&j, pfds);
    job_finish(&j, pfds);
    arrun_remove_segments(opts, id);
    status = j.exit_code;

err_free:
    arrun_watch_done(&watch);
    for (int i = 0; j.ranks && i < opts->nranks; i++) {
        label_stream_free(&j.ranks[i].out);
        label_stream_free(&j.ranks[i].err);
    }
    free(j.ranks);
    free(pfds);
    close(j.sigfd);
err_mask:
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    return status;
}

/*
 * A closed stdin, stdout or stderr (a daemon, cron, `arrun ... <&-`) would be the next fd
 * arrun opens: rank 0 then inherited a closed stdin (its first open() became its
 * "stdin"), and arrun's messages could land in one of its own pipes.  /dev/null takes
 * the place of each, as a shell's redirection would.
 */
static void std_fds_open(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        int null_fd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (null_fd >= 0 && null_fd != fd) {
            dup2(null_fd, fd);
            close(null_fd);
        }
    }
}

/*
 * --label keeps two pipes a rank open in arrun (four with --output-filename), which the
 * usual soft limit of 1024 fds ran out of at about 500 ranks, after half of them had
 * started.  The soft limit is raised to what the job needs, up to the hard limit, before
 * any rank starts (the ranks get the limit arrun was given back: orig); past the hard
 * limit arrun says so and starts nothing.  Returns 0, or the exit status.
 */
static int fd_limit_raise(const struct arrun_opts *o, struct rlimit *orig, bool *raised)
{
    int per_rank = o->label ? (o->output_dir ? 4 : 2) : 0;
    rlim_t need = (rlim_t)per_rank * (rlim_t)o->nranks + 64;
    struct rlimit now;

    *raised = false;
    if (per_rank == 0 || getrlimit(RLIMIT_NOFILE, orig) < 0 || orig->rlim_cur >= need)
        return 0;
    if (orig->rlim_max != RLIM_INFINITY && orig->rlim_max < need) {
        arrun_msg("--label with %d ranks needs about %llu file descriptors (%d a rank), but "
                  "arrun may open at most %llu (ulimit -Hn): raise that limit, or leave out "
                  "--label (the ranks then write to arrun's stdout and stderr themselves)",
                  o->nranks, (unsigned long long)need, per_rank,
                  (unsigned long long)orig->rlim_max);
        return ARRUN_EXIT_ERROR;
    }
    now = *orig;
    now.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &now) < 0) {
        arrun_msg("cannot raise the file descriptor limit to %llu for --label with %d ranks: %s",
                  (unsigned long long)need, o->nranks, strerror(errno));
        return ARRUN_EXIT_ERROR;
    }
    *raised = true;
    return 0;
}

int main(int argc, char **argv)
{
    struct arrun_opts opts;
    struct arrun_binding binding;
    struct rlimit nofile;
    bool nofile_raised;
    comm_id_t id;
    int status;

    std_fds_open();
    status = arrun_parse_options(argc, argv, &opts);
    if (status >= 0)
        goto out;

    /* One job, one id: an ARCOMM_ID arrun inherited belongs to some other job. */
    if (comm_id_new(&id) != COMM_OK) {
        arrun_msg("cannot make a job id: %s", comm_last_error(NULL));
        status = ARRUN_EXIT_ERROR;
        goto out;
    }
    if (opts.verbose >= 2)
        arrun_msg("job id %s, %d rank%s of %s", id.str, opts.nranks, plural(opts.nranks),
                  opts.path);

    status = arrun_binding_plan(&opts, &binding);
    if (status < 0) {
        status = status == -EINVAL ? ARRUN_EXIT_USAGE : ARRUN_EXIT_ERROR;
        goto out;
    }
    /* Every rank's directory, before any rank starts: a bad DIR is a usage error. */
    if (opts.output_dir) {
        status = arrun_output_prepare(&opts);
        if (status != 0) {
            arrun_binding_free(&binding);
            goto out;
        }
    }
    status = arrun_heap_prepare(&opts);
    if (status == 0)
        status = fd_limit_raise(&opts, &nofile, &nofile_raised);
    if (status != 0) {
        arrun_heap_remove(&opts);
        arrun_binding_free(&binding);
        goto out;
    }
    fflush(NULL); /* nothing buffered by arrun may be written twice by a forked child */
    status = run_job(&opts, id.str, &binding, nofile_raised ? &nofile : NULL);
    arrun_heap_remove(&opts);
    arrun_binding_free(&binding);
out:
    arrun_opts_free(&opts);
    return status;
}
