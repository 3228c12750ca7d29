/* SPDX-License-Identifier: MIT */
/*
 * The Hexagon allreduce, as the Hexagon backend (allreduce_hex.c's table) calls it.
 */
#ifndef ARCOMM_COLL_HEXAGON_H
#define ARCOMM_COLL_HEXAGON_H

#include "coll.h"

comm_status_t coll_hexagon_allreduce(struct comm *c, const struct coll_call *call);

#endif /* ARCOMM_COLL_HEXAGON_H */
