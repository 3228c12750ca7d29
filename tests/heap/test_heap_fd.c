/* SPDX-License-Identifier: MIT */
/*
 * The shared heap never touches a descriptor that is not its memfd (issue 37, finding 1),
 * preloaded (tests/heap/meson.build).  A program closes every descriptor from 3 on, as
 * daemons do, and opens a file that it puts at the number the heap's memfd had; then it
 * frees, allocates, grows, and forks (the child writes to that number): the file keeps
 * every byte and its size, the child's descriptor stays open, and the heap goes on
 * without its memfd (saying so once: no peer can map it now, and fork copies).  And bash,
 * whose `exec 4>log` takes over a descriptor while large strings come and go: its log
 * files hold exactly what the script wrote.  Each case runs in a process of its own
 * (this executable again), since the first one loses the heap's memfd for good.
 */
#include "heap_test.h"

#include <setjmp.h>
#include <stdarg.h>

#include <cmocka.h>

struct ht ht;

#define FILE_BYTES (32 * MiB)

/* Does fd hold exactly size bytes: the pattern, then (past FILE_BYTES) anything? */
static bool file_holds(int fd, uint8_t *buf, size_t size)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != (off_t)size) {
        fprintf(stderr, "the program's file has %lld bytes, not %zu: the heap wrote to it\n",
                (long long)st.st_size, size);
        return false;
    }
    if (pread(fd, buf, size, 0) != (ssize_t)size)
        return false;
    size_t off = ht_check(buf, FILE_BYTES, 3);
    if (off != SIZE_MAX)
        fprintf(stderr, "the program's file changed at byte %zu: the heap wrote to it\n", off);
    return off == SIZE_MAX;
}

static int child_dupover(const char *dir)
{
    int heap_fd = ht.heap0.fd;
    size_t n = 16 * MiB;
    uint8_t *l1 = malloc(n), *l2 = malloc(MiB);
    CHILD_CHECK(ht_in_heap(l1) && ht_in_heap(l2), "blocks not in the heap");
    ht_fill(l1, 0, n, 1);
    ht_fill(l2, 0, MiB, 2);
    /* The daemon's closefrom(3), then a file of its own at the memfd's old number. */
    close_range(3, ~0u, 0);
    char path[256];
    snprintf(path, sizeof(path), "%s/heap-fd-XXXXXX", dir);
    int fd = mkstemp(path);
    CHILD_CHECK(fd >= 0, "mkstemp %s: %s", path, strerror(errno));
    unlink(path);
    uint8_t *data = malloc(FILE_BYTES);
    ht_fill(data, 0, FILE_BYTES, 3);
    CHILD_CHECK(write(fd, data, FILE_BYTES) == (ssize_t)FILE_BYTES, "write: %s", strerror(errno));
    free(data);
    CHILD_CHECK(dup2(fd, heap_fd) == heap_fd, "dup2 onto %d: %s", heap_fd, strerror(errno));
    close(fd);
    /* Everything that used to fallocate, punch or close the heap's descriptor. */
    free(l1);
    for (int i = 0; i < 20; i++) {
        uint8_t *p = malloc(n), *q = calloc(1, 3 * MiB);
        memset(p, i, n);
        CHILD_CHECK(ht_first_nonzero(q, 3 * MiB) == SIZE_MAX, "calloc not zero");
        p = realloc(p, 2 * n);
        memset(p + n, i, n);
        free(q);
        free(p);
    }
    /* The file: every byte as written. */
    uint8_t *back = malloc(FILE_BYTES + 1);
    CHILD_CHECK(file_holds(heap_fd, back, FILE_BYTES), "after the frees and mallocs");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        CHILD_CHECK(ht_check(l2, MiB, 2) == SIZE_MAX, "child: a block lost its contents");
        ht_fill(l2, 0, MiB, 4);
        /* Its copy of the program's descriptor is still open, and still the file. */
        CHILD_CHECK(pwrite(heap_fd, "c", 1, FILE_BYTES) == 1, "child: pwrite to %d: %s", heap_fd,
                    strerror(errno));
        uint8_t *q = malloc(n);
        memset(q, 9, n);
        free(q);
        free(l2);
        _exit(0);
    }
    CHILD_CHECK(ht_wait(pid, 60) == 0, "the fork child failed");
    CHILD_CHECK(ht_check(l2, MiB, 2) == SIZE_MAX, "parent: the child's writes reached a block");
    free(l2);
    /* The child's one byte after the file's, the rest as written. */
    CHILD_CHECK(file_holds(heap_fd, back, FILE_BYTES + 1), "after the fork");
    CHILD_CHECK(back[FILE_BYTES] == 'c', "the child's byte is missing");
    free(back);
    struct arcomm_heap_info h;
    CHILD_CHECK(ht.region(&h) == 0,
                "arcomm_heap_region still offers descriptor %d, which is the program's file now",
                heap_fd);
    return 0;
}

