/* SPDX-License-Identifier: MIT */
/*
 * What every transport's probe is asked.  The backends that answer it (a transport and
 * the collectives built on it, one ops table each) are in collectives/backend.h.
 */
#ifndef ARCOMM_BASE_TRANSPORT_H
#define ARCOMM_BASE_TRANSPORT_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>

/* What a probe is asked: can you serve a communicator like this one? */
struct transport_probe {
    int nranks;
    comm_device_t device;
};

#endif /* ARCOMM_BASE_TRANSPORT_H */
