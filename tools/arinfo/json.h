/* SPDX-License-Identifier: MIT */
/*
 * A streaming JSON writer for arinfo --json: pretty-printed, commas placed by the
 * writer, every string escaped so that the output is valid JSON (and valid UTF-8)
 * whatever bytes hwloc or the environment hand us.
 */
#ifndef ARINFO_JSON_H
#define ARINFO_JSON_H

#include <stdbool.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 32

struct json {
    FILE *f;
    int depth;                      /* open containers */
    bool has_items[JSON_MAX_DEPTH]; /* does the container at this depth hold a value yet */
    bool inline_[JSON_MAX_DEPTH];   /* an array of scalars printed on one line */
};

void json_init(struct json *j, FILE *f);
/* Ends the document with a newline; the caller must have closed every container. */
void json_finish(struct json *j);

/* key is the member name inside an object, NULL inside an array or at the top. */
void json_object_begin(struct json *j, const char *key);
void json_object_end(struct json *j);
void json_array_begin(struct json *j, const char *key);
/* An array whose items are scalars, kept on one line ([0, 1, 2]). */
void json_array_begin_inline(struct json *j, const char *key);
void json_array_end(struct json *j);

void json_string(struct json *j, const char *key, const char *value); /* NULL: null */
void json_int(struct json *j, const char *key, long long value);
void json_uint(struct json *j, const char *key, unsigned long long value);
void json_double(struct json *j, const char *key, double value, int decimals);
void json_bool(struct json *j, const char *key, bool value);
void json_null(struct json *j, const char *key);

/* Writes s as a quoted JSON string: escapes, and U+FFFD for each invalid UTF-8 byte. */
void json_write_string(FILE *f, const char *s);

#endif /* ARINFO_JSON_H */
