/* SPDX-License-Identifier: MIT */
/*
 * arinfo's command line against the library's own tables: --config lists every knob
 * of rt_knob_table with its source and the value comm_init would use, a malformed
 * knob exits 2 with rt_knobs_load's message, typos of ARCOMM_* names are warned about
 * (arrun's variables are not), usage errors exit 2, and the paths of allreduce and of
 * every other collective are coll_host_path's around the flag thresholds.
 *
 *   test_arinfo_cli ARINFO TOPOLOGY.xml
 */
#include "backend.h"
#include "coll.h"
#include "comm_internal.h"
#include "knobs.h"
#include "shm/cma_calibrate.h"
#include "nt_calibrate.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

extern char **environ;

static const char *arinfo_path;
static const char *xml_path;

struct run {
    int status; /* exit status, or -1 when killed */
    char *out;
    char *err;
};

static char *slurp(int fd)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    lseek(fd, 0, SEEK_SET);
    for (;;) {
        if (len + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        assert_true(n >= 0);
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    close(fd);
    return buf;
}

static int tmpfd(void)
{
    char name[] = "/tmp/test_arinfo_cli.XXXXXX";
    int fd = mkstemp(name);
    assert_true(fd >= 0);
    unlink(name);
    return fd;
}

/*
 * Runs arinfo with args (NULL-terminated) in this environment less every ARCOMM_* and
 * HWLOC_* variable, plus env ("NAME=VALUE", NULL-terminated): knobs at their defaults
 * unless a test sets one.  COLUMNS is wide, so that no line the tests parse is wrapped
 * (a test that wants the wrapping sets its own).
 */
static struct run run_arinfo(const char *const *env, const char *const *args)
{
    const char *envp[256];
    size_t ne = 0;
    for (char **e = environ; *e && ne < 200; e++)
        if (strncmp(*e, "ARCOMM_", 7) != 0 && strncmp(*e, "HWLOC_", 6) != 0 &&
            strncmp(*e, "COLUMNS=", 8) != 0)
            envp[ne++] = *e;
    bool columns = false;
    for (; env && *env && ne < 254; env++) {
        columns |= strncmp(*env, "COLUMNS=", 8) == 0;
        envp[ne++] = *env;
    }
    if (!columns)
        envp[ne++] = "COLUMNS=1000";
    envp[ne] = NULL;
    const char *argv[32] = {arinfo_path};
    size_t na = 1;
    for (; args && *args && na < 31; args++)
        argv[na++] = *args;
    argv[na] = NULL;

    int out = tmpfd(), err = tmpfd();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out, 1);
        dup2(err, 2);
        execve(arinfo_path, (char *const *)argv, (char *const *)envp);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        assert_int_equal(errno, EINTR);
    struct run r = {.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1};
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

/* The line of out that starts with "  NAME " (a --config row), or fails. */
static const char *config_row(const char *out, const char *name, char *line, size_t len)
{
    char head[128];
    snprintf(head, sizeof(head), "\n  %s ", name);
    const char *p = strstr(out, head);
    if (p == NULL)
        fail_msg("--config has no row for %s:\n%s", name, out);
    p += 1;
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    assert_true(n < len);
    memcpy(line, p, n);
    line[n] = '\0';
    return line;
}

/* The knobs as comm_init would resolve them for nranks, with no ARCOMM_* set here. */
/* The knobs as each backend's communicators of nranks ranks use them. */
static void expected_knobs(struct rt_knobs k[3], int nranks)
{
    char err[256];
    for (size_t v = 0; v < 3; v++) {
        assert_int_equal(rt_knobs_load(&k[v], err, sizeof(err)), COMM_OK);
        coll_knob_views[v]->used(&k[v], rt_topo_summary(), nranks, false);
    }
}

static void config_lists_every_knob(void **state)
{
    (void)state;
    const char *env[] = {"ARCOMM_TIMEOUT_MS=4321", NULL};
    const char *args[] = {"--config", "--topology", xml_path, NULL};
    struct run r = run_arinfo(env, args);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    struct rt_knobs k[3];
    setenv("ARCOMM_TIMEOUT_MS", "4321", 1); /* as arinfo sees it: others depend on it */
    expected_knobs(k, 2);
    unsetenv("ARCOMM_TIMEOUT_MS");
    char line[1024], want[RT_KNOB_STR_MAX + 64], first[RT_KNOB_STR_MAX];
    for (size_t i = 0; i < rt_knob_count; i++) {
        const struct rt_knob_desc *d = &rt_knob_table[i];
        config_row(r.out, d->name, line, sizeof(line));
        bool from_env = strcmp(d->name, "ARCOMM_TIMEOUT_MS") == 0;
        if (strstr(line, from_env ? "  environment  " : "  default  ") == NULL)
            fail_msg("%s: wrong source in \"%s\"", d->name, line);
        if (strstr(line, d->doc) == NULL)
            fail_msg("%s: doc missing in \"%s\"", d->name, line);
        /* Every backend that reads the knob: its value is in the row, named by the
         * backend when they differ, marked "(auto)" when it resolved an automatic one. */
        size_t readers = 0;
        bool differ = false;
        for (size_t v = 0; v < 3; v++) {
            if (!((coll_knob_views[v]->reads >> i) & 1u))
                continue;
            rt_knob_format(&k[v], i, readers ? want : first, RT_KNOB_STR_MAX);
            differ |= readers && strcmp(want, first) != 0;
            readers++;
        }
        if (readers == 0)
            fail_msg("%s: no backend reads it", d->name);
        for (size_t v = 0; v < 3; v++) {
            if (!((coll_knob_views[v]->reads >> i) & 1u))
                continue;
            char value[RT_KNOB_STR_MAX];
            rt_knob_format(&k[v], i, value, sizeof(value));
            if (from_env)
                snprintf(want, sizeof(want), "  4321  ");
            else if (differ)
                snprintf(want, sizeof(want), "%s: %s", coll_knob_views[v]->name, value);
            else if (strcmp(d->def, "auto") == 0 && strcmp(value, "auto") != 0)
                snprintf(want, sizeof(want), "%s (auto)", value);
            else
                snprintf(want, sizeof(want), "%s", value);
            if (want[0] != '\0' && strstr(line, want) == NULL)
                fail_msg("%s: \"%s\" missing in \"%s\"", d->name, want, line);
        }
    }
    run_free(&r);
}

static void malformed_knob_exits_2(void **state)
{
    (void)state;
    const char *env[] = {"ARCOMM_SHM_SLOT_BYTES=12Q", NULL};
    const char *modes[][3] = {{"--config", NULL}, {"--json", NULL}, {NULL}};
    for (size_t m = 0; m < 3; m++) {
        struct run r = run_arinfo(env, modes[m]);
        assert_int_equal(r.status, 2);
        assert_string_equal(r.out, "");
        assert_non_null(strstr(r.err, "ARCOMM_SHM_SLOT_BYTES=\"12Q\" is not valid"));
        run_free(&r);
    }
}

static void typos_warned_arrun_vars_not(void **state)
{
    (void)state;
    const char *env[] = {
        "ARCOMM_FLAG_TRESHOLD=1", "ARCOMM_RANK=0", "ARCOMM_SIZE=2",      "ARCOMM_LOCAL_RANK=0",
        "ARCOMM_LOCAL_SIZE=2",    "ARCOMM_ID=x",   "ARCOMM_DEVICE=host", NULL};
    const char *args[] = {"--config", NULL};
    struct run r = run_arinfo(env, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.err, "ARCOMM_FLAG_TRESHOLD is set but is no arcomm knob "
                                  "(did you mean ARCOMM_FLAG_THRESHOLD?)"));
    assert_non_null(strstr(r.out, "not knobs, yet set: ARCOMM_FLAG_TRESHOLD\n"));
    const char *arrun[] = {"ARCOMM_RANK", "ARCOMM_SIZE", "ARCOMM_LOCAL", "ARCOMM_ID",
                           "ARCOMM_DEVICE"};
    for (size_t i = 0; i < 5; i++)
        if (strstr(r.err, arrun[i]) != NULL)
            fail_msg("arrun's %s reported as a typo: %s", arrun[i], r.err);
    run_free(&r);
}

