/* SPDX-License-Identifier: MIT */
/*
 * Every collective on 1 to 256 ranks.  Thread ranks made by comm_init_all (1, 3, 5, 16,
 * 64, 256; one pthread per rank) and process ranks forked here (16, 64, 256: beyond
 * the harness's 8) each make every collective: allreduce, broadcast and reduce at roots
 * 0, n-1 and n/2 (in place at n/2), allgather and reduce_scatter (in place at count 3),
 * alltoall and barrier, in f32 and i32 (SUM; i32 MAX once) and f16, at count 0 (NULL
 * buffers), counts 1 and 3 (the flag path; for reduce_scatter and alltoall, which
 * stage n blocks, the bulk path once n blocks pass the threshold) and one count past
 * the 1 KiB flag threshold (one-pass for thread ranks, staged for process ranks).
 * Random data per (rank, element), outputs poisoned with a guard element after,
 * float64 references (exact for i32), exact ones for data movement.  Every element of
 * every rank is checked: each rank checks its block of the allreduce of every rank's
 * reduce_scatter input against the reference, every rank's allreduce, broadcast and
 * allgather outputs are compared bit for bit with rank 0's, data movement is compared
 * with its source exactly, and reduce (at each root) and reduce_scatter (each block)
 * must give the bits of that allreduce.  Then 256 thread ranks split into 16 groups of
 * 16 and into 7 uneven groups with every 11th rank left out, each group summing over
 * itself.  The staging slots are 64 KiB (and the comm_mem_alloc arenas 1 MiB) so that
 * 256 ranks' segments stay small; no segment of any communicator made may be left in
 * /dev/shm.  Sanitizer builds (h_quick) stop at 64 thread and 8 process ranks.
 */
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define W_MAX_RANKS  256
#define W_MAX_HASHES 128
#define W_SLOT_BYTES "64K"
#define W_POOL_BYTES "1M"

/* One rank's results; in a shared mapping, so that process ranks can report them. */
struct w_rank {
    long errors;
    char first_error[512];
    int nh;                        /* hashes recorded */
    uint64_t hashes[W_MAX_HASHES]; /* of the outputs every rank must agree on */
};

struct w_shared {
    _Atomic long barrier_entries; /* every rank adds one before each barrier */
    struct w_rank rank[W_MAX_RANKS];
};

static struct w_shared *shared;
static bool made_comms; /* the test made communicators (a skipped one makes none) */

/* A rank while it runs. */
struct w_ctx {
    comm_t *comm;
    int rank, n;
    struct w_rank *res;
    long barriers; /* barriers this rank has made */
};

