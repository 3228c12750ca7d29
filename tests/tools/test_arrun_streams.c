/* SPDX-License-Identifier: MIT */
/*
 * The ranks' standard streams under arrun, tested from the outside: stdin reaches rank 0
 * only, --label prefixes every line with its rank and never mixes two ranks' bytes, and
 * --output-filename writes each rank's output to DIR/rank.R.  Part of test_arrun (main in
 * test_arrun.c).  The ranks run unbound (--bind none): what arrun itself writes here must
 * not depend on how many cores the host has (more ranks than cores is a warning).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arrun_run.h"
#include "test_arrun.h"

void test_stdin(void **state)
{
    (void)state;
    struct run_opts ro = {.stdin_text = "hello ranks\n"};
    struct run r;

    /* Rank 0 reads arrun's stdin; the others read /dev/null rather than race for it. */
    run_arrun(&r, &ro, "--bind", "none", "-n", "2", helper_path, "stdin", NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "rank=0 stdin=hello ranks\n"));
    assert_non_null(strstr(r.out, "rank=1 stdin=(eof)\n"));
    run_free(&r);
}

/* ---- output -------------------------------------------------------------------------- */

static bool has_line_starting(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0)
            return true;
    return false;
}

/*
 * Every line "[r] r<r> <stream> l<j> " + len copies of the rank's letter, j counting up
 * from 0 for each rank, then "[r] r<r> tail" (the child wrote it without a newline).
 */
static void check_labelled(const char *text, const char *stream, int nranks, int nlines, int len)
{
    int next[64] = {0};
    bool tail[64] = {false};
    const char *p = text;

    while (*p) {
        const char *nl = strchr(p, '\n');
        int r, j, n = 0;
        char head[64];

        assert_non_null(nl);
        if (sscanf(p, "[%d] %n", &r, &n) != 1 || n == 0 || r < 0 || r >= nranks)
            fail_msg("line without a rank label: %.60s", p);
        const char *body = p + n;
        size_t body_len = (size_t)(nl - body);

        snprintf(head, sizeof(head), "r%d tail", r);
        if (body_len == strlen(head) && strncmp(body, head, body_len) == 0) {
            assert_false(tail[r]);
            tail[r] = true;
        } else {
            int h = snprintf(head, sizeof(head), "r%d %s l%d ", r, stream, next[r]);
            if (body_len != (size_t)h + (size_t)len || strncmp(body, head, (size_t)h) != 0)
                fail_msg("rank %d: line %d of %s is broken: %.80s", r, next[r], stream, body);
            for (j = 0; j < len; j++)
                if (body[h + j] != 'a' + r % 26)
                    fail_msg("rank %d: line %d of %s holds another rank's bytes at %d", r, next[r],
                             stream, j);
            assert_false(tail[r]); /* nothing after the tail */
            next[r]++;
        }
        p = nl + 1;
    }
    for (int r = 0; r < nranks; r++) {
        assert_int_equal(next[r], nlines);
        assert_true(tail[r]);
    }
}

void test_label(void **state)
{
    (void)state;
    struct run r;

    /* 3000-byte lines written 7 bytes at a time by 4 ranks at once, on both streams. */
    run_arrun(&r, NULL, "--bind", "none", "-n", "4", "--label", helper_path, "label", "40", "3000",
              NULL);
    if (r.status != 0)
        fail_msg("arrun exited %d; stderr:\n%.2000s", r.status, r.err);
    check_labelled(r.out, "out", 4, 40, 3000);
    check_labelled(r.err, "err", 4, 40, 3000);
    run_free(&r);

    /* A line longer than any pipe buffer. */
    run_arrun(&r, NULL, "--bind", "none", "-n", "2", "--label", helper_path, "label", "2", "200000",
              NULL);
    assert_int_equal(r.status, 0);
    check_labelled(r.out, "out", 2, 2, 200000);
    check_labelled(r.err, "err", 2, 2, 200000);
    run_free(&r);

    /* arrun's own message after a failure comes unlabelled, on a line of its own. */
    run_arrun(&r, NULL, "--bind", "none", "-n", "3", "--label", helper_path, "fail", "1", "7",
              NULL);
    assert_int_equal(r.status, 7);
    assert_true(has_line_starting(r.err, "arrun: rank 1 (pid "));
    assert_non_null(strstr(r.out, "[0] pid="));
    assert_non_null(strstr(r.out, "[2] pid="));
    assert_int_equal(check_pids_gone(r.out, 0), 2);
    run_free(&r);
}

