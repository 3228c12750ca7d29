/* SPDX-License-Identifier: MIT */
/*
 * Communicator ids: format, randomness (no repeats), validation of malformed ids.
 */
#include "id.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void format(void **s)
{
    (void)s;
    comm_id_t id;
    char why[128];
    assert_int_equal(comm_id_new(&id), COMM_OK);
    assert_int_equal(strlen(id.str), 37);
    assert_memory_equal(id.str, "arc1-", 5);
    assert_true(rt_id_valid(&id, why, sizeof(why)));
}

static int cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void unique(void **s)
{
    (void)s;
    enum { N = 20000 };
    comm_id_t *ids = malloc(N * sizeof(*ids));
    for (int i = 0; i < N; i++)
        assert_int_equal(comm_id_new(&ids[i]), COMM_OK);
    qsort(ids, N, sizeof(*ids), cmp);
    for (int i = 1; i < N; i++)
        assert_true(strcmp(ids[i - 1].str, ids[i].str) != 0);
    /* Every hex digit turns up in every position over 20000 ids. */
    for (int pos = 5; pos < 37; pos++) {
        int seen = 0;
        for (int i = 0; i < N; i++) {
            char ch = ids[i].str[pos];
            seen |= 1 << (ch <= '9' ? ch - '0' : ch - 'a' + 10);
        }
        assert_int_equal(seen, 0xffff);
    }
    free(ids);
}

static void malformed(void **s)
{
    (void)s;
    static const char *const bad[] = {
        "",
        "arc1-",
        "arc1-0123456789abcdef0123456789abcde",
        "arc1-0123456789abcdef0123456789abcdef0",
        "arc2-0123456789abcdef0123456789abcdef",
        "arc1-0123456789ABCDEF0123456789abcdef",
        "arc1-0123456789abcdef0123456789abcd/f",
        "arc1_0123456789abcdef0123456789abcdef",
    };
    char why[128];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        comm_id_t id;
        memset(&id, 0, sizeof(id));
        strcpy(id.str, bad[i]);
        assert_false(rt_id_valid(&id, why, sizeof(why)));
        assert_true(strlen(why) > 10);
    }
    comm_id_t unterminated;
    memset(unterminated.str, 'a', sizeof(unterminated.str));
    assert_false(rt_id_valid(&unterminated, why, sizeof(why)));
    assert_non_null(strstr(why, "NUL"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(format),
        cmocka_unit_test(unique),
        cmocka_unit_test(malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