static void w_fail(struct w_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_fail(struct w_ctx *x, const char *fmt, ...)
{
    if (x->res->errors++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        int w = snprintf(x->res->first_error, sizeof(x->res->first_error),
                         "rank %d of %d: ", x->rank, x->n);
        vsnprintf(x->res->first_error + w, sizeof(x->res->first_error) - (size_t)w, fmt, ap);
        va_end(ap);
    }
}

static uint64_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void record_hash(struct w_ctx *x, const void *p, size_t bytes)
{
    if (x->res->nh < W_MAX_HASHES)
        x->res->hashes[x->res->nh++] = fnv(p, bytes);
    else
        w_fail(x, "more than %d hashes", W_MAX_HASHES);
}

/* ---- data and references ---- */

/* One dtype and op, and the counts it is tried with. */
struct w_case {
    comm_dtype_t dt;
    comm_op_t op;
    unsigned counts; /* bits: W_C1, W_C3, W_BULK */
};
#define W_C1   1u
#define W_C3   2u
#define W_BULK 4u

static const struct w_case cases[] = {
    {COMM_F32, COMM_SUM, W_C1 | W_C3 | W_BULK},
    {COMM_I32, COMM_SUM, W_C1 | W_C3 | W_BULK},
    {COMM_I32, COMM_MAX, W_C3},
    {COMM_F16, COMM_SUM, W_C3 | W_BULK},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/*
 * A count past thread ranks' 1 KiB flag threshold for every collective (process ranks
 * run with ARCOMM_FLAG_THRESHOLD=1K): an odd 4101 up to 16 ranks, just past 1 KiB per
 * rank beyond (256 ranks' allgather and alltoall buffers hold 256 blocks).
 */
static size_t bulk_count(int n, size_t es)
{
    return n <= 16 ? 4101 : 1024 / es + 5;
}

/* Seeds: one per (case, count) call group, then per block, root or collective. */
static uint64_t seed_of(size_t ci, int which, uint64_t what, int sub)
{
    return ((uint64_t)ci * 4 + (uint64_t)which) * 8192 + what * 1024 + (uint64_t)sub;
}
enum { S_BLOCK, S_BCAST, S_GATHER, S_A2A };

static bool is_int(comm_dtype_t dt)
{
    return dt == COMM_I32;
}

/* Checks the guard element after out[0..count). */
static void check_guard(struct w_ctx *x, const void *out, size_t count, comm_dtype_t dt,
                        const char *what)
{
    const uint8_t *g = (const uint8_t *)out + count * comm_dtype_size(dt);
    if (!h_poisoned(g, 1, dt))
        w_fail(x, "%s (count %zu, %s) wrote past the end of its output", what, count,
               h_dtype_name(dt));
}

/* One unit in the last place of v in f16 (for the one rounding of an f16 result). */
static double ulp_f16(double v)
{
    int e;
    frexp(fabs(v), &e);
    double u = ldexp(1, e - 11);
    return u > ldexp(1, -24) ? u : ldexp(1, -24);
}

/*
 * Checks out[0..count) against the float64 (integers: exact, wrapping) reduction with op
 * of h_fill_op(count, dt, op, seed, p) over every rank p, element by element.
 */
static void check_reduced(struct w_ctx *x, const void *out, size_t count, comm_dtype_t dt,
                          comm_op_t op, uint64_t seed, const char *what)
{
    size_t es = comm_dtype_size(dt);
    double *want = malloc(count * sizeof(double)), *mag = malloc(count * sizeof(double));
    uint8_t *in = malloc(count * es);
    for (int p = 0; p < x->n; p++) {
        h_fill_op(in, count, dt, op, seed, p);
        for (size_t i = 0; i < count; i++) {
            double v = h_get(in, i, dt);
            if (is_int(dt)) {
                int32_t b = (int32_t)v, a = p == 0 ? b : (int32_t)want[i];
                if (p > 0 && op == COMM_SUM)
                    a = (int32_t)((uint32_t)a + (uint32_t)b); /* wraps as the library's */
                else if (p > 0)
                    a = b > a ? b : a;
                want[i] = a;
                continue;
            }
            if (p == 0) {
                want[i] = v;
                mag[i] = fabs(v);
            } else {
                want[i] = op == COMM_SUM ? want[i] + v : v > want[i] ? v : want[i];
                mag[i] += fabs(v);
            }
        }
    }
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        double got = h_get(out, i, dt), tol = 0;
        if (!is_int(dt) && op == COMM_SUM) {
            tol = 2.0 * (x->n + 1) * ldexp(1, -23) * mag[i];
            if (dt == COMM_F16)
                tol += ulp_f16(want[i]);
        }
        bool ok = is_int(dt) ? got == want[i] : fabs(got - want[i]) <= tol; /* NaN: poison */
        if (!ok && wrong++ == 0)
            w_fail(x, "%s: element %zu of %zu (%s %s): got %.17g, want %.17g", what, i, count,
                   h_dtype_name(dt), h_op_name(op), got, want[i]);
    }
    if (wrong > 1)
        x->res->errors += wrong - 1;
    free(in);
    free(mag);
    free(want);
}

/* ---- one rank's calls ---- */

static bool call_ok(struct w_ctx *x, comm_status_t st, const char *what, size_t count,
                    comm_dtype_t dt, int root)
{
    if (st == COMM_OK)
        return true;
    w_fail(x, "%s(count %zu, %s, root %d) = %s: %s", what, count, h_dtype_name(dt), root,
           comm_status_string(st), comm_last_error(x->comm));
    return false;
}

static void barrier_checked(struct w_ctx *x)
{
    atomic_fetch_add(&shared->barrier_entries, 1);
    x->barriers++;
    comm_status_t st = comm_barrier(x->comm);
    if (!call_ok(x, st, "comm_barrier", 0, COMM_F32, 0))
        return;
    /* Every rank entered this barrier before any rank left it. */
    long entered = atomic_load(&shared->barrier_entries);
    if (entered < (long)x->n * x->barriers)
        w_fail(x, "left barrier %ld when only %ld entries of %ld were made", x->barriers, entered,
               (long)x->n * x->barriers);
}

/*
 * Every collective for case ci at count c (which: the count's index, for seeds and for
 * choosing the in-place forms at count 3).
 */
static void one_count(struct w_ctx *x, size_t ci, int which, size_t c)
{
    const struct w_case *k = &cases[ci];
    comm_dtype_t dt = k->dt;
    comm_op_t op = k->op;
    int n = x->n, me = x->rank;
    size_t es = comm_dtype_size(dt), nc = (size_t)n * c;
    bool inplace = which == 1;
    /* X: the reduce_scatter input, block b = h_fill_op(seed b, this rank); A: its
     * allreduce; G: the gathered (or alltoall) output; T: alltoall input; B, R: one
     * block. */
    uint8_t *X = malloc(nc * es), *A = malloc((nc + 1) * es), *G = malloc((nc + 1) * es);
    uint8_t *T = malloc(nc * es), *B = malloc((c + 1) * es), *R = malloc((c + 1) * es);
    comm_status_t st;
    char what[96];

    for (int b = 0; b < n; b++)
        h_fill_op(X + (size_t)b * c * es, c, dt, op, seed_of(ci, which, S_BLOCK, b), me);

    /* allreduce of every block: this rank checks its block against the reference. */
    h_poison(A, nc + 1, dt);
    st = comm_allreduce(x->comm, X, A, nc, dt, op, NULL);
    if (call_ok(x, st, "allreduce", nc, dt, 0)) {
        snprintf(what, sizeof(what), "allreduce of %zu, block %d", nc, me);
        check_reduced(x, A + (size_t)me * c * es, c, dt, op, seed_of(ci, which, S_BLOCK, me), what);
        check_guard(x, A, nc, dt, "allreduce");
    }
    record_hash(x, A, nc * es);

    /* allreduce of block 0 alone: the bits of A's block 0 (one order for every count). */
    h_poison(R, c + 1, dt);
    st = comm_allreduce(x->comm, X, R, c, dt, op, NULL);
    if (call_ok(x, st, "allreduce", c, dt, 0)) {
        if (memcmp(R, A, c * es) != 0)
            w_fail(x, "allreduce of count %zu (%s) differs from block 0 of allreduce of %zu", c,
                   h_dtype_name(dt), nc);
        check_guard(x, R, c, dt, "allreduce");
    }

    int roots[3] = {0, n - 1, n / 2};
    for (int ri = 0; ri < 3; ri++) {
        int root = roots[ri];
        bool in_place = ri == 2; /* on the root; other ranks pass NULL (root 0) or a buffer */
        uint64_t bseed = seed_of(ci, which, S_BCAST, root);

        /* broadcast */
        h_poison(B, c + 1, dt);
        const void *send = NULL;
        if (me == root) {
            h_fill(in_place ? B : R, c, dt, bseed, root);
            send = in_place ? B : R;
        } else if (ri != 0) {
            h_poison(R, c, dt);
            send = R; /* not read off the root */
        }
        st = comm_broadcast(x->comm, send, B, c, dt, root, NULL);
        if (call_ok(x, st, "broadcast", c, dt, root)) {
            if (!h_holds(B, c, dt, COMM_SUM, bseed, root))
                w_fail(x, "broadcast (count %zu, %s, root %d%s) differs from the root's input", c,
                       h_dtype_name(dt), root, in_place ? ", in place" : "");
            check_guard(x, B, c, dt, "broadcast");
        }
        record_hash(x, B, c * es);

        /* reduce of block 0: the bits of A's block 0 at the root, nothing elsewhere. */
        h_poison(B, c + 1, dt);
        void *recv = B;
        const void *rsend = X;
        if (me == root && in_place) {
            memcpy(B, X, c * es);
            rsend = B;
        } else if (me != root && ri == 0) {
            recv = NULL;
        }
        st = comm_reduce(x->comm, rsend, recv, c, dt, op, root, NULL);
        if (call_ok(x, st, "reduce", c, dt, root)) {
            if (me == root && memcmp(B, A, c * es) != 0)
                w_fail(x, "reduce (count %zu, %s %s, root %d%s) differs from allreduce's bits", c,
                       h_dtype_name(dt), h_op_name(op), root, in_place ? ", in place" : "");
            if (me != root && recv != NULL && !h_poisoned(B, c, dt))
                w_fail(x, "reduce (count %zu, root %d) wrote the recvbuf of rank %d", c, root, me);
            check_guard(x, B, c, dt, "reduce");
        }
    }

    /* allgather: block p is rank p's input (in place at count 3). */
    uint64_t gseed = seed_of(ci, which, S_GATHER, 0);
    h_poison(G, nc + 1, dt);
    const void *gsend = B;
    if (inplace) {
        h_fill(G + (size_t)me * c * es, c, dt, gseed, me);
        gsend = G + (size_t)me * c * es;
    } else {
        h_fill(B, c, dt, gseed, me);
    }
    st = comm_allgather(x->comm, gsend, G, c, dt, NULL);
    if (call_ok(x, st, "allgather", c, dt, 0)) {
        for (int p = 0; p < n; p++)
            if (!h_holds(G + (size_t)p * c * es, c, dt, COMM_SUM, gseed, p)) {
                w_fail(x, "allgather (count %zu, %s%s): block %d differs from rank %d's input", c,
                       h_dtype_name(dt), inplace ? ", in place" : "", p, p);
                break;
            }
        check_guard(x, G, nc, dt, "allgather");
    }
    record_hash(x, G, nc * es);

    /* reduce_scatter: this rank's block of A, bit for bit (in place at count 3, where the
     * other blocks of the input stay as they were). */
    h_poison(B, c + 1, dt);
    const void *qsend = X;
    void *qrecv = B;
    if (inplace) {
        h_poison(G, nc + 1, dt);
        memcpy(G, X, nc * es);
        qsend = G;
        qrecv = G + (size_t)me * c * es;
    }
    st = comm_reduce_scatter(x->comm, qsend, qrecv, c, dt, op, NULL);
    if (call_ok(x, st, "reduce_scatter", c, dt, 0)) {
        if (memcmp(qrecv, A + (size_t)me * c * es, c * es) != 0)
            w_fail(x, "reduce_scatter (count %zu, %s %s%s) differs from block %d of allreduce", c,
                   h_dtype_name(dt), h_op_name(op), inplace ? ", in place" : "", me);
        if (inplace) {
            for (int b = 0; b < n; b++)
                if (b != me && memcmp(G + (size_t)b * c * es, X + (size_t)b * c * es, c * es)) {
                    w_fail(x, "in-place reduce_scatter (count %zu) changed block %d of sendbuf", c,
                           b);
                    break;
                }
            check_guard(x, G, nc, dt, "in-place reduce_scatter");
        } else {
            check_guard(x, B, c, dt, "reduce_scatter");
        }
    }

    /* alltoall: block p of rank r's input lands in block r of rank p's output. */
    for (int p = 0; p < n; p++)
        h_fill(T + (size_t)p * c * es, c, dt, seed_of(ci, which, S_A2A, p), me);
    h_poison(G, nc + 1, dt);
    st = comm_alltoall(x->comm, T, G, c, dt, NULL);
    if (call_ok(x, st, "alltoall", c, dt, 0)) {
        for (int p = 0; p < n; p++)
            if (!h_holds(G + (size_t)p * c * es, c, dt, COMM_SUM, seed_of(ci, which, S_A2A, me),
                         p)) {
                w_fail(x, "alltoall (count %zu, %s): block %d differs from rank %d's block %d", c,
                       h_dtype_name(dt), p, p, me);
                break;
            }
        check_guard(x, G, nc, dt, "alltoall");
    }

    barrier_checked(x);
    free(R);
    free(B);
    free(T);
    free(G);
    free(A);
    free(X);
}

/* Count 0 with NULL buffers: a valid call of every collective that touches nothing
 * (one statement each: the ranks must make them in the same order). */
static void zero_counts(struct w_ctx *x)
{
    int root = x->n - 1;
    comm_status_t st;
    st = comm_allreduce(x->comm, NULL, NULL, 0, COMM_F32, COMM_SUM, NULL);
    call_ok(x, st, "allreduce", 0, COMM_F32, 0);
    st = comm_broadcast(x->comm, NULL, NULL, 0, COMM_I32, root, NULL);
    call_ok(x, st, "broadcast", 0, COMM_I32, root);
    st = comm_reduce(x->comm, NULL, NULL, 0, COMM_F16, COMM_MAX, root, NULL);
    call_ok(x, st, "reduce", 0, COMM_F16, root);
    st = comm_allgather(x->comm, NULL, NULL, 0, COMM_F32, NULL);
    call_ok(x, st, "allgather", 0, COMM_F32, 0);
    st = comm_reduce_scatter(x->comm, NULL, NULL, 0, COMM_I32, COMM_SUM, NULL);
    call_ok(x, st, "reduce_scatter", 0, COMM_I32, 0);
    st = comm_alltoall(x->comm, NULL, NULL, 0, COMM_F32, NULL);
    call_ok(x, st, "alltoall", 0, COMM_F32, 0);
}

static void body(struct w_ctx *x)
{
    zero_counts(x);
    for (size_t ci = 0; ci < N_CASES; ci++) {
        size_t es = comm_dtype_size(cases[ci].dt);
        const size_t counts[3] = {1, 3, bulk_count(x->n, es)};
        for (int which = 0; which < 3; which++)
            if (cases[ci].counts & (1u << which))
                one_count(x, ci, which, counts[which]);
    }
}

/* ---- running n ranks ---- */

static void shared_reset(void)
{
    made_comms = true;
    if (shared == NULL) {
        shared =
            mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        assert_true(shared != MAP_FAILED);
    }
    memset(shared, 0, sizeof(*shared));
}

/* Every rank's errors, then every rank's hashes against rank 0's. */
static void check_results(int n, const char *what)
{
    long errors = 0;
    int first = -1;
    for (int r = 0; r < n; r++) {
        errors += shared->rank[r].errors;
        if (first < 0 && shared->rank[r].errors)
            first = r;
    }
    if (errors)
        fail_msg("%s: %ld errors; first: %s", what, errors, shared->rank[first].first_error);
    const struct w_rank *r0 = &shared->rank[0];
    assert_true(r0->nh > 0);
    for (int r = 1; r < n; r++) {
        const struct w_rank *x = &shared->rank[r];
        assert_int_equal(x->nh, r0->nh);
        for (int h = 0; h < r0->nh; h++)
            if (x->hashes[h] != r0->hashes[h])
                fail_msg("%s: rank %d's output %d differs from rank 0's (not bit-identical)", what,
                         r, h);
    }
}

/*
 * Every communicator the test makes, comm_init_all's and comm_split's included (whose
 * ids the library makes), logs "joined communicator ID" at level info: the ranks log to
 * a file of this test's, and teardown looks for each ID's segment in /dev/shm.  (Other
 * jobs on the machine may leave segments of their own there: only this test's count.)
 */
static char log_path[64];

static int setup(void **s)
{
    (void)s;
    snprintf(log_path, sizeof(log_path), "/tmp/test_wide.XXXXXX");
    int fd = mkstemp(log_path);
    assert_true(fd >= 0);
    close(fd);
    h_env_push("ARCOMM_LOG_FILE", log_path);
    h_env_push("ARCOMM_LOG_LEVEL", "info");
    h_env_push("ARCOMM_SHM_SLOT_BYTES", W_SLOT_BYTES);
    h_env_push("ARCOMM_MEM_POOL_BYTES", W_POOL_BYTES);
    h_env_push("ARCOMM_FLAG_THRESHOLD", NULL); /* thread ranks' default: 1 KiB */
    h_env_push("ARCOMM_BF16_THRESHOLD", NULL); /* f32 keeps every bit, at every count */
    made_comms = false;
    return 0;
}

/* Segments of the communicators the log names that are still in /dev/shm; *joins: how
 * many joins the log has. */
static int logged_leftovers(long *joins)
{
    static const char key[] = "joined communicator ";
    FILE *f = fopen(log_path, "r");
    char line[1024], last[COMM_ID_BYTES] = "";
    int left = 0;
    *joins = 0;
    while (f && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, key);
        char id[COMM_ID_BYTES], path[128];
        if (p == NULL || sscanf(p + strlen(key), "%63s", id) != 1 || strlen(id) <= 5)
            continue;
        (*joins)++;
        snprintf(path, sizeof(path), "/dev/shm/arcomm-%s", id + 5);
        if (access(path, F_OK) != 0 || strcmp(id, last) == 0)
            continue; /* gone, or seen on the line before (each rank logs its join) */
        fprintf(stderr, "left behind: %s\n", path);
        snprintf(last, sizeof(last), "%s", id);
        left++;
    }
    if (f)
        fclose(f);
    return left;
}

