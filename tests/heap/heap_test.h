/* SPDX-License-Identifier: MIT */
/*
 * What the shared heap's tests share (test_heap.c, test_heap_fork.c, test_heap_fd.c):
 * the heap's entry points looked up at run time (the tests do not link the library, it
 * is preloaded), patterns that say which block and which byte, the heap's view of the
 * process's mappings, and children that report what went wrong.
 */
#ifndef ARCOMM_HEAP_TEST_H
#define ARCOMM_HEAP_TEST_H

#include "heap_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KiB      ((size_t)1 << 10)
#define MiB      ((size_t)1 << 20)
#define HEAP_MIN (64 * KiB) /* ARCOMM_HEAP_MIN's default */

#define HT_UNUSED __attribute__((unused))

struct ht {
    int (*region)(struct arcomm_heap_info *);
    int (*share)(const void *, uint64_t, uint64_t *);
    int (*stats)(struct arcomm_heap_stats *);
    struct arcomm_heap_info heap0; /* this process's heap, read at start */
};
extern struct ht ht;

/* Without arcomm_heap_share (an older heap, run by hand against its fixes): nothing is
 * shared, so the checks that need it fail on their own terms. */
static HT_UNUSED int ht_no_share(const void *p, uint64_t len, uint64_t *off)
{
    (void)p, (void)len, (void)off;
    return 0;
}

static HT_UNUSED int ht_no_stats(struct arcomm_heap_stats *st)
{
    (void)st;
    return 0;
}

/* Looks the entry points up; false (with a line on stderr) without the preload. */
static HT_UNUSED bool ht_init(const char *prog)
{
    ht.region = (int (*)(struct arcomm_heap_info *))dlsym(RTLD_DEFAULT, "arcomm_heap_region");
    ht.share =
        (int (*)(const void *, uint64_t, uint64_t *))dlsym(RTLD_DEFAULT, "arcomm_heap_share");
    ht.stats = (int (*)(struct arcomm_heap_stats *))dlsym(RTLD_DEFAULT, "arcomm_heap_stats");
    if (ht.share == NULL || ht.stats == NULL) {
        fprintf(stderr, "%s: this heap has no arcomm_heap_share or arcomm_heap_stats\n", prog);
        ht.share = ht.share != NULL ? ht.share : ht_no_share;
        ht.stats = ht.stats != NULL ? ht.stats : ht_no_stats;
    }
    if (ht.region == NULL || ht.region(&ht.heap0) != 1) {
        fprintf(stderr,
                "%s: libarcomm_heap.so is not preloaded, or has no heap: run it with "
                "LD_PRELOAD=.../libarcomm_heap.so\n",
                prog);
        return false;
    }
    return true;
}

static HT_UNUSED bool ht_in_range(const void *p, const struct arcomm_heap_info *h)
{
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)h->base;
    return u >= b && u - b < h->bytes;
}

static HT_UNUSED bool ht_in_heap(const void *p)
{
    return ht_in_range(p, &ht.heap0);
}

static HT_UNUSED struct arcomm_heap_stats ht_stats(void)
{
    struct arcomm_heap_stats st;
    memset(&st, 0xff, sizeof(st));
    if (ht.stats(&st) != 1)
        memset(&st, 0xff, sizeof(st));
    return st;
}

