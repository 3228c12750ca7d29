/* SPDX-License-Identifier: MIT */
/*
 * arrun's binding, tested from the outside: --bind core and numa spread ranks round robin
 * over the objects that have cpus arrun may run on, --bind none keeps arrun's affinity,
 * --cpus-per-rank gives each rank its cores and OMP_NUM_THREADS, a warning says when
 * ranks share cores, and --report-bindings says where each rank runs.  arrun started on
 * some of the cpus only (taskset) binds within them.  Part of test_arrun (main in
 * test_arrun.c).  The expectations are the cpus this test may run on, as arrun's are.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <hwloc.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arrun_run.h"
#include "test_arrun.h"

/* ---- binding ------------------------------------------------------------------------- */

/* The cpus this test (and so an arrun it starts) may run on: set by load_topology. */
static hwloc_bitmap_t g_allowed;

/* The whole host's topology, as arrun loads it (a cgroup's disallowed cpus included). */
static void load_topology(hwloc_topology_t *topo)
{
    assert_int_equal(hwloc_topology_init(topo), 0);
    assert_int_equal(hwloc_topology_set_flags(*topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED), 0);
    assert_int_equal(hwloc_topology_load(*topo), 0);
    hwloc_bitmap_free(g_allowed);
    g_allowed = hwloc_bitmap_alloc();
    assert_non_null(g_allowed);
    if (hwloc_get_cpubind(*topo, g_allowed, HWLOC_CPUBIND_THREAD) < 0)
        hwloc_bitmap_copy(g_allowed, hwloc_topology_get_allowed_cpuset(*topo));
    hwloc_bitmap_and(g_allowed, g_allowed, hwloc_topology_get_allowed_cpuset(*topo));
}

static void free_topology(hwloc_topology_t topo)
{
    hwloc_topology_destroy(topo);
    hwloc_bitmap_free(g_allowed);
    g_allowed = NULL;
}

/* The cpus of set that this test may run on, as "0,1,5". */
static void cpulist(hwloc_const_bitmap_t set, char *buf, size_t cap)
{
    size_t len = 0;
    unsigned i;
    buf[0] = '\0';
    hwloc_bitmap_foreach_begin(i, set)
    {
        if (!g_allowed || hwloc_bitmap_isset(g_allowed, i))
            len += (size_t)snprintf(buf + len, cap - len, "%s%u", len ? "," : "", i);
    }
    hwloc_bitmap_foreach_end();
}

/* The objects arrun spreads ranks over: those of `type` with cpus this test may run on. */
static int objs_with_cpus(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_obj_t *objs, int max)
{
    int n = 0;
    for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, type) && n < max; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
        if (o->cpuset && hwloc_bitmap_intersects(o->cpuset, g_allowed))
            objs[n++] = o;
    }
    return n;
}

/* How many objects of `type` have cpus in set that this test may run on. */
static int count_in(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_const_bitmap_t set)
{
    int n = 0;
    for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, type); i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
        if (o->cpuset && hwloc_bitmap_intersects(o->cpuset, set) &&
            hwloc_bitmap_intersects(o->cpuset, g_allowed))
            n++;
    }
    return n;
}

/* "N of the M ranks share cores": ranks given per cores each, round robin over ncores. */
static int sharing_ranks(int nranks, int per, int ncores)
{
    int users[1024] = {0}, sharing = 0;
    for (int i = 0; i < nranks; i++)
        for (int j = 0; j < per; j++)
            users[(i * per + j) % ncores]++;
    for (int i = 0; i < nranks; i++) {
        for (int j = 0; j < per; j++) {
            if (users[(i * per + j) % ncores] > 1) {
                sharing++;
                break;
            }
        }
    }
    return sharing;
}

