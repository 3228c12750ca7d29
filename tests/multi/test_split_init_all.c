/* SPDX-License-Identifier: MIT */
/*
 * comm_init_all (its tests run by test_split.c's main()): 1, 2, 4, 8 thread ranks of
 * this process, each running allreduce on random data checked against a float64
 * reference, every rank bit for bit, no helper thread left behind; the config's knob
 * defaults, applied, overridden by the environment and kept by comm_split's children;
 * and its bad arguments and failing ranks, nothing left in /dev/shm.
 */
#include "split_common.h"

#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- comm_init_all ---- */

struct init_all_rank {
    struct h_rank r;
    comm_t *comm;
};

static void *init_all_rank_main(void *arg)
{
    struct init_all_rank *x = arg;
    sp_reduce_check(&x->r, x->comm, 2000, COMM_F64, 71, "init_all f64");
    sp_reduce_check(&x->r, x->comm, 50, COMM_F32, 72, "init_all f32");
    if (comm_barrier(x->comm) != COMM_OK)
        h_fail(&x->r, "barrier: %s", comm_last_error(x->comm));
    return NULL;
}

/* The threads of this process (comm_init_all must join every helper it started). */
static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

/* A joined thread can stay in /proc/self/task a moment: pthread_join returns when the
 * kernel clears the thread's id, before it reaps the thread (a loaded CI machine showed
 * it, the helpers of an earlier test still listed). The count once three reads 10 ms
 * apart agree (at most 2 s). */
static int threads_settled(void)
{
    int n = thread_count(), same = 0;
    for (int i = 0; i < 200 && same < 2; i++) {
        usleep(10 * 1000);
        int m = thread_count();
        same = m == n ? same + 1 : 0;
        n = m;
    }
    return n;
}

/* Threads above before, once the joined ones are gone (waits up to 5 s for them): a
 * helper left running stays counted. */
static int threads_above(int before)
{
    int n = thread_count();
    for (int i = 0; i < 500 && n > before; i++) {
        usleep(10 * 1000);
        n = thread_count();
    }
    return n > before ? n - before : 0;
}

