/* SPDX-License-Identifier: MIT */
#ifndef ARCOMM_RT_ID_H
#define ARCOMM_RT_ID_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>

/* Is id well formed ("arc1-" + 32 lowercase hex digits)?  If not, says why. */
bool rt_id_valid(const comm_id_t *id, char *why, size_t len);

#endif