static void check_binding(hwloc_topology_t topo, const char *bind, hwloc_obj_type_t type)
{
    hwloc_obj_t objs[1024];
    int n = objs_with_cpus(topo, type, objs, 1024);
    /* More ranks than objects, so that the round robin wraps. */
    int nranks = n + 2 > 64 ? 64 : n + 2;
    char nr[16], want[2048];
    struct env_line l[64];
    struct run r;

    if (n == 0 && type == HWLOC_OBJ_CORE)
        n = objs_with_cpus(topo, HWLOC_OBJ_PU, objs, 1024);
    assert_true(n > 0);
    snprintf(nr, sizeof(nr), "%d", nranks);
    run_arrun(&r, NULL, "-n", nr, "--bind", bind, helper_path, "env", NULL);
    if (r.status != 0)
        fail_msg("arrun --bind %s exited %d; stderr:\n%s", bind, r.status, r.err);
    parse_env(r.out, nranks, l);
    for (int i = 0; i < nranks; i++) {
        cpulist(objs[i % n]->cpuset, want, sizeof(want));
        if (strcmp(l[i].cpus, want) != 0)
            fail_msg("--bind %s: rank %d runs on cpus %s, expected %s", bind, i, l[i].cpus, want);
    }
    /* More ranks than cores: they share, round robin, and one warning says so (as mpirun
     * refuses to bind more processes than cpus unless told to).  NUMA nodes are meant to
     * hold several ranks: nothing to say. */
    if (type == HWLOC_OBJ_NUMANODE) {
        assert_string_equal(r.err, "");
    } else {
        char warn[160];
        snprintf(warn, sizeof(warn), "arrun: warning: %d ranks x 1 core on %d ", nranks, n);
        if (strncmp(r.err, warn, strlen(warn)) != 0)
            fail_msg("--bind %s, %d ranks on %d: expected '%s...' as the only output, not:\n%s",
                     bind, nranks, n, warn, r.err);
        snprintf(warn, sizeof(warn), ": %d of the %d ranks share cores\n",
                 sharing_ranks(nranks, 1, n), nranks);
        if (strstr(r.err, warn) == NULL || strchr(r.err, '\n')[1] != '\0')
            fail_msg("--bind %s: expected '%s' on one line, not:\n%s", bind, warn, r.err);
    }
    run_free(&r);
}

void test_bind(void **state)
{
    (void)state;
    hwloc_topology_t topo;
    cpu_set_t mine;
    char want[4096] = "";
    size_t len = 0;
    struct env_line l[3];
    struct run r;

    load_topology(&topo);
    check_binding(topo, "core", HWLOC_OBJ_CORE);
    check_binding(topo, "numa", HWLOC_OBJ_NUMANODE);
    free_topology(topo);

    /* Default: core, the same as --bind core. */
    run_arrun(&r, NULL, "-n", "3", helper_path, "env", NULL);
    assert_int_equal(r.status, 0);
    parse_env(r.out, 3, l);
    assert_int_not_equal(strcmp(l[0].cpus, ""), 0);
    run_free(&r);

    /* none: the ranks keep arrun's affinity, which is this process's. */
    assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine))
            len += (size_t)snprintf(want + len, sizeof(want) - len, "%s%d", len ? "," : "", c);
    run_arrun(&r, NULL, "-n", "3", "--bind", "none", helper_path, "env", NULL);
    assert_int_equal(r.status, 0);
    parse_env(r.out, 3, l);
    for (int i = 0; i < 3; i++)
        assert_string_equal(l[i].cpus, want);
    run_free(&r);
}

/* ---- multi-threaded ranks ------------------------------------------------------------ */

/* The value of " NAME=" on the line of rank `rank` in the `vars` mode's output. */
void ta_rank_var(const char *out, int rank, const char *name, char *buf, size_t cap)
{
    char head[32], key[128];
    const char *line = NULL, *v, *end;
    int n = snprintf(head, sizeof(head), "rank=%d ", rank);

    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, head, (size_t)n) == 0) {
            line = p;
            break;
        }
    }
    if (!line)
        fail_msg("no line from rank %d in:\n%s", rank, out);
    end = strchrnul(line, '\n');
    snprintf(key, sizeof(key), " %s=", name);
    v = strstr(line, key);
    if (!v || v > end)
        fail_msg("rank %d printed no %s: %.*s", rank, name, (int)(end - line), line);
    v += strlen(key);
    n = (int)strcspn(v, " \n");
    snprintf(buf, cap, "%.*s", n, v);
}

