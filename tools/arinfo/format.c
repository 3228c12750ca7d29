/* SPDX-License-Identifier: MIT */
/*
 * Formatting shared by arinfo's sections: byte counts for people and for knobs,
 * section titles, and text that must stay on one line.
 */
#include "arinfo.h"

#include <stdarg.h>

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
