/* SPDX-License-Identifier: MIT */
/*
 * A build without the Hexagon backend (-Dhexagon=disabled): a Hexagon communicator is
 * refused with COMM_ERR_UNSUPPORTED and a reason that says Hexagon is not built in,
 * from comm_init and from comm_init_env (ARCOMM_DEVICE=hexagon), and the refusal
 * leaves no segment in /dev/shm.
 */
#include "arcomm.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

/* The segment a communicator with this id would have: /dev/shm/arcomm-<hex digits>. */
static void check_no_segment(const comm_id_t *id)
{
    const char *dash = strchr(id->str, '-');
    assert_non_null(dash);
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/arcomm-%s", dash + 1);
    if (access(path, F_OK) == 0)
        fail_msg("%s is left behind", path);
}

static void check_refusal(comm_status_t st, comm_t *c)
{
    if (st == COMM_OK)
        comm_destroy(c);
    assert_int_equal(st, COMM_ERR_UNSUPPORTED);
    assert_null(c);
    const char *m = comm_last_error(NULL);
    if (!strstr(m, "Hexagon is not built into this arcomm"))
        fail_msg("\"%s\" does not say Hexagon is not built in", m);
}

static void init_refused(void **s)
{
    (void)s;
    comm_config_t cfg;
    comm_config_init(&cfg);
    assert_int_equal(comm_id_new(&cfg.id), COMM_OK);
    cfg.device = COMM_DEVICE_HEXAGON;
    comm_t *c = NULL;
    check_refusal(comm_init(&c, &cfg), c);
    check_no_segment(&cfg.id);
}

static void init_env_refused(void **s)
{
    (void)s;
    comm_id_t id;
    assert_int_equal(comm_id_new(&id), COMM_OK);
    setenv("ARCOMM_RANK", "0", 1);
    setenv("ARCOMM_SIZE", "1", 1);
    setenv("ARCOMM_ID", id.str, 1);
    setenv("ARCOMM_DEVICE", "hexagon", 1);
    comm_t *c = NULL;
    check_refusal(comm_init_env(&c), c);
    check_no_segment(&id);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(init_refused),
        cmocka_unit_test(init_env_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