/* "0-2,5" as "0,1,2,5": hwloc's list form as the helper prints cpus. */
static void expand_list(const char *list, char *buf, size_t cap)
{
    size_t len = 0;
    const char *p = list;

    buf[0] = '\0';
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        assert_true(end != p);
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b; c++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%ld", len ? "," : "", c);
        p = *end == ',' ? end + 1 : end;
        assert_true(*end == ',' || *end == '\0');
    }
}

/* The cores arrun counts (PUs where the topology has no cores), in hwloc's order. */
static int cores_of(hwloc_topology_t topo, hwloc_obj_t *objs, int max)
{
    int n = objs_with_cpus(topo, HWLOC_OBJ_CORE, objs, max);
    return n > 0 ? n : objs_with_cpus(topo, HWLOC_OBJ_PU, objs, max);
}

/*
 * arrun -n nranks --cpus-per-rank per: each rank runs on cores [r*per, r*per+per) mod
 * the cores, gets OMP_NUM_THREADS=per, and a warning says how many ranks share cores
 * exactly when some do.
 */
static void check_cpus_per_rank(hwloc_obj_t *objs, int ncores, int nranks, int per)
{
    char nr[16], np[16], got[2048], want[2048], warn[160];
    int users[1024] = {0}, sharing = 0;
    struct run r;

    snprintf(nr, sizeof(nr), "%d", nranks);
    snprintf(np, sizeof(np), "%d", per);
    run_arrun(&r, NULL, "-n", nr, "--cpus-per-rank", np, helper_path, "vars", "OMP_NUM_THREADS",
              NULL);
    if (r.status != 0)
        fail_msg("-n %d --cpus-per-rank %d: arrun exited %d; stderr:\n%s", nranks, per, r.status,
                 r.err);
    for (int i = 0; i < nranks; i++) {
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        for (int j = 0; j < per; j++) {
            hwloc_bitmap_or(set, set, objs[(i * per + j) % ncores]->cpuset);
            users[(i * per + j) % ncores]++;
        }
        cpulist(set, want, sizeof(want));
        hwloc_bitmap_free(set);
        ta_rank_var(r.out, i, "cpus", got, sizeof(got));
        if (strcmp(got, want) != 0)
            fail_msg("-n %d --cpus-per-rank %d: rank %d runs on cpus %s, expected %s", nranks, per,
                     i, got, want);
        ta_rank_var(r.out, i, "OMP_NUM_THREADS", got, sizeof(got));
        assert_string_equal(got, np);
    }
    for (int i = 0; i < nranks; i++) {
        for (int j = 0; j < per; j++) {
            if (users[(i * per + j) % ncores] > 1) {
                sharing++;
                break;
            }
        }
    }
    if (sharing == 0) {
        if (!strstr(r.err, "err rank=0") || strstr(r.err, "warning"))
            fail_msg("-n %d --cpus-per-rank %d: unexpected stderr:\n%s", nranks, per, r.err);
    } else {
        snprintf(warn, sizeof(warn), "ranks share cores");
        if (!strstr(r.err, warn))
            fail_msg("-n %d --cpus-per-rank %d: no warning about sharing:\n%s", nranks, per, r.err);
        snprintf(warn, sizeof(warn), ": %d of the %d ranks share cores\n", sharing, nranks);
        if (!strstr(r.err, warn))
            fail_msg("-n %d --cpus-per-rank %d: the warning does not say '%s':\n%s", nranks, per,
                     warn, r.err);
        /* One warning for the whole job. */
        assert_null(strstr(strstr(r.err, "warning") + 1, "warning"));
    }
    run_free(&r);
}