/* Removes dir and what the tests put in it: rank.R/{stdout,stderr}, and dirs below. */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (!d) {
        unlink(dir);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        char path[1024];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        remove_tree(path);
    }
    closedir(d);
    rmdir(dir);
}

static char *read_whole(const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = fopen(path, "r");

    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    buf = calloc(1, 1 << 16);
    assert_non_null(buf);
    len = fread(buf, 1, (1 << 16) - 1, f);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

/* DIR/rank.R/stdout holds exactly rank R's vars line, DIR/rank.R/stderr its err line. */
static void check_rank_files(const char *dir, int nranks)
{
    for (int i = 0; i < nranks; i++) {
        char path[1024], want[64], *text;
        snprintf(path, sizeof(path), "%s/rank.%d/stdout", dir, i);
        text = read_whole(path);
        snprintf(want, sizeof(want), "rank=%d pid=", i);
        if (strncmp(text, want, strlen(want)) != 0 || strchr(text, '\n') != text + strlen(text) - 1)
            fail_msg("%s holds: %s", path, text);
        free(text);
        snprintf(path, sizeof(path), "%s/rank.%d/stderr", dir, i);
        text = read_whole(path);
        snprintf(want, sizeof(want), "err rank=%d\n", i);
        assert_string_equal(text, want);
        free(text);
    }
}

/* test_output_filename's directory, removed by the teardown also when a check failed. */
static char output_top[] = "/tmp/arrun-test-output-XXXXXX";

int ta_remove_output_top(void **state)
{
    (void)state;
    if (strchr(output_top, 'X') == NULL)
        remove_tree(output_top);
    return 0;
}

void test_output_filename(void **state)
{
    (void)state;
    char *top = output_top, dir[256], file[512], under[600];
    struct stat st;
    struct run r;
    int fd;

    assert_non_null(mkdtemp(top));
    snprintf(dir, sizeof(dir), "%s/a/b", top); /* made, parents too */

    run_arrun(&r, NULL, "--bind", "none", "-n", "3", "--output-filename", dir, helper_path, "vars",
              NULL);
    if (r.status != 0)
        fail_msg("arrun exited %d; stderr:\n%s", r.status, r.err);
    assert_int_equal(r.out_len, 0); /* nothing on the terminal */
    assert_string_equal(r.err, "");
    check_rank_files(dir, 3);
    run_free(&r);

    /* Again with --label: the files as before (rewritten, not appended to), the terminal labelled.
     */
    run_arrun(&r, NULL, "--bind", "none", "-n", "2", "--label", "--output-filename", dir,
              helper_path, "vars", "RANK", NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "[0] rank=0 pid="));
    assert_non_null(strstr(r.out, "[1] rank=1 pid="));
    assert_non_null(strstr(r.err, "[1] err rank=1\n"));
    check_rank_files(dir, 2);
    snprintf(file, sizeof(file), "%s/rank.2/stdout", dir);
    assert_int_equal(stat(file, &st), 0); /* rank 2's from the first run, left alone */
    run_free(&r);

    /* A DIR that cannot be a directory: a usage error, and no rank ran. */
    snprintf(file, sizeof(file), "%s/file", top);
    fd = open(file, O_CREAT | O_WRONLY, 0644);
    assert_true(fd >= 0);
    close(fd);
    run_arrun(&r, NULL, "--bind", "none", "-n", "2", "--output-filename", file, helper_path, "vars",
              NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "arrun: --output-filename "));
    assert_non_null(strstr(r.err, ": Not a directory"));
    assert_int_equal(r.out_len, 0);
    run_free(&r);
    snprintf(under, sizeof(under), "%s/sub", file);
    run_arrun(&r, NULL, "--bind", "none", "-n", "2", "--output-filename", under, helper_path,
              "vars", NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "cannot make directory"));
    assert_null(strstr(r.err, "err rank="));
    run_free(&r);
    /* Unwritable (root may write anywhere, so only when not root). */
    if (geteuid() != 0) {
        snprintf(under, sizeof(under), "%s/ro", top);
        assert_int_equal(mkdir(under, 0500), 0);
        snprintf(dir, sizeof(dir), "%s/ro/out", top);
        run_arrun(&r, NULL, "--bind", "none", "-n", "1", "--output-filename", dir, helper_path,
                  "vars", NULL);
        assert_int_equal(r.status, 2);
        assert_non_null(strstr(r.err, "Permission denied"));
        run_free(&r);
        chmod(under, 0700);
    }
    remove_tree(top);
    assert_int_not_equal(stat(top, &st), 0);
}