static int teardown(void **s)
{
    (void)s;
    h_env_pop();
    long joins;
    int left = logged_leftovers(&joins);
    unlink(log_path);
    if (made_comms && joins == 0)
        fail_msg("no \"joined communicator\" in the ranks' info log: the /dev/shm check "
                 "found nothing to check");
    if (left != 0 || h_shm_leftovers() != 0)
        fail_msg("segments left in /dev/shm");
    return 0;
}

struct w_thread {
    struct w_ctx x;
    void (*fn)(struct w_ctx *x);
};

static void *thread_main(void *arg)
{
    struct w_thread *t = arg;
    t->fn(&t->x);
    if (t->x.comm)
        comm_destroy(t->x.comm);
    return NULL;
}

/* n thread ranks from comm_init_all, one pthread each, running fn. */
static double run_threads(int n, void (*fn)(struct w_ctx *x))
{
    shared_reset();
    comm_t **comms = calloc((size_t)n, sizeof(*comms));
    struct w_thread *t = calloc((size_t)n, sizeof(*t));
    pthread_t *tid = calloc((size_t)n, sizeof(*tid));
    double start = h_now_ms();
    comm_status_t st = comm_init_all(comms, n, NULL, NULL);
    if (st != COMM_OK)
        fail_msg("comm_init_all(%d): %s: %s", n, comm_status_string(st), comm_last_error(NULL));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256u << 10);
    for (int r = 0; r < n; r++) {
        assert_int_equal(comm_rank(comms[r]), r);
        assert_int_equal(comm_size(comms[r]), n);
        t[r].x = (struct w_ctx){.comm = comms[r], .rank = r, .n = n, .res = &shared->rank[r]};
        t[r].fn = fn;
        assert_int_equal(pthread_create(&tid[r], &attr, thread_main, &t[r]), 0);
    }
    pthread_attr_destroy(&attr);
    for (int r = 0; r < n; r++)
        pthread_join(tid[r], NULL);
    double s = (h_now_ms() - start) / 1e3;
    free(tid);
    free(t);
    free(comms);
    return s;
}

