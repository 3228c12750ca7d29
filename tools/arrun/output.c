/* SPDX-License-Identifier: MIT */
/*
 * arrun --output-filename DIR: rank R's stdout and stderr go to DIR/rank.R/stdout and
 * DIR/rank.R/stderr (Open MPI's layout).  Every directory is made before the first rank
 * starts, so that a DIR arrun cannot write is a usage error and no rank ran; the files
 * are opened (and truncated) as each rank starts.
 */
#include "arrun.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p: 0, or -errno with what[] naming the path that failed. */
static int make_dirs(const char *dir, char *what, size_t what_len)
{
    char path[PATH_MAX];
    size_t len = strlen(dir);
    struct stat st;

    if (len >= sizeof(path)) {
        snprintf(what, what_len, "%.200s...", dir);
        return -ENAMETOOLONG;
    }
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0777) < 0 && errno != EEXIST) {
            int err = -errno;
            snprintf(what, what_len, "%s", path);
            return err;
        }
        /* EEXIST also for a file of that name: only a directory will do. */
        if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
            snprintf(what, what_len, "%s", path);
            return -ENOTDIR;
        }
        if (i < len)
            path[i] = '/';
    }
    return 0;
}

int arrun_output_prepare(const struct arrun_opts *o)
{
    char what[PATH_MAX + 16], sub[PATH_MAX];
    int rc = make_dirs(o->output_dir, what, sizeof(what));

    for (int r = 0; rc == 0 && r < o->nranks; r++) {
        int n = snprintf(sub, sizeof(sub), "%s/rank.%d", o->output_dir, r);
        if (n < 0 || (size_t)n >= sizeof(sub)) {
            snprintf(what, sizeof(what), "%.200s/rank.%d", o->output_dir, r);
            rc = -ENAMETOOLONG;
            break;
        }
        rc = make_dirs(sub, what, sizeof(what));
        /* An existing directory arrun may not write is no better than none. */
        if (rc == 0 && access(sub, W_OK | X_OK) < 0) {
            rc = -errno;
            snprintf(what, sizeof(what), "%s", sub);
        }
    }
    if (rc == 0)
        return 0;
    arrun_msg("--output-filename %s: cannot make directory %s: %s", o->output_dir, what,
              strerror(-rc));
    return ARRUN_EXIT_USAGE;
}

static int open_one(const struct arrun_opts *o, int rank, const char *name, int *fd)
{
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/rank.%d/%s", o->output_dir, rank, name);
    *fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (*fd < 0) {
        int err = -errno;
        arrun_msg("rank %d: cannot open %s: %s", rank, path, strerror(errno));
        return err;
    }
    return 0;
}

int arrun_output_open(const struct arrun_opts *o, int rank, int *out_fd, int *err_fd)
{
    int status = open_one(o, rank, "stdout", out_fd);

    if (status < 0)
        return status;
    status = open_one(o, rank, "stderr", err_fd);
    if (status < 0) {
        close(*out_fd);
        *out_fd = -1;
    }
    return status;
}