static void usage_errors_exit_2(void **state)
{
    (void)state;
    const char *bad[][4] = {
        {"--sizes", "12Q", NULL}, {"--sizes", "off", NULL}, {"-n", "0", NULL}, {"-n", "two", NULL},
        {"--only", "gpus", NULL}, {"stray", NULL},          {"--bogus", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct run r = run_arinfo(NULL, bad[i]);
        if (r.status != 2)
            fail_msg("arinfo %s %s: exit %d, not 2", bad[i][0], bad[i][1] ? bad[i][1] : "",
                     r.status);
        assert_string_equal(r.out, "");
        assert_true(strlen(r.err) > 0);
        run_free(&r);
    }
    const char *help[] = {"--help", NULL};
    struct run r = run_arinfo(NULL, help);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "Usage: arinfo [OPTION]...\n"));
    run_free(&r);
}

/* Every line of the text within COLUMNS, but for a word longer than the width. */
static void text_wraps_to_columns(void **state)
{
    (void)state;
    const char *env[] = {"COLUMNS=60", NULL};
    const char *args[] = {"--topology", xml_path, "--paths", "-n", "4", NULL};
    const char *config[] = {"--config", "--topology", xml_path, NULL};
    for (int pass = 0; pass < 2; pass++) {
        struct run r = run_arinfo(env, pass ? config : args);
        assert_int_equal(r.status, 0);
        assert_true(strlen(r.out) > 1000);
        for (char *line = r.out, *nl; *line; line = nl + 1) {
            nl = strchr(line, '\n');
            assert_non_null(nl);
            size_t len = (size_t)(nl - line);
            if (len <= 60)
                continue;
            /* Longer: only as one word after the indent. */
            size_t lead = strspn(line, " ");
            if (memchr(line + lead, ' ', len - lead) != NULL)
                fail_msg("a line of %zu columns at COLUMNS=60: \"%.*s\"", len, (int)len, line);
        }
        run_free(&r);
    }
}

