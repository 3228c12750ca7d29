/* SPDX-License-Identifier: MIT */
/*
 * comm_mem_alloc arenas: alignment, no overlap, reuse after free with coalescing, a
 * clear NOMEM when full, INVALID for foreign and double frees, and that the memory is
 * the segment's (a 1-rank communicator is enough).
 */
#include "arcomm.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static comm_t *one_rank(void)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    assert_int_equal(comm_id_new(&cfg.id), COMM_OK);
    comm_t *c = NULL;
    assert_int_equal(comm_init(&c, &cfg), COMM_OK);
    return c;
}

static void alloc_free(void **s)
{
    (void)s;
    setenv("ARCOMM_MEM_POOL_BYTES", "1M", 1);
    comm_t *c = one_rank();
    unsetenv("ARCOMM_MEM_POOL_BYTES");
    void *p[16];
    for (int i = 0; i < 16; i++) {
        assert_int_equal(comm_mem_alloc(c, 1000 + (size_t)i, &p[i]), COMM_OK);
        assert_int_equal((uintptr_t)p[i] % 64, 0);
        memset(p[i], i, 1000 + (size_t)i);
    }
    for (int i = 0; i < 16; i++)
        for (size_t b = 0; b < 1000 + (size_t)i; b++)
            assert_int_equal(((uint8_t *)p[i])[b], i);
    /* Too large: NOMEM with a message naming the knob; nothing written to the output. */
    void *big = (void *)0x1;
    assert_int_equal(comm_mem_alloc(c, 2u << 20, &big), COMM_ERR_NOMEM);
    assert_ptr_equal(big, (void *)0x1);
    assert_non_null(strstr(comm_last_error(c), "ARCOMM_MEM_POOL_BYTES"));
    /* Free every other block, then all: the arena coalesces back to one piece. */
    for (int i = 0; i < 16; i += 2)
        assert_int_equal(comm_mem_free(c, p[i]), COMM_OK);
    assert_int_equal(comm_mem_free(c, p[0]), COMM_ERR_INVALID); /* double free */
    int local;
    assert_int_equal(comm_mem_free(c, &local), COMM_ERR_INVALID);
    assert_int_equal(comm_mem_free(c, NULL), COMM_OK);
    for (int i = 1; i < 16; i += 2)
        assert_int_equal(comm_mem_free(c, p[i]), COMM_OK);
    void *whole;
    assert_int_equal(comm_mem_alloc(c, 1u << 20, &whole), COMM_OK);
    assert_int_equal(comm_mem_free(c, whole), COMM_OK);
    assert_int_equal(comm_mem_alloc(c, 0, &whole), COMM_ERR_INVALID);
    assert_int_equal(comm_mem_alloc(c, 64, NULL), COMM_ERR_INVALID);

    /* A 1-rank allreduce over pool memory is a copy. */
    float *x, *y;
    assert_int_equal(comm_mem_alloc(c, 400000, (void **)&x), COMM_OK);
    assert_int_equal(comm_mem_alloc(c, 400000, (void **)&y), COMM_OK);
    for (int i = 0; i < 100000; i++)
        x[i] = (float)i * 0.5f + 1.0f;
    assert_int_equal(comm_allreduce(c, x, y, 100000, COMM_F32, COMM_SUM, NULL), COMM_OK);
    assert_memory_equal(x, y, 400000);
    comm_destroy(c);
}

static void status_strings(void **s)
{
    (void)s;
    for (int st = COMM_ERR_ABORTED; st <= COMM_OK; st++) {
        const char *msg = comm_status_string((comm_status_t)st);
        assert_non_null(msg);
        assert_true(strncmp(msg, "COMM_", 5) == 0);
    }
    assert_int_equal(comm_dtype_size(COMM_F32), 4);
    assert_int_equal(comm_dtype_size(COMM_BF16), 2);
    assert_int_equal(comm_dtype_size(COMM_I64), 8);
    assert_int_equal(comm_dtype_size((comm_dtype_t)99), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alloc_free),
        cmocka_unit_test(status_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
