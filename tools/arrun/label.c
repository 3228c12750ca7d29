/* SPDX-License-Identifier: MIT */
/*
 * arrun --label: every line a rank writes leaves arrun as "[rank] line\n" in one
 * write(2).  arrun is the only writer of its stdout and stderr while ranks are piped,
 * and a whole line per write keeps lines whole even when arrun's output is shared
 * with other writers (a terminal, a file opened O_APPEND, a pipe for short lines).
 * With --output-filename too, the bytes also go, as the rank wrote them, to its file.
 */
#include "arrun.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * A line longer than this is written in pieces of this size, each ended by a newline:
 * a rank that prints megabytes without a newline must not make arrun hold them all.
 */
#define LABEL_MAX_LINE  (1u << 20)
#define LABEL_READ_SIZE 65536

static bool broken[3]; /* indexed by destination fd: 1 stdout, 2 stderr */

bool label_dest_broken(int dest)
{
    return dest >= 0 && dest < 3 && broken[dest];
}

/* One write of the whole buffer: blocking fds make partial writes rare, but not impossible. */
static void write_line(int dest, const char *p, size_t n)
{
    if (label_dest_broken(dest))
        return;
    while (n > 0) {
        ssize_t w = write(dest, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            /* The reader went away (arrun ... | head): drop output from now on. */
            broken[dest] = true;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

int label_stream_init(struct label_stream *s, int rank, int fd, int dest, int copy)
{
    char prefix[32];
    int n = snprintf(prefix, sizeof(prefix), "[%d] ", rank);

    s->fd = fd;
    s->dest = dest;
    s->copy = copy;
    s->prefix_len = (size_t)n;
    s->cap = 256;
    s->buf = malloc(s->cap);
    if (!s->buf)
        return -ENOMEM;
    memcpy(s->buf, prefix, s->prefix_len);
    s->len = s->prefix_len;
    return 0;
}

static int append(struct label_stream *s, const char *p, size_t n)
{
    if (s->len + n + 1 > s->cap) { /* + 1: room for the newline a partial line may need */
        size_t cap = s->cap;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *buf = realloc(s->buf, cap);
        if (!buf)
            return -ENOMEM;
        s->buf = buf;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    return 0;
}

static void flush_pending(struct label_stream *s)
{
    if (s->len == s->prefix_len)
        return;
    s->buf[s->len++] = '\n'; /* append() always leaves room for it */
    write_line(s->dest, s->buf, s->len);
    s->len = s->prefix_len;
}

/* The rank's file gets every byte; a file that fails (disk full) is given up, once. */
static void write_copy(struct label_stream *s, const char *p, size_t n)
{
    while (s->copy >= 0 && n > 0) {
        ssize_t w = write(s->copy, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            arrun_msg("warning: cannot write a rank's output file: %s; no more goes there",
                      w < 0 ? strerror(errno) : "short write");
            close(s->copy);
            s->copy = -1;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Splits what was read into lines; complete ones leave at once, the rest waits. */
static int consume(struct label_stream *s, const char *p, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) + 1 : n;
        size_t room = LABEL_MAX_LINE - (s->len - s->prefix_len);

        if (take > room)
            take = room;
        if (append(s, p, take) < 0)
            return -ENOMEM;
        p += take;
        n -= take;
        if (s->buf[s->len - 1] == '\n') {
            write_line(s->dest, s->buf, s->len);
            s->len = s->prefix_len;
        } else if (s->len - s->prefix_len >= LABEL_MAX_LINE) {
            flush_pending(s);
        }
    }
    return 0;
}

int label_stream_pump(struct label_stream *s)
{
    char chunk[LABEL_READ_SIZE];

    if (s->fd < 0)
        return 0;
    for (;;) {
        ssize_t r = read(s->fd, chunk, sizeof(chunk));
        if (r > 0) {
            write_copy(s, chunk, (size_t)r);
            if (consume(s, chunk, (size_t)r) < 0) {
                arrun_msg("out of memory buffering output of a rank");
                return -1;
            }
            if ((size_t)r < sizeof(chunk))
                return 1; /* most likely empty now; poll() will say when there is more */
            continue;
        }
        if (r == 0) {
            label_stream_finish(s);
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 1;
        arrun_msg("cannot read the output of a rank: %s", strerror(errno));
        label_stream_finish(s);
        return -1;
    }
}

void label_stream_finish(struct label_stream *s)
{
    flush_pending(s);
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    if (s->copy >= 0) {
        close(s->copy);
        s->copy = -1;
    }
}

void label_stream_free(struct label_stream *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    if (s->copy >= 0) {
        close(s->copy);
        s->copy = -1;
    }
    free(s->buf);
    s->buf = NULL;
}