/* The path tables are behind --paths in the text; JSON always has them. */
static void paths_behind_a_flag(void **state)
{
    (void)state;
    const char *plain[] = {"--topology", xml_path, NULL};
    const char *paths[] = {"--topology", xml_path, "--paths", NULL};
    const char *json[] = {"--topology", xml_path, "--json", NULL};
    struct run r = run_arinfo(NULL, plain);
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, "Allreduce paths"));
    assert_null(strstr(r.out, "Collective paths"));
    assert_non_null(strstr(r.out, "Transports"));
    run_free(&r);
    r = run_arinfo(NULL, paths);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "Allreduce paths"));
    assert_non_null(strstr(r.out, "Collective paths"));
    assert_non_null(strstr(r.out, "Transports"));
    run_free(&r);
    r = run_arinfo(NULL, json);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "\"collective_paths\""));
    run_free(&r);
}

static void missing_topology_exits_1(void **state)
{
    (void)state;
    const char *args[] = {"--topology", "/nonexistent/topology.xml", NULL};
    struct run r = run_arinfo(NULL, args);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent/topology.xml"));
    run_free(&r);
}

/* Each size lands on the path coll_host_path_name gives, around the flag threshold. */
static void paths_follow_the_threshold(void **state)
{
    (void)state;
    struct rt_knobs k[3];
    expected_knobs(k, 4);
    size_t t = k[0].flag_threshold; /* the host backend's */
    char sizes[64];
    snprintf(sizes, sizeof(sizes), "%zu,%zu", t, t + 1);
    const char *args[] = {"--only", "paths", "-n", "4", "--sizes", sizes, NULL};
    struct run r = run_arinfo(NULL, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "(host buffers, 4 ranks)"));
    char line[256];
    snprintf(line, sizeof(line), "\n  %-10zu %-12s %-38s %s\n", t + 1, "no",
             "bulk: staged (one-pass with comm_mem)", "bulk: one-pass");
    assert_string_equal(coll_host_path_name(&k[0], t + 1), "bulk");
    assert_non_null(strstr(r.out, line));
    run_free(&r);

    /* Narrowing from 1K on: every size at or above says yes. */
    const char *env[] = {"ARCOMM_BF16_THRESHOLD=1K", NULL};
    const char *args2[] = {"--only", "paths", "--sizes", "1023,1K", NULL};
    r = run_arinfo(env, args2);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "\n  1023       no "));
    assert_non_null(strstr(r.out, "\n  1K         yes "));
    run_free(&r);

    /* A flag path set off stays "off" once resolved (it read 0 before), and every size,
     * 1 byte included, takes the bulk path. */
    const char *env3[] = {"ARCOMM_FLAG_THRESHOLD=off", NULL};
    const char *args3[] = {"--only", "paths", "--sizes", "1,4K", NULL};
    r = run_arinfo(env3, args3);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "flag path up to off (thread ranks of one process: up to off)"));
    assert_null(strstr(r.out, "no           flag"));
    run_free(&r);
}

