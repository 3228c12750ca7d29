/* SPDX-License-Identifier: MIT */
/*
 * comm_get_version: the library's own version, as meson.build's project version says
 * (through arcomm_build.h), so that a program can tell which library it loaded.
 */
#include "comm_internal.h"
#include "arcomm_build.h"

/* arcomm.h's compile-time version and the library's must never disagree. */
_Static_assert(ARCOMM_VERSION_MAJOR == ARCOMM_BUILD_VERSION_MAJOR,
               "ARCOMM_VERSION_MAJOR in arcomm.h differs from meson.build's project version");
_Static_assert(ARCOMM_VERSION_MINOR == ARCOMM_BUILD_VERSION_MINOR,
               "ARCOMM_VERSION_MINOR in arcomm.h differs from meson.build's project version");
_Static_assert(ARCOMM_VERSION_PATCH == ARCOMM_BUILD_VERSION_PATCH,
               "ARCOMM_VERSION_PATCH in arcomm.h differs from meson.build's project version");

ARCOMM_API void comm_get_version(int *major, int *minor, int *patch)
{
    if (major)
        *major = ARCOMM_BUILD_VERSION_MAJOR;
    if (minor)
        *minor = ARCOMM_BUILD_VERSION_MINOR;
    if (patch)
        *patch = ARCOMM_BUILD_VERSION_PATCH;
}