void test_cpus_per_rank(void **state)
{
    (void)state;
    struct run_opts omp_env = {.env = "OMP_NUM_THREADS=7"};
    hwloc_topology_t topo;
    hwloc_obj_t objs[1024], nodes[64];
    char got[2048], want[2048], arg[16], msg[128];
    int n, nnodes, node_cores;
    struct run r;

    load_topology(&topo);
    n = cores_of(topo, objs, 1024);
    assert_true(n > 0);

    check_cpus_per_rank(objs, n, n < 64 ? n : 64, 1); /* one core each, none shared */
    check_cpus_per_rank(objs, n, n + 1, 1);           /* wraps: ranks 0 and n share */
    if (n >= 2) {
        check_cpus_per_rank(objs, n, 1, 2);
        check_cpus_per_rank(objs, n, n / 2, 2);
        check_cpus_per_rank(objs, n, n, 2); /* twice the cores there are */
        check_cpus_per_rank(objs, n, 2, n);
    }

    /* More cores per rank than the host has: refused before any rank starts. */
    snprintf(arg, sizeof(arg), "%d", n + 1);
    run_arrun(&r, NULL, "-n", "1", "--cpus-per-rank", arg, helper_path, "vars", NULL);
    assert_int_equal(r.status, 2);
    if (hwloc_bitmap_isincluded(hwloc_topology_get_topology_cpuset(topo), g_allowed))
        snprintf(msg, sizeof(msg), "arrun: --cpus-per-rank %d: this host has %d ", n + 1, n);
    else
        snprintf(msg, sizeof(msg), "arrun: --cpus-per-rank %d: arrun may run on %d ", n + 1, n);
    if (!strstr(r.err, msg))
        fail_msg("expected '%s' in:\n%s", msg, r.err);
    assert_int_equal(r.out_len, 0);
    run_free(&r);

    /* A value the user set for OMP_NUM_THREADS wins: inherited, or through -x. */
    run_arrun(&r, &omp_env, "-n", "1", "--cpus-per-rank", "1", helper_path, "vars",
              "OMP_NUM_THREADS", NULL);
    assert_int_equal(r.status, 0);
    ta_rank_var(r.out, 0, "OMP_NUM_THREADS", got, sizeof(got));
    assert_string_equal(got, "7");
    run_free(&r);
    run_arrun(&r, NULL, "-n", "1", "--cpus-per-rank", "1", "-x", "OMP_NUM_THREADS=5", helper_path,
              "vars", "OMP_NUM_THREADS", NULL);
    assert_int_equal(r.status, 0);
    ta_rank_var(r.out, 0, "OMP_NUM_THREADS", got, sizeof(got));
    assert_string_equal(got, "5");
    run_free(&r);
    /* Without --cpus-per-rank arrun leaves it alone. */
    if (!getenv("OMP_NUM_THREADS")) {
        run_arrun(&r, NULL, "-n", "1", helper_path, "vars", "OMP_NUM_THREADS", NULL);
        assert_int_equal(r.status, 0);
        ta_rank_var(r.out, 0, "OMP_NUM_THREADS", got, sizeof(got));
        assert_string_equal(got, "(unset)");
        run_free(&r);
    }

    /* --bind numa: the whole node, round robin; N counts the node's cores. */
    nnodes = objs_with_cpus(topo, HWLOC_OBJ_NUMANODE, nodes, 64);
    assert_true(nnodes > 0);
    node_cores = count_in(topo, HWLOC_OBJ_CORE, nodes[0]->cpuset);
    if (node_cores <= 0)
        node_cores = count_in(topo, HWLOC_OBJ_PU, nodes[0]->cpuset);
    run_arrun(&r, NULL, "-n", "2", "--bind", "numa", "--cpus-per-rank", "1", helper_path, "vars",
              "OMP_NUM_THREADS", NULL);
    if (r.status != 0)
        fail_msg("--bind numa --cpus-per-rank 1 exited %d; stderr:\n%s", r.status, r.err);
    for (int i = 0; i < 2; i++) {
        cpulist(nodes[i % nnodes]->cpuset, want, sizeof(want));
        ta_rank_var(r.out, i, "cpus", got, sizeof(got));
        assert_string_equal(got, want);
        ta_rank_var(r.out, i, "OMP_NUM_THREADS", got, sizeof(got));
        assert_string_equal(got, "1");
    }
    run_free(&r);
    snprintf(arg, sizeof(arg), "%d", node_cores + 1);
    run_arrun(&r, NULL, "-n", "1", "--bind", "numa", "--cpus-per-rank", arg, helper_path, "vars",
              NULL);
    assert_int_equal(r.status, 2);
    snprintf(msg, sizeof(msg), "arrun: --cpus-per-rank %d: NUMA node %u has %d ", node_cores + 1,
             nodes[0]->logical_index, node_cores);
    if (!strstr(r.err, msg))
        fail_msg("expected '%s' in:\n%s", msg, r.err);
    run_free(&r);
    if (nnodes == 1 && node_cores < 64) {
        /* The node's ranks ask for more cores than it has: they share, with a warning. */
        snprintf(arg, sizeof(arg), "%d", node_cores + 1);
        run_arrun(&r, NULL, "-n", arg, "--bind", "numa", "--cpus-per-rank", "1", helper_path,
                  "vars", NULL);
        assert_int_equal(r.status, 0);
        snprintf(msg, sizeof(msg), ": %d of the %d ranks share cores\n", node_cores + 1,
                 node_cores + 1);
        if (!strstr(r.err, msg))
            fail_msg("expected '%s' in:\n%s", msg, r.err);
        run_free(&r);
    }
    free_topology(topo);
}

