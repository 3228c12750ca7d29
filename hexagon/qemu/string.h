/* SPDX-License-Identifier: MIT */
/*
 * The freestanding driver's <string.h>: what crt.c defines.  Headers shared with the
 * hosted builds (transports/base/wire_scalar.h) include <string.h>; the cross-builds
 * have no libc, and find this one first (-I hexagon/qemu).
 */
#ifndef ARCOMM_HEX_CRT_STRING_H
#define ARCOMM_HEX_CRT_STRING_H

#include <stddef.h>

void *memcpy(void *d, const void *s, size_t n);
void *memmove(void *d, const void *s, size_t n);
void *memset(void *d, int c, size_t n);

#endif /* ARCOMM_HEX_CRT_STRING_H */
