/* SPDX-License-Identifier: MIT */
/*
 * A live Hexagon communicator (2 thread ranks on the emulated sessions) and the path
 * tables: comm_paths_query answers it with its table (one session row, ARCOMM_PATHS's
 * session rows first), an ARCOMM_PATHS item naming a host or CUDA path fails comm_init
 * on every rank with COMM_ERR_INVALID naming the item, and process ranks whose
 * ARCOMM_PATHS differ fail the join with COMM_ERR_MISMATCH naming it, as host ranks do.
 */
#include "arcomm.h"
#include "arcomm_paths.h"
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define NRANKS 2

struct rank {
    int rank;
    comm_id_t id;
    comm_status_t init;
    char msg[512];
    /* What the query on the live communicator gave. */
    comm_status_t query;
    size_t nrows;
    comm_paths_row_t rows[4];
    comm_paths_plan_t plan, bcast;
};

static void *rank_main(void *arg)
{
    struct rank *r = arg;
    comm_config_t cfg;
    comm_t *c = NULL;
    comm_config_init(&cfg);
    cfg.nranks = NRANKS;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.device = COMM_DEVICE_HEXAGON;
    cfg.timeout_ms = 20000;
    r->init = comm_init(&c, &cfg);
    if (r->init != COMM_OK) {
        snprintf(r->msg, sizeof(r->msg), "%s", comm_last_error(NULL));
        return NULL;
    }
    comm_paths_query_t q = {.collective = "allreduce", .bytes = 1 << 20};
    r->query = comm_paths_query(c, &q, r->rows, 4, &r->nrows, &r->plan);
    q.collective = "broadcast";
    if (r->query == COMM_OK)
        r->query = comm_paths_query(c, &q, NULL, 0, &r->nrows, &r->bcast);
    /* The wrong table asked of it. */
    q.ranks = COMM_PATHS_CUDA;
    if (r->query == COMM_OK &&
        comm_paths_query(c, &q, NULL, 0, &r->nrows, &r->bcast) != COMM_ERR_INVALID)
        r->query = COMM_ERR_SYSTEM;
    comm_destroy(c);
    return NULL;
}

static void run(struct rank *ranks)
{
    pthread_t th[NRANKS];
    comm_id_t id;
    assert_int_equal(comm_id_new(&id), COMM_OK);
    for (int i = 0; i < NRANKS; i++) {
        memset(&ranks[i], 0, sizeof(ranks[i]));
        ranks[i].rank = i;
        ranks[i].id = id;
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &ranks[i]), 0);
    }
    for (int i = 0; i < NRANKS; i++)
        pthread_join(th[i], NULL);
}

static void live_table(void **st)
{
    (void)st;
    struct rank ranks[NRANKS];
    setenv("ARCOMM_PATHS", "allreduce:0-64K:session", 1);
    run(ranks);
    unsetenv("ARCOMM_PATHS");
    for (int i = 0; i < NRANKS; i++) {
        if (ranks[i].init != COMM_OK)
            fail_msg("rank %d: comm_init: %s", i, ranks[i].msg);
        assert_int_equal(ranks[i].query, COMM_OK);
        assert_int_equal(ranks[i].nrows, 2);
        assert_int_equal(ranks[i].rows[0].item, 1);
        assert_string_equal(ranks[i].rows[1].path, "session");
        assert_string_equal(ranks[i].rows[1].collectives, "allreduce");
        assert_int_equal(ranks[i].plan.row, 1);
        assert_string_equal(ranks[i].plan.path, "session");
        assert_string_equal(ranks[i].bcast.path, "none");
    }
}

static void refused(void **st)
{
    (void)st;
    static const char *const bad[] = {"allreduce:0-64K:flag", "allreduce:0-:kernel;x"};
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        struct rank ranks[NRANKS];
        setenv("ARCOMM_PATHS", bad[b], 1);
        run(ranks);
        unsetenv("ARCOMM_PATHS");
        for (int i = 0; i < NRANKS; i++) {
            assert_int_equal(ranks[i].init, COMM_ERR_INVALID);
            if (strstr(ranks[i].msg, "ARCOMM_PATHS item 1") == NULL ||
                strstr(ranks[i].msg, "not of this hexagon communicator") == NULL)
                fail_msg("rank %d: \"%s\"", i, ranks[i].msg);
        }
    }
}

/* Each process rank sets its own ARCOMM_PATHS. */
static const char *const *g_each;

static void init_body(struct h_rank *r)
{
    setenv("ARCOMM_PATHS", g_each[r->rank], 1);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.device = COMM_DEVICE_HEXAGON;
    cfg.timeout_ms = 20000;
    r->status = comm_init(&r->comm, &cfg);
    if (r->status == COMM_OK) {
        comm_destroy(r->comm);
        r->comm = NULL;
    } else {
        snprintf(r->first_error, sizeof(r->first_error), "%s", comm_last_error(NULL));
    }
}

static void disagree(void **st)
{
    (void)st;
    static const char *const each[] = {"allreduce:0-64K:session", "allreduce:0-32K:session"};
    g_each = each;
    struct h_job job = {
        .nranks = 2, .procs = true, .no_init = true, .body = init_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    if (res[1].status != COMM_ERR_MISMATCH || strstr(res[1].first_error, "ARCOMM_PATHS") == NULL)
        fail_msg("rank 1: %s, \"%s\": not a mismatch naming ARCOMM_PATHS",
                 comm_status_string(res[1].status), res[1].first_error);
    if (res[0].status == COMM_OK)
        fail_msg("rank 0 joined a communicator whose ranks disagree on ARCOMM_PATHS");
    static const char *const same[] = {"allreduce:0-64K:session", "allreduce:0-64K:session"};
    g_each = same;
    res = h_run(&job);
    for (int i = 0; i < 2; i++)
        if (res[i].status != COMM_OK)
            fail_msg("rank %d: %s: %s", i, comm_status_string(res[i].status), res[i].first_error);
}

int main(void)
{
    unsetenv("ARCOMM_PATHS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(live_table),
        cmocka_unit_test(refused),
        cmocka_unit_test(disagree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
