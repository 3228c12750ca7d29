/* SPDX-License-Identifier: MIT */
/*
 * A Hexagon communicator served by the host emulation says so, once per process, at
 * warn level (the default): a child process with its stderr in a file makes two
 * communicators of two thread ranks each, and the file must hold the notice once.
 * With ARCOMM_LOG_LEVEL=error it holds nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "arcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int two_hexagon_comms(void)
{
    for (int round = 0; round < 2; round++) {
        comm_config_t cfg;
        comm_config_init(&cfg);
        cfg.device = COMM_DEVICE_HEXAGON;
        comm_t *c[2] = {NULL, NULL};
        if (comm_init_all(c, 2, NULL, &cfg) != COMM_OK) {
            fprintf(stdout, "comm_init_all: %s\n", comm_last_error(NULL));
            return 10;
        }
        comm_destroy(c[0]);
        comm_destroy(c[1]);
    }
    return 0;
}

/* Runs two_hexagon_comms in a child with ARCOMM_LOG_LEVEL=level (NULL: unset); returns
 * its stderr in err. */
static void run_child(const char *level, char *err, size_t len)
{
    char path[] = "/tmp/arcomm-test-hex-notice-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (level != NULL)
            setenv("ARCOMM_LOG_LEVEL", level, 1);
        else
            unsetenv("ARCOMM_LOG_LEVEL");
        dup2(fd, 2);
        _exit(two_hexagon_comms());
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    ssize_t n = pread(fd, err, len - 1, 0);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void notice_once(void **s)
{
    (void)s;
    char err[4096];
    run_child(NULL, err, sizeof(err));
    if (count_of(err, "host emulation") != 1)
        fail_msg("expected the emulation notice once; stderr:\n%s", err);
    assert_non_null(strstr(err, "arcomm warn: Hexagon communicators of this process run on the "
                                "host emulation"));
}

static void notice_quiet_at_error(void **s)
{
    (void)s;
    char err[4096];
    run_child("error", err, sizeof(err));
    assert_string_equal(err, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(notice_once),
        cmocka_unit_test(notice_quiet_at_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
