/* SPDX-License-Identifier: MIT */
/*
 * comm_split at width (run by test_wide.c's main()): 256 thread ranks (quick: 64) split
 * into 16 groups of 16 (quick: 8 of 8) and into 7 uneven groups with every 11th rank
 * left out, each group summing over itself against a float64 reference (exact for i32),
 * every member of a group holding the bits of the group's first member.
 */
#include "wide_common.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

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
        if (w_call_ok(x, st, "allreduce over a group", c, dt, 0)) {
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
            w_check_guard(x, out, c, dt, "group allreduce");
            h = h * 31 + h_hash(out, c * es);
        }
        free(iw);
        free(mag);
        free(want);
        free(tmp);
        free(out);
        free(in);
    }
    w_call_ok(x, comm_barrier(group), "comm_barrier over a group", 0, COMM_F32, 0);
    return h;
}

/* This rank's communicator of split, checked for its size and rank (NULL if none). */
static comm_t *split_checked(struct w_ctx *x, int split)
{
    int color = color_of(split, x->rank, x->n);
    int key = split == SPLIT_A ? -x->rank : x->rank;
    comm_t *group = NULL;
    comm_status_t st = comm_split(x->comm, color, key, &group);
    if (!w_call_ok(x, st, "comm_split", 0, COMM_F32, 0))
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

void split_into_groups(void **s)
{
    (void)s;
    int n = h_quick() ? 64 : 256;
    double t = w_run_threads(n, split_body);
    for (int r = 0; r < n; r++)
        if (w_shared_mem->rank[r].errors)
            fail_msg("comm_split of %d: %ld errors; first: %s", n, w_shared_mem->rank[r].errors,
                     w_shared_mem->rank[r].first_error);
    /* Every member of a group holds the bits of the group's first member. */
    for (int split = SPLIT_A; split <= SPLIT_B; split++) {
        for (int r = 0; r < n; r++) {
            int color = color_of(split, r, n), members[W_MAX_RANKS];
            if (color == COMM_SPLIT_NONE)
                continue;
            members_of(split, color, n, members);
            if (w_shared_mem->rank[r].hashes[split] != w_shared_mem->rank[members[0]].hashes[split])
                fail_msg("split %c: world rank %d's results differ from world rank %d's",
                         "AB"[split], r, members[0]);
        }
    }
    printf("  %d thread ranks split into %d groups, and into 7 uneven ones: %.2f s\n", n,
           groups_a(n), t);
}
