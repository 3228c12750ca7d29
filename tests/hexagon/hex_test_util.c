/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the Hexagon tests (see hex_test_util.h).
 */
#include "hex_test_util.h"
#include "reduce.h"

#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

struct thread_arg {
    struct ht_rank *r;
    comm_id_t id;
    ht_body body;
    comm_status_t init;
    char init_msg[512];
};

static void *rank_main(void *p)
{
    struct thread_arg *a = p;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = a->r->nranks;
    cfg.rank = a->r->rank;
    cfg.id = a->id;
    cfg.device = COMM_DEVICE_HEXAGON;
    cfg.timeout_ms = 20000;
    a->init = comm_init(&a->r->comm, &cfg);
    if (a->init != COMM_OK) {
        snprintf(a->init_msg, sizeof(a->init_msg), "%s", comm_last_error(NULL));
        return NULL;
    }
    a->body(a->r);
    comm_destroy(a->r->comm);
    a->r->comm = NULL;
    return NULL;
}

void ht_run_threads(int nranks, ht_body body, void *user, struct ht_rank *out)
{
    pthread_t th[HT_MAX_RANKS];
    struct thread_arg args[HT_MAX_RANKS];
    comm_id_t id;
    assert_int_equal(comm_id_new(&id), COMM_OK);
    for (int r = 0; r < nranks; r++) {
        memset(&out[r], 0, sizeof(out[r]));
        out[r].rank = r;
        out[r].nranks = nranks;
        out[r].user = user;
        args[r] = (struct thread_arg){.r = &out[r], .id = id, .body = body};
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
    }
    for (int r = 0; r < nranks; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < nranks; r++) {
        if (args[r].init != COMM_OK)
            fail_msg("rank %d: comm_init: %s: %s", r, comm_status_string(args[r].init),
                     args[r].init_msg);
    }
}

#define MAX_SAVED 16
static struct {
    char name[64];
    char *old; /* NULL: was unset */
} saved[MAX_SAVED];
static int n_saved;

void ht_env_set(const char *name, const char *value)
{
    assert_true(n_saved < MAX_SAVED);
    const char *old = getenv(name);
    snprintf(saved[n_saved].name, sizeof(saved[n_saved].name), "%s", name);
    saved[n_saved].old = old ? strdup(old) : NULL;
    n_saved++;
    setenv(name, value, 1);
}

void ht_env_restore(void)
{
    while (n_saved > 0) {
        n_saved--;
        if (saved[n_saved].old) {
            setenv(saved[n_saved].name, saved[n_saved].old, 1);
            free(saved[n_saved].old);
        } else {
            unsetenv(saved[n_saved].name);
        }
    }
}

uint32_t ht_rand(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*state >> 33);
}

void ht_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed)
{
    uint64_t st = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < count; i++) {
        float v = (float)((double)ht_rand(&st) / 2147483648.0 * 2.0 - 2.0);
        if (v == 0.0f)
            v = 0.5f; /* never zeros: a missed element must show */
        if (dtype == COMM_F32)
            ((float *)buf)[i] = v;
        else
            ((uint16_t *)buf)[i] = coll_f32_to_f16(v);
    }
}

double ht_get(const void *buf, size_t i, comm_dtype_t dtype)
{
    if (dtype == COMM_F32)
        return ((const float *)buf)[i];
    return coll_f16_to_f32(((const uint16_t *)buf)[i]);
}

double ht_tol(comm_dtype_t dtype, int nterms)
{
    /* Sums in f32 of nterms values <= 2, rounded once to dtype at the end. */
    double f32 = nterms * 2.0 * nterms * 0x1p-24;
    double out = dtype == COMM_F32 ? 0.0 : 2.0 * nterms * 0x1p-11;
    return f32 + out + 1e-12;
}

int ht_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}
