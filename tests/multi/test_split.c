/* SPDX-License-Identifier: MIT */
/*
 * Communicators from communicators: comm_split into 2 and 3 colors (keys in rank order,
 * reversed, tied), COMM_SPLIT_NONE ranks, nested splits, comm_dup, children that outlive
 * their parent, parent and children used in turn; every child runs allreduce on random
 * data checked against a float64 reference, every member bit for bit.  Failures: a rank
 * making another call (MISMATCH on every rank), bad arguments, a dead or aborting peer,
 * a group whose comm_init fails; nothing may be left in /dev/shm, the children's
 * segments included.  comm_init_all for 1, 2, 4, 8 thread ranks and its bad arguments.
 */
#include "harness.h"

#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- the children's ids, derived as runtime/split.c does, for h_shm_leftovers ---- */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The id of the group of color made by call number call of the parent. */
static comm_id_t child_id(const comm_id_t *parent, uint32_t call, int color)
{
    uint8_t tail[8];
    for (int i = 0; i < 4; i++) {
        tail[i] = (uint8_t)(call >> (8 * i));
        tail[4 + i] = (uint8_t)((uint32_t)color >> (8 * i));
    }
    uint64_t h[2] = {0xcbf29ce484222325ull, 0x6c62272e07bb0142ull};
    size_t n = strlen(parent->str);
    for (int lane = 0; lane < 2; lane++) {
        for (size_t i = 0; i < n; i++)
            h[lane] = (h[lane] ^ (uint8_t)parent->str[i]) * 0x100000001b3ull;
        for (size_t i = 0; i < sizeof(tail); i++)
            h[lane] = (h[lane] ^ tail[i]) * 0x100000001b3ull;
        h[lane] = mix64(h[lane] ^ (lane ? 0x73706c6974303031ull : 0x73706c6974303030ull));
    }
    comm_id_t id;
    memset(&id, 0, sizeof(id));
    snprintf(id.str, sizeof(id.str), "arc1-%016llx%016llx", (unsigned long long)h[0],
             (unsigned long long)h[1]);
    return id;
}

/* Segments of the children of the last h_run's parent (calls 0..calls-1, colors
 * 0..ncolors-1) still in /dev/shm, plus the harness's own. */
static int leftovers(const comm_id_t *parent, int calls, int ncolors)
{
    int n = h_shm_leftovers();
    for (int call = 0; call < calls; call++) {
        for (int color = 0; color < ncolors; color++) {
            comm_id_t id = child_id(parent, (uint32_t)call, color);
            char path[128];
            snprintf(path, sizeof(path), "/dev/shm/arcomm-%s", id.str + 5);
            if (access(path, F_OK) == 0) {
                fprintf(stderr, "left behind: %s (child of color %d, call %d)\n", path, color,
                        call);
                n++;
            }
        }
    }
    return n;
}

/* The same for one id. */
static int leftover(const comm_id_t *id, const char *what)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/arcomm-%s", id->str + 5);
    if (access(path, F_OK) != 0)
        return 0;
    fprintf(stderr, "left behind: %s (%s)\n", path, what);
    return 1;
}

static void expect_clean(struct h_rank *res, int n)
{
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
}

static void expect_status(struct h_rank *r, comm_t *c, comm_status_t got, comm_status_t want,
                          const char *must_contain)
{
    if (got != want) {
        h_fail(r, "got %s, want %s (%s)", comm_status_string(got), comm_status_string(want),
               comm_last_error(c));
        return;
    }
    if (must_contain && strstr(comm_last_error(c), must_contain) == NULL)
        h_fail(r, "message \"%s\" lacks \"%s\"", comm_last_error(c), must_contain);
}

/*
 * One allreduce on comm, as its rank: random data of (seed, rank), output poisoned
 * first, checked against the float64 reference of every rank's data; the output bytes
 * are appended to r->out for the bit comparison between ranks.
 */
