/* SPDX-License-Identifier: MIT */
/*
 * arrun — the launcher: what its parts share (arrun.c: the job's event loop,
 * options.c: the command line, spawn.c: one rank's process, label.c: "[rank] " output,
 * bind.c: hwloc placement, output.c: --output-filename's files, heap.c: --shared-heap's
 * LD_PRELOAD, watch.c: the watcher).  Not installed; nothing outside tools/arrun
 * includes it.
 */
#ifndef ARRUN_H
#define ARRUN_H

#include <stdbool.h>
#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <hwloc.h>

/* Exit statuses of arrun itself (a failed rank's own status is passed through). */
#define ARRUN_EXIT_ERROR   1   /* arrun could not do its job (fork, pipe, id, ...) */
#define ARRUN_EXIT_USAGE   2   /* bad command line or program not found */
#define ARRUN_EXIT_TIMEOUT 124 /* --timeout expired, as timeout(1) says */

enum arrun_bind {
    ARRUN_BIND_NONE,
    ARRUN_BIND_CORE, /* default: rank i on core i % ncores (the cores arrun may run on) */
    ARRUN_BIND_NUMA, /* rank i on the cpus of NUMA node i % nnodes (those arrun may run on) */
};

/* One -x: NAME set to VALUE in every rank's environment. */
struct arrun_env {
    char *name;        /* malloc'd */
    const char *value; /* points into argv, or into arrun's own environment (-x NAME) */
};

struct arrun_opts {
    int nranks;             /* -n, >= 1 */
    enum arrun_bind bind;   /* --bind */
    int cpus_per_rank;      /* --cpus-per-rank; 0 = not given (one core per rank) */
    bool report_bindings;   /* --report-bindings */
    bool oversubscribe;     /* --oversubscribe: ranks sharing cores is no news */
    double timeout_s;       /* --timeout; 0 = none */
    double grace_s;         /* --grace: SIGTERM to SIGKILL */
    bool label;             /* --label */
    const char *output_dir; /* --output-filename DIR, or NULL */
    bool shared_heap;       /* --shared-heap */
    char *heap_lib;         /* with it: libarcomm_heap.so's absolute path (malloc'd) */
    char *heap_dir;         /* arrun's directory of the link to it, or NULL (malloc'd) */
    char *heap_preload;     /* the ranks' LD_PRELOAD (malloc'd; in env[] too) */
    struct arrun_env *env;  /* -x, in command-line order (a later NAME wins) */
    int nenv;
    char **argv; /* PROGRAM ARGS..., NULL-terminated (points into main's argv) */
    char *path;  /* PROGRAM resolved through PATH, as execvp would (malloc'd) */
    int verbose; /* 0 quiet, 1 info, 2 debug: from ARCOMM_LOG_LEVEL */
};

/*
 * Placement: one cpuset per rank, computed before any fork so that a child only
 * has to apply its own.  sets == NULL means the ranks run unbound.
 */
struct arrun_binding {
    hwloc_topology_t topo;
    hwloc_bitmap_t allowed; /* the cpus ranks may get: arrun's affinity, within the topology */
    bool restricted;        /* allowed leaves out some of the topology's cpus */
    hwloc_bitmap_t *sets;   /* nranks entries, or NULL */
    char **where;           /* nranks entries ("cores 0-1", "NUMA node 0, cores 0-3"), or NULL */
    int nranks;
};

/* Returns -1 to go on with the job, else the status arrun exits with (usage: 2, help: 0). */
int arrun_parse_options(int argc, char **argv, struct arrun_opts *o);
void arrun_opts_free(struct arrun_opts *o);

/*
 * --shared-heap (heap.c): arrun_heap_find, while parsing, finds libarcomm_heap.so beside
 * libarcomm (-1 to go on, else the exit status, message printed); arrun_heap_prepare,
 * before the job, puts it first in the ranks' LD_PRELOAD, through a link of arrun's own
 * where its path cannot be named there (0, or the exit status); arrun_heap_remove
 * removes that link (arrun at the end of the job, the watcher when arrun was killed).
 */
int arrun_heap_find(struct arrun_opts *o);
int arrun_heap_prepare(struct arrun_opts *o);
void arrun_heap_remove(const struct arrun_opts *o);

/* 0; -EINVAL for a --cpus-per-rank this host cannot give (message printed); -ENOMEM. */
int arrun_binding_plan(const struct arrun_opts *opts, struct arrun_binding *b);
void arrun_binding_free(struct arrun_binding *b);

