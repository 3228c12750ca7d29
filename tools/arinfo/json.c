/* SPDX-License-Identifier: MIT */
/*
 * The JSON writer behind arinfo --json.  Strings come from hwloc info attributes, PCI
 * name databases and the environment, none of which promise UTF-8, so each one is
 * checked byte by byte: a consumer's json.load must never fail on our output.
 */
#include "json.h"

#include <stdint.h>
#include <string.h>

void json_init(struct json *j, FILE *f)
{
    memset(j, 0, sizeof(*j));
    j->f = f;
}

void json_finish(struct json *j)
{
    fputc('\n', j->f);
}

static void indent(struct json *j)
{
    for (int i = 0; i < j->depth; i++)
        fputs("  ", j->f);
}

/* Length of the valid UTF-8 sequence at s, or 0 when the byte at s starts none. */
static size_t utf8_valid_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) {
        n = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        /* A NUL here fails this test too, so we never read past the string's end. */
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* Overlong forms, UTF-16 surrogates and code points past Unicode are not UTF-8. */
    if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return n;
}

void json_write_string(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    while (*s) {
        unsigned char c = *s;
        switch (c) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        case '\b':
            fputs("\\b", f);
            break;
        case '\f':
            fputs("\\f", f);
            break;
        default:
            if (c < 0x20 || c == 0x7f) {
                fprintf(f, "\\u%04x", c);
            } else if (c >= 0x80) {
                size_t n = utf8_valid_len(s);
                if (n == 0) {
                    fputs("\\ufffd", f);
                } else {
                    fwrite(s, 1, n, f);
                    s += n;
                    continue;
                }
            } else {
                fputc(c, f);
            }
            break;
        }
        s++;
    }
    fputc('"', f);
}

/* Starts a value: the comma after the previous one, the newline, the key. */
static void value_begin(struct json *j, const char *key)
{
    bool is_inline = j->depth > 0 && j->inline_[j->depth - 1];
    if (j->depth > 0) {
        if (j->has_items[j->depth - 1])
            fputs(is_inline ? ", " : ",", j->f);
        j->has_items[j->depth - 1] = true;
        if (!is_inline) {
            fputc('\n', j->f);
            indent(j);
        }
    }
    if (key != NULL) {
        json_write_string(j->f, key);
        fputs(": ", j->f);
    }
}

static void container_begin(struct json *j, const char *key, char open, bool is_inline)
{
    value_begin(j, key);
    fputc(open, j->f);
    if (j->depth < JSON_MAX_DEPTH) {
        j->has_items[j->depth] = false;
        j->inline_[j->depth] = is_inline;
    }
    j->depth++;
}

static void container_end(struct json *j, char close)
{
    j->depth--;
    bool had = j->depth < JSON_MAX_DEPTH && j->has_items[j->depth];
    bool is_inline = j->depth < JSON_MAX_DEPTH && j->inline_[j->depth];
    if (had && !is_inline) {
        fputc('\n', j->f);
        indent(j);
    }
    fputc(close, j->f);
}

void json_object_begin(struct json *j, const char *key)
{
    container_begin(j, key, '{', false);
}

void json_object_end(struct json *j)
{
    container_end(j, '}');
}

void json_array_begin(struct json *j, const char *key)
{
    container_begin(j, key, '[', false);
}

void json_array_begin_inline(struct json *j, const char *key)
{
    container_begin(j, key, '[', true);
}

void json_array_end(struct json *j)
{
    container_end(j, ']');
}

void json_string(struct json *j, const char *key, const char *value)
{
    value_begin(j, key);
    if (value == NULL)
        fputs("null", j->f);
    else
        json_write_string(j->f, value);
}

void json_int(struct json *j, const char *key, long long value)
{
    value_begin(j, key);
    fprintf(j->f, "%lld", value);
}

void json_uint(struct json *j, const char *key, unsigned long long value)
{
    value_begin(j, key);
    fprintf(j->f, "%llu", value);
}

void json_double(struct json *j, const char *key, double value, int decimals)
{
    value_begin(j, key);
    /* JSON has no NaN or infinity. */
    if (value != value || value > 1e300 || value < -1e300)
        fputs("null", j->f);
    else
        fprintf(j->f, "%.*f", decimals, value);
}

void json_bool(struct json *j, const char *key, bool value)
{
    value_begin(j, key);
    fputs(value ? "true" : "false", j->f);
}

void json_null(struct json *j, const char *key)
{
    value_begin(j, key);
    fputs("null", j->f);
}
