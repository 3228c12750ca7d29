/* SPDX-License-Identifier: MIT */
/*
 * What the library says on stderr, and only that: each case runs in a child process of
 * its own (the "once per process" warnings start fresh there) with an environment the
 * case sets, its stderr in a file, and checks the file afterwards.
 *
 *   - an ARCOMM_* variable that is no knob is warned about once per process, with the
 *     suggestion arinfo makes, however many communicators the process makes;
 *   - the variables of arrun, libarcomm_pmpi, libarcomm_heap and the Python package
 *     are no typos: nothing said;
 *   - an error the caller receives is not logged at the default level (it is in
 *     comm_last_error), and is at info;
 *   - comm_init_env outside arrun names what the launcher that did start the process
 *     needs: comm_init_mpi under mpirun, arrun or a config under torchrun.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <arcomm.h>

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* What a child wrote to stderr, and its exit status. */
struct child_out {
    char err[8192];
    int status;
};

typedef int (*child_fn)(void);

/* Launchers' variables that comm_init_env looks at: none from whoever runs the suite. */
static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",   "PMI_SIZE",
    "MPI_LOCALRANKID",      "RANK",      "WORLD_SIZE", "MASTER_ADDR"};

/* Clears every ARCOMM_* variable (the suite's own ARCOMM_LOG_LEVEL too) and the
 * launchers', sets the NULL-terminated NAME, VALUE pairs, and runs fn with stderr going
 * to a file. */
static void run_child(struct child_out *o, child_fn fn, const char *const *env)
{
    char path[] = "/tmp/arcomm-test-messages-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (bool again = true; again;) {
            again = false;
            for (char **e = environ; *e != NULL; e++) {
                if (strncmp(*e, "ARCOMM_", 7) != 0)
                    continue;
                char name[256];
                size_t len = strcspn(*e, "=");
                snprintf(name, sizeof(name), "%.*s", (int)len, *e);
                unsetenv(name);
                again = true;
                break;
            }
        }
        for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(launcher_vars[0]); i++)
            unsetenv(launcher_vars[i]);
        for (size_t i = 0; env != NULL && env[i] != NULL; i += 2)
            setenv(env[i], env[i + 1], 1);
        dup2(fd, 2);
        _exit(fn());
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    o->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    ssize_t n = pread(fd, o->err, sizeof(o->err) - 1, 0);
    o->err[n > 0 ? n : 0] = '\0';
    close(fd);
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Two communicators of two thread ranks each, one after the other: four comm_inits of
 * one process, from two threads. */
static int make_comms(void)
{
    for (int round = 0; round < 2; round++) {
        comm_t *c[2] = {NULL, NULL};
        if (comm_init_all(c, 2, NULL, NULL) != COMM_OK) {
            fprintf(stdout, "comm_init_all: %s\n", comm_last_error(NULL));
            return 10;
        }
        for (int i = 0; i < 2; i++)
            comm_destroy(c[i]);
    }
    return 0;
}

static void unknown_variable_warned_once(void **s)
{
    (void)s;
    static const char *const env[] = {"ARCOMM_TIMOUT_MS", "5000", NULL};
    struct child_out o;
    run_child(&o, make_comms, env);
    assert_int_equal(o.status, 0);
    if (count_of(o.err, "ARCOMM_TIMOUT_MS") != 1)
        fail_msg("expected one warning about ARCOMM_TIMOUT_MS; stderr:\n%s", o.err);
    assert_non_null(strstr(o.err, "arcomm warn: ARCOMM_TIMOUT_MS is set but is no arcomm "
                                  "variable (did you mean ARCOMM_TIMEOUT_MS?)\n"));
}

static void unknown_variable_quiet_at_error_level(void **s)
{
    (void)s;
    static const char *const env[] = {"ARCOMM_TIMOUT_MS", "5000", "ARCOMM_LOG_LEVEL", "error",
                                      NULL};
    struct child_out o;
    run_child(&o, make_comms, env);
    assert_int_equal(o.status, 0);
    assert_string_equal(o.err, "");
}

