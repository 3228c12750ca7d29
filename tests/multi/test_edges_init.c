/* SPDX-License-Identifier: MIT */
/*
 * comm_init keeps its promises at the edges: knobs that must agree are compared before
 * any byte is written, bad sizes are refused with the range, every init failure after
 * the id is valid reaches every peer at once (with the cause and the rank), nothing of
 * a failed or killed rendezvous stays in /dev/shm, a full /dev/shm fails a call instead
 * of killing it, a huge timeout does not wrap, a FIFO log cannot block, and a device
 * nobody serves says what every transport said.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define H_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define H_SANITIZED 1
#endif
#endif
#ifndef H_SANITIZED
#define H_SANITIZED 0
#endif

/* How long a peer may take to learn of a failure (the communicators wait 5 s). */
#define LEARN_MS     2500
#define EDGE_TIMEOUT 5000
#define EDGE_KNOB    (-1000000)

static void expect_no_errors(struct h_rank *res, int n)
{
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
}

static void expect_clean(struct h_rank *res, int n)
{
    expect_no_errors(res, n);
    assert_int_equal(h_shm_leftovers(), 0);
}

static const char *msg_of(const struct h_rank *r)
{
    return (const char *)r->out;
}

/* ---- one comm_init per rank, the config and environment shaped per rank ---- */

struct edge {
    int cfg_nranks; /* 0: the job's */
    int timeout_ms; /* cfg.timeout_ms; 0: EDGE_TIMEOUT, EDGE_KNOB: 0 (ARCOMM_TIMEOUT_MS) */
    void (*prepare)(struct h_rank *r, comm_config_t *cfg); /* before comm_init, may be NULL */
    int absent;                                            /* this rank never calls comm_init */
    int late_ms;                                           /* ranks but 0 start this late */
    void (*after)(struct h_rank *r);                       /* with r->comm, when comm_init is OK */
};

static void edge_body(struct h_rank *r)
{
    const struct edge *e = r->arg;
    r->out_len = 0;
    r->out[0] = '\0';
    if (r->rank == e->absent) {
        r->status = -100;
        return;
    }
    if (e->late_ms && r->rank != 0)
        usleep((useconds_t)e->late_ms * 1000);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = e->cfg_nranks ? e->cfg_nranks : r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = e->timeout_ms == EDGE_KNOB ? 0 : e->timeout_ms ? e->timeout_ms : EDGE_TIMEOUT;
    if (e->prepare)
        e->prepare(r, &cfg);
    double t0 = h_now_ms();
    comm_status_t st = comm_init(&r->comm, &cfg);
    r->elapsed_s = (h_now_ms() - t0) / 1e3;
    r->status = st;
    snprintf((char *)r->out, 1024, "%s", st == COMM_OK ? "" : comm_last_error(NULL));
    if (st == COMM_OK) {
        if (e->after)
            e->after(r);
        comm_destroy(r->comm);
        r->comm = NULL;
    }
}

static struct h_rank *run_edge(const struct edge *e, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .no_init = true,
                        .body = edge_body,
                        .arg = (void *)e,
                        .kill_rank = -1};
    return h_run(&job);
}

/*
 * Every rank that called comm_init failed: `culprit` with want_culprit, the rest with
 * want_peers; every message names `cause`; nobody waited past LEARN_MS; nothing left.
 */
static void expect_all_fail(struct h_rank *res, int n, const struct edge *e, int culprit,
                            comm_status_t want_culprit, comm_status_t want_peers, const char *cause)
{
    for (int r = 0; r < n; r++) {
        if (r == e->absent)
            continue;
        comm_status_t st = (comm_status_t)res[r].status;
        bool ok = culprit >= 0 ? st == (r == culprit ? want_culprit : want_peers)
                               : st == want_culprit || st == want_peers;
        if (!ok)
            fail_msg("rank %d: comm_init returned %s, want %s (\"%s\")", r, comm_status_string(st),
                     comm_status_string(r == culprit ? want_culprit : want_peers), msg_of(&res[r]));
        if (strstr(msg_of(&res[r]), cause) == NULL)
            fail_msg("rank %d: message \"%s\" does not name \"%s\"", r, msg_of(&res[r]), cause);
        if (res[r].elapsed_s * 1e3 > LEARN_MS)
            fail_msg("rank %d: learned after %.0f ms (\"%s\")", r, res[r].elapsed_s * 1e3,
                     msg_of(&res[r]));
    }
    expect_clean(res, n);
}

