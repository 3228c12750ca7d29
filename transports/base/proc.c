/* SPDX-License-Identifier: MIT */
/*
 * Process liveness through /proc: a dead rank must be noticed even while it is an
 * unreaped zombie.
 */
#include "topo.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads /proc/PID/stat: state (field 3) and start time (field 22). */
static int read_stat(pid_t pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The command name may contain spaces and parentheses: parse after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    /* p is at field 3; field 22 is 19 fields further. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 0;
}

uint64_t rt_proc_start_time(pid_t pid)
{
    char state;
    uint64_t start;
    return read_stat(pid, &state, &start) == 0 ? start : 0;
}

int rt_proc_alive(pid_t pid, uint64_t start_time)
{
    char state;
    uint64_t start;
    if (read_stat(pid, &state, &start) != 0)
        return 0;
    if (state == 'Z' || state == 'X' || state == 'x')
        return 0;
    return start_time == 0 || start == start_time;
}