static void closefrom_dupover(void **state)
{
    (void)state;
    char err[4096];
    const char *env[] = {NULL};
    int st = ht_run_self("dupover", env, err, sizeof(err), 120);
    if (st != 0)
        fail_msg("closefrom + a file at the memfd's number: status %d, stderr '%s'", st, err);
    /* It says once what it lost, naming the descriptor. */
    if (strstr(err, "was closed, or replaced, by the program") == NULL)
        fail_msg("the heap did not say that it lost its memfd: stderr '%s'", err);
}

/* bash: `exec 3>log3 4>log4` while strings of megabytes come and go and $(...) forks. */
static void bash_exec(void **state)
{
    (void)state;
    if (access("/bin/bash", X_OK) != 0)
        skip();
    char dir[] = "/tmp/heap-bash-XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const char script[] = "d=$1\n"
                                 "x=$(head -c 3000000 /dev/zero | tr '\\0' a)\n"
                                 "exec 3>\"$d/log3\" 4>\"$d/log4\"\n"
                                 "echo hello >&3; echo world >&4\n"
                                 "y=\"$x$x$x$x\"\n"
                                 "unset x y\n"
                                 "z=$(echo sub)\n"
                                 "echo \"$z\" >&3\n"
                                 "w=$(head -c 5000000 /dev/zero | tr '\\0' b)\n"
                                 "unset w\n"
                                 "echo end >&4\n"
                                 "exec 3>&- 4>&-\n";
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/bash", "bash", "-c", script, "bash", dir, (char *)NULL);
        _exit(127);
    }
    int st = ht_wait(pid, 60);
    static const char *const want[2] = {"hello\nsub\n", "world\nend\n"};
    for (int k = 0; k < 2; k++) {
        char path[64], buf[64] = "";
        snprintf(path, sizeof(path), "%s/log%d", dir, 3 + k);
        struct stat sb;
        int fd = open(path, O_RDONLY);
        bool ok = fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size == (off_t)strlen(want[k]) &&
                  read(fd, buf, sizeof(buf) - 1) == (ssize_t)strlen(want[k]) &&
                  strcmp(buf, want[k]) == 0;
        long long size = fd >= 0 ? (long long)sb.st_size : -1;
        if (fd >= 0)
            close(fd);
        unlink(path);
        if (!ok) {
            rmdir(dir);
            fail_msg("bash under the heap: %s holds %lld bytes ('%.20s'), want '%s' (status %d)",
                     path, size, buf, want[k], st);
        }
    }
    rmdir(dir);
    assert_int_equal(st, 0);
}

int main(int argc, char **argv)
{
    if (!ht_init(argv[0]))
        return 1;
    if (argc > 1) {
        if (strcmp(argv[1], "dupover") == 0) {
            const char *dir = getenv("TMPDIR");
            return child_dupover(dir != NULL ? dir : "/tmp");
        }
        fprintf(stderr, "test_heap_fd: unknown mode %s\n", argv[1]);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(closefrom_dupover),
        cmocka_unit_test(bash_exec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