/* A size as arinfo prints it ("512K", "131073") in bytes. */
static size_t parse_size(const char *text)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end == 'K')
        v <<= 10;
    else if (*end == 'M')
        v <<= 20;
    else if (*end == 'G')
        v <<= 30;
    return (size_t)v;
}

static const enum coll_kind other_kinds[] = {COLL_BROADCAST, COLL_REDUCE, COLL_ALLGATHER,
                                             COLL_REDUCE_SCATTER, COLL_ALLTOALL};

/*
 * The collective paths table of out (arinfo --only paths -n nranks --sizes sizes[0..n)):
 * two rows per size, process ranks then thread ranks, each cell the path
 * coll_host_path gives that collective for that size, "staged" and "one-pass" for bulk.
 */
static void check_collective_table(const char *out, int nranks, const struct rt_knobs *procs,
                                   const struct rt_knobs *threads, const size_t *sizes, size_t n)
{
    char title[96];
    snprintf(title, sizeof(title),
             "Collective paths (host buffers, %d rank%s; SIZE: bytes per rank", nranks,
             nranks == 1 ? "" : "s");
    if (strstr(out, title) == NULL)
        fail_msg("no \"%s\" in:\n%s", title, out);
    const char *p = strstr(out, "\n  SIZE       RANKS    BROADCAST REDUCE   ALLGATHER "
                                "REDUCE_SCATTER ALLTOALL\n");
    if (p == NULL) {
        fail_msg("no collective paths header in:\n%s", out);
        return;
    }
    p = strchr(p + 1, '\n') + 1;
    for (size_t i = 0; i < n; i++) {
        for (int t = 0; t < 2; t++) {
            const char *nl = strchr(p, '\n');
            assert_non_null(nl);
            char line[256], size[32], ranks[32], cells[5][32];
            size_t len = (size_t)(nl - p);
            assert_true(len < sizeof(line));
            memcpy(line, p, len);
            line[len] = '\0';
            p = nl + 1;
            int got = t ? sscanf(line, "%31s %31s %31s %31s %31s %31s", ranks, cells[0], cells[1],
                                 cells[2], cells[3], cells[4]) +
                              1
                        : sscanf(line, "%31s %31s %31s %31s %31s %31s %31s", size, ranks, cells[0],
                                 cells[1], cells[2], cells[3], cells[4]);
            if (got != 7)
                fail_msg("row \"%s\" is not SIZE RANKS and five paths", line);
            if (!t && parse_size(size) != sizes[i])
                fail_msg("row \"%s\": size %s, not %zu", line, size, sizes[i]);
            assert_string_equal(ranks, t ? "thread" : "process");
            for (size_t c = 0; c < 5; c++) {
                const char *path =
                    coll_host_path(other_kinds[c], t ? threads : procs, sizes[i], nranks);
                const char *want = strcmp(path, "bulk") == 0 ? (t ? "one-pass" : "staged") : path;
                if (strcmp(cells[c], want) != 0)
                    fail_msg("%s of %zu bytes per rank on %d %s ranks: arinfo says %s, "
                             "coll_host_path %s (row \"%s\")",
                             coll_kind_name(other_kinds[c]), sizes[i], nranks,
                             t ? "thread" : "process", cells[c], path, line);
            }
        }
    }
}

/*
 * Each collective lands on the path coll_host_path gives, around the flag threshold of
 * process ranks and of thread ranks: T / nranks and T / nranks + 1 (where the
 * collectives that stage nranks blocks leave the flag path), T and T + 1.
 */
