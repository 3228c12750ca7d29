/* SPDX-License-Identifier: MIT */
/*
 * The knob table: defaults parse, sizes and booleans parse and reject garbage with a
 * message naming the variable, the environment wins over defaults and says so, and
 * every knob formats back to text.
 */
#include "knobs.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void clear_env(void)
{
    for (size_t i = 0; i < rt_knob_count; i++)
        unsetenv(rt_knob_table[i].name);
}

static int setup(void **s)
{
    (void)s;
    clear_env();
    return 0;
}

static void defaults(void **s)
{
    (void)s;
    struct rt_knobs k;
    char err[256] = "";
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    for (size_t i = 0; i < rt_knob_count; i++) {
        assert_int_equal(k.source[i], RT_SRC_DEFAULT);
        assert_true(strncmp(rt_knob_table[i].name, "ARCOMM_", 7) == 0);
        assert_true(strlen(rt_knob_table[i].doc) > 10);
        char buf[64];
        rt_knob_format(&k, i, buf, sizeof(buf));
        assert_true(buf[0] != '\0' || rt_knob_table[i].def[0] == '\0');
    }
    assert_int_equal(k.timeout_ms, 120000);
    assert_int_equal(k.log_level, RT_LOG_WARN);
    assert_int_equal(k.shm_slot_bytes, 1u << 20);
    assert_int_equal(k.flag_threshold, RT_SIZE_AUTO);
}

static void sizes(void **s)
{
    (void)s;
    size_t v;
    assert_true(rt_parse_size("0", &v) && v == 0);
    assert_true(rt_parse_size("4096", &v) && v == 4096);
    assert_true(rt_parse_size("64K", &v) && v == 65536);
    assert_true(rt_parse_size("64k", &v) && v == 65536);
    assert_true(rt_parse_size("1M", &v) && v == 1u << 20);
    assert_true(rt_parse_size("2GiB", &v) && v == 2ull << 30);
    assert_true(rt_parse_size("3MB", &v) && v == 3u << 20);
    assert_true(rt_parse_size("off", &v) && v == RT_SIZE_OFF);
    assert_true(rt_parse_size("auto", &v) && v == RT_SIZE_AUTO);
    assert_false(rt_parse_size("", &v));
    assert_false(rt_parse_size("-1", &v));
    assert_false(rt_parse_size("12Q", &v));
    assert_false(rt_parse_size("1MM", &v));
    assert_false(rt_parse_size("99999999999999999999", &v));
    assert_false(rt_parse_size("17179869184G", &v));
}

static void environment(void **s)
{
    (void)s;
    setenv("ARCOMM_TIMEOUT_MS", "250", 1);
    setenv("ARCOMM_FLAG_THRESHOLD", "8K", 1);
    setenv("ARCOMM_NUMA", "off", 1);
    setenv("ARCOMM_LOG_LEVEL", "DEBUG", 1);
    struct rt_knobs k;
    char err[256] = "";
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    assert_int_equal(k.timeout_ms, 250);
    assert_int_equal(k.flag_threshold, 8192);
    assert_false(k.numa);
    assert_int_equal(k.log_level, RT_LOG_DEBUG);
    assert_int_equal(k.source[RT_KNOB_TIMEOUT_MS], RT_SRC_ENV);
    assert_int_equal(k.source[RT_KNOB_YIELD_NS], RT_SRC_DEFAULT);
    assert_string_equal(rt_knob_source_name(RT_SRC_ENV), "environment");
    char buf[32];
    rt_knob_format(&k, RT_KNOB_FLAG_THRESHOLD, buf, sizeof(buf));
    assert_string_equal(buf, "8K");
    clear_env();
}

static void malformed(void **s)
{
    (void)s;
    static const char *const bad[][2] = {
        {"ARCOMM_TIMEOUT_MS", "12s"}, {"ARCOMM_SHM_SLOT_BYTES", "big"}, {"ARCOMM_NUMA", "maybe"},
        {"ARCOMM_LOG_LEVEL", "loud"}, {"ARCOMM_SPIN_NS", ""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv(bad[i][0], bad[i][1], 1);
        struct rt_knobs k;
        char err[256] = "";
        assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_ERR_INVALID);
        assert_non_null(strstr(err, bad[i][0]));
        assert_non_null(strstr(err, "expected"));
        unsetenv(bad[i][0]);
    }
}