/* ---- 2. knobs that must agree ---- */

struct knob_case {
    const char *name;
    const char *value[3]; /* per rank; NULL = unset */
};
static const struct knob_case *knob_now;

/* Thread ranks share one environment: rank 0 reads it first (its segment exists once it
 * has), then rank 1 sets its own; the ranks of a process set theirs alone. */
static void knob_prepare(struct h_rank *r, comm_config_t *cfg)
{
    (void)cfg;
    if (!r->procs && r->rank != 0) {
        double t0 = h_now_ms();
        while (!h_segment_exists(&r->id) && h_now_ms() - t0 < 5000)
            usleep(1000);
    }
    if (knob_now->value[r->rank])
        setenv(knob_now->name, knob_now->value[r->rank], 1);
    else
        unsetenv(knob_now->name);
}

/* The call: 512 KiB of f32 from comm_mem_alloc; what it does if init let it. */
static void knob_after(struct h_rank *r)
{
    size_t count = 131072;
    float *send = NULL, *recv = NULL;
    if (comm_mem_alloc(r->comm, count * 4, (void **)&send) != COMM_OK ||
        comm_mem_alloc(r->comm, count * 4, (void **)&recv) != COMM_OK) {
        h_fail(r, "comm_mem_alloc: %s", comm_last_error(r->comm));
        return;
    }
    h_fill(send, count, COMM_F32, 21, r->rank);
    h_poison(recv, count, COMM_F32);
    comm_status_t st = comm_allreduce(r->comm, send, recv, count, COMM_F32, COMM_SUM, NULL);
    float *want = malloc(count * 4);
    h_fill(want, count, COMM_F32, 21, r->rank);
    if (memcmp(want, send, count * 4) != 0)
        h_fail(r, "the allreduce (%s) wrote into this rank's send buffer", comm_status_string(st));
    else if (st == COMM_OK)
        h_check(r, recv, count, COMM_F32, COMM_SUM, 21, r->nranks, NULL, 0, false);
    free(want);
    comm_mem_free(r->comm, send);
    comm_mem_free(r->comm, recv);
}

static void run_knob(const struct knob_case *k, int n, bool procs, int culprit)
{
    knob_now = k;
    h_env_push(k->name, NULL);
    struct edge e = {.prepare = knob_prepare, .after = knob_after, .absent = -1};
    /* Buffers made before comm_init must come out as they went in. */
    size_t count = 4096;
    float *user = malloc(count * 4), *copy = malloc(count * 4);
    h_fill(user, count, COMM_F32, 3, 0);
    memcpy(copy, user, count * 4);
    struct h_rank *res = run_edge(&e, n, procs);
    h_env_pop();
    assert_memory_equal(user, copy, count * 4);
    free(user);
    free(copy);
    expect_all_fail(res, n, &e, culprit, COMM_ERR_MISMATCH, COMM_ERR_MISMATCH, k->name);
    /* The one who found it says both values and the fix. */
    const char *m = msg_of(&res[culprit]);
    if (!strstr(m, "rank 0") || !strstr(m, "every rank"))
        fail_msg("the mismatch message \"%s\" lacks rank 0's value or the fix", m);
}

static const struct knob_case slot_case = {"ARCOMM_SHM_SLOT_BYTES", {"64K", NULL, NULL}};
static const struct knob_case bf16_case = {"ARCOMM_BF16_THRESHOLD", {NULL, NULL, "4K"}};
static const struct knob_case flag_case = {"ARCOMM_FLAG_THRESHOLD", {"1K", "2K", NULL}};

