/* SPDX-License-Identifier: MIT */
/*
 * Formatting shared by arinfo's sections: byte counts for people and for knobs,
 * section titles, and text that must stay on one line.
 */
#include "arinfo.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

void arinfo_fmt_bytes(unsigned long long bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    unsigned u = 0;
    unsigned long long scale = 1;
    while (u + 1 < sizeof(units) / sizeof(units[0]) && bytes >= scale * 1024) {
        scale *= 1024;
        u++;
    }
    if (bytes % scale == 0)
        snprintf(buf, len, "%llu %s", bytes / scale, units[u]);
    else
        snprintf(buf, len, "%.1f %s", (double)bytes / (double)scale, units[u]);
}

void arinfo_fmt_size(size_t bytes, char *buf, size_t len)
{
    if (bytes != 0 && bytes % (1ull << 30) == 0)
        snprintf(buf, len, "%zuG", bytes >> 30);
    else if (bytes != 0 && bytes % (1ull << 20) == 0)
        snprintf(buf, len, "%zuM", bytes >> 20);
    else if (bytes != 0 && bytes % (1ull << 10) == 0)
        snprintf(buf, len, "%zuK", bytes >> 10);
    else
        snprintf(buf, len, "%zu", bytes);
}

void arinfo_title(struct arinfo *ai, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (ai->text_started)
        fputc('\n', ai->out);
    ai->text_started = true;
    vfprintf(ai->out, fmt, ap);
    fputc('\n', ai->out);
    va_end(ap);
}

void arinfo_put_clean(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s, f);
}

int arinfo_width(void)
{
    const char *cols = getenv("COLUMNS");
    if (cols != NULL && *cols != '\0') {
        char *end;
        long w = strtol(cols, &end, 10);
        if (*end == '\0' && w > 0)
            return w < ARINFO_MIN_WIDTH ? ARINFO_MIN_WIDTH : (int)w;
    }
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col < ARINFO_MIN_WIDTH ? ARINFO_MIN_WIDTH : ws.ws_col;
    return 80;
}

/*
 * Where the continuation lines of a long line start: under the last column of a table
 * row (the text after the last run of two or more blanks, when it leaves room for 24
 * characters a line), else four past the line's own indent.
 */
static size_t hang_of(const char *line, size_t len, size_t width)
{
    size_t lead = 0;
    while (lead < len && line[lead] == ' ')
        lead++;
    size_t hang = 0;
    for (size_t i = lead + 1; i + 1 < len && i + 24 < width; i++)
        if (line[i] == ' ' && line[i + 1] == ' ') {
            size_t j = i;
            while (j < len && line[j] == ' ')
                j++;
            if (j + 24 < width)
                hang = j;
            i = j;
        }
    if (hang == 0)
        hang = lead + 4 + 24 < width ? lead + 4 : lead;
    return hang;
}

/* One line (no '\n') as lines of at most width columns, broken at blanks. */
static void wrap_line(FILE *out, const char *line, size_t len, size_t width)
{
    size_t hang = len > width ? hang_of(line, len, width) : 0;
    size_t pos = 0, col = 0; /* col: the column line[pos] lands in */
    size_t lead = 0;         /* the first line's indent: never a place to break */
    while (lead < len && line[lead] == ' ')
        lead++;
    for (;;) {
        size_t room = width - col;
        size_t end;
        if (len - pos <= room) {
            end = len;
        } else {
            /* The last blank that keeps the piece within the width; without one, the
             * word runs on to its end (a word is never cut). */
            end = 0;
            for (size_t i = pos + room; i > pos && i > lead; i--)
                if (line[i] == ' ') {
                    end = i;
                    break;
                }
            if (end == 0) {
                end = pos + room;
                while (end < len && line[end] != ' ')
                    end++;
            }
        }
        size_t stop = end;
        while (stop > pos && line[stop - 1] == ' ')
            stop--;
        fwrite(line + pos, 1, stop - pos, out);
        fputc('\n', out);
        pos = end;
        while (pos < len && line[pos] == ' ')
            pos++;
        if (pos >= len)
            return;
        fprintf(out, "%*s", (int)hang, "");
        col = hang;
    }
}

void arinfo_wrap_write(FILE *out, const char *text, size_t len, int width)
{
    size_t w = width < ARINFO_MIN_WIDTH ? ARINFO_MIN_WIDTH : (size_t)width;
    while (len > 0) {
        const char *nl = memchr(text, '\n', len);
        size_t n = nl ? (size_t)(nl - text) : len;
        wrap_line(out, text, n, w);
        if (nl == NULL)
            break;
        text += n + 1;
        len -= n + 1;
    }
}