/* A rank of a forked process: its own comm_init on the shared id, then body. */
struct w_proc_rank {
    struct w_ctx x;
    comm_id_t id;
};

static void *proc_rank_main(void *arg)
{
    struct w_proc_rank *p = arg;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = p->x.n;
    cfg.rank = p->x.rank;
    cfg.id = p->id;
    comm_status_t st = comm_init(&p->x.comm, &cfg);
    if (st != COMM_OK) {
        w_fail(&p->x, "comm_init: %s: %s", comm_status_string(st), comm_last_error(NULL));
        return NULL;
    }
    body(&p->x);
    comm_destroy(p->x.comm);
    return NULL;
}

/* The process of ranks first .. first + per - 1: one thread each (itself when per is 1). */
static void proc_main(int n, int first, int per, comm_id_t id)
{
    struct w_proc_rank *ranks = calloc((size_t)per, sizeof(*ranks));
    pthread_t *tid = calloc((size_t)per, sizeof(*tid));
    for (int i = 0; i < per; i++) {
        int r = first + i;
        ranks[i].x = (struct w_ctx){.rank = r, .n = n, .res = &shared->rank[r]};
        ranks[i].id = id;
        if (per == 1) {
            proc_rank_main(&ranks[i]);
        } else if (pthread_create(&tid[i], NULL, proc_rank_main, &ranks[i]) != 0) {
            w_fail(&ranks[i].x, "pthread_create failed");
            _exit(1);
        }
    }
    for (int i = 0; i < per && per > 1; i++)
        pthread_join(tid[i], NULL);
    _exit(0);
}

