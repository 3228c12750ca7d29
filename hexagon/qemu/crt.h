/* SPDX-License-Identifier: MIT */
/* The freestanding runtime of the qemu test driver (crt.c). */
#ifndef ARCOMM_HEX_CRT_H
#define ARCOMM_HEX_CRT_H

#include <stdint.h>

void crt_write(const char *s, unsigned len);
void crt_exit(int code) __attribute__((noreturn));
void crt_puts(const char *s);
void crt_put_u32(uint32_t v);
void crt_put_i32(int32_t v);
void crt_put_hex(uint32_t v);

#endif /* ARCOMM_HEX_CRT_H */
