/* SPDX-License-Identifier: MIT */
/*
 * The status entry points (comm_status_string, comm_last_error) and the handle check
 * every entry point starts with.
 */
#include "comm_internal.h"

ARCOMM_API const char *comm_status_string(comm_status_t status)
{
    return rt_status_string(status);
}

ARCOMM_API const char *comm_last_error(const comm_t *comm)
{
    return comm != NULL ? comm->errmsg : rt_init_errmsg();
}

bool rt_handle_ok(const struct comm *comm, const char *fn)
{
    if (comm == NULL) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "%s: comm is NULL; pass the communicator comm_init made", fn);
        return false;
    }
    if (comm->magic != RT_COMM_LIVE) {
        rt_init_error(NULL, COMM_ERR_INVALID,
                      "%s: %p is not a live communicator (used after comm_destroy, or not made "
                      "by comm_init)",
                      fn, (const void *)comm);
        return false;
    }
    return true;
}