/* n ranks in n / per forked processes, per thread ranks each (each rank its own
 * comm_init), running body. */
static double run_procs(int n, int per)
{
    shared_reset();
    comm_id_t id;
    h_id_new(&id);
    int np = n / per;
    pid_t *pid = calloc((size_t)np, sizeof(*pid));
    double start = h_now_ms();
    fflush(NULL);
    for (int p = 0; p < np; p++) {
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0)
            proc_main(n, p * per, per, id);
    }
    int live = np;
    while (live > 0) {
        for (int p = 0; p < np; p++) {
            int ws;
            struct w_rank *first = &shared->rank[p * per];
            if (pid[p] > 0 && waitpid(pid[p], &ws, WNOHANG) == pid[p]) {
                if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && first->errors == 0) {
                    first->errors++;
                    snprintf(first->first_error, sizeof(first->first_error),
                             "the process of ranks %d..%d died (wait status 0x%x)", p * per,
                             p * per + per - 1, ws);
                }
                pid[p] = 0;
                live--;
            }
        }
        if (h_now_ms() - start > 240000) {
            for (int p = 0; p < np; p++)
                if (pid[p] > 0)
                    kill(pid[p], SIGKILL);
            fail_msg("process ranks hung for 240 s: killed");
        }
        usleep(2000);
    }
    free(pid);
    return (h_now_ms() - start) / 1e3;
}