static void collective_paths_follow_the_threshold(void **state)
{
    (void)state;
    const int counts[] = {4, 7, 256};
    for (size_t ni = 0; ni < sizeof(counts) / sizeof(counts[0]); ni++) {
        int n = counts[ni];
        struct rt_knobs k[3], threads;
        expected_knobs(k, n);
        char err[256];
        assert_int_equal(rt_knobs_load(&threads, err, sizeof(err)), COMM_OK);
        coll_host_resolve_knobs(&threads, rt_topo_summary(), n, true);
        size_t sizes[8], ns = 0;
        const size_t t[2] = {k[0].flag_threshold, threads.flag_threshold};
        for (int j = 0; j < 2; j++) {
            sizes[ns++] = t[j] / (size_t)n;
            sizes[ns++] = t[j] / (size_t)n + 1;
            sizes[ns++] = t[j];
            sizes[ns++] = t[j] + 1;
        }
        char list[256], nr[16];
        size_t used = 0;
        for (size_t i = 0; i < ns; i++)
            used +=
                (size_t)snprintf(list + used, sizeof(list) - used, "%s%zu", i ? "," : "", sizes[i]);
        snprintf(nr, sizeof(nr), "%d", n);
        const char *args[] = {"--only", "paths", "-n", nr, "--sizes", list, NULL};
        struct run r = run_arinfo(NULL, args);
        assert_int_equal(r.status, 0);
        check_collective_table(r.out, n, &k[0], &threads, sizes, ns);
        /* Both sides of each threshold are in the table: the test sees both paths. */
        assert_string_equal(coll_host_path(COLL_ALLTOALL, &k[0], t[0] / (size_t)n, n), "flag");
        assert_string_equal(coll_host_path(COLL_ALLTOALL, &k[0], t[0] / (size_t)n + 1, n), "bulk");
        assert_string_equal(coll_host_path(COLL_BROADCAST, &k[0], t[0], n), "flag");
        assert_string_equal(coll_host_path(COLL_BROADCAST, &k[0], t[0] + 1, n), "bulk");
        run_free(&r);
    }

    /* The flag path off: every collective of every size, 1 byte included, is bulk. */
    const char *env[] = {"ARCOMM_FLAG_THRESHOLD=off", NULL};
    const char *args[] = {"--only", "paths", "--sizes", "1,4K", NULL};
    struct run r = run_arinfo(env, args);
    assert_int_equal(r.status, 0);
    setenv("ARCOMM_FLAG_THRESHOLD", "off", 1);
    struct rt_knobs k[3], threads;
    expected_knobs(k, 2);
    char err[256];
    assert_int_equal(rt_knobs_load(&threads, err, sizeof(err)), COMM_OK);
    coll_host_resolve_knobs(&threads, rt_topo_summary(), 2, true);
    unsetenv("ARCOMM_FLAG_THRESHOLD");
    const size_t sizes[] = {1, 4096};
    check_collective_table(r.out, 2, &k[0], &threads, sizes, 2);
    assert_non_null(strstr(r.out, "\n  1          process  staged    staged   staged    "
                                  "staged         staged\n"));
    assert_non_null(strstr(r.out, "\n             thread   one-pass  one-pass one-pass  "
                                  "one-pass       one-pass\n"));
    run_free(&r);
}

static void named_transport_is_honoured(void **state)
{
    (void)state;
    const char *env[] = {"ARCOMM_TRANSPORT=nosuch", NULL};
    const char *args[] = {"--only", "transports", NULL};
    struct run r = run_arinfo(env, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "ARCOMM_TRANSPORT=nosuch\n"));
    assert_non_null(strstr(r.out, "no transport named \"nosuch\" in this build"));
    assert_null(strstr(r.out, "<- picked"));
    run_free(&r);

    const char *env2[] = {"ARCOMM_TRANSPORT=shm", NULL};
    r = run_arinfo(env2, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "  shm      host     probe ok  <- picked for host buffers\n"));
    run_free(&r);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s ARINFO TOPOLOGY.xml\n", argv[0]);
        return 2;
    }
    arinfo_path = argv[1];
    xml_path = argv[2];
    /* expected_knobs() reads this process's environment: make it the children's. */
    for (size_t i = 0; i < rt_knob_count; i++)
        unsetenv(rt_knob_table[i].name);
    setenv("HWLOC_XMLFILE", xml_path, 1);
    /* The streaming-store threshold from the XML's caches, here and in the children: two
     * processes' calibrations need not agree. */
    setenv("ARINFO_NO_CALIBRATION", "1", 1);
    coll_nt_calibration_skip();
    shm_cma_calibration_skip();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_lists_every_knob),
        cmocka_unit_test(malformed_knob_exits_2),
        cmocka_unit_test(typos_warned_arrun_vars_not),
        cmocka_unit_test(usage_errors_exit_2),
        cmocka_unit_test(text_wraps_to_columns),
        cmocka_unit_test(paths_behind_a_flag),
        cmocka_unit_test(missing_topology_exits_1),
        cmocka_unit_test(paths_follow_the_threshold),
        cmocka_unit_test(named_transport_is_honoured),
        cmocka_unit_test(collective_paths_follow_the_threshold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