/*
 * Every "arrun: rank R (pid P): WHERE (PUs LIST)" line: one per rank, P the rank's pid,
 * LIST the cpus it runs on, WHERE as want_where(R) says.
 */
static void check_reports(const struct run *r, int nranks, const char *const *want_where)
{
    int seen = 0;

    for (const char *p = r->err; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        char where[256], pus[1024], cpus[2048], got[2048];
        int rank, pid, k = 0;

        if (strncmp(p, "arrun: rank ", 12) != 0)
            continue;
        if (sscanf(p, "arrun: rank %d (pid %d): %n", &rank, &pid, &k) != 2 || k == 0)
            fail_msg("malformed report: %.100s", p);
        const char *open = strstr(p + k, " (PUs ");
        const char *nl = strchrnul(p, '\n');
        assert_non_null(open);
        assert_true(open < nl && nl[-1] == ')');
        snprintf(where, sizeof(where), "%.*s", (int)(open - (p + k)), p + k);
        snprintf(pus, sizeof(pus), "%.*s", (int)(nl - 1 - (open + 6)), open + 6);
        assert_in_range(rank, 0, nranks - 1);
        expand_list(pus, cpus, sizeof(cpus));
        ta_rank_var(r->out, rank, "cpus", got, sizeof(got));
        if (strcmp(cpus, got) != 0)
            fail_msg("rank %d: reported PUs %s, but it runs on %s", rank, pus, got);
        ta_rank_var(r->out, rank, "pid", got, sizeof(got));
        assert_int_equal(atoi(got), pid);
        if (strcmp(where, want_where[rank]) != 0)
            fail_msg("rank %d: reported '%s', expected '%s'", rank, where, want_where[rank]);
        seen++;
    }
    assert_int_equal(seen, nranks);
}

/* Drops the "[R] " at the start of every line, so that ta_rank_var finds "rank=R ". */
static void strip_labels(char *text)
{
    char *w = text;
    bool line_start = true;

    for (char *p = text; *p;) {
        if (line_start && *p == '[') {
            char *end = strstr(p, "] ");
            assert_non_null(end);
            p = end + 2;
        }
        line_start = *p == '\n';
        *w++ = *p++;
    }
    *w = '\0';
}