/* n thread ranks with ARCOMM_FLAG_THRESHOLD=flag (NULL: the default, 1 KiB for them). */
static void threads_n(int n, const char *flag)
{
    h_env_push("ARCOMM_FLAG_THRESHOLD", flag);
    double s = run_threads(n, body);
    char what[96];
    snprintf(what, sizeof(what), "%d thread ranks, flag threshold %s", n, flag ? flag : "auto");
    check_results(n, what);
    printf("  %s: %.2f s\n", what, s);
}

static void threads_1(void **s)
{
    (void)s;
    threads_n(1, NULL);
}
static void threads_3_and_5(void **s)
{
    (void)s;
    threads_n(3, NULL);
    threads_n(5, NULL);
}
static void threads_16(void **s)
{
    (void)s;
    threads_n(16, NULL);
}
static void threads_64(void **s)
{
    (void)s;
    threads_n(64, NULL);
}
static void threads_256(void **s)
{
    (void)s;
    if (h_quick()) {
        printf("  256 thread ranks: skipped in quick builds\n");
        return;
    }
    threads_n(256, NULL);
}

/* n process ranks with ARCOMM_FLAG_THRESHOLD=flag (NULL: the default, 2 MiB / n up to
 * the slot); their buffers are private, so the bulk path is the staged one. */