static void reduce_check(struct h_rank *r, comm_t *comm, size_t count, comm_dtype_t dt,
                         uint64_t seed, const char *what)
{
    size_t es = comm_dtype_size(dt);
    uint8_t *send = malloc(count * es), *recv = malloc(count * es);
    h_fill(send, count, dt, seed, comm_rank(comm));
    h_poison(recv, count, dt);
    comm_status_t st = comm_allreduce(comm, send, recv, count, dt, COMM_SUM, NULL);
    if (st != COMM_OK)
        h_fail(r, "%s: allreduce: %s: %s", what, comm_status_string(st), comm_last_error(comm));
    else if (h_check(r, recv, count, dt, COMM_SUM, seed, comm_size(comm), NULL, 0, false))
        h_fail(r, "%s: wrong sums (see above)", what);
    if (r->out_len + count * es <= H_OUT_BYTES) {
        memcpy(r->out + r->out_len, recv, count * es);
        r->out_len += count * es;
    }
    free(send);
    free(recv);
}

/* A non-NULL value no communicator has: *newcomm must keep it when a call fails. */
static int sentinel_storage;
#define SENTINEL ((comm_t *)&sentinel_storage)

/* ---- splits: colors, keys, COMM_SPLIT_NONE, interleaved with the parent ---- */

enum keys { KEYS_RANK, KEYS_REVERSE, KEYS_SAME };

struct split_case {
    int nranks;
    bool procs;
    int ncolors;  /* color = rank % ncolors ... */
    int none_mod; /* ... except rank % none_mod == 1: COMM_SPLIT_NONE (0: none) */
    enum keys keys;
};

static int case_color(const struct split_case *k, int rank)
{
    if (k->none_mod && rank % k->none_mod == 1)
        return COMM_SPLIT_NONE;
    return rank % k->ncolors;
}

static int case_key(const struct split_case *k, int rank)
{
    return k->keys == KEYS_REVERSE ? -3 * rank : k->keys == KEYS_SAME ? 7 : rank;
}

/* The rank and size the API promises: members ordered by (key, parent rank). */
static void expected(const struct split_case *k, int rank, int *crank, int *csize)
{
    int color = case_color(k, rank), key = case_key(k, rank);
    *crank = 0;
    *csize = 0;
    for (int p = 0; p < k->nranks; p++) {
        if (case_color(k, p) != color)
            continue;
        (*csize)++;
        int kp = case_key(k, p);
        if (kp < key || (kp == key && p < rank))
            (*crank)++;
    }
}

static void split_body(struct h_rank *r)
{
    const struct split_case *k = r->arg;
    int color = case_color(k, r->rank);
    comm_t *child = SENTINEL;
    comm_status_t st = comm_split(r->comm, color, case_key(k, r->rank), &child);
    if (st != COMM_OK) {
        h_fail(r, "comm_split: %s: %s", comm_status_string(st), comm_last_error(r->comm));
        return;
    }
    if (color < 0 && child != NULL)
        h_fail(r, "COMM_SPLIT_NONE got a communicator (%p), not NULL", (void *)child);
    if (color >= 0) {
        int crank, csize;
        expected(k, r->rank, &crank, &csize);
        if (child == NULL || child == SENTINEL) {
            h_fail(r, "color %d got no communicator", color);
            return;
        }
        if (comm_rank(child) != crank || comm_size(child) != csize)
            h_fail(r, "color %d: rank %d of %d, want %d of %d", color, comm_rank(child),
                   comm_size(child), crank, csize);
    }
    /* Child, parent, child, parent: the calls of one do not disturb the other's. */
    if (color >= 0)
        reduce_check(r, child, 1000, COMM_F64, 10 + (uint64_t)color, "child f64");
    size_t parent_len = r->out_len;
    reduce_check(r, r->comm, 333, COMM_F32, 99, "parent");
    r->out_len = parent_len; /* the parent's output is checked, not compared per group */
    if (color >= 0)
        reduce_check(r, child, 20000, COMM_F32, 20 + (uint64_t)color, "child f32 bulk");
    st = comm_barrier(r->comm);
    if (st != COMM_OK)
        h_fail(r, "parent barrier: %s", comm_last_error(r->comm));
    if (color >= 0 && comm_destroy(child) != COMM_OK)
        h_fail(r, "comm_destroy(child): %s", comm_last_error(NULL));
}

