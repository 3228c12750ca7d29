/* SPDX-License-Identifier: MIT */
/*
 * Where a file of this build lies on this machine, for the text to name a real path
 * instead of "<libdir>/...": beside an installed arinfo (its prefix found from
 * /proc/self/exe, so a moved or staged install answers too), else in the build tree
 * when arinfo runs from it, else where the configured prefix would put it.
 */
#include "arinfo.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by tools/arinfo/meson.build. */
#ifndef ARINFO_PREFIX
#define ARINFO_PREFIX "/usr/local"
#endif
#ifndef ARINFO_BINDIR
#define ARINFO_BINDIR "bin"
#endif

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

bool arinfo_find_path(const char *installed, const char *built, char *out, size_t len)
{
    char exe[PATH_MAX];
    /* A libdir configured as an absolute path does not move with the prefix. */
    if (installed[0] == '/' && exists(installed)) {
        snprintf(out, len, "%s", installed);
        return true;
    }
    ssize_t n = installed[0] == '/' ? -1 : readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            /* An installed arinfo is in <prefix>/<bindir>: <prefix> is its directory
             * less as many levels as bindir has. */
            int up = 1;
            for (const char *p = ARINFO_BINDIR; *p; p++)
                up += *p == '/' && p[1] != '\0';
            char prefix[PATH_MAX];
            snprintf(prefix, sizeof(prefix), "%s", exe);
            for (int i = 0; i < up; i++) {
                char *s = strrchr(prefix, '/');
                if (s == NULL)
                    break;
                *s = '\0';
            }
            char cand[PATH_MAX + 256];
            snprintf(cand, sizeof(cand), "%s/%s", prefix, installed);
            if (exists(cand) && realpath(cand, exe) != NULL) {
                snprintf(out, len, "%s", exe);
                return true;
            }
        }
    }
    if (built != NULL && exists(built)) {
        snprintf(out, len, "%s", built);
        return true;
    }
    if (installed[0] == '/')
        snprintf(out, len, "%s", installed);
    else
        snprintf(out, len, "%s/%s", ARINFO_PREFIX, installed);
    return false;
}