static void procs_n(int n, const char *flag)
{
    h_env_push("ARCOMM_FLAG_THRESHOLD", flag);
    double t = run_procs(n, 1);
    char what[96];
    snprintf(what, sizeof(what), "%d process ranks, flag threshold %s", n, flag ? flag : "auto");
    check_results(n, what);
    printf("  %s: %.2f s\n", what, t);
}

/* Thread ranks in several processes: the staged path too (not every buffer is
 * reachable), 256 ranks as 16 processes of 16 threads (quick: 16 as 2 of 8). */
static void threads_in_processes(void **s)
{
    (void)s;
    int n = h_quick() ? 16 : 256, per = h_quick() ? 8 : 16;
    h_env_push("ARCOMM_FLAG_THRESHOLD", "1K");
    double t = run_procs(n, per);
    char what[96];
    snprintf(what, sizeof(what), "%d ranks as %d processes of %d threads, flag threshold 1K", n,
             n / per, per);
    check_results(n, what);
    printf("  %s: %.2f s\n", what, t);
}

/* Flag path up to 1 KiB, staged beyond. */
static void procs_16_and_64(void **s)
{
    (void)s;
    procs_n(h_quick() ? 8 : 16, "1K");
    if (!h_quick())
        procs_n(64, "1K");
}

/* Large messages on the flag path: up to the whole 64 KiB slot (process ranks' default
 * for 16 ranks; the bulk count's broadcast, reduce and allgather stay on it, its
 * reduce_scatter and alltoall do not), at 16 process and 64 thread ranks. */
static void large_flag_messages(void **s)
{
    (void)s;
    procs_n(h_quick() ? 8 : 16, NULL);
    threads_n(h_quick() ? 16 : 64, W_SLOT_BYTES);
}
static void procs_256(void **s)
{
    (void)s;
    if (h_quick()) {
        printf("  256 process ranks: skipped in quick builds\n");
        return;
    }
    procs_n(256, "1K");
}

/* ---- comm_split: n ranks into groups ---- */

/*
 * The two splits of the world: A, n / 16 ranks per group (quick: n / 8) by world rank
 * modulo the groups, key -rank (the group in reverse world order); B, uneven groups by
 * world rank modulo 7, key rank, every 11th world rank left out (COMM_SPLIT_NONE).
 */
enum { SPLIT_A, SPLIT_B };

static int groups_a(int n)
{
    return n >= 256 ? 16 : 8;
}

static int color_of(int split, int rank, int n)
{
    if (split == SPLIT_A)
        return rank % groups_a(n);
    return rank % 11 == 0 ? COMM_SPLIT_NONE : rank % 7;
}

/* The world ranks of color's group in the group's rank order; returns how many. */
static int members_of(int split, int color, int n, int *members)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        int r = split == SPLIT_A ? n - 1 - i : i; /* key -rank, or key rank */
        if (color_of(split, r, n) == color)
            members[m++] = r;
    }
    return m;
}

/* f32 count 3 (flag), f32 and i32 count 300 (one-pass) over group, checked against
 * the reference over its members; returns a hash of the results. */
static uint64_t group_sums(struct w_ctx *x, comm_t *group, int split, int color)
{
    int members[W_MAX_RANKS];
    int size = members_of(split, color, x->n, members);
    const struct {
        comm_dtype_t dt;
        size_t count;
    } calls[] = {{COMM_F32, 3}, {COMM_F32, 300}, {COMM_I32, 300}};
    uint64_t h = 0;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        comm_dtype_t dt = calls[i].dt;
        size_t c = calls[i].count, es = comm_dtype_size(dt);
        uint8_t *in = malloc(c * es), *out = malloc((c + 1) * es), *tmp = malloc(c * es);
        double *want = calloc(c, sizeof(double)), *mag = calloc(c, sizeof(double));
        int32_t *iw = calloc(c, sizeof(int32_t));
        uint64_t seed = 77 + 31 * i + 1000 * (uint64_t)split + (uint64_t)color;
        h_fill(in, c, dt, seed, x->rank); /* by world rank */
        h_poison(out, c + 1, dt);
        comm_status_t st = comm_allreduce(group, in, out, c, dt, COMM_SUM, NULL);
        if (call_ok(x, st, "allreduce over a group", c, dt, 0)) {
            for (int q = 0; q < size; q++) {
                h_fill(tmp, c, dt, seed, members[q]);
                for (size_t e = 0; e < c; e++) {
                    double v = h_get(tmp, e, dt);
                    if (dt == COMM_I32)
                        iw[e] = (int32_t)((uint32_t)iw[e] + (uint32_t)(int32_t)v);
                    want[e] += v;
                    mag[e] += fabs(v);
                }
            }
            for (size_t e = 0; e < c; e++) {
                double got = h_get(out, e, dt);
                bool ok = dt == COMM_I32
                              ? got == iw[e]
                              : fabs(got - want[e]) <= 2.0 * (size + 1) * ldexp(1, -23) * mag[e];
                if (!ok) {
                    w_fail(x,
                           "split %c group %d (%d ranks) allreduce (count %zu, %s): element "
                           "%zu: got %.17g, want %.17g",
                           "AB"[split], color, size, c, h_dtype_name(dt), e, got, want[e]);
                    break;
                }
            }
            check_guard(x, out, c, dt, "group allreduce");
            h = h * 31 + fnv(out, c * es);
        }
        free(iw);
        free(mag);
        free(want);
        free(tmp);
        free(out);
        free(in);
    }
    call_ok(x, comm_barrier(group), "comm_barrier over a group", 0, COMM_F32, 0);
    return h;
}

