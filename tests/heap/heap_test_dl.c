/* SPDX-License-Identifier: MIT */
/*
 * Loaded with dlopen by test_heap_fork (case dlopen): a library that allocates large
 * blocks in its constructor, in its functions and frees them in its destructor, as
 * plugins do.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *kept;
static size_t kept_n;

__attribute__((constructor)) static void dl_init(void)
{
    kept_n = (size_t)3 << 20;
    kept = malloc(kept_n);
    if (kept != NULL)
        memset(kept, 0x5a, kept_n);
}

/* The block the constructor made, its size in *n. */
__attribute__((visibility("default"))) uint8_t *heap_test_dl_kept(size_t *n)
{
    *n = kept_n;
    return kept;
}

/* A vector grown by realloc to n bytes, byte i holding i * 7 + seed. */
__attribute__((visibility("default"))) uint8_t *heap_test_dl_vector(size_t n, unsigned seed)
{
    uint8_t *v = NULL;
    for (size_t m = 4096; m < 2 * n; m *= 2) {
        size_t want = m < n ? m : n;
        uint8_t *w = realloc(v, want);
        if (w == NULL) {
            free(v);
            return NULL;
        }
        v = w;
        for (size_t i = 0; i < want; i++)
            v[i] = (uint8_t)(i * 7 + seed);
        if (want == n)
            break;
    }
    return v;
}

__attribute__((destructor)) static void dl_fini(void)
{
    free(kept);
    kept = NULL;
}