/* Integers beyond long are refused with the range, not wrapped; the largest is kept. */
static void int_range(void **s)
{
    (void)s;
    struct rt_knobs k;
    char err[256];
    setenv("ARCOMM_TIMEOUT_MS", "9223372036854775808", 1);
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_ERR_INVALID);
    assert_non_null(strstr(err, "ARCOMM_TIMEOUT_MS"));
    assert_non_null(strstr(err, "9223372036854775807"));
    setenv("ARCOMM_TIMEOUT_MS", "9223372036854775807", 1);
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    assert_true(k.timeout_ms == 9223372036854775807L);
    unsetenv("ARCOMM_TIMEOUT_MS");
}

/* Slots that cannot work are refused with the knob, the value and the range. */
static void slot_range(void **s)
{
    (void)s;
    struct rt_knobs k;
    char err[256];
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    assert_int_equal(rt_knobs_check(&k, 2, err, sizeof(err)), COMM_OK);
    const size_t bad[] = {0, 1, 4095, RT_SIZE_OFF, RT_SIZE_AUTO};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        k.shm_slot_bytes = bad[i];
        assert_int_equal(rt_knobs_check(&k, 2, err, sizeof(err)), COMM_ERR_INVALID);
        assert_non_null(strstr(err, "ARCOMM_SHM_SLOT_BYTES"));
        assert_non_null(strstr(err, "at least 4096"));
    }
    assert_int_equal(rt_knob_min_slot_bytes(1), 4096);
    assert_int_equal(rt_knob_min_slot_bytes(256), 16384);
    k.shm_slot_bytes = 8192;
    assert_int_equal(rt_knobs_check(&k, 128, err, sizeof(err)), COMM_OK);
    assert_int_equal(rt_knobs_check(&k, 129, err, sizeof(err)), COMM_ERR_INVALID);
}

/* The knobs that change what goes into shared memory are the ones flagged to agree, and
 * every flagged knob has a number to compare. */
static void agree_flags(void **s)
{
    (void)s;
    static const enum rt_knob_id agree[] = {RT_KNOB_FLAG_THRESHOLD,     RT_KNOB_BF16_THRESHOLD,
                                            RT_KNOB_SHM_SLOT_BYTES,     RT_KNOB_COPY_THRESHOLD,
                                            RT_KNOB_COPY_CHUNK_BYTES,   RT_KNOB_CUDA_STAGING_BYTES,
                                            RT_KNOB_CUDA_BLOCKS,        RT_KNOB_CMA_THRESHOLD,
                                            RT_KNOB_BCAST_EAGER,        RT_KNOB_WIRE,
                                            RT_KNOB_WIRE_THRESHOLD,     RT_KNOB_SMALL_GATHER_MAX,
                                            RT_KNOB_STAGED_CHUNK_BYTES, RT_KNOB_PATHS,
                                            RT_KNOB_REDUCE_EAGER};
    size_t n = 0;
    for (size_t i = 0; i < rt_knob_count; i++) {
        if (!(rt_knob_table[i].flags & RT_KNOB_AGREE))
            continue;
        n++;
        assert_true(rt_knob_table[i].type == RT_KNOB_SIZE || rt_knob_table[i].type == RT_KNOB_INT ||
                    rt_knob_table[i].type == RT_KNOB_BOOL ||
                    rt_knob_table[i].type == RT_KNOB_CODEC ||
                    rt_knob_table[i].type == RT_KNOB_STRING);
    }
    assert_int_equal(n, sizeof(agree) / sizeof(agree[0]));
    for (size_t i = 0; i < n; i++) {
        assert_true(rt_knob_table[agree[i]].flags & RT_KNOB_AGREE);
    }
    /* Values round-trip through the number the segment header carries. */
    struct rt_knobs k, t;
    char err[256], buf[32];
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    t = k;
    rt_knob_set_value(&t, RT_KNOB_SHM_SLOT_BYTES, 65536);
    assert_int_equal(rt_knob_value(&t, RT_KNOB_SHM_SLOT_BYTES), 65536);
    rt_knob_format(&t, RT_KNOB_SHM_SLOT_BYTES, buf, sizeof(buf));
    assert_string_equal(buf, "64K");
    rt_knob_format(&k, RT_KNOB_BF16_THRESHOLD, buf, sizeof(buf));
    assert_string_equal(buf, "auto");
}

/* An index is a compile-time constant naming its entry: the table cannot drift from the
 * enum, and a renamed knob fails to compile here. */
_Static_assert(RT_KNOB_LOG_LEVEL == 0, "the common sub-table comes first");
_Static_assert(RT_KNOB_HEX_SEQ_START == RT_KNOB_COUNT - 1, "the Hexagon sub-table comes last");