static void knob_slot_procs(void **s)
{
    (void)s;
    run_knob(&slot_case, 2, true, 1);
}
static void knob_slot_threads(void **s)
{
    (void)s;
    run_knob(&slot_case, 2, false, 1);
}
static void knob_bf16_procs(void **s)
{
    (void)s;
    run_knob(&bf16_case, 3, true, 2);
}
static void knob_bf16_threads(void **s)
{
    (void)s;
    const struct knob_case two = {"ARCOMM_BF16_THRESHOLD", {"off", "4K", NULL}};
    run_knob(&two, 2, false, 1);
}
static void knob_flag_procs(void **s)
{
    (void)s;
    run_knob(&flag_case, 3, true, 1);
}

/* ---- 3. staging slots that cannot work ---- */

static void slot_bad_values(void **s)
{
    (void)s;
    static const char *const bad[] = {"0", "off", "auto", "1", "4095"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        h_env_push("ARCOMM_SHM_SLOT_BYTES", bad[i]);
        comm_config_t cfg;
        comm_config_init(&cfg);
        h_id_new(&cfg.id);
        comm_t *c = NULL;
        comm_status_t st = comm_init(&c, &cfg);
        h_env_pop();
        if (st == COMM_OK)
            comm_destroy(c);
        if (st != COMM_ERR_INVALID)
            fail_msg("ARCOMM_SHM_SLOT_BYTES=%s: comm_init returned %s", bad[i],
                     comm_status_string(st));
        const char *m = comm_last_error(NULL);
        if (!strstr(m, "ARCOMM_SHM_SLOT_BYTES") || !strstr(m, "at least 4096"))
            fail_msg("ARCOMM_SHM_SLOT_BYTES=%s: message \"%s\" lacks the knob or the range", bad[i],
                     m);
    }
    /* 64 bytes per rank: 8K is too small for 256 ranks (rank 255 alone: nobody to tell). */
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "8K");
    comm_config_t cfg;
    comm_config_init(&cfg);
    h_id_new(&cfg.id);
    cfg.nranks = 256;
    cfg.rank = 255;
    cfg.timeout_ms = 200;
    comm_t *c = NULL;
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "at least 16384"));
    h_env_pop();
    assert_int_equal(h_shm_leftovers(), 0);
}

/* The smallest slot works: a staged allreduce of process ranks through 4 KiB slots. */
static void slot_min_after(struct h_rank *r)
{
    h_allreduce_checked(r, 65536 + 7, 8, "allreduce");
}

static void slot_minimum_works(void **s)
{
    (void)s;
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "4K");
    struct edge e = {.after = slot_min_after, .absent = -1};
    struct h_rank *res = run_edge(&e, 3, true);
    h_env_pop();
    for (int r = 0; r < 3; r++)
        if (res[r].status != COMM_OK)
            fail_msg("rank %d: %s", r, msg_of(&res[r]));
    expect_clean(res, 3);
}

/* A slot so large that the geometry would wrap 64 bits: refused, and the peer learns. */
static void slot_overflow(void **s)
{
    (void)s;
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "8000000000G");
    struct edge e = {.absent = -1};
    struct h_rank *res = run_edge(&e, 2, false);
    h_env_pop();
    expect_all_fail(res, 2, &e, 0, COMM_ERR_INVALID, COMM_ERR_PEER, "64 bits");
}

/* ---- 7. init failures reach the peers at once ---- */

static void dup_rank1(struct h_rank *r, comm_config_t *cfg)
{
    if (r->rank == 2)
        cfg->rank = 1; /* ranks 0, 1, 1 of a 3-rank communicator */
}

static void dup_rank0(struct h_rank *r, comm_config_t *cfg)
{
    if (r->rank == 1)
        cfg->rank = 0; /* ranks 0, 0, 2 */
}

