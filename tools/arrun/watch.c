/* SPDX-License-Identifier: MIT */
/*
 * arrun's watcher: what ends a job when arrun itself cannot.
 *
 * The ranks die with arrun on their own (PR_SET_PDEATHSIG), but what they started does
 * not, and a rank killed during rendezvous leaves its segment name behind.  So before
 * the first rank, arrun forks a watcher in a process group of its own, connected by a
 * pipe.  arrun tells it the ranks' group and, at the normal end of the job (after arrun
 * cleaned up itself), that it is done; the watcher then exits and arrun reaps it.  EOF
 * without "done" means arrun died: the watcher SIGKILLs the ranks' group, waits until
 * no live process is left in it, removes every /dev/shm name of the job's id and the
 * --shared-heap link (heap.c), and exits.
 *
 * The group's id stays safe to signal: arrun's unreaped ranks hold it while arrun
 * lives (arrun tells the watcher to forget the group before it reaps them), and once
 * arrun dies the watcher signals it at once, while the ranks (killed by PDEATHSIG at
 * the same moment) or their children still hold it.  A process that
 * left the group (setsid, setpgid) is out of reach, as it is for arrun.
 */
#include "arrun.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ARRUN_ID_PREFIX  "arc1-"
#define ARRUN_ID_HEX     32
#define ARRUN_SHM_PREFIX "arcomm-"

#define WATCH_GROUP 'G' /* value: the ranks' process group; 0: no group to end any more */
#define WATCH_DONE  'D' /* arrun ended the job itself: nothing to do */

#define WATCH_GONE_S 5.0 /* how long the watcher waits for the group to die */

/* One message on the pipe: 8 bytes, written in one write(2), so never split. */
struct watch_msg {
    int32_t kind;  /* WATCH_GROUP or WATCH_DONE */
    int32_t value; /* the process group for WATCH_GROUP */
};

/*
 * The job's shared-memory names: every /dev/shm entry whose name starts with
 * "arcomm-" + the id's hex digits (the rendezvous segment and any name derived from
 * it by a suffix).  A rank killed during rendezvous (before every rank attached and
 * the name was unlinked) would otherwise leave it in /dev/shm.
 */