void test_report_bindings(void **state)
{
    (void)state;
    hwloc_topology_t topo;
    hwloc_obj_t objs[1024], nodes[64];
    char where[3][256], nr[16];
    const char *want[3] = {where[0], where[1], where[2]};
    int n, nnodes;
    struct run r;

    load_topology(&topo);
    n = cores_of(topo, objs, 1024);
    nnodes = objs_with_cpus(topo, HWLOC_OBJ_NUMANODE, nodes, 64);
    const char *word =
        hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? "cores" : "processing units";

    /* Default binding, 3 ranks: core r mod n, the wrap included. */
    for (int i = 0; i < 3; i++)
        snprintf(where[i], sizeof(where[i]), "%s %u", word, objs[i % n]->logical_index);
    run_arrun(&r, NULL, "-n", "3", "--report-bindings", helper_path, "vars", NULL);
    assert_int_equal(r.status, 0);
    check_reports(&r, 3, want);
    run_free(&r);

    /* Two cores a rank, under --label: the reports stay unlabelled, on arrun's stderr. */
    if (n >= 2) {
        for (int i = 0; i < 2; i++) {
            hwloc_bitmap_t idx = hwloc_bitmap_alloc();
            char *list = NULL;
            hwloc_bitmap_set(idx, objs[(2 * i) % n]->logical_index);
            hwloc_bitmap_set(idx, objs[(2 * i + 1) % n]->logical_index);
            hwloc_bitmap_list_asprintf(&list, idx);
            snprintf(where[i], sizeof(where[i]), "%s %s", word, list);
            free(list);
            hwloc_bitmap_free(idx);
        }
        run_arrun(&r, NULL, "-n", "2", "--cpus-per-rank", "2", "--label", "--report-bindings",
                  helper_path, "vars", NULL);
        assert_int_equal(r.status, 0);
        strip_labels(r.out);
        assert_non_null(strstr(r.err, "[0] err rank=0\n"));
        check_reports(&r, 2, want);
        run_free(&r);
    }

    /* NUMA nodes: the node and all its cores. */
    for (int i = 0; i < 3; i++) {
        hwloc_obj_t node = nodes[i % nnodes];
        hwloc_bitmap_t idx = hwloc_bitmap_alloc();
        hwloc_obj_type_t unit = strcmp(word, "cores") == 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
        char *list = NULL;
        for (int k = 0; k < hwloc_get_nbobjs_by_type(topo, unit); k++) {
            hwloc_obj_t o = hwloc_get_obj_by_type(topo, unit, (unsigned)k);
            if (hwloc_bitmap_intersects(o->cpuset, node->cpuset) &&
                hwloc_bitmap_intersects(o->cpuset, g_allowed))
                hwloc_bitmap_set(idx, o->logical_index);
        }
        hwloc_bitmap_list_asprintf(&list, idx);
        snprintf(where[i], sizeof(where[i]), "NUMA node %u, %s %s", node->logical_index, word,
                 list);
        free(list);
        hwloc_bitmap_free(idx);
    }
    run_arrun(&r, NULL, "-n", "3", "--bind", "numa", "--report-bindings", helper_path, "vars",
              NULL);
    assert_int_equal(r.status, 0);
    check_reports(&r, 3, want);
    run_free(&r);

    /* Unbound: said so, with the cpus the rank inherited. */
    for (int i = 0; i < 2; i++)
        snprintf(where[i], sizeof(where[i]), "not bound");
    snprintf(nr, sizeof(nr), "%d", 2);
    run_arrun(&r, NULL, "-n", nr, "--bind", "none", "--report-bindings", helper_path, "vars", NULL);
    assert_int_equal(r.status, 0);
    check_reports(&r, 2, want);
    run_free(&r);
    free_topology(topo);
}

/*
 * arrun started on one core's cpu only (taskset -c, a batch system's cpuset): its ranks
 * run there, as mpirun's do, so two jobs given disjoint cpus never share a core.  Two
 * ranks on that one core share it, and one warning says so; --report-bindings says what
 * arrun was given; --bind numa and --bind none stay within it too; a --cpus-per-rank it
 * cannot give is exit 2.  Before, rank 0 ran on core 0 whatever arrun was given.
 */