static void init_dup_rank(void **s)
{
    (void)s;
    for (int procs = 0; procs < 2; procs++) {
        struct edge e = {.prepare = dup_rank1, .absent = -1};
        struct h_rank *res = run_edge(&e, 3, procs);
        expect_all_fail(res, 3, &e, -1, COMM_ERR_INVALID, COMM_ERR_PEER, "two ranks claim rank 1");
    }
}

static void init_dup_rank0(void **s)
{
    (void)s;
    for (int procs = 0; procs < 2; procs++) {
        struct edge e = {.prepare = dup_rank0, .absent = -1};
        struct h_rank *res = run_edge(&e, 3, procs);
        expect_all_fail(res, 3, &e, -1, COMM_ERR_INVALID, COMM_ERR_PEER, "two ranks claim rank 0");
    }
}

static int culprit_rank;

static void bogus_transport(struct h_rank *r, comm_config_t *cfg)
{
    if (r->rank != culprit_rank)
        return;
    if (r->procs)
        setenv("ARCOMM_TRANSPORT", "bogus", 1);
    else
        cfg->transport = "bogus";
}

static void init_bogus_transport(void **s)
{
    (void)s;
    for (int procs = 0; procs < 2; procs++) {
        for (culprit_rank = 0; culprit_rank < 2; culprit_rank++) {
            struct edge e = {.prepare = bogus_transport, .absent = -1};
            struct h_rank *res = run_edge(&e, 2 + procs, procs);
            expect_all_fail(res, 2 + procs, &e, culprit_rank, COMM_ERR_INVALID, COMM_ERR_PEER,
                            "bogus");
        }
    }
}

static void bad_size(struct h_rank *r, comm_config_t *cfg)
{
    if (r->rank == culprit_rank)
        cfg->size = offsetof(comm_config_t, device); /* covers the id, not the rest */
}

static void init_bad_size(void **s)
{
    (void)s;
    for (int procs = 0; procs < 2; procs++) {
        for (culprit_rank = 0; culprit_rank < 2; culprit_rank++) {
            struct edge e = {.prepare = bad_size, .absent = -1};
            struct h_rank *res = run_edge(&e, 3, procs);
            expect_all_fail(res, 3, &e, culprit_rank, COMM_ERR_INVALID, COMM_ERR_PEER,
                            "comm_config_init");
        }
    }
}

static void bad_knob(struct h_rank *r, comm_config_t *cfg)
{
    (void)cfg;
    if (r->rank == culprit_rank)
        setenv("ARCOMM_NUMA", "perhaps", 1);
}

/* An environment knob can differ between process ranks only. */
static void init_bad_knob_procs(void **s)
{
    (void)s;
    for (culprit_rank = 0; culprit_rank < 3; culprit_rank += 2) {
        struct edge e = {.prepare = bad_knob, .absent = -1};
        struct h_rank *res = run_edge(&e, 3, true);
        expect_all_fail(res, 3, &e, culprit_rank, COMM_ERR_INVALID, COMM_ERR_PEER, "ARCOMM_NUMA");
    }
}

/* A Hexagon knob out of range on one process rank: the knob table's range refuses it in
 * comm_init (it was the Hexagon setup's own check), and the peers fail with COMM_ERR_PEER. */
static void hex_bad_threads(struct h_rank *r, comm_config_t *cfg)
{
    cfg->device = COMM_DEVICE_HEXAGON;
    if (r->rank == culprit_rank)
        setenv("ARCOMM_HEX_THREADS", "99", 1);
}

static void init_hexagon_setup_fails(void **s)
{
    (void)s;
#if !ARCOMM_TEST_HAVE_HEXAGON
    skip();
#endif
    for (culprit_rank = 0; culprit_rank < 2; culprit_rank++) {
        struct edge e = {.prepare = hex_bad_threads, .absent = -1};
        struct h_rank *res = run_edge(&e, 2, true);
        expect_all_fail(res, 2, &e, culprit_rank, COMM_ERR_INVALID, COMM_ERR_PEER,
                        "ARCOMM_HEX_THREADS");
    }
}