static void known_variables_quiet(void **s)
{
    (void)s;
    /* arrun's (ARCOMM_LOCAL_SIZE is read by nobody in the library), the other
     * components', the test suite's switches. */
    static const char *const env[] = {"ARCOMM_LOCAL_SIZE",
                                      "2",
                                      "ARCOMM_PMPI",
                                      "on",
                                      "ARCOMM_PMPI_MIN_BYTES",
                                      "1K",
                                      "ARCOMM_PMPI_PROGRESS_US",
                                      "100",
                                      "ARCOMM_HEAP_BYTES",
                                      "1G",
                                      "ARCOMM_HEAP_MIN",
                                      "64K",
                                      "ARCOMM_LIBRARY",
                                      "/nowhere/libarcomm.so",
                                      "ARCOMM_MPI_LIBRARY",
                                      "/nowhere/libarcomm_mpi.so",
                                      "ARCOMM_TORCH_NATIVE",
                                      "0",
                                      "ARCOMM_TEST_QUICK",
                                      "1",
                                      NULL};
    struct child_out o;
    run_child(&o, make_comms, env);
    assert_int_equal(o.status, 0);
    assert_string_equal(o.err, "");
}

/* A call that fails on its arguments, and a comm_init that does. */
static int failing_calls(void)
{
    comm_t *c[1] = {NULL};
    if (comm_init_all(c, 1, NULL, NULL) != COMM_OK)
        return 10;
    float x = 1;
    if (comm_allreduce(c[0], NULL, &x, 1, COMM_F32, COMM_SUM, NULL) != COMM_ERR_INVALID)
        return 11;
    if (strstr(comm_last_error(c[0]), "sendbuf is NULL") == NULL)
        return 12;
    comm_destroy(c[0]);
    comm_t *d = NULL;
    if (comm_init(&d, NULL) != COMM_ERR_INVALID)
        return 13;
    if (strstr(comm_last_error(NULL), "cfg is NULL") == NULL)
        return 14;
    return 0;
}

static void returned_error_not_logged(void **s)
{
    (void)s;
    struct child_out o;
    run_child(&o, failing_calls, NULL);
    assert_int_equal(o.status, 0);
    assert_string_equal(o.err, "");
}

static void returned_error_logged_at_info(void **s)
{
    (void)s;
    static const char *const env[] = {"ARCOMM_LOG_LEVEL", "info", NULL};
    struct child_out o;
    run_child(&o, failing_calls, env);
    assert_int_equal(o.status, 0);
    assert_non_null(strstr(o.err, "arcomm info: rank 0: comm_allreduce: sendbuf is NULL"));
    assert_non_null(strstr(o.err, "arcomm info: comm_init: cfg is NULL"));
    assert_null(strstr(o.err, "arcomm error"));
}

/* The child checks comm_init_env's message for env_needle, and prints it when wrong. */
static const char *env_needle;

static int init_env_says(void)
{
    comm_t *c = NULL;
    if (comm_init_env(&c) != COMM_ERR_INVALID)
        return 10;
    if (strstr(comm_last_error(NULL), env_needle) == NULL) {
        fprintf(stderr, "message: %s\n", comm_last_error(NULL));
        return 11;
    }
    return 0;
}

static void init_env_under_mpirun(void **s)
{
    (void)s;
    static const char *const env[] = {"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "0",
                                      NULL};
    struct child_out o;
    env_needle = "call comm_init_mpi";
    run_child(&o, init_env_says, env);
    if (o.status != 0)
        fail_msg("status %d; stderr:\n%s", o.status, o.err);
    static const char *const pmix[] = {"PMIX_RANK", "1", NULL};
    env_needle = "PMIX_RANK is: an MPI launcher";
    run_child(&o, init_env_says, pmix);
    if (o.status != 0)
        fail_msg("status %d; stderr:\n%s", o.status, o.err);
}

static void init_env_under_torchrun(void **s)
{
    (void)s;
    static const char *const env[] = {"RANK",        "0",         "WORLD_SIZE", "2",
                                      "MASTER_ADDR", "127.0.0.1", NULL};
    struct child_out o;
    env_needle = "torchrun started this process";
    run_child(&o, init_env_says, env);
    if (o.status != 0)
        fail_msg("status %d; stderr:\n%s", o.status, o.err);
}

static void init_env_plain(void **s)
{
    (void)s;
    struct child_out o;
    env_needle = "ARCOMM_RANK is not set (start the program with arrun";
    run_child(&o, init_env_says, NULL);
    if (o.status != 0)
        fail_msg("status %d; stderr:\n%s", o.status, o.err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unknown_variable_warned_once),
        cmocka_unit_test(unknown_variable_quiet_at_error_level),
        cmocka_unit_test(known_variables_quiet),
        cmocka_unit_test(returned_error_not_logged),
        cmocka_unit_test(returned_error_logged_at_info),
        cmocka_unit_test(init_env_under_mpirun),
        cmocka_unit_test(init_env_under_torchrun),
        cmocka_unit_test(init_env_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