/* This rank's communicator of split, checked for its size and rank (NULL if none). */
static comm_t *split_checked(struct w_ctx *x, int split)
{
    int color = color_of(split, x->rank, x->n);
    int key = split == SPLIT_A ? -x->rank : x->rank;
    comm_t *group = NULL;
    comm_status_t st = comm_split(x->comm, color, key, &group);
    if (!call_ok(x, st, "comm_split", 0, COMM_F32, 0))
        return NULL;
    if (color == COMM_SPLIT_NONE) {
        if (group != NULL)
            w_fail(x, "comm_split with COMM_SPLIT_NONE gave a communicator");
        return NULL;
    }
    int members[W_MAX_RANKS];
    int size = members_of(split, color, x->n, members), want = -1;
    for (int q = 0; q < size; q++)
        if (members[q] == x->rank)
            want = q;
    if (group == NULL || comm_size(group) != size || comm_rank(group) != want) {
        w_fail(x, "split %c: rank %d of %d in group %d, want %d of %d", "AB"[split],
               group ? comm_rank(group) : -1, group ? comm_size(group) : 0, color, want, size);
        if (group)
            comm_destroy(group);
        return NULL;
    }
    return group;
}

static void split_body(struct w_ctx *x)
{
    comm_t *a = split_checked(x, SPLIT_A);
    comm_t *b = split_checked(x, SPLIT_B);
    /* The groups outlive the world; both run at once on their own segments. */
    comm_destroy(x->comm);
    x->comm = NULL;
    if (a) {
        x->comm = a;
        x->res->hashes[0] = group_sums(x, a, SPLIT_A, color_of(SPLIT_A, x->rank, x->n));
        comm_destroy(a);
    }
    if (b) {
        x->comm = b;
        x->res->hashes[1] = group_sums(x, b, SPLIT_B, color_of(SPLIT_B, x->rank, x->n));
        comm_destroy(b);
    }
    x->comm = NULL;
}

static void split_into_groups(void **s)
{
    (void)s;
    int n = h_quick() ? 64 : 256;
    double t = run_threads(n, split_body);
    for (int r = 0; r < n; r++)
        if (shared->rank[r].errors)
            fail_msg("comm_split of %d: %ld errors; first: %s", n, shared->rank[r].errors,
                     shared->rank[r].first_error);
    /* Every member of a group holds the bits of the group's first member. */
    for (int split = SPLIT_A; split <= SPLIT_B; split++) {
        for (int r = 0; r < n; r++) {
            int color = color_of(split, r, n), members[W_MAX_RANKS];
            if (color == COMM_SPLIT_NONE)
                continue;
            members_of(split, color, n, members);
            if (shared->rank[r].hashes[split] != shared->rank[members[0]].hashes[split])
                fail_msg("split %c: world rank %d's results differ from world rank %d's",
                         "AB"[split], r, members[0]);
        }
    }
    printf("  %d thread ranks split into %d groups, and into 7 uneven ones: %.2f s\n", n,
           groups_a(n), t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* Process ranks first: forking from a small parent is quicker. */
        cmocka_unit_test_setup_teardown(procs_16_and_64, setup, teardown),
        cmocka_unit_test_setup_teardown(procs_256, setup, teardown),
        cmocka_unit_test_setup_teardown(large_flag_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_in_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_1, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_3_and_5, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_16, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_64, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_256, setup, teardown),
        cmocka_unit_test_setup_teardown(split_into_groups, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