/*
 * One output stream of one rank under --label.  The buffer starts with the
 * "[rank] " prefix followed by the bytes of the line not yet complete, so a whole
 * line leaves in one write(2) without another copy.
 */
struct label_stream {
    int fd;    /* read end of the rank's pipe; -1 once closed */
    int dest;  /* STDOUT_FILENO or STDERR_FILENO of arrun */
    int copy;  /* --output-filename: the rank's file, which gets the bytes unlabelled; or -1 */
    char *buf; /* prefix, then the pending partial line */
    size_t prefix_len; /* strlen("[rank] ") */
    size_t len;        /* bytes used in buf, prefix included */
    size_t cap;        /* bytes allocated */
};

/* Takes fd and copy (closed by label_stream_finish or label_stream_free). */
int label_stream_init(struct label_stream *s, int rank, int fd, int dest, int copy);
/* Reads what is there; returns 1 while the stream is open, 0 at EOF (fd closed), -1 on error. */
int label_stream_pump(struct label_stream *s);
/* Writes a pending partial line (with a newline added) and closes the fd. */
void label_stream_finish(struct label_stream *s);
void label_stream_free(struct label_stream *s);
/* True once a write to dest failed with EPIPE: that destination is gone. */
bool label_dest_broken(int dest);

struct arrun_rank {
    pid_t pid;   /* 0 if never started */
    bool exited; /* seen exiting (still a zombie until the job ends) */
    int code;    /* exit status, when exited by exit */
    int signo;   /* terminating signal, when killed; 0 otherwise */
    bool core;   /* dumped core */
    struct label_stream out, err;
};

/*
 * The watcher (watch.c): a process that outlives a SIGKILLed arrun long enough to
 * kill what the ranks left running and remove the job's shared-memory names.
 */
struct arrun_watch {
    pid_t pid; /* the watcher; -1 when none runs */
    int fd;    /* write end of its pipe; -1 once closed */
};

/* Forks the watcher; returns 0, or -1 with the message printed (the job runs without). */
int arrun_watch_start(struct arrun_watch *w, const struct arrun_opts *o, const char *id,
                      const sigset_t *orig_mask);
/* Tells the watcher the ranks' process group, as soon as rank 0 made it. */
void arrun_watch_group(struct arrun_watch *w, pid_t pgid);
/* The job ended and arrun cleaned up: the watcher exits, and is reaped here. */
void arrun_watch_done(struct arrun_watch *w);
/* Unlinks every /dev/shm name that starts with "arcomm-" + the hex digits of id. */
void arrun_remove_segments(const struct arrun_opts *o, const char *id);

/*
 * --output-filename (output.c): makes DIR and DIR/rank.R for every rank before any starts
 * (0, or ARRUN_EXIT_USAGE with the message printed), then opens a rank's two files.
 */
int arrun_output_prepare(const struct arrun_opts *o);
int arrun_output_open(const struct arrun_opts *o, int rank, int *out_fd, int *err_fd);

/* What a child needs to turn itself into rank `rank`. */
struct arrun_spawn {
    const struct arrun_opts *opts;
    const struct arrun_binding *binding;
    const char *id;              /* ARCOMM_ID for every rank */
    pid_t pgid;                  /* the job's process group; 0 for the first rank (it makes it) */
    pid_t parent;                /* arrun's pid, to detect a parent that died before prctl */
    const sigset_t *orig_mask;   /* arrun's signal mask before it blocked signals */
    bool pipe_ignored;           /* SIGPIPE was ignored when arrun started */
    bool stdin_null;             /* rank 0 too gets /dev/null: arrun's stdin is a terminal */
    struct arrun_watch *watch;   /* told the group as soon as rank 0 is forked */
    const struct rlimit *nofile; /* RLIMIT_NOFILE arrun was given, when it raised its own */
};

/*
 * Forks rank `rank` and waits until it has called exec.  Returns 0 and fills
 * r->pid (and r->out/r->err under --label); or -errno when the fork or exec failed,
 * with the message already printed (r->pid is set if a child was made).
 */
int arrun_spawn_rank(const struct arrun_spawn *sp, int rank, struct arrun_rank *r);

/* "arrun: " + message + "\n" on stderr in one write, so it never splits a line. */
void arrun_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* ARRUN_H */
