/* SPDX-License-Identifier: MIT */
/*
 * Every collective on 1 to 256 ranks.  Thread ranks made by comm_init_all (1, 3, 5, 16,
 * 64, 256; one pthread per rank), process ranks forked here (16, 64, 256: beyond the
 * harness's 8) and thread ranks in several forked processes each make every collective
 * (test_wide_calls.c says which and how each rank checks them); every rank's errors are
 * collected here, and its outputs compared bit for bit with rank 0's.  Then 256 thread
 * ranks split into groups (test_wide_split.c).  The staging slots are 64 KiB (and the
 * comm_mem_alloc arenas 1 MiB) so that 256 ranks' segments stay small; no segment of any
 * communicator made may be left in /dev/shm.  Sanitizer builds (h_quick) stop at 64
 * thread and 8 process ranks.
 */
#include "wide_common.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define W_SLOT_BYTES "64K"
#define W_POOL_BYTES "1M"

struct w_shared *w_shared_mem;
static bool made_comms; /* the test made communicators (a skipped one makes none) */

void w_fail(struct w_ctx *x, const char *fmt, ...)
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

/* ---- running n ranks ---- */

static void shared_reset(void)
{
    made_comms = true;
    if (w_shared_mem == NULL) {
        w_shared_mem = mmap(NULL, sizeof(*w_shared_mem), PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        assert_true(w_shared_mem != MAP_FAILED);
    }
    memset(w_shared_mem, 0, sizeof(*w_shared_mem));
}

/* Every rank's errors, then every rank's hashes against rank 0's. */
static void check_results(int n, const char *what)
{
    long errors = 0;
    int first = -1;
    for (int r = 0; r < n; r++) {
        errors += w_shared_mem->rank[r].errors;
        if (first < 0 && w_shared_mem->rank[r].errors)
            first = r;
    }
    if (errors)
        fail_msg("%s: %ld errors; first: %s", what, errors, w_shared_mem->rank[first].first_error);
    const struct w_rank *r0 = &w_shared_mem->rank[0];
    assert_true(r0->nh > 0);
    for (int r = 1; r < n; r++) {
        const struct w_rank *x = &w_shared_mem->rank[r];
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
double w_run_threads(int n, void (*fn)(struct w_ctx *x))
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
        t[r].x = (struct w_ctx){.comm = comms[r], .rank = r, .n = n, .res = &w_shared_mem->rank[r]};
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

/* A rank of a forked process: its own comm_init on the shared id, then w_body. */
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
    w_body(&p->x);
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
        ranks[i].x = (struct w_ctx){.rank = r, .n = n, .res = &w_shared_mem->rank[r]};
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
 * comm_init), running w_body. */
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
            struct w_rank *first = &w_shared_mem->rank[p * per];
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
    double s = w_run_threads(n, w_body);
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

/* n process ranks with ARCOMM_FLAG_THRESHOLD=flag (NULL: the default, 2 MiB / n^2 up to
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