void test_bind_inherited(void **state)
{
    (void)state;
    hwloc_topology_t topo;
    hwloc_obj_t cores[1024];
    int ncores;

    load_topology(&topo);
    ncores = cores_of(topo, cores, 1024);
    if (ncores < 2) {
        free_topology(topo);
        skip(); /* one core: no other job's cpus to keep away from */
    }
    const char *word =
        hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? "cores" : "processing units";
    /* The last core, then the first: two jobs on disjoint cpus. */
    for (int k = 0; k < 2; k++) {
        hwloc_obj_t core = cores[k == 0 ? ncores - 1 : 0];
        hwloc_bitmap_t mine = hwloc_bitmap_dup(core->cpuset);
        hwloc_bitmap_and(mine, mine, g_allowed);
        int pu = hwloc_bitmap_first(mine);
        hwloc_bitmap_free(mine);
        char cpu[16], where[2][256], msg[256];
        const char *want[2] = {where[0], where[1]};
        struct run_opts ro = {.cpus = cpu};
        struct env_line l[2];
        struct run r;

        snprintf(cpu, sizeof(cpu), "%d", pu);
        for (int i = 0; i < 2; i++)
            snprintf(where[i], sizeof(where[i]), "%s %u", word, core->logical_index);
        run_arrun(&r, &ro, "-n", "2", "--report-bindings", helper_path, "vars", NULL);
        if (r.status != 0)
            fail_msg("taskset -c %d arrun -n 2 exited %d; stderr:\n%s", pu, r.status, r.err);
        for (int i = 0; i < 2; i++) {
            char got[2048];
            ta_rank_var(r.out, i, "cpus", got, sizeof(got));
            if (strcmp(got, cpu) != 0)
                fail_msg("taskset -c %d arrun: rank %d runs on cpus %s", pu, i, got);
        }
        check_reports(&r, 2, want);
        snprintf(msg, sizeof(msg),
                 "arrun: binding within the cpus arrun may run on (its affinity and cgroup): PUs "
                 "%d, 1 of this host's ",
                 pu);
        if (!strstr(r.err, msg))
            fail_msg("expected '%s' in:\n%s", msg, r.err);
        snprintf(msg, sizeof(msg),
                 "arrun: warning: 2 ranks x 1 core on 1 %.*s (arrun may run only on PUs %d): 2 "
                 "of the 2 ranks share cores\n",
                 (int)strlen(word) - 1, word, pu);
        if (!strstr(r.err, msg))
            fail_msg("expected '%s' in:\n%s", msg, r.err);
        run_free(&r);

        /* NUMA nodes and no binding: the same cpu. */
        for (int b = 0; b < 2; b++) {
            run_arrun(&r, &ro, "-n", "2", "--bind", b ? "none" : "numa", helper_path, "env", NULL);
            assert_int_equal(r.status, 0);
            parse_env(r.out, 2, l);
            for (int i = 0; i < 2; i++)
                if (strcmp(l[i].cpus, cpu) != 0)
                    fail_msg("taskset -c %d arrun --bind %s: rank %d runs on cpus %s", pu,
                             b ? "none" : "numa", i, l[i].cpus);
            run_free(&r);
        }

        /* Two cores a rank, where arrun has one: refused before any rank starts. */
        run_arrun(&r, &ro, "-n", "1", "--cpus-per-rank", "2", helper_path, "vars", NULL);
        assert_int_equal(r.status, 2);
        snprintf(msg, sizeof(msg),
                 "arrun: --cpus-per-rank 2: arrun may run on 1 %.*s (arrun may run only on PUs "
                 "%d)\n",
                 (int)strlen(word) - 1, word, pu);
        if (strcmp(r.err, msg) != 0)
            fail_msg("expected '%s', not:\n%s", msg, r.err);
        assert_int_equal(r.out_len, 0);
        run_free(&r);
    }
    free_topology(topo);
}

/* The cgroup test_bind_cgroup made, removed by its teardown. */
static char g_cgroup[256];

int ta_remove_cgroup(void **state)
{
    (void)state;
    /* The group empties once arrun and its ranks are reaped: at once, or nearly. */
    for (int tries = 0; g_cgroup[0] != '\0' && rmdir(g_cgroup) < 0 && errno == EBUSY && tries < 200;
         tries++)
        usleep(10000);
    g_cgroup[0] = '\0';
    return 0;
}

/* Writes text into dir/name: 0, or -1. */
static int cgroup_write(const char *dir, const char *name, const char *text)
{
    char path[320];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) != 0 ? -1 : rc;
}