static void run_split(const struct split_case *k)
{
    struct h_job job = {.nranks = k->nranks,
                        .procs = k->procs,
                        .body = split_body,
                        .arg = (void *)k,
                        .kill_rank = -1,
                        .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    expect_clean(res, k->nranks);
    /* Every member of a group holds the same bits. */
    for (int a = 0; a < k->nranks; a++) {
        for (int b = a + 1; b < k->nranks; b++) {
            if (case_color(k, a) < 0 || case_color(k, a) != case_color(k, b))
                continue;
            assert_int_equal(res[a].out_len, res[b].out_len);
            if (memcmp(res[a].out, res[b].out, res[a].out_len) != 0)
                fail_msg("ranks %d and %d of color %d differ", a, b, case_color(k, a));
        }
    }
    for (int a = 0; a < k->nranks; a++)
        if (case_color(k, a) >= 0)
            assert_true(res[a].out_len > 0);
    assert_int_equal(leftovers(&res[0].id, 1, k->ncolors), 0);
}

static void split_two_colors(void **s)
{
    (void)s;
    struct split_case k = {.nranks = 4, .ncolors = 2, .keys = KEYS_RANK};
    run_split(&k);
}

static void split_reverse_keys(void **s)
{
    (void)s;
    struct split_case k = {.nranks = 5, .ncolors = 2, .keys = KEYS_REVERSE};
    run_split(&k);
}

static void split_three_colors_procs(void **s)
{
    (void)s;
    struct split_case k = {.nranks = 4, .procs = true, .ncolors = 3, .keys = KEYS_REVERSE};
    run_split(&k);
}

static void split_none(void **s)
{
    (void)s;
    /* Ranks 1 and 4 opt out; the tied keys keep the parent's order. */
    struct split_case k = {.nranks = 6, .ncolors = 3, .none_mod = 3, .keys = KEYS_SAME};
    run_split(&k);
}

static void split_none_procs(void **s)
{
    (void)s;
    struct split_case k = {
        .nranks = 3, .procs = true, .ncolors = 1, .none_mod = 2, .keys = KEYS_REVERSE};
    run_split(&k);
}

/* ---- the child's id is the one the test derives (so the leftover checks look at the
 * right names): comm_init logs it at info level ---- */

static void ids_body(struct h_rank *r)
{
    comm_t *child = NULL;
    comm_status_t st = comm_split(r->comm, r->rank % 2, 0, &child);
    if (st != COMM_OK) {
        h_fail(r, "comm_split: %s", comm_last_error(r->comm));
        return;
    }
    comm_destroy(child);
}

static void split_ids(void **s)
{
    (void)s;
    char path[96];
    snprintf(path, sizeof(path), "/tmp/arcomm-test-split-%d.log", (int)getpid());
    unlink(path);
    h_env_push("ARCOMM_LOG_LEVEL", "info");
    h_env_push("ARCOMM_LOG_FILE", path);
    struct h_job job = {.nranks = 4, .body = ids_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    expect_clean(res, 4);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    text[len] = '\0';
    fclose(f);
    unlink(path);
    for (int color = 0; color < 2; color++) {
        comm_id_t id = child_id(&res[0].id, 0, color);
        char line[160];
        snprintf(line, sizeof(line), "joined communicator %s of 2 ranks", id.str);
        char *hit = strstr(text, line);
        if (hit == NULL || strstr(hit + 1, line) == NULL)
            fail_msg("the log lacks two ranks' \"%s\":\n%s", line, text);
    }
    assert_int_equal(leftovers(&res[0].id, 1, 2), 0);
}

/* ---- nesting, comm_dup, children outliving their parent ---- */

static void nested_body(struct h_rank *r)
{
    /* 8 (or 4) ranks -> halves by parity -> pairs (reversed) -> a dup of each pair. */
    comm_t *half = NULL, *pair = NULL, *dup = NULL, *dup2 = NULL;
    comm_status_t st = comm_split(r->comm, r->rank % 2, r->rank, &half);
    if (st != COMM_OK) {
        h_fail(r, "split into halves: %s", comm_last_error(r->comm));
        return;
    }
    int hr = comm_rank(half);
    if (hr != r->rank / 2 || comm_size(half) != r->nranks / 2)
        h_fail(r, "half: rank %d of %d", hr, comm_size(half));
    st = comm_split(half, hr / 2, -hr, &pair);
    if (st != COMM_OK) {
        h_fail(r, "split into pairs: %s", comm_last_error(half));
        return;
    }
    if (comm_size(pair) != 2 || comm_rank(pair) != 1 - hr % 2)
        h_fail(r, "pair: rank %d of %d, want %d of 2", comm_rank(pair), comm_size(pair),
               1 - hr % 2);
    st = comm_dup(pair, &dup);
    if (st == COMM_OK)
        st = comm_dup(dup, &dup2);
    if (st != COMM_OK) {
        h_fail(r, "comm_dup: %s", comm_status_string(st));
        return;
    }
    if (comm_rank(dup) != comm_rank(pair) || comm_size(dup) != 2 ||
        comm_rank(dup2) != comm_rank(pair))
        h_fail(r, "dup: rank %d of %d", comm_rank(dup), comm_size(dup));

    /* The parents go first; the grandchildren keep working. */
    comm_destroy(r->comm);
    r->comm = NULL;
    reduce_check(r, half, 500, COMM_F64, 31 + (uint64_t)(r->rank % 2), "half");
    comm_destroy(half);
    reduce_check(r, pair, 4000, COMM_F32, 41, "pair");
    reduce_check(r, dup, 700, COMM_F64, 42, "dup");
    comm_destroy(pair);
    reduce_check(r, dup2, 300, COMM_F32, 43, "dup of dup");
    reduce_check(r, dup, 300, COMM_F32, 44, "dup again");
    comm_destroy(dup);
    comm_destroy(dup2);
}

static void run_nested(int n, bool procs)
{
    struct h_job job = {
        .nranks = n, .procs = procs, .body = nested_body, .kill_rank = -1, .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    expect_clean(res, n);
    /* Pairs: ranks {0,4},{2,6} of the even half... compare pair members' outputs after
     * the half's (the half's differ by parity). */
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (a % 2 == b % 2 && (a / 2) / 2 == (b / 2) / 2 &&
                memcmp(res[a].out, res[b].out, res[a].out_len) != 0)
                fail_msg("pair ranks %d and %d hold different bits", a, b);
    /* Every generation's segments: halves, pairs, dups of pairs, dups of dups. */
    int left = leftovers(&res[0].id, 1, 2);
    for (int half = 0; half < 2; half++) {
        comm_id_t h = child_id(&res[0].id, 0, half);
        for (int pair = 0; pair < n / 4 + (n < 4); pair++) {
            comm_id_t p = child_id(&h, 0, pair), d = child_id(&p, 0, 0), dd = child_id(&d, 0, 0);
            left += leftover(&p, "pair") + leftover(&d, "dup") + leftover(&dd, "dup of dup");
        }
    }
    assert_int_equal(left, 0);
}

static void nested_threads(void **s)
{
    (void)s;
    run_nested(h_quick() ? 4 : 8, false);
}

static void nested_procs(void **s)
{
    (void)s;
    run_nested(4, true);
}

static void dup_body(struct h_rank *r)
{
    comm_t *dup = SENTINEL;
    comm_status_t st = comm_dup(r->comm, &dup);
    if (st != COMM_OK || dup == SENTINEL || dup == NULL) {
        h_fail(r, "comm_dup: %s: %s", comm_status_string(st), comm_last_error(r->comm));
        return;
    }
    if (comm_rank(dup) != r->rank || comm_size(dup) != r->nranks)
        h_fail(r, "dup: rank %d of %d", comm_rank(dup), comm_size(dup));
    if (strcmp(comm_transport_name(dup), comm_transport_name(r->comm)) != 0)
        h_fail(r, "dup runs on %s, its parent on %s", comm_transport_name(dup),
               comm_transport_name(r->comm));
    reduce_check(r, dup, 1234, COMM_F64, 51, "dup");
    reduce_check(r, r->comm, 1234, COMM_F64, 51, "parent");
    reduce_check(r, dup, 77, COMM_F32, 52, "dup");
    comm_destroy(r->comm);
    r->comm = NULL;
    reduce_check(r, dup, 9000, COMM_F32, 53, "dup after its parent");
    comm_destroy(dup);
}

static void run_dup(int n, bool procs)
{
    struct h_job job = {
        .nranks = n, .procs = procs, .body = dup_body, .kill_rank = -1, .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    expect_clean(res, n);
    for (int a = 1; a < n; a++) {
        assert_int_equal(res[a].out_len, res[0].out_len);
        if (memcmp(res[a].out, res[0].out, res[0].out_len) != 0)
            fail_msg("ranks 0 and %d differ", a);
    }
    assert_int_equal(leftovers(&res[0].id, 1, 1), 0);
}

static void dup_threads(void **s)
{
    (void)s;
    run_dup(3, false);
}

static void dup_procs(void **s)
{
    (void)s;
    run_dup(2, true);
}

/* ---- mismatches and bad arguments ---- */

enum other { OTHER_ALLREDUCE, OTHER_BARRIER };

static void mismatch_body(struct h_rank *r)
{
    enum other other = *(enum other *)r->arg;
    float send[100], recv[100];
    h_fill(send, 100, COMM_F32, 3, r->rank);
    h_poison(recv, 100, COMM_F32);
    comm_t *child = SENTINEL;
    comm_status_t st;
    if (r->rank == r->nranks - 1)
        st = other == OTHER_BARRIER
                 ? comm_barrier(r->comm)
                 : comm_allreduce(r->comm, send, recv, 100, COMM_F32, COMM_SUM, NULL);
    else
        st = comm_split(r->comm, 0, r->rank, &child);
    expect_status(r, r->comm, st, COMM_ERR_MISMATCH, "disagree");
    if (r->rank != r->nranks - 1)
        expect_status(r, r->comm, st, COMM_ERR_MISMATCH, "made comm_split");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    for (int i = 0; i < 100; i++) {
        uint32_t bits;
        memcpy(&bits, &recv[i], 4);
        if (bits != 0xffffffffu) {
            h_fail(r, "recvbuf element %d was written by a mismatched call", i);
            break;
        }
    }
    /* The parent stays broken, and a split on it says so at once. */
    double t0 = h_now_ms();
    st = comm_split(r->comm, 0, 0, &child);
    if (st != COMM_ERR_MISMATCH || child != SENTINEL || h_now_ms() - t0 > 100)
        h_fail(r, "a split after the mismatch returned %s after %.0f ms", comm_status_string(st),
               h_now_ms() - t0);
}

static void run_mismatch(enum other other, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = mismatch_body,
                        .arg = &other,
                        .kill_rank = -1,
                        .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    expect_clean(res, n);
    assert_int_equal(leftovers(&res[0].id, 2, 1), 0);
}

static void mismatch_allreduce(void **s)
{
    (void)s;
    run_mismatch(OTHER_ALLREDUCE, 3, false);
}

static void mismatch_allreduce_procs(void **s)
{
    (void)s;
    run_mismatch(OTHER_ALLREDUCE, 2, true);
}

static void mismatch_barrier(void **s)
{
    (void)s;
    run_mismatch(OTHER_BARRIER, 2, false);
}

static void null_newcomm_body(struct h_rank *r)
{
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    if (r->rank == 1) {
        comm_status_t st = comm_split(r->comm, 0, 0, NULL);
        expect_status(r, r->comm, st, COMM_ERR_INVALID, "newcomm is NULL");
        usleep(300 * 1000); /* its comm_destroy must not be what tells the peers */
    } else {
        comm_status_t st = comm_split(r->comm, 0, 0, &child);
        /* The root cause, not rank 1 leaving at comm_destroy. */
        expect_status(r, r->comm, st, COMM_ERR_PEER, "newcomm is NULL");
        if (child != SENTINEL)
            h_fail(r, "a failed comm_split wrote *newcomm");
    }
    if (h_now_ms() - t0 > 5000)
        h_fail(r, "the failure took %.0f ms to arrive", h_now_ms() - t0);
}

static void invalid_arguments(void **s)
{
    (void)s;
    comm_t *child = SENTINEL;
    assert_int_equal(comm_split(NULL, 0, 0, &child), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "comm is NULL"));
    assert_non_null(strstr(comm_last_error(NULL), "comm_split"));
    assert_int_equal(comm_dup(NULL, &child), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "comm_dup"));
    assert_ptr_equal(child, SENTINEL);

    struct h_job job = {.nranks = 3, .body = null_newcomm_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    expect_clean(res, 3);
    assert_int_equal(leftovers(&res[0].id, 1, 1), 0);
}

/* ---- a peer that dies or aborts: every rank returns an error within the timeout ---- */

#define FAIL_TIMEOUT_MS 3000

static void dead_body(struct h_rank *r)
{
    if (r->rank == 2) {
        sleep(30); /* killed by the harness instead of calling comm_split */
        return;
    }
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = comm_split(r->comm, r->rank % 2, 0, &child);
    double ms = h_now_ms() - t0;
    expect_status(r, r->comm, st, COMM_ERR_PEER, "rank 2");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    if (ms > FAIL_TIMEOUT_MS)
        h_fail(r, "comm_split returned after %.0f ms, past the %d ms timeout", ms, FAIL_TIMEOUT_MS);
}

static void dead_peer(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 3,
                        .procs = true,
                        .body = dead_body,
                        .kill_rank = 2,
                        .kill_after_ms = 300,
                        .timeout_ms = FAIL_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    expect_clean(res, 3);
    assert_int_equal(leftovers(&res[0].id, 1, 2), 0);
}

struct aborter {
    comm_t *comm;
    int delay_ms;
};

static void *abort_later(void *arg)
{
    struct aborter *a = arg;
    usleep((useconds_t)a->delay_ms * 1000);
    comm_abort(a->comm);
    return NULL;
}

static void abort_body(struct h_rank *r)
{
    /* Rank 0 is blocked in comm_split (rank 2 comes late) when another of its threads
     * aborts the parent; rank 2 then calls comm_split too. */
    pthread_t t;
    struct aborter a = {.comm = r->comm, .delay_ms = 200};
    if (r->rank == 0)
        pthread_create(&t, NULL, abort_later, &a);
    if (r->rank == 2)
        usleep(600 * 1000);
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = comm_split(r->comm, 0, 0, &child);
    double ms = h_now_ms() - t0;
    if (r->rank == 0)
        pthread_join(t, NULL);
    expect_status(r, r->comm, st, r->rank == 0 ? COMM_ERR_ABORTED : COMM_ERR_PEER,
                  r->rank == 0 ? "comm_abort" : "rank 0");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    if (ms > FAIL_TIMEOUT_MS)
        h_fail(r, "comm_split returned after %.0f ms", ms);
}

static void aborting_peer(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 3, .procs = true, .body = abort_body, .kill_rank = -1, .timeout_ms = 10000};
    struct h_rank *res = h_run(&job);
    expect_clean(res, 3);
    assert_int_equal(leftovers(&res[0].id, 1, 1), 0);
}

/* ---- one group's comm_init fails: every rank returns its status, the parent lives ---- */

static void child_fail_body(struct h_rank *r)
{
    /* Only rank 1's new communicator cannot open its log. */
    if (r->rank == 1)
        setenv("ARCOMM_LOG_FILE", "/nonexistent-arcomm-dir/split.log", 1);
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = comm_split(r->comm, r->rank % 2, 0, &child);
    double ms = h_now_ms() - t0;
    if (r->rank == 1)
        unsetenv("ARCOMM_LOG_FILE");
    expect_status(r, r->comm, st, COMM_ERR_INVALID, "rank 1");
    if (r->rank == 1)
        expect_status(r, r->comm, st, COMM_ERR_INVALID, "ARCOMM_LOG_FILE");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    if (ms > FAIL_TIMEOUT_MS)
        h_fail(r, "comm_split returned after %.0f ms", ms);
    /* Both handshakes completed: the parent is still whole. */
    reduce_check(r, r->comm, 100, COMM_F64, 61, "parent after the failed split");
}

static void child_init_fails(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 4,
                        .procs = true,
                        .body = child_fail_body,
                        .kill_rank = -1,
                        .timeout_ms = FAIL_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    expect_clean(res, 4);
    assert_int_equal(leftovers(&res[0].id, 1, 2), 0);
}

/* ---- the child inherits the parent's timeout ---- */

#define SHORT_TIMEOUT_MS 800

static void timeout_body(struct h_rank *r)
{
    comm_t *dup = NULL;
    comm_status_t st = comm_dup(r->comm, &dup);
    if (st != COMM_OK) {
        h_fail(r, "comm_dup: %s", comm_last_error(r->comm));
        return;
    }
    float x[16], y[16];
    h_fill(x, 16, COMM_F32, 81, r->rank);
    /* Rank 1 comes long after rank 0's timeout (the parent's, not the default). */
    if (r->rank == 1)
        usleep(3 * SHORT_TIMEOUT_MS * 1000);
    double t0 = h_now_ms();
    st = comm_allreduce(dup, x, y, 16, COMM_F32, COMM_SUM, NULL);
    double ms = h_now_ms() - t0;
    if (r->rank == 0) {
        expect_status(r, dup, st, COMM_ERR_TIMEOUT, "rank 1");
        if (ms < SHORT_TIMEOUT_MS * 0.9 || ms > 2.5 * SHORT_TIMEOUT_MS)
            h_fail(r, "the child timed out after %.0f ms, not the parent's %d ms", ms,
                   SHORT_TIMEOUT_MS);
    } else if (st == COMM_OK) {
        h_fail(r, "rank 1's late allreduce succeeded: rank 0 should have timed out");
    }
    comm_destroy(dup);
}

static void child_timeout(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 2, .body = timeout_body, .kill_rank = -1, .timeout_ms = SHORT_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    expect_clean(res, 2);
    assert_int_equal(leftovers(&res[0].id, 1, 1), 0);
}

/* ---- another device: the handshakes leave the backend's staging alone (Hexagon keeps
 * its buffer registry there) ---- */

/* An allreduce on comm_mem_alloc buffers (what a Hexagon communicator takes). */
static void reduce_check_mem(struct h_rank *r, comm_t *comm, size_t count, uint64_t seed,
                             const char *what)
{
    float *send = NULL, *recv = NULL;
    if (comm_mem_alloc(comm, count * sizeof(float), (void **)&send) != COMM_OK ||
        comm_mem_alloc(comm, count * sizeof(float), (void **)&recv) != COMM_OK) {
        h_fail(r, "%s: comm_mem_alloc: %s", what, comm_last_error(comm));
        return;
    }
    h_fill(send, count, COMM_F32, seed, comm_rank(comm));
    h_poison(recv, count, COMM_F32);
    comm_status_t st = comm_allreduce(comm, send, recv, count, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_OK)
        h_fail(r, "%s: allreduce: %s: %s", what, comm_status_string(st), comm_last_error(comm));
    else if (h_check(r, recv, count, COMM_F32, COMM_SUM, seed, comm_size(comm), NULL, 0, false))
        h_fail(r, "%s: wrong sums (see above)", what);
    comm_mem_free(comm, send);
    comm_mem_free(comm, recv);
}

static void hexagon_body(struct h_rank *r)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.device = COMM_DEVICE_HEXAGON;
    cfg.timeout_ms = 20000;
    comm_t *parent = NULL, *half = NULL, *dup = NULL;
    comm_status_t st = comm_init(&parent, &cfg);
    if (st == COMM_ERR_UNSUPPORTED) {
        r->status = st; /* not built in: every rank alike */
        return;
    }
    if (st != COMM_OK) {
        h_fail(r, "comm_init (hexagon): %s", comm_last_error(NULL));
        return;
    }
    reduce_check_mem(r, parent, 1000, 91, "hexagon parent");
    st = comm_split(parent, r->rank % 2, -r->rank, &half);
    if (st == COMM_OK)
        st = comm_dup(parent, &dup);
    if (st != COMM_OK) {
        h_fail(r, "split/dup (hexagon): %s: %s", comm_status_string(st), comm_last_error(parent));
        comm_destroy(parent);
        comm_destroy(half);
        return;
    }
    if (strcmp(comm_transport_name(half), "hexagon") != 0)
        h_fail(r, "the child runs on %s", comm_transport_name(half));
    reduce_check_mem(r, half, 777, 92 + (uint64_t)(r->rank % 2), "hexagon half");
    reduce_check_mem(r, parent, 513, 94, "hexagon parent after the split");
    reduce_check_mem(r, dup, 300, 95, "hexagon dup");
    comm_destroy(parent);
    reduce_check_mem(r, half, 64, 96 + (uint64_t)(r->rank % 2), "hexagon half after its parent");
    comm_destroy(half);
    comm_destroy(dup);
}

static void split_hexagon(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 4, .no_init = true, .body = hexagon_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    if (res[0].status == COMM_ERR_UNSUPPORTED) {
        for (int r = 1; r < 4; r++)
            assert_int_equal(res[r].status, COMM_ERR_UNSUPPORTED);
        skip();
    }
    expect_clean(res, 4);
    assert_int_equal(leftovers(&res[0].id, 2, 2), 0);
}

/* ---- comm_init_all ---- */

struct init_all_rank {
    struct h_rank r;
    comm_t *comm;
};

static void *init_all_rank_main(void *arg)
{
    struct init_all_rank *x = arg;
    reduce_check(&x->r, x->comm, 2000, COMM_F64, 71, "init_all f64");
    reduce_check(&x->r, x->comm, 50, COMM_F32, 72, "init_all f32");
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

static void run_init_all(int n, const comm_config_t *cfg)
{
    comm_t *comms[H_MAX_RANKS];
    int threads = thread_count();
    comm_status_t st = comm_init_all(comms, n, NULL, cfg);
    if (st != COMM_OK)
        fail_msg("comm_init_all(%d): %s: %s", n, comm_status_string(st), comm_last_error(NULL));
    assert_int_equal(thread_count(), threads);
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

static void init_all_sizes(void **s)
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

static void knob_defaults(void **s)
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

/* arcomm-* names in /dev/shm created at or after since (ns), still there. */
static int new_segments(long long since_s)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, "arcomm-", 7) != 0)
            continue;
        char path[300];
        struct stat st;
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        if (stat(path, &st) == 0 && st.st_uid == getuid() && (long long)st.st_ctime >= since_s) {
            fprintf(stderr, "new in /dev/shm: %s\n", path);
            n++;
        }
    }
    if (d != NULL)
        closedir(d);
    return n;
}