/* Rank 0 cannot make its segment: 64 GiB slots do not fit /dev/shm. */
static void init_rank0_nomem(void **s)
{
    (void)s;
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "64G");
    for (int procs = 0; procs < 2; procs++) {
        struct edge e = {.absent = -1};
        struct h_rank *res = run_edge(&e, 3, procs);
        expect_all_fail(res, 3, &e, 0, COMM_ERR_NOMEM, COMM_ERR_PEER, "ARCOMM_SHM_SLOT_BYTES");
    }
    h_env_pop();
}

/* Rank 0 cannot map its segment (ulimit -v): the peers learn why. */
static void as_limit(struct h_rank *r, comm_config_t *cfg)
{
    (void)cfg;
    if (r->rank != 0)
        return;
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%ld", &pages) != 1)
        h_fail(r, "cannot read /proc/self/statm");
    if (f)
        fclose(f);
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = (rlim_t)pages * 4096 + (1ull << 30);
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        h_fail(r, "setrlimit: %s", strerror(errno));
}

static void init_rank0_ulimit(void **s)
{
    (void)s;
    if (H_SANITIZED)
        skip(); /* the sanitizers' shadow memory needs the address space */
    h_env_push("ARCOMM_MEM_POOL_BYTES", "4G"); /* sparse: /dev/shm has room, 1 GiB of VM not */
    struct edge e = {.prepare = as_limit, .absent = -1};
    struct h_rank *res = run_edge(&e, 2, true);
    h_env_pop();
    expect_all_fail(res, 2, &e, 0, COMM_ERR_NOMEM, COMM_ERR_PEER, "ulimit -v");
}

/* ---- 10. rank 0 killed during the rendezvous: nothing stays in /dev/shm ---- */

static void init_rank0_killed(void **s)
{
    (void)s;
    for (int late = 0; late < 2; late++) {
        /* Rank 2 never comes, so the rendezvous is still open when rank 0 dies; with late
         * set, rank 1 comes only after rank 0 died. */
        struct edge e = {.absent = 2, .late_ms = late ? 700 : 0};
        struct h_job job = {.nranks = 3,
                            .procs = true,
                            .no_init = true,
                            .body = edge_body,
                            .arg = &e,
                            .kill_rank = 0,
                            .kill_after_ms = 300};
        struct h_rank *res = h_run(&job);
        if (res[1].status != COMM_ERR_PEER || !strstr(msg_of(&res[1]), "rank 0"))
            fail_msg("rank 1: %s: \"%s\"", comm_status_string((comm_status_t)res[1].status),
                     msg_of(&res[1]));
        if (res[1].elapsed_s * 1e3 > LEARN_MS)
            fail_msg("rank 1 learned after %.0f ms", res[1].elapsed_s * 1e3);
        res[0].errors = 0;
        expect_clean(res, 3);
    }
}

/* ---- 5. /dev/shm fills after comm_init ---- */

static const char *fill_path = "/dev/shm/edges-init-fill";

