/* SPDX-License-Identifier: MIT */
/*
 * Communicators from communicators: comm_split into 2 and 3 colors (keys in rank order,
 * reversed, tied), COMM_SPLIT_NONE ranks, nested splits, comm_dup, children that outlive
 * their parent, parent and children used in turn, on another device too; every child runs
 * allreduce on random data checked against a float64 reference, every member bit for
 * bit; nothing may be left in /dev/shm, the children's segments included.  The helpers
 * of split_common.h are defined here, and main() runs the tests of the sibling files as
 * well: test_split_failures.c (a rank making another call, bad arguments, a dead or
 * aborting peer, a group whose comm_init fails, the child's timeout) and
 * test_split_init_all.c (comm_init_all and its bad arguments, the config's knob
 * defaults).
 */
#include "split_common.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
int sp_leftovers(const comm_id_t *parent, int calls, int ncolors)
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

void sp_expect_clean(struct h_rank *res, int n)
{
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
}

/*
 * One allreduce on comm, as its rank: random data of (seed, rank), output poisoned
 * first, checked against the float64 reference of every rank's data; the output bytes
 * are appended to r->out for the bit comparison between ranks.
 */
void sp_reduce_check(struct h_rank *r, comm_t *comm, size_t count, comm_dtype_t dt, uint64_t seed,
                     const char *what)
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

/* SENTINEL's storage (split_common.h). */
int sp_sentinel_storage;

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
        sp_reduce_check(r, child, 1000, COMM_F64, 10 + (uint64_t)color, "child f64");
    size_t parent_len = r->out_len;
    sp_reduce_check(r, r->comm, 333, COMM_F32, 99, "parent");
    r->out_len = parent_len; /* the parent's output is checked, not compared per group */
    if (color >= 0)
        sp_reduce_check(r, child, 20000, COMM_F32, 20 + (uint64_t)color, "child f32 bulk");
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
    sp_expect_clean(res, k->nranks);
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
    assert_int_equal(sp_leftovers(&res[0].id, 1, k->ncolors), 0);
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
    sp_expect_clean(res, 4);
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
    assert_int_equal(sp_leftovers(&res[0].id, 1, 2), 0);
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
    sp_reduce_check(r, half, 500, COMM_F64, 31 + (uint64_t)(r->rank % 2), "half");
    comm_destroy(half);
    sp_reduce_check(r, pair, 4000, COMM_F32, 41, "pair");
    sp_reduce_check(r, dup, 700, COMM_F64, 42, "dup");
    comm_destroy(pair);
    sp_reduce_check(r, dup2, 300, COMM_F32, 43, "dup of dup");
    sp_reduce_check(r, dup, 300, COMM_F32, 44, "dup again");
    comm_destroy(dup);
    comm_destroy(dup2);
}

static void run_nested(int n, bool procs)
{
    struct h_job job = {
        .nranks = n, .procs = procs, .body = nested_body, .kill_rank = -1, .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, n);
    /* Pairs: ranks {0,4},{2,6} of the even half... compare pair members' outputs after
     * the half's (the half's differ by parity). */
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (a % 2 == b % 2 && (a / 2) / 2 == (b / 2) / 2 &&
                memcmp(res[a].out, res[b].out, res[a].out_len) != 0)
                fail_msg("pair ranks %d and %d hold different bits", a, b);
    /* Every generation's segments: halves, pairs, dups of pairs, dups of dups. */
    int left = sp_leftovers(&res[0].id, 1, 2);
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
    sp_reduce_check(r, dup, 1234, COMM_F64, 51, "dup");
    sp_reduce_check(r, r->comm, 1234, COMM_F64, 51, "parent");
    sp_reduce_check(r, dup, 77, COMM_F32, 52, "dup");
    comm_destroy(r->comm);
    r->comm = NULL;
    sp_reduce_check(r, dup, 9000, COMM_F32, 53, "dup after its parent");
    comm_destroy(dup);
}

static void run_dup(int n, bool procs)
{
    struct h_job job = {
        .nranks = n, .procs = procs, .body = dup_body, .kill_rank = -1, .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, n);
    for (int a = 1; a < n; a++) {
        assert_int_equal(res[a].out_len, res[0].out_len);
        if (memcmp(res[a].out, res[0].out, res[0].out_len) != 0)
            fail_msg("ranks 0 and %d differ", a);
    }
    assert_int_equal(sp_leftovers(&res[0].id, 1, 1), 0);
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
    sp_expect_clean(res, 4);
    assert_int_equal(sp_leftovers(&res[0].id, 2, 2), 0);
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
        cmocka_unit_test(dead_peer_joining),
        cmocka_unit_test(dead_peer_making),
        cmocka_unit_test(aborting_parent_joining),
        cmocka_unit_test(aborting_parent_joining_procs),
        cmocka_unit_test(aborting_peer),
        cmocka_unit_test(aborting_split_word),
        cmocka_unit_test(aborting_split_word_set),
        cmocka_unit_test(child_init_fails),
        cmocka_unit_test(child_timeout),
        cmocka_unit_test(split_hexagon),
        cmocka_unit_test(init_all_sizes),
        cmocka_unit_test(init_all_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