/*
 * arrun started in a cgroup whose cpuset holds one core's cpu (a container, a batch
 * system's job): its ranks run there, and --report-bindings, the sharing warning and a
 * refused --cpus-per-rank say what arrun was given, as for an affinity.  Needs a cgroup
 * v1 cpuset hierarchy this test may make a group in (root); skipped elsewhere.  Before,
 * hwloc left the other cpus out of arrun's topology: nothing said the job was confined,
 * and --cpus-per-rank 2 said "this host has 1 core".
 */
void test_bind_cgroup(void **state)
{
    (void)state;
    const char *root = "/sys/fs/cgroup/cpuset";
    hwloc_topology_t topo;
    hwloc_obj_t cores[1024];
    char mems[64] = "", path[320], cpu[16], msg[256], where[256];
    const char *want[2] = {where, where};
    struct run r;

    load_topology(&topo);
    int ncores = cores_of(topo, cores, 1024);
    hwloc_bitmap_t mine = hwloc_bitmap_dup(cores[ncores - 1]->cpuset);
    hwloc_bitmap_and(mine, mine, g_allowed);
    int pu = hwloc_bitmap_first(mine);
    hwloc_bitmap_free(mine);
    unsigned logical = cores[ncores - 1]->logical_index;
    const char *word =
        hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? "cores" : "processing units";
    free_topology(topo);
    snprintf(path, sizeof(path), "%s/cpuset.mems", root);
    FILE *f = fopen(path, "r");
    if (ncores < 2 || f == NULL || fgets(mems, sizeof(mems), f) == NULL) {
        if (f != NULL)
            fclose(f);
        skip();
    }
    fclose(f);
    snprintf(g_cgroup, sizeof(g_cgroup), "%s/arrun-test-%d", root, (int)getpid());
    snprintf(cpu, sizeof(cpu), "%d", pu);
    if (mkdir(g_cgroup, 0755) < 0) {
        g_cgroup[0] = '\0';
        skip();
    }
    if (cgroup_write(g_cgroup, "cpuset.mems", mems) < 0 ||
        cgroup_write(g_cgroup, "cpuset.cpus", cpu) < 0)
        skip(); /* the teardown removes the group */
    snprintf(path, sizeof(path), "%s/cgroup.procs", g_cgroup);
    struct run_opts ro = {.cgroup = path};

    snprintf(where, sizeof(where), "%s %u", word, logical);
    run_arrun(&r, &ro, "-n", "2", "--report-bindings", helper_path, "vars", NULL);
    if (r.status != 0)
        fail_msg("arrun in a cgroup of cpu %d exited %d; stderr:\n%s", pu, r.status, r.err);
    for (int i = 0; i < 2; i++) {
        char got[2048];
        ta_rank_var(r.out, i, "cpus", got, sizeof(got));
        if (strcmp(got, cpu) != 0)
            fail_msg("arrun in a cgroup of cpu %d: rank %d runs on cpus %s", pu, i, got);
    }
    check_reports(&r, 2, want);
    snprintf(msg, sizeof(msg),
             "arrun: binding within the cpus arrun may run on (its affinity and cgroup): PUs %d, "
             "1 of this host's %d ",
             pu, ncores);
    if (!strstr(r.err, msg))
        fail_msg("expected '%s' in:\n%s", msg, r.err);
    snprintf(msg, sizeof(msg), "(arrun may run only on PUs %d): 2 of the 2 ranks share cores\n",
             pu);
    if (!strstr(r.err, msg))
        fail_msg("expected '%s' in:\n%s", msg, r.err);
    run_free(&r);

    run_arrun(&r, &ro, "-n", "1", "--cpus-per-rank", "2", helper_path, "vars", NULL);
    assert_int_equal(r.status, 2);
    snprintf(msg, sizeof(msg),
             "arrun: --cpus-per-rank 2: arrun may run on 1 %.*s (arrun may run only on PUs %d)\n",
             (int)strlen(word) - 1, word, pu);
    if (strcmp(r.err, msg) != 0)
        fail_msg("expected '%s', not:\n%s", msg, r.err);
    run_free(&r);
}