void arrun_remove_segments(const struct arrun_opts *o, const char *id)
{
    char prefix[sizeof(ARRUN_SHM_PREFIX) + ARRUN_ID_HEX], name[NAME_MAX + 2];
    const char *hex = id + strlen(ARRUN_ID_PREFIX);
    size_t plen;
    struct dirent *e;
    DIR *dir;

    if (strncmp(id, ARRUN_ID_PREFIX, strlen(ARRUN_ID_PREFIX)) != 0 || strlen(hex) != ARRUN_ID_HEX) {
        if (o->verbose >= 1)
            arrun_msg("note: id '%s' has an unknown form; no segment name to clean up", id);
        return;
    }
    plen = (size_t)snprintf(prefix, sizeof(prefix), ARRUN_SHM_PREFIX "%s", hex);

    dir = opendir("/dev/shm");
    if (!dir) {
        /* No /dev/shm to look at: at least the rendezvous segment's own name. */
        snprintf(name, sizeof(name), "/%s", prefix);
        if (shm_unlink(name) < 0 && errno != ENOENT)
            arrun_msg("warning: cannot remove shared memory %s: %s", name, strerror(errno));
        return;
    }
    while ((e = readdir(dir)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        snprintf(name, sizeof(name), "/%s", e->d_name);
        if (shm_unlink(name) < 0 && errno != ENOENT)
            arrun_msg("warning: cannot remove shared memory %s: %s", name, strerror(errno));
        else if (o->verbose >= 1)
            arrun_msg("note: removed shared memory %s left by the job", name);
    }
    closedir(dir);
}

/* True while some process of group pgid has not exited (zombies do not count). */
static bool group_alive(pid_t pgid)
{
    struct dirent *e;
    bool alive = false;
    DIR *proc = opendir("/proc");

    if (!proc)
        return kill(-pgid, 0) == 0; /* no /proc: zombies then count as alive */
    while (!alive && (e = readdir(proc)) != NULL) {
        char path[300], line[512], state;
        int ppid, pgrp;
        const char *p;
        FILE *f;

        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        f = fopen(path, "r");
        if (!f)
            continue;
        /* "pid (comm) S ppid pgrp ...": comm may hold anything, so parse after the last ')'. */
        if (fgets(line, sizeof(line), f) && (p = strrchr(line, ')')) != NULL &&
            sscanf(p + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid && state != 'Z' &&
            state != 'X')
            alive = true;
        fclose(f);
    }
    closedir(proc);
    return alive;
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void __attribute__((noreturn))
watcher_main(const struct arrun_opts *o, const char *id, int fd)
{
    struct timespec start;
    pid_t pgid = 0;

    for (;;) {
        struct watch_msg m;
        ssize_t n = read(fd, &m, sizeof(m));

        if (n < 0 && errno == EINTR)
            continue;
        if (n == (ssize_t)sizeof(m) && m.kind == WATCH_DONE)
            _exit(0);
        if (n == (ssize_t)sizeof(m) && m.kind == WATCH_GROUP) {
            pgid = m.value;
            continue;
        }
        break; /* EOF (or a broken pipe): arrun is gone without saying done */
    }

    /* Again and again: a process of the group may still be forking. */
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (pgid > 0 && killpg(pgid, SIGKILL) == 0 && group_alive(pgid)) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) * 1e-9 >
            WATCH_GONE_S) {
            arrun_msg("warning: processes of the job (group %d) still run %g s after SIGKILL",
                      (int)pgid, WATCH_GONE_S);
            break;
        }
        sleep_s(0.01);
    }
    arrun_remove_segments(o, id);
    arrun_heap_remove(o);
    if (pgid > 0)
        arrun_msg("arrun ended before its job did: killed what was left of the job (process "
                  "group %d) and removed its shared memory",
                  (int)pgid);
    _exit(0);
}

int arrun_watch_start(struct arrun_watch *w, const struct arrun_opts *o, const char *id,
                      const sigset_t *orig_mask)
{
    int fds[2];
    pid_t pid;

    w->pid = -1;
    w->fd = -1;
    if (pipe2(fds, O_CLOEXEC) < 0) {
        arrun_msg("cannot make the watcher's pipe: %s", strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        arrun_msg("cannot start the watcher: fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);

        /*
         * Out of arrun's group, so that a signal to that group (Ctrl-C, a supervisor's
         * killpg) leaves the watcher to clean up after arrun; and nothing but the pipe
         * and stderr kept, so that it holds no pipe a reader of arrun waits on.
         */
        setpgid(0, 0);
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        signal(SIGPIPE, SIG_IGN);
        sigprocmask(SIG_SETMASK, orig_mask, NULL);
        if (null_fd >= 0) {
            dup2(null_fd, STDIN_FILENO);
            dup2(null_fd, STDOUT_FILENO);
        }
        if (dup2(fds[0], 3) < 0)
            _exit(1);
        if (close_range(4, ~0u, 0) < 0) {
            for (int fd = 4; fd < 1024; fd++)
                close(fd);
        }
        watcher_main(o, id, 3);
    }
    close(fds[0]);
    w->pid = pid;
    w->fd = fds[1];
    return 0;
}

static void watch_send(struct arrun_watch *w, int32_t kind, int32_t value)
{
    struct watch_msg m = {.kind = kind, .value = value};

    if (w->fd < 0)
        return;
    while (write(w->fd, &m, sizeof(m)) < 0 && errno == EINTR)
        ;
}

void arrun_watch_group(struct arrun_watch *w, pid_t pgid)
{
    watch_send(w, WATCH_GROUP, (int32_t)pgid);
}

void arrun_watch_done(struct arrun_watch *w)
{
    watch_send(w, WATCH_DONE, 0);
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (w->pid > 0) {
        while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    w->pid = -1;
}