static void full_after(struct h_rank *r)
{
    if (r->rank == 0) {
        /* Take every free page of the small /dev/shm. */
        int fd = open(fill_path, O_CREAT | O_RDWR, 0600);
        for (off_t mb = 64; fd >= 0 && mb > 0; mb /= 2) {
            struct stat st;
            fstat(fd, &st);
            while (posix_fallocate(fd, st.st_size, mb << 20) == 0)
                fstat(fd, &st);
        }
        char page[4096] = {1};
        while (fd >= 0 && write(fd, page, sizeof(page)) == (ssize_t)sizeof(page))
            ;
        if (fd >= 0)
            close(fd);
    }
    if (comm_barrier(r->comm) != COMM_OK) {
        h_fail(r, "barrier: %s", comm_last_error(r->comm));
        return;
    }
    /* Staged calls (process ranks, private buffers) go through the staging slots. */
    h_allreduce_checked(r, 3 * 262144 + 5, 13, "staged allreduce on a full /dev/shm");
    /* The arena is sparse: its pages must be had now, or not at all. */
    void *p = NULL;
    comm_status_t st = comm_mem_alloc(r->comm, 1u << 20, &p);
    if (st == COMM_OK) {
        memset(p, 0x3c, 1u << 20);
        comm_mem_free(r->comm, p);
    } else if (st != COMM_ERR_NOMEM || !strstr(comm_last_error(r->comm), "/dev/shm")) {
        h_fail(r, "comm_mem_alloc on a full /dev/shm: %s: %s", comm_status_string(st),
               comm_last_error(r->comm));
    }
    comm_barrier(r->comm);
    if (r->rank == 0)
        unlink(fill_path);
}

static void shm_fills_up(void **s)
{
    (void)s;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* This child and its ranks die of their signals, not into cmocka's handlers. */
        signal(SIGBUS, SIG_DFL);
        signal(SIGSEGV, SIG_DFL);
        signal(SIGFPE, SIG_DFL);
        if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=12m,mode=1777") != 0)
            _exit(77);
        struct edge e = {.after = full_after, .absent = -1};
        struct h_rank *res = run_edge(&e, 2, true);
        int bad = 0;
        for (int r = 0; r < 2; r++) {
            if (res[r].status != COMM_OK || res[r].errors) {
                fprintf(stderr, "rank %d: %s %s\n", r, msg_of(&res[r]), res[r].first_error);
                bad = 1;
            }
        }
        _exit(bad || h_shm_leftovers() != 0);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 77)
        skip(); /* cannot mount a small tmpfs here */
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("the job on a full /dev/shm failed (wait status 0x%x)", ws);
}

/* ---- 8. a huge timeout does not wrap ---- */

static void ok_after(struct h_rank *r)
{
    float x = (float)(r->rank + 1), y = 0;
    if (comm_allreduce(r->comm, &x, &y, 1, COMM_F32, COMM_SUM, NULL) != COMM_OK ||
        y != (float)(r->nranks * (r->nranks + 1) / 2))
        h_fail(r, "allreduce after a huge timeout: %s", comm_last_error(r->comm));
}

static void huge_timeout(void **s)
{
    (void)s;
    h_env_push("ARCOMM_TIMEOUT_MS", "9223372036854775807");
    for (int procs = 0; procs < 2; procs++) {
        /* The config's timeout would win over the knob: leave it 0. */
        struct edge e = {.absent = -1, .late_ms = 300, .after = ok_after, .timeout_ms = EDGE_KNOB};
        struct h_job job = {.nranks = 2,
                            .procs = procs,
                            .no_init = true,
                            .body = edge_body,
                            .arg = &e,
                            .kill_rank = -1};
        struct h_rank *res = h_run(&job);
        for (int r = 0; r < 2; r++)
            if (res[r].status != COMM_OK)
                fail_msg("rank %d: %s", r, msg_of(&res[r]));
        expect_clean(res, 2);
    }
    h_env_pop();
}

/* ---- 9. ARCOMM_LOG_FILE that is not a file ---- */

static comm_status_t init_with_log(const char *path, char *msg, size_t len)
{
    h_env_push("ARCOMM_LOG_FILE", path);
    comm_config_t cfg;
    comm_config_init(&cfg);
    h_id_new(&cfg.id);
    comm_t *c = NULL;
    comm_status_t st = comm_init(&c, &cfg);
    h_env_pop();
    snprintf(msg, len, "%s", comm_last_error(NULL));
    if (st == COMM_OK)
        comm_destroy(c);
    return st;
}