static void init_all_invalid(void **s)
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

    /* Every rank fails in comm_init: the cause comes back, nothing is left. */
    int threads = thread_count();
    long long t0 = (long long)time(NULL);
    comm_config_init(&cfg);
    cfg.transport = "no-such-transport";
    cfg.timeout_ms = 5000;
    assert_int_equal(comm_init_all(comms, 4, NULL, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "no-such-transport"));
    assert_int_equal(thread_count(), threads);
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(comms[i], SENTINEL);
    comm_config_init(&cfg);
    cfg.device = (comm_device_t)9;
    assert_int_equal(comm_init_all(comms, 3, NULL, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "device 9"));
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(comms[i], SENTINEL);
    /* Failure records may stay a moment while the ranks leave; then nothing. */
    int left = 0;
    for (int tries = 0; tries < 50 && (left = new_segments(t0)) != 0; tries++)
        usleep(100 * 1000);
    assert_int_equal(left, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_two_colors),
        cmocka_unit_test(split_reverse_keys),
        cmocka_unit_test(split_three_colors_procs),
        cmocka_unit_test(split_none),
        cmocka_unit_test(split_none_procs),
        cmocka_unit_test(split_ids),
        cmocka_unit_test(nested_threads),
        cmocka_unit_test(nested_procs),
        cmocka_unit_test(dup_threads),
        cmocka_unit_test(dup_procs),
        cmocka_unit_test(knob_defaults),
        cmocka_unit_test(mismatch_allreduce),
        cmocka_unit_test(mismatch_allreduce_procs),
        cmocka_unit_test(mismatch_barrier),
        cmocka_unit_test(invalid_arguments),
        cmocka_unit_test(dead_peer),
        cmocka_unit_test(aborting_peer),
        cmocka_unit_test(child_init_fails),
        cmocka_unit_test(child_timeout),
        cmocka_unit_test(split_hexagon),
        cmocka_unit_test(init_all_sizes),
        cmocka_unit_test(init_all_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
