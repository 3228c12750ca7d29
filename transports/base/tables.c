/* SPDX-License-Identifier: MIT */
/*
 * The tables of tables.h, each indexed by its enumeration and checked against it.
 */
#include "tables.h"
#include "knobs.h"

#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    size_t size;
    bool is_float; /* a floating-point format (AVG is defined on these only) */
} dtypes[] = {
    [COMM_F32] = {"f32", 4, true},  [COMM_F16] = {"f16", 2, true},  [COMM_BF16] = {"bf16", 2, true},
    [COMM_F64] = {"f64", 8, true},  [COMM_I32] = {"i32", 4, false}, [COMM_I64] = {"i64", 8, false},
    [COMM_I8] = {"i8", 1, false},   [COMM_U8] = {"u8", 1, false},   [COMM_U32] = {"u32", 4, false},
    [COMM_U64] = {"u64", 8, false},
};
_Static_assert(sizeof(dtypes) / sizeof(dtypes[0]) == RT_DTYPE_COUNT &&
                   COMM_U64 + 1 == RT_DTYPE_COUNT,
               "one dtypes[] entry per comm_dtype_t");

static const char *const ops[] = {
    [COMM_SUM] = "sum",   [COMM_MAX] = "max", [COMM_MIN] = "min",
    [COMM_PROD] = "prod", [COMM_AVG] = "avg",
};
_Static_assert(sizeof(ops) / sizeof(ops[0]) == RT_OP_COUNT && COMM_AVG + 1 == RT_OP_COUNT,
               "one ops[] entry per comm_op_t");

static const struct {
    const char *name;  /* ARCOMM_DEVICE's spelling */
    const char *title; /* in messages */
} devices[] = {
    [COMM_DEVICE_HOST] = {"host", "host"},
    [COMM_DEVICE_CUDA] = {"cuda", "CUDA"},
    [COMM_DEVICE_HEXAGON] = {"hexagon", "Hexagon"},
};
_Static_assert(sizeof(devices) / sizeof(devices[0]) == RT_DEVICE_COUNT &&
                   COMM_DEVICE_HEXAGON + 1 == RT_DEVICE_COUNT,
               "one devices[] entry per comm_device_t");

static const char *const log_levels[] = {
    [RT_LOG_NONE] = "none", [RT_LOG_ERROR] = "error", [RT_LOG_WARN] = "warn",
    [RT_LOG_INFO] = "info", [RT_LOG_DEBUG] = "debug", [RT_LOG_TRACE] = "trace",
};
_Static_assert(sizeof(log_levels) / sizeof(log_levels[0]) == RT_LOG_LEVEL_COUNT &&
                   RT_LOG_TRACE + 1 == RT_LOG_LEVEL_COUNT,
               "one log_levels[] entry per enum rt_log_level");

size_t rt_dtype_size(comm_dtype_t dtype)
{
    return (unsigned)dtype < RT_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *rt_dtype_name(comm_dtype_t dtype)
{
    return (unsigned)dtype < RT_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

bool rt_dtype_is_float(comm_dtype_t dtype)
{
    return (unsigned)dtype < RT_DTYPE_COUNT && dtypes[dtype].is_float;
}

const char *rt_op_name(comm_op_t op)
{
    return (unsigned)op < RT_OP_COUNT ? ops[op] : "?";
}

const char *rt_device_name(comm_device_t device)
{
    return (unsigned)device < RT_DEVICE_COUNT ? devices[device].name : "?";
}

const char *rt_device_title(comm_device_t device)
{
    return (unsigned)device < RT_DEVICE_COUNT ? devices[device].title : "?";
}

bool rt_device_parse(const char *name, comm_device_t *device)
{
    for (unsigned i = 0; i < RT_DEVICE_COUNT; i++) {
        if (strcmp(name, devices[i].name) == 0) {
            *device = (comm_device_t)i;
            return true;
        }
    }
    return false;
}

const char *rt_log_level_name(int level)
{
    return level >= 0 && level < RT_LOG_LEVEL_COUNT ? log_levels[level] : "?";
}

int rt_log_level_parse(const char *name)
{
    for (int i = 0; name != NULL && i < RT_LOG_LEVEL_COUNT; i++)
        if (strcasecmp(name, log_levels[i]) == 0)
            return i;
    return -1;
}

const char *rt_status_string(comm_status_t status)
{
    switch (status) {
    case COMM_OK:
        return "COMM_OK: success";
    case COMM_ERR_INVALID:
        return "COMM_ERR_INVALID: bad argument or configuration";
    case COMM_ERR_NOMEM:
        return "COMM_ERR_NOMEM: out of memory";
    case COMM_ERR_UNSUPPORTED:
        return "COMM_ERR_UNSUPPORTED: dtype, op, device or transport not available";
    case COMM_ERR_SYSTEM:
        return "COMM_ERR_SYSTEM: an OS, driver or runtime call failed";
    case COMM_ERR_TIMEOUT:
        return "COMM_ERR_TIMEOUT: a peer did not arrive within the timeout";
    case COMM_ERR_PEER:
        return "COMM_ERR_PEER: a peer failed, exited or aborted";
    case COMM_ERR_MISMATCH:
        return "COMM_ERR_MISMATCH: ranks disagree on count, dtype or op";
    case COMM_ERR_ABORTED:
        return "COMM_ERR_ABORTED: comm_abort was called on this communicator (or the abort "
               "word of its comm_init or split was set)";
    }
    return "unknown comm_status_t value";
}