static void run_init_all(int n, const comm_config_t *cfg)
{
    comm_t *comms[H_MAX_RANKS];
    int threads = threads_settled();
    comm_status_t st = comm_init_all(comms, n, NULL, cfg);
    if (st != COMM_OK)
        fail_msg("comm_init_all(%d): %s: %s", n, comm_status_string(st), comm_last_error(NULL));
    int left = threads_above(threads);
    if (left != 0) {
        for (int i = 0; i < n; i++)
            comm_destroy(comms[i]);
        fail_msg("comm_init_all(%d) left %d thread(s) running", n, left);
    }
    struct init_all_rank x[H_MAX_RANKS];
    pthread_t t[H_MAX_RANKS];
    memset(x, 0, sizeof(x));
    for (int i = 0; i < n; i++) {
        assert_int_equal(comm_rank(comms[i]), i);
        assert_int_equal(comm_size(comms[i]), n);
        x[i].comm = comms[i];
        x[i].r.rank = i;
        x[i].r.nranks = n;
        x[i].r.out = malloc(H_OUT_BYTES);
        pthread_create(&t[i], NULL, init_all_rank_main, &x[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++) {
        if (x[i].r.errors)
            fail_msg("rank %d: %ld errors; first: %s", i, x[i].r.errors, x[i].r.first_error);
        assert_int_equal(x[i].r.out_len, x[0].r.out_len);
        if (memcmp(x[i].r.out, x[0].r.out, x[0].r.out_len) != 0)
            fail_msg("ranks 0 and %d differ", i);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(comm_destroy(comms[i]), COMM_OK);
        free(x[i].r.out);
    }
}

void init_all_sizes(void **s)
{
    (void)s;
    run_init_all(1, NULL);
    run_init_all(2, NULL);
    run_init_all(4, NULL);
    if (!h_quick())
        run_init_all(8, NULL);
    /* cfg's nranks, rank and id are ignored; its timeout and transport are taken. */
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = 99;
    cfg.rank = 42;
    snprintf(cfg.id.str, sizeof(cfg.id.str), "not an id");
    cfg.timeout_ms = 20000;
    cfg.transport = "shm";
    run_init_all(3, &cfg);
}

/* ---- the config's knob defaults: applied, overridden by the environment, kept by
 * comm_split's children ---- */

static void *split_once(void *arg)
{
    comm_t **c = arg; /* c[0]: the parent; c[1] receives the child */
    if (comm_split(c[0], 0, 0, &c[1]) != COMM_OK)
        c[1] = NULL;
    return NULL;
}

/* Lines of path containing what (0 when it is missing). */
static int lines_with(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    int n = 0;
    char line[1024];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, what) != NULL;
    if (f != NULL)
        fclose(f);
    return n;
}

/* Two thread ranks made with defaults that log at info into path, each split once:
 * the "joined communicator" lines written there (parents and children). */
static int joined_lines(const char *defaults, const char *path)
{
    unlink(path);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.knob_defaults = defaults;
    comm_t *comms[2];
    comm_status_t st = comm_init_all(comms, 2, NULL, &cfg);
    if (st != COMM_OK)
        fail_msg("comm_init_all: %s: %s", comm_status_string(st), comm_last_error(NULL));
    comm_t *pair[2][2] = {{comms[0], NULL}, {comms[1], NULL}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, split_once, pair[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (pair[i][1] == NULL)
            fail_msg("rank %d: comm_split: %s", i, comm_last_error(comms[i]));
        assert_int_equal(comm_destroy(pair[i][1]), COMM_OK);
        assert_int_equal(comm_destroy(comms[i]), COMM_OK);
    }
    int n = lines_with(path, "joined communicator");
    unlink(path);
    return n;
}

void knob_defaults(void **s)
{
    (void)s;
    char path[128], defaults[300];
    snprintf(path, sizeof(path), "/tmp/arcomm-test-knobdefaults-%d.log", (int)getpid());
    snprintf(defaults, sizeof(defaults), "ARCOMM_LOG_LEVEL=info; ARCOMM_LOG_FILE=%s", path);
    char *saved = getenv("ARCOMM_LOG_LEVEL") ? strdup(getenv("ARCOMM_LOG_LEVEL")) : NULL;
    unsetenv("ARCOMM_LOG_LEVEL");
    /* Two parents and two children log that they joined. */
    assert_int_equal(joined_lines(defaults, path), 4);
    /* The environment overrides a default. */
    setenv("ARCOMM_LOG_LEVEL", "error", 1);
    assert_int_equal(joined_lines(defaults, path), 0);
    if (saved != NULL) {
        setenv("ARCOMM_LOG_LEVEL", saved, 1);
        free(saved);
    } else {
        unsetenv("ARCOMM_LOG_LEVEL");
    }
    /* A name that is no knob, or a value that does not parse: INVALID, said which. */
    comm_config_t cfg;
    comm_config_init(&cfg);
    comm_t *comms[2] = {SENTINEL, SENTINEL};
    cfg.knob_defaults = "ARCOMM_BF16_THRESHOLD=off,ARCOMM_NO_SUCH_KNOB=1";
    assert_int_equal(comm_init_all(comms, 2, NULL, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "ARCOMM_NO_SUCH_KNOB"));
    cfg.knob_defaults = "ARCOMM_TIMEOUT_MS=soon";
    assert_int_equal(comm_init_all(comms, 2, NULL, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "ARCOMM_TIMEOUT_MS"));
    assert_non_null(strstr(comm_last_error(NULL), "knob_defaults"));
    assert_ptr_equal(comms[0], SENTINEL);
    assert_ptr_equal(comms[1], SENTINEL);
}

/* arcomm-* names in /dev/shm, still there after up to 5 s (failure records may stay a
 * moment while the ranks leave).  Called where /dev/shm is this test's own (a private
 * tmpfs in a mount namespace), so every name is one the test made. */
static int segments_left(void)
{
    int n = 0;
    for (int tries = 0; tries < 50; tries++) {
        DIR *d = opendir("/dev/shm");
        n = 0;
        for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
            if (strncmp(e->d_name, "arcomm-", 7) != 0)
                continue;
            if (tries == 49)
                fprintf(stderr, "left in /dev/shm: %s\n", e->d_name);
            n++;
        }
        if (d != NULL)
            closedir(d);
        if (n == 0)
            break;
        usleep(100 * 1000);
    }
    return n;
}

/* Every rank fails in comm_init: the cause comes back, comms is not written, no helper
 * thread stays, nothing stays in /dev/shm.  In a child with a /dev/shm of its own where
 * it can make one (root), so that another job's names beside the test never count;
 * elsewhere without the /dev/shm check.  Exit status: 0 ok, 1 a check failed. */
static int init_all_fails_child(void)
{
    bool own_shm = unshare(CLONE_NEWNS) == 0 &&
                   mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                   mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64m,mode=1777") == 0;
    if (!own_shm)
        fprintf(stderr, "note: no private /dev/shm here (not root?): the failing comm_init_all "
                        "is checked without its /dev/shm check\n");
    comm_t *comms[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
    int bad = 0;
    int threads = threads_settled();
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.transport = "no-such-transport";
    cfg.timeout_ms = 5000;
    if (comm_init_all(comms, 4, NULL, &cfg) != COMM_ERR_INVALID ||
        strstr(comm_last_error(NULL), "no-such-transport") == NULL) {
        fprintf(stderr, "no-such-transport: %s\n", comm_last_error(NULL));
        bad = 1;
    }
    if (threads_above(threads) != 0) {
        fprintf(stderr, "comm_init_all left %d threads\n", threads_above(threads));
        bad = 1;
    }
    comm_config_init(&cfg);
    cfg.device = (comm_device_t)9;
    if (comm_init_all(comms, 3, NULL, &cfg) != COMM_ERR_INVALID ||
        strstr(comm_last_error(NULL), "device 9") == NULL) {
        fprintf(stderr, "device 9: %s\n", comm_last_error(NULL));
        bad = 1;
    }
    for (int i = 0; i < 4; i++)
        if (comms[i] != SENTINEL) {
            fprintf(stderr, "comms[%d] was written\n", i);
            bad = 1;
        }
    if (own_shm && segments_left() != 0)
        bad = 1;
    return bad;
}

void init_all_invalid(void **s)
{
    (void)s;
    comm_t *comms[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
    assert_int_equal(comm_init_all(NULL, 2, NULL, NULL), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "comms is NULL"));
    assert_int_equal(comm_init_all(comms, 0, NULL, NULL), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "n is 0"));
    assert_int_equal(comm_init_all(comms, -3, NULL, NULL), COMM_ERR_INVALID);
    assert_int_equal(comm_init_all(comms, COMM_MAX_RANKS + 1, NULL, NULL), COMM_ERR_INVALID);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.size = 8;
    assert_int_equal(comm_init_all(comms, 2, NULL, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "comm_config_init"));
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(comms[i], SENTINEL);

    /* Every rank fails in comm_init (in a child: see init_all_fails_child). */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(init_all_fails_child());
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("comm_init_all with every rank failing (wait status 0x%x): see above", ws);
}
