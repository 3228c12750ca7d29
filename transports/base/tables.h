/* SPDX-License-Identifier: MIT */
/*
 * The one table of each enumeration every layer names: dtypes (size and name), ops,
 * devices, statuses and log levels.
 */
#ifndef ARCOMM_BASE_TABLES_H
#define ARCOMM_BASE_TABLES_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>

/* How many values each public enumeration has (all values are 0..N-1, statuses apart). */
#define RT_DTYPE_COUNT  10
#define RT_OP_COUNT     5
#define RT_DEVICE_COUNT 3

/* Bytes of one element, 0 when dtype is not a comm_dtype_t. */
size_t rt_dtype_size(comm_dtype_t dtype);
/* "f32", ... or "?". */
const char *rt_dtype_name(comm_dtype_t dtype);
/* True for the floating-point dtypes (f32, f16, bf16, f64), false for the integers and
 * for a value that is not a comm_dtype_t. */
bool rt_dtype_is_float(comm_dtype_t dtype);
/* "sum", "max", "min", "prod", "avg" or "?". */
const char *rt_op_name(comm_op_t op);
/* "host", "cuda", "hexagon" (ARCOMM_DEVICE's spelling) or "?". */
const char *rt_device_name(comm_device_t device);
/* "host", "CUDA", "Hexagon" (as messages name the buffers) or "?". */
const char *rt_device_title(comm_device_t device);
/* The device named name (ARCOMM_DEVICE's spelling); false when none is. */
bool rt_device_parse(const char *name, comm_device_t *device);
/* comm_status_string's text. */
const char *rt_status_string(comm_status_t status);

/* Log levels, by number (enum rt_log_level, knobs.h). */
#define RT_LOG_LEVEL_COUNT 6
/* "none", "error", ... "trace", or "?". */
const char *rt_log_level_name(int level);
/* The level a name gives (any case), or -1 when it names none. */
int rt_log_level_parse(const char *name);

#endif /* ARCOMM_BASE_TABLES_H */
