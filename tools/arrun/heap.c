/* SPDX-License-Identifier: MIT */
/*
 * arrun --shared-heap: how the ranks' LD_PRELOAD names libarcomm_heap.so.
 *
 * The library lies beside the libarcomm this arrun runs with.  The dynamic loader splits
 * LD_PRELOAD at every space and colon and expands $ORIGIN, $LIB and $PLATFORM in it, so
 * a path holding any of those can never be named there as it is: the loader would look
 * for its pieces, print "cannot be preloaded" in every rank, and run the job without
 * the heap.  For such a path arrun makes a directory of its own (mkdtemp, mode 0700, in
 * $TMPDIR or /tmp, wherever that path is free of them) holding one symbolic link to the
 * library's directory, and preloads the library through it; the loader opens the real
 * file, and $ORIGIN of the library is still its own directory.  arrun removes the link
 * when the job ends, and its watcher does when arrun is killed.  Where no such directory
 * can be made, arrun refuses to start the job rather than start it without the heap.
 */
#include "arrun.h"

#include <arcomm.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HEAP_LIB  "libarcomm_heap.so"
#define HEAP_LINK "lib" /* the link's name in arrun's directory */

/* Can the loader take path as one LD_PRELOAD item? */
static bool preload_safe(const char *path)
{
    return path[0] == '/' && strpbrk(path, " :$") == NULL;
}

int arrun_heap_find(struct arrun_opts *o)
{
    Dl_info info;
    char cwd[PATH_MAX];
    int rc;

    if (dladdr((void *)comm_id_new, &info) == 0 || info.dli_fname == NULL) {
        arrun_msg("--shared-heap: cannot tell where libarcomm is loaded from");
        return ARRUN_EXIT_ERROR;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
    const char *dir = slash ? info.dli_fname : ".";
    /* The ranks may change directory before they exec anything: an absolute path. */
    if (dir[0] == '/') {
        rc = asprintf(&o->heap_lib, "%.*s/" HEAP_LIB, dir_len, dir);
    } else if (getcwd(cwd, sizeof(cwd)) != NULL) {
        rc = asprintf(&o->heap_lib, "%s/%.*s/" HEAP_LIB, cwd, dir_len, dir);
    } else {
        arrun_msg("--shared-heap: getcwd: %s", strerror(errno));
        return ARRUN_EXIT_ERROR;
    }
    if (rc < 0) {
        o->heap_lib = NULL;
        arrun_msg("out of memory");
        return ARRUN_EXIT_ERROR;
    }
    if (access(o->heap_lib, R_OK) != 0) {
        arrun_msg("--shared-heap: %s: %s (build or install " HEAP_LIB " beside libarcomm)",
                  o->heap_lib, strerror(errno));
        return ARRUN_EXIT_USAGE;
    }
    return -1;
}

/* A directory of arrun's own holding HEAP_LINK -> the library's directory; 0 or -errno. */
static int make_link(struct arrun_opts *o, char *why, size_t why_len)
{
    const char *bases[] = {getenv("TMPDIR"), "/tmp"};
    char target[PATH_MAX], link_path[PATH_MAX + 8];
    int err = -ENOENT;

    snprintf(target, sizeof(target), "%s", o->heap_lib);
    *strrchr(target, '/') = '\0';
    snprintf(why, why_len, "no directory to make it in");
    for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
        char *dir = NULL;
        if (bases[i] == NULL || !preload_safe(bases[i]) ||
            asprintf(&dir, "%s/arrun-XXXXXX", bases[i]) < 0)
            continue;
        if (mkdtemp(dir) == NULL) {
            err = -errno;
            snprintf(why, why_len, "mkdtemp in %s: %s", bases[i], strerror(errno));
            free(dir);
            continue;
        }
        snprintf(link_path, sizeof(link_path), "%s/" HEAP_LINK, dir);
        if (symlink(target, link_path) < 0) {
            err = -errno;
            snprintf(why, why_len, "symlink %s: %s", link_path, strerror(errno));
            rmdir(dir);
            free(dir);
            continue;
        }
        o->heap_dir = dir;
        return 0;
    }
    return err;
}

int arrun_heap_prepare(struct arrun_opts *o)
{
    const char *preload = getenv("LD_PRELOAD");
    char *lib = o->heap_lib, *linked = NULL;

    if (!o->shared_heap)
        return 0;
    if (!preload_safe(lib)) {
        char why[PATH_MAX + 64];
        if (make_link(o, why, sizeof(why)) < 0) {
            arrun_msg("--shared-heap: the path of " HEAP_LIB " (%s) holds a space, colon or $, "
                      "which LD_PRELOAD cannot name, and arrun could not make a link to it "
                      "without them (%s): set TMPDIR to a writable directory whose path has "
                      "none, or install arcomm under such a path; the job was not started",
                      lib, why);
            return ARRUN_EXIT_ERROR;
        }
        if (asprintf(&linked, "%s/" HEAP_LINK "/" HEAP_LIB, o->heap_dir) < 0) {
            arrun_msg("out of memory");
            return ARRUN_EXIT_ERROR;
        }
        lib = linked;
        if (o->verbose >= 1)
            arrun_msg("note: --shared-heap: %s is preloaded as %s (LD_PRELOAD cannot name its "
                      "path)",
                      o->heap_lib, lib);
    }
    /* First the heap, then whatever LD_PRELOAD the ranks would have had (-x, else arrun's). */
    for (int i = 0; i < o->nenv; i++)
        if (strcmp(o->env[i].name, "LD_PRELOAD") == 0)
            preload = o->env[i].value;
    bool more = preload != NULL && *preload != '\0';
    char *name = strdup("LD_PRELOAD");
    struct arrun_env *env = realloc(o->env, ((size_t)o->nenv + 1) * sizeof(*env));
    if (env != NULL)
        o->env = env;
    if (name == NULL || env == NULL ||
        asprintf(&o->heap_preload, "%s%s%s", lib, more ? ":" : "", more ? preload : "") < 0) {
        o->heap_preload = NULL;
        free(name);
        free(linked);
        arrun_msg("out of memory");
        return ARRUN_EXIT_ERROR;
    }
    free(linked);
    o->env[o->nenv++] = (struct arrun_env){.name = name, .value = o->heap_preload};
    return 0;
}

void arrun_heap_remove(const struct arrun_opts *o)
{
    char link_path[PATH_MAX + 8];

    if (o->heap_dir == NULL)
        return;
    snprintf(link_path, sizeof(link_path), "%s/" HEAP_LINK, o->heap_dir);
    if ((unlink(link_path) < 0 && errno != ENOENT) || (rmdir(o->heap_dir) < 0 && errno != ENOENT))
        arrun_msg("warning: cannot remove %s: %s", o->heap_dir, strerror(errno));
}
