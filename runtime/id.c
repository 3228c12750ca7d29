/* SPDX-License-Identifier: MIT */
/*
 * Communicator ids: "arc1-" followed by 32 lowercase hex digits, 128 bits from the
 * OS random source.  Printable, so that launchers pass them in the environment.
 */
#include "comm_internal.h"
#include "id.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define ID_PREFIX     "arc1-"
#define ID_PREFIX_LEN 5
#define ID_HEX_DIGITS 32

ARCOMM_API comm_status_t comm_id_new(comm_id_t *id)
{
    if (id == NULL) {
        rt_init_error(NULL, COMM_ERR_INVALID, "comm_id_new: id is NULL; pass a comm_id_t *");
        return COMM_ERR_INVALID;
    }
    unsigned char bytes[ID_HEX_DIGITS / 2];
    size_t got = 0;
    while (got < sizeof(bytes)) {
        ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rt_init_error(NULL, COMM_ERR_SYSTEM, "comm_id_new: getrandom failed: %s",
                          strerror(errno));
            return COMM_ERR_SYSTEM;
        }
        got += (size_t)n;
    }
    comm_id_t fresh;
    memset(&fresh, 0, sizeof(fresh));
    memcpy(fresh.str, ID_PREFIX, ID_PREFIX_LEN);
    for (size_t i = 0; i < sizeof(bytes); i++)
        snprintf(fresh.str + ID_PREFIX_LEN + 2 * i, 3, "%02x", bytes[i]);
    *id = fresh;
    return COMM_OK;
}

bool rt_id_valid(const comm_id_t *id, char *why, size_t len)
{
    size_t n = strnlen(id->str, COMM_ID_BYTES);
    if (n == COMM_ID_BYTES) {
        snprintf(why, len, "the id is not NUL-terminated within %d bytes", COMM_ID_BYTES);
        return false;
    }
    if (n != ID_PREFIX_LEN + ID_HEX_DIGITS || memcmp(id->str, ID_PREFIX, ID_PREFIX_LEN) != 0) {
        snprintf(why, len, "\"%.*s\" is not an arcomm id (\"arc1-\" and 32 hex digits)",
                 (int)(n < 48 ? n : 48), id->str);
        return false;
    }
    for (size_t i = ID_PREFIX_LEN; i < n; i++) {
        char ch = id->str[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) {
            snprintf(why, len, "id \"%s\" has a character that is not a lowercase hex digit",
                     id->str);
            return false;
        }
    }
    return true;
}