static void indices(void **s)
{
    (void)s;
#define CHECK_NAME(id, type, def, field, min, max, flags, doc)                                     \
    assert_string_equal(rt_knob_table[RT_KNOB_##id].name, "ARCOMM_" #id);
    RT_KNOBS(CHECK_NAME)
#undef CHECK_NAME
    assert_int_equal(rt_knob_count, RT_KNOB_COUNT);
    /* Each sub-table's knobs carry its group. */
    assert_int_equal(rt_knob_table[RT_KNOB_TIMEOUT_MS].group, RT_KNOB_GROUP_COMMON);
    assert_int_equal(rt_knob_table[RT_KNOB_SHM_SLOT_BYTES].group, RT_KNOB_GROUP_HOST);
    assert_int_equal(rt_knob_table[RT_KNOB_CUDA_STAGING_BYTES].group, RT_KNOB_GROUP_CUDA);
    assert_int_equal(rt_knob_table[RT_KNOB_HEX_THREADS].group, RT_KNOB_GROUP_HEX);
    for (size_t i = 0; i < rt_knob_count; i++)
        for (size_t j = i + 1; j < rt_knob_count; j++)
            assert_true(strcmp(rt_knob_table[i].name, rt_knob_table[j].name) != 0);
}

/* Loads with one variable set; returns the status and leaves the message in err. */
static comm_status_t load_one(const char *name, const char *value, char *err, size_t errlen)
{
    struct rt_knobs k;
    setenv(name, value, 1);
    err[0] = '\0';
    comm_status_t st = rt_knobs_load(&k, err, errlen);
    unsetenv(name);
    return st;
}

/* The descriptors' ranges: the bounds themselves pass, one past them is refused with the
 * knob, the value and the range; "off" and "auto" only where a knob takes them. */
static void ranges(void **s)
{
    (void)s;
    char err[256];
    static const char *const ok[][2] = {
        {"ARCOMM_HEX_THREADS", "1"},      {"ARCOMM_HEX_THREADS", "8"},
        {"ARCOMM_HEX_VTCM_BYTES", "4K"},  {"ARCOMM_HEX_VTCM_BYTES", "1G"},
        {"ARCOMM_FLAG_THRESHOLD", "off"}, {"ARCOMM_FLAG_THRESHOLD", "auto"},
        {"ARCOMM_FLAG_THRESHOLD", "0"},   {"ARCOMM_NT_THRESHOLD", "off"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        assert_int_equal(load_one(ok[i][0], ok[i][1], err, sizeof(err)), COMM_OK);
    static const char *const bad[][3] = {
        {"ARCOMM_HEX_THREADS", "0", "1..8"},          {"ARCOMM_HEX_THREADS", "9", "1..8"},
        {"ARCOMM_HEX_THREADS", "-1", "1..8"},         {"ARCOMM_HEX_VTCM_BYTES", "4095", "4K..1G"},
        {"ARCOMM_HEX_VTCM_BYTES", "1025M", "4K..1G"}, {"ARCOMM_HEX_VTCM_BYTES", "off", "4K..1G"},
        {"ARCOMM_HEX_VTCM_BYTES", "auto", "4K..1G"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(load_one(bad[i][0], bad[i][1], err, sizeof(err)), COMM_ERR_INVALID);
        assert_non_null(strstr(err, bad[i][0]));
        assert_non_null(strstr(err, bad[i][1]));
        assert_non_null(strstr(err, bad[i][2]));
        assert_non_null(strstr(err, "out of range"));
    }
    /* Every range is ordered (rt_knobs_load checks each default against its range). */
    for (size_t i = 0; i < rt_knob_count; i++)
        assert_true(rt_knob_table[i].min <= rt_knob_table[i].max);
}

/* RT_KNOB_AUTO_DEFAULT: "auto" is the knob's default, stated once in the table: the
 * CUDA staging read "auto" and "off" as 16M while the table said 32M, and the arena's
 * "auto" was a second copy of its 64M.  "off" is refused where nothing can be off. */
static void auto_is_the_default(void **s)
{
    (void)s;
    struct rt_knobs k;
    char err[256];
    setenv("ARCOMM_CUDA_STAGING_BYTES", "auto", 1);
    setenv("ARCOMM_MEM_POOL_BYTES", "auto", 1);
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    assert_int_equal(k.cuda.staging_bytes, 32u << 20);
    assert_int_equal(k.mem_pool_bytes, 64u << 20);
    assert_int_equal(k.source[RT_KNOB_CUDA_STAGING_BYTES], RT_SRC_ENV);
    unsetenv("ARCOMM_CUDA_STAGING_BYTES");
    unsetenv("ARCOMM_MEM_POOL_BYTES");
    /* A default "auto" stays for the backend to resolve. */
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    assert_int_equal(k.cuda.copy_chunk_bytes, RT_SIZE_AUTO);
    /* "off" keeps its one value where a knob can be off. */
    assert_int_equal(load_one("ARCOMM_MEM_POOL_BYTES", "off", err, sizeof(err)), COMM_OK);
    static const char *const no_off[] = {"ARCOMM_CUDA_STAGING_BYTES", "ARCOMM_COPY_CHUNK_BYTES",
                                         "ARCOMM_HEX_VTCM_BYTES"};
    for (size_t i = 0; i < sizeof(no_off) / sizeof(no_off[0]); i++) {
        assert_int_equal(load_one(no_off[i], "off", err, sizeof(err)), COMM_ERR_INVALID);
        assert_non_null(strstr(err, no_off[i]));
        assert_non_null(strstr(err, "=off is out of range"));
    }
}

/* The spin phase's automatic value lives with the table, not in the segment code. */
static void spin_default(void **s)
{
    (void)s;
    struct rt_knobs k;
    char err[256];
    assert_int_equal(rt_knobs_load(&k, err, sizeof(err)), COMM_OK);
    assert_int_equal(rt_knobs_spin_ns(&k, false), RT_KNOB_SPIN_NS_AUTO);
    assert_int_equal(rt_knobs_spin_ns(&k, true), 0);
    k.spin_ns = 1234;
    assert_int_equal(rt_knobs_spin_ns(&k, true), 1234);
    k.spin_ns = 0;
    assert_int_equal(rt_knobs_spin_ns(&k, false), 0);
}

/* The config's defaults: in place of the table's, the environment over them, and a
 * list with an unknown name or a bad value refused whole, naming the item. */
static void config_defaults(void **s)
{
    (void)s;
    struct rt_knobs k;
    char err[512] = "";
    assert_int_equal(rt_knobs_load_with(&k, " ARCOMM_BF16_THRESHOLD=off;ARCOMM_TIMEOUT_MS=250,",
                                        err, sizeof(err)),
                     COMM_OK);
    assert_true(k.bf16_threshold == RT_SIZE_OFF);
    assert_int_equal(k.source[RT_KNOB_BF16_THRESHOLD], RT_SRC_CONFIG);
    assert_int_equal(k.timeout_ms, 250);
    assert_int_equal(k.source[RT_KNOB_TIMEOUT_MS], RT_SRC_CONFIG);
    assert_int_equal(k.source[RT_KNOB_LOG_LEVEL], RT_SRC_DEFAULT);
    /* The last item naming a knob wins. */
    assert_int_equal(
        rt_knobs_load_with(&k, "ARCOMM_TIMEOUT_MS=1 ARCOMM_TIMEOUT_MS=7", err, sizeof(err)),
        COMM_OK);
    assert_int_equal(k.timeout_ms, 7);
    setenv("ARCOMM_TIMEOUT_MS", "999", 1);
    assert_int_equal(rt_knobs_load_with(&k, "ARCOMM_TIMEOUT_MS=250", err, sizeof(err)), COMM_OK);
    assert_int_equal(k.timeout_ms, 999);
    assert_int_equal(k.source[RT_KNOB_TIMEOUT_MS], RT_SRC_ENV);
    unsetenv("ARCOMM_TIMEOUT_MS");
    static const char *const bad[] = {"ARCOMM_NOPE=1", "ARCOMM_TIMEOUT_MS", "TIMEOUT_MS=5",
                                      "ARCOMM_TIMEOUT_MS=soon", "ARCOMM_BF16_THRESHOLD=lots"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(rt_knobs_load_with(&k, bad[i], err, sizeof(err)), COMM_ERR_INVALID);
        assert_non_null(strstr(err, "knob_defaults"));
        assert_non_null(strstr(err, i == 0 ? "ARCOMM_NOPE" : i == 2 ? "TIMEOUT_MS" : "ARCOMM_"));
    }
    /* NULL and "" are the table's defaults. */
    assert_int_equal(rt_knobs_load_with(&k, "", err, sizeof(err)), COMM_OK);
    assert_int_equal(k.source[RT_KNOB_TIMEOUT_MS], RT_SRC_DEFAULT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(config_defaults, setup),
        cmocka_unit_test_setup(defaults, setup),
        cmocka_unit_test_setup(sizes, setup),
        cmocka_unit_test_setup(environment, setup),
        cmocka_unit_test_setup(malformed, setup),
        cmocka_unit_test_setup(int_range, setup),
        cmocka_unit_test_setup(slot_range, setup),
        cmocka_unit_test_setup(agree_flags, setup),
        cmocka_unit_test_setup(indices, setup),
        cmocka_unit_test_setup(ranges, setup),
        cmocka_unit_test_setup(auto_is_the_default, setup),
        cmocka_unit_test_setup(spin_default, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