static void log_fifo(void **s)
{
    (void)s;
    char fifo[128];
    snprintf(fifo, sizeof(fifo), "/tmp/arcomm-edges-fifo-%d", (int)getpid());
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(10); /* the bug blocked here forever */
        char msg[600];
        comm_status_t st = init_with_log(fifo, msg, sizeof(msg));
        if (st != COMM_ERR_INVALID || !strstr(msg, "FIFO") || !strstr(msg, "ARCOMM_LOG_FILE")) {
            fprintf(stderr, "fifo: %s: %s\n", comm_status_string(st), msg);
            _exit(1);
        }
        /* A directory is no log either; /dev/null (a character device) is. */
        st = init_with_log("/tmp", msg, sizeof(msg));
        if (st != COMM_ERR_INVALID || !strstr(msg, "ARCOMM_LOG_FILE")) {
            fprintf(stderr, "dir: %s: %s\n", comm_status_string(st), msg);
            _exit(1);
        }
        _exit(init_with_log("/dev/null", msg, sizeof(msg)) == COMM_OK ? 0 : 1);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    unlink(fifo);
    if (WIFSIGNALED(ws))
        fail_msg("comm_init with a FIFO log was killed by signal %d (blocked in open?)",
                 WTERMSIG(ws));
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

/* ---- 13. a device nobody serves: every transport's reason ---- */

static void cuda_reasons(void **s)
{
    (void)s;
    comm_config_t cfg;
    comm_config_init(&cfg);
    h_id_new(&cfg.id);
    cfg.device = COMM_DEVICE_CUDA;
    comm_t *c = NULL;
    comm_status_t st = comm_init(&c, &cfg);
    if (st == COMM_OK) {
        comm_destroy(c);
        skip(); /* a GPU is here */
    }
    const char *m = comm_last_error(NULL);
    assert_int_equal(st, COMM_ERR_UNSUPPORTED);
    if (!strstr(m, "shm") || (ARCOMM_TEST_HAVE_HEXAGON && !strstr(m, "hexagon")))
        fail_msg("\"%s\" does not give every transport's reason", m);
#if ARCOMM_TEST_HAVE_CUDA
    if (!strstr(m, "cuda: no GPU or no driver"))
        fail_msg("\"%s\" does not say there is no GPU or driver", m);
#else
    if (!strstr(m, "CUDA is not built in"))
        fail_msg("\"%s\" does not say CUDA is not built in", m);
#endif
}

/* A failed test leaves by longjmp: what it pushed into the environment goes here. */
static int pop_env(void **s)
{
    (void)s;
    h_env_pop();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(knob_slot_procs, pop_env),
        cmocka_unit_test_teardown(knob_slot_threads, pop_env),
        cmocka_unit_test_teardown(knob_bf16_procs, pop_env),
        cmocka_unit_test_teardown(knob_bf16_threads, pop_env),
        cmocka_unit_test_teardown(knob_flag_procs, pop_env),
        cmocka_unit_test_teardown(slot_bad_values, pop_env),
        cmocka_unit_test_teardown(slot_minimum_works, pop_env),
        cmocka_unit_test_teardown(slot_overflow, pop_env),
        cmocka_unit_test_teardown(init_dup_rank, pop_env),
        cmocka_unit_test_teardown(init_dup_rank0, pop_env),
        cmocka_unit_test_teardown(init_bogus_transport, pop_env),
        cmocka_unit_test_teardown(init_bad_size, pop_env),
        cmocka_unit_test_teardown(init_bad_knob_procs, pop_env),
        cmocka_unit_test_teardown(init_hexagon_setup_fails, pop_env),
        cmocka_unit_test_teardown(init_rank0_nomem, pop_env),
        cmocka_unit_test_teardown(init_rank0_ulimit, pop_env),
        cmocka_unit_test_teardown(init_rank0_killed, pop_env),
        cmocka_unit_test_teardown(shm_fills_up, pop_env),
        cmocka_unit_test_teardown(huge_timeout, pop_env),
        cmocka_unit_test_teardown(log_fifo, pop_env),
        cmocka_unit_test_teardown(cuda_reasons, pop_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