/* The pattern of block id at byte o: distinct per block and per position. */
static HT_UNUSED uint64_t ht_word(uint64_t id, uint64_t w)
{
    uint64_t x = ((id + 1) << 40) ^ w;
    x *= 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

static HT_UNUSED uint8_t ht_byte(uint64_t id, size_t o)
{
    return (uint8_t)(ht_word(id, o / 8) >> (8 * (o % 8)));
}

static HT_UNUSED void ht_fill(void *p, size_t from, size_t to, uint64_t id)
{
    uint8_t *b = p;
    size_t o = from;
    for (; o < to && o % 8 != 0; o++)
        b[o] = ht_byte(id, o);
    for (; o + 8 <= to; o += 8) {
        uint64_t w = ht_word(id, o / 8);
        memcpy(b + o, &w, 8);
    }
    for (; o < to; o++)
        b[o] = ht_byte(id, o);
}

/* The first offset in [0, n) that does not hold block id's pattern, or SIZE_MAX. */
static HT_UNUSED size_t ht_check(const void *p, size_t n, uint64_t id)
{
    const uint8_t *b = p;
    size_t o = 0;
    for (; o + 8 <= n; o += 8) {
        uint64_t w = ht_word(id, o / 8), have;
        memcpy(&have, b + o, 8);
        if (have != w)
            break;
    }
    for (; o < n; o++)
        if (b[o] != ht_byte(id, o))
            return o;
    return SIZE_MAX;
}

/* The same for bytes [from, to) of a block whose pattern starts at p. */
static HT_UNUSED size_t ht_check_range(const void *p, size_t from, size_t to, uint64_t id)
{
    const uint8_t *b = p;
    for (size_t o = from; o < to; o++)
        if (b[o] != ht_byte(id, o))
            return o;
    return SIZE_MAX;
}

static HT_UNUSED size_t ht_first_nonzero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t o = 0; o < n; o++)
        if (b[o] != 0)
            return o;
    return SIZE_MAX;
}

static HT_UNUSED uint64_t ht_rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/*
 * The /proc/self/maps line of the mapping that holds p: its permissions ("rw-s" shared,
 * "rw-p" private, "---p" reserved; "" when unmapped) and whether it maps the heap's memfd.
 */
static HT_UNUSED void ht_maps(const void *p, char perms[5], bool *memfd)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    perms[0] = '\0';
    *memfd = false;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        char pr[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, pr) == 3 && (uintptr_t)p >= lo &&
            (uintptr_t)p < hi) {
            memcpy(perms, pr, 5);
            *memfd = strstr(line, "/memfd:arcomm-heap") != NULL;
            break;
        }
    }
    if (f != NULL)
        fclose(f);
}

/* One field of /proc/self/status, in KiB (VmRSS, RssShmem, RssAnon), or -1. */
static HT_UNUSED long ht_status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    if (f != NULL)
        fclose(f);
    return v;
}

/* The bytes of the memfd that hold pages (512-byte blocks), through a descriptor of ours. */
static HT_UNUSED int64_t ht_memfd_bytes(void)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", ht.heap0.fd);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0)
        st.st_blocks = -1;
    if (fd >= 0)
        close(fd);
    return (int64_t)st.st_blocks * 512;
}

/* In a child: a failed check prints what it checked and ends the child with 1. */
#define CHILD_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "pid %d: ", (int)getpid());                                            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            fflush(stderr);                                                                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* The child's exit status, 128 + signal, or -1; a child still there after limit_s
 * seconds is killed (SIGKILL: 137), for tests whose failure is a hang. */
static HT_UNUSED int ht_wait(pid_t pid, int limit_s)
{
    int st;
    for (int i = 0; i < limit_s * 100; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0)
            return -1;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return 128 + SIGKILL;
}

/*
 * Runs this executable again as "PROG mode" with env (NAME=VALUE, ..., NULL) and the
 * heap's knobs unset otherwise; its stderr in err; its status (ht_wait) back.
 */
static HT_UNUSED int ht_run_self(const char *mode, const char *const *env, char *err, size_t errlen,
                                 int limit_s)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], STDERR_FILENO);
        close(pfd[0]);
        unsetenv("ARCOMM_HEAP_BYTES");
        unsetenv("ARCOMM_HEAP_MIN");
        for (; *env != NULL; env++)
            putenv((char *)*env);
        execl("/proc/self/exe", "heap-test", mode, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    size_t len = 0;
    ssize_t r;
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    int st = -2;
    for (int i = 0; i < limit_s * 100 && st == -2; i++) {
        while (len + 1 < errlen && (r = read(pfd[0], err + len, errlen - 1 - len)) > 0)
            len += (size_t)r;
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid)
            st = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        else
            usleep(10000);
    }
    if (st == -2)
        st = ht_wait(pid, 0);
    while (len + 1 < errlen && (r = read(pfd[0], err + len, errlen - 1 - len)) > 0)
        len += (size_t)r;
    err[len] = '\0';
    close(pfd[0]);
    return st;
}

#endif /* ARCOMM_HEAP_TEST_H */
