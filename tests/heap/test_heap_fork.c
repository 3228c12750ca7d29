/* SPDX-License-Identifier: MIT */
/*
 * The shared heap and fork(), preloaded (tests/heap/meson.build): what a program that
 * forks gets under glibc it gets here.  The child sees the blocks as they were at the
 * fork, the parent's and the peers' later writes never reach it, nor its writes the
 * parent; blocks no collective used are shared copy-on-write (no copy: the child's
 * private pages stay at zero until it writes), blocks a collective used stay shared in
 * the parent and are copied for the child; the parent reuses a block's pages only when
 * no child that may still read them is left (exit, exec, a grandchild that outlived it);
 * fork handlers, registered before the heap's or after, allocate and free in prepare,
 * parent and child alike without a hang (issue 37, finding 2); threads that allocate
 * while another forks; children made without fork's handlers (_Fork), posix_spawn and
 * vfork; an environment that lives in the heap across fork and exec; dlopen'd
 * libraries that allocate.
 */
#include "heap_test.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <setjmp.h>
#include <sys/syscall.h>

#include <cmocka.h>

struct ht ht;
extern void (*heap_test_early_hook[3])(void); /* heap_test_early.c */
extern char **environ;

/* Private_Dirty of the mapping that holds p (KiB), from /proc/self/smaps, or -1. */
static long private_dirty_kib(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool in = false;
    long v = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && strncmp(line, "Private_Dirty:", 14) == 0)
            v = strtol(line + 14, NULL, 10);
    }
    if (f != NULL)
        fclose(f);
    return v;
}

static int wait_word(int fd)
{
    char c;
    return read(fd, &c, 1) == 1 ? 0 : -1;
}

/* A peer's view of this process's heap: the memfd mapped a second time. */
static uint8_t *peer_map(void)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", ht.heap0.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    uint8_t *m = mmap(NULL, ht.heap0.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

static ino_t fd_ino(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* ---- the child's copy of the heap, two generations deep ---- */

static int fork_grandchild(const struct arcomm_heap_info *h1, uint8_t *keep, size_t keep_n,
                           uint8_t *q, size_t q_n)
{
    struct arcomm_heap_info h2;
    CHILD_CHECK(ht.region(&h2) == 1, "grandchild: arcomm_heap_region gave no heap");
    CHILD_CHECK(h2.base != ht.heap0.base && h2.base != h1->base,
                "grandchild: heap %p is not new (parent's %p, child's %p)", h2.base, ht.heap0.base,
                h1->base);
    CHILD_CHECK(ht_check(keep, keep_n, 21) == SIZE_MAX,
                "grandchild: the first heap's block %p lost its contents", (void *)keep);
    CHILD_CHECK(ht_check(q, q_n, 23) == SIZE_MAX,
                "grandchild: the child heap's block %p lost its contents", (void *)q);
    CHILD_CHECK(malloc_usable_size(keep) >= keep_n, "grandchild: malloc_usable_size(%p) = %zu",
                (void *)keep, malloc_usable_size(keep));
    free(keep);
    free(q);
    void *r = malloc(2 * MiB);
    CHILD_CHECK(r != NULL && ht_in_range(r, &h2), "grandchild: malloc(2 MiB) = %p, not in %p", r,
                h2.base);
    memset(r, 1, 2 * MiB);
    free(r);
    return 0;
}

static int fork_child(uint8_t *p, size_t n, uint8_t *keep, size_t keep_n, ino_t ino0, int rfd)
{
    CHILD_CHECK(wait_word(rfd) == 0, "child: no word from the parent");
    size_t off = ht_check(p, n, 20);
    CHILD_CHECK(off == SIZE_MAX,
                "child: byte %zu of %p is not what it was at fork (the parent's later write "
                "shows through)",
                off, (void *)p);
    ht_fill(p, 0, n, 22);
    char perms[5];
    bool memfd;
    ht_maps(p, perms, &memfd);
    CHILD_CHECK(strcmp(perms, "rw-p") == 0, "child: block %p is mapped %s, not rw-p (private)",
                (void *)p, perms);
    ht_maps((uint8_t *)ht.heap0.base + ht.heap0.bytes - 1, perms, &memfd);
    CHILD_CHECK(strcmp(perms, "---p") == 0, "child: the old heap's end is mapped '%s', not ---p",
                perms);
    struct arcomm_heap_info h1;
    CHILD_CHECK(ht.region(&h1) == 1, "child: arcomm_heap_region gave no heap");
    CHILD_CHECK(h1.base != ht.heap0.base, "child: heap base %p is the parent's", h1.base);
    CHILD_CHECK(fd_ino(h1.fd) != 0 && fd_ino(h1.fd) != ino0,
                "child: heap fd %d is the parent's memfd", h1.fd);
    uint8_t *q = malloc(4 * MiB);
    CHILD_CHECK(q != NULL && ht_in_range(q, &h1), "child: malloc(4 MiB) = %p, not in its heap %p",
                (void *)q, h1.base);
    ht_fill(q, 0, 4 * MiB, 23);
    CHILD_CHECK(malloc_usable_size(p) >= n, "child: malloc_usable_size(%p) = %zu < %zu", (void *)p,
                malloc_usable_size(p), n);
    /* realloc of an inherited block: into the child's heap, contents kept, old pages gone. */
    volatile uintptr_t pa = (uintptr_t)p; /* (an address to look at, not to use) */
    uint8_t *p2 = realloc(p, 2 * n);
    CHILD_CHECK(p2 != NULL && ht_in_range(p2, &h1), "child: realloc(%#lx, %zu) = %p, not in %p",
                (unsigned long)pa, 2 * n, (void *)p2, h1.base);
    CHILD_CHECK(ht_check(p2, n, 22) == SIZE_MAX, "child: realloc of an inherited block lost data");
    ht_maps((const void *)pa, perms, &memfd);
    CHILD_CHECK(strcmp(perms, "---p") == 0,
                "child: the freed inherited block %#lx is mapped '%s', not reserved (---p)",
                (unsigned long)pa, perms);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(fork_grandchild(&h1, keep, keep_n, q, 4 * MiB));
    CHILD_CHECK(pid > 0 && ht_wait(pid, 60) == 0, "child: the grandchild failed");
    CHILD_CHECK(ht_check(q, 4 * MiB, 23) == SIZE_MAX, "child: the grandchild's free changed %p",
                (void *)q);
    free(q);
    free(p2);
    return 0;
}

static void fork_private(void **state)
{
    (void)state;
    size_t n = 8 * MiB, keep_n = MiB;
    uint8_t *p = malloc(n), *keep = malloc(keep_n);
    assert_true(p != NULL && ht_in_heap(p) && keep != NULL && ht_in_heap(keep));
    ht_fill(p, 0, n, 20);
    ht_fill(keep, 0, keep_n, 21);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[1]);
        _exit(fork_child(p, n, keep, keep_n, fd_ino(ht.heap0.fd), pfd[0]));
    }
    assert_true(pid > 0);
    close(pfd[0]);
    ht_fill(p, 0, n, 24); /* after the fork: the child must not see it */
    assert_int_equal(write(pfd[1], "x", 1), 1);
    close(pfd[1]);
    int st = ht_wait(pid, 60);
    if (st != 0)
        fail_msg("the fork child failed (status %d; its stderr says what)", st);
    size_t off = ht_check(p, n, 24);
    if (off != SIZE_MAX)
        fail_msg("the parent's block %p changed at byte %zu: the child's writes show through",
                 (void *)p, off);
    assert_int_equal(ht_check(keep, keep_n, 21), SIZE_MAX);
    free(p);
    free(keep);
}

/* ---- copy-on-write for what no collective used, a copy for what one did ---- */

static int cow_child(uint8_t *l, uint8_t *e, size_t n, int rfd)
{
    char perms[5];
    bool memfd;
    /* Before any access: the frozen block cost the child no copy. */
    long dirty = private_dirty_kib(l);
    CHILD_CHECK(dirty >= 0 && dirty < 1024,
                "child: the unused block %p has %ld KiB private dirty right after fork: it was "
                "copied, not shared copy-on-write",
                (void *)l, dirty);
    ht_maps(l, perms, &memfd);
    CHILD_CHECK(strcmp(perms, "rw-p") == 0 && memfd,
                "child: block %p is mapped %s%s, not a private view of the memfd", (void *)l, perms,
                memfd ? " (memfd)" : "");
    ht_maps(e, perms, &memfd);
    CHILD_CHECK(strcmp(perms, "rw-p") == 0 && !memfd,
                "child: the exported block %p is mapped %s%s, not a private copy", (void *)e, perms,
                memfd ? " (memfd)" : "");
    CHILD_CHECK(wait_word(rfd) == 0, "child: no word from the parent");
    CHILD_CHECK(ht_check(l, n, 31) == SIZE_MAX, "child: the unused block changed after the fork");
    CHILD_CHECK(ht_check(e, n, 32) == SIZE_MAX,
                "child: the exported block changed after the fork (the parent's or a peer's "
                "write reached the child)");
    ht_fill(l, 0, n, 35);
    ht_fill(e, 0, n, 36);
    uint64_t off;
    CHILD_CHECK(ht.share(e, n, &off) == 0 && ht.share(l, n, &off) == 0,
                "child: an inherited block is offered to peers");
    return 0;
}

static void fork_cow(void **state)
{
    (void)state;
    size_t n = 64 * MiB;
    uint8_t *l = malloc(n), *e = malloc(n);
    uint64_t off;
    assert_true(ht_in_heap(l) && ht_in_heap(e));
    ht_fill(l, 0, n, 31);
    ht_fill(e, 0, n, 32);
    int shared = ht.share(e + 4096, n - 8192, &off); /* a collective's buffer */
    uint8_t *peer = peer_map();
    assert_non_null(peer);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[1]);
        _exit(cow_child(l, e, n, pfd[0]));
    }
    close(pfd[0]);
    char perms[5];
    bool memfd;
    ht_maps(l, perms, &memfd);
    if (strcmp(perms, "rw-p") != 0)
        fail_msg("parent: the unused block %p is mapped %s after fork, not private (copy-on-write)",
                 (void *)l, perms);
    ht_maps(e, perms, &memfd);
    if (strcmp(perms, "rw-s") != 0 || !memfd || shared != 1)
        fail_msg("parent: the exported block %p is mapped %s after fork, not shared (share %d)",
                 (void *)e, perms, shared);
    /* The parent writes both, a peer writes the exported one: the child sees neither. */
    ht_fill(l, 0, n / 2, 33);
    ht_fill(peer + (e - (uint8_t *)ht.heap0.base), 0, n, 34);
    if (ht_check(e, n, 34) != SIZE_MAX)
        fail_msg("parent: a peer's write to the exported block is not seen: it is not shared");
    assert_int_equal(ht.share(e, n, &off), 1);
    assert_int_equal(ht.share(l, n, &off), 0); /* a child may read its pages: staged */
    assert_int_equal(write(pfd[1], "x", 1), 1);
    close(pfd[1]);
    int st = ht_wait(pid, 60);
    if (st != 0)
        fail_msg("the child failed (status %d; its stderr says what)", st);
    if (ht_check(l, n / 2, 33) != SIZE_MAX || ht_check_range(l, n / 2, n, 31) != SIZE_MAX)
        fail_msg("parent: the child's writes reached the unused block");
    assert_int_equal(ht_check(e, n, 34), SIZE_MAX);
    struct arcomm_heap_stats s = ht_stats();
    assert_true(s.private_bytes >= n && s.exported_bytes >= n);
    munmap(peer, ht.heap0.bytes);
    free(l);
    free(e);
}

/* A sparse block a collective used: the child's copy holds its data, its untouched pages
 * read zero in the child and are allocated neither there nor in the parent's memfd. */
static void fork_sparse_exported(void **state)
{
    (void)state;
    size_t n = 256 * MiB, pg = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *e = malloc(n);
    uint64_t off;
    ht_fill(e, 0, pg, 37);
    ht_fill(e, n - pg, n, 37);
    assert_int_equal(ht.share(e, n, &off), 1);
    int64_t before = ht_memfd_bytes();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        bool ok = ht_check(e, pg, 37) == SIZE_MAX && ht_check_range(e, n - pg, n, 37) == SIZE_MAX &&
                  ht_first_nonzero(e + pg, n - 2 * pg) == SIZE_MAX;
        long dirty = private_dirty_kib(e);
        _exit(!ok ? 1 : dirty > 1024 ? 2 : 0);
    }
    int st = ht_wait(pid, 60);
    if (st != 0)
        fail_msg("the child's copy of a sparse exported block %s",
                 st == 1 ? "lost its data or reads non-zero in between"
                         : "holds its untouched pages too (more than 1 MiB private dirty)");
    int64_t grew = ht_memfd_bytes() - before;
    if (grew > (int64_t)MiB)
        fail_msg("copying a sparse exported block for the child allocated %" PRId64
                 " bytes of the parent's memfd",
                 grew);
    free(e);
}

/* ---- held pages, until every child that may read them is gone ---- */

/*
 * The parent frees the frozen block f and fills the heap with other data while a child
 * (or the grandchild of one that exited at once, as daemons do, with every descriptor
 * closed) still reads f: f's pages must not be reused until it is gone.
 */
static int held_reader(uint8_t *f, size_t n, int rfd, int how, _Atomic int *verdict)
{
    if (how == 1) {
        pid_t g = fork();
        if (g != 0)
            _exit(g > 0 ? 0 : 1); /* the child exits; the grandchild goes on */
        setsid();
        close_range(3, ~0u, 0); /* the daemon closes everything: rfd too */
        sleep(1);
        /* Its verdict through a shared page, the one thing it shares with the test. */
        atomic_store(verdict, ht_check(f, n, 41) == SIZE_MAX ? 1 : 2);
        _exit(0);
    }
    CHILD_CHECK(wait_word(rfd) == 0, "child: no word from the parent");
    size_t off = ht_check(f, n, 41);
    CHILD_CHECK(off == SIZE_MAX,
                "child: byte %zu of the frozen block %p changed: the parent reused its pages "
                "while this child could read them",
                off, (void *)f);
    if (how == 2) {
        execl("/bin/true", "true", (char *)NULL);
        return 4;
    }
    return 0;
}

/* Waits until the heap released every held page (children gone), at most limit_ms. */
static bool held_released(int limit_ms)
{
    for (int i = 0; i < limit_ms / 10; i++) {
        void *p = malloc(4 * MiB); /* frees are where held pages are looked at */
        free(p);
        if (ht_stats().held_bytes == 0)
            return true;
        usleep(10000);
    }
    return false;
}

static void fork_held(void **state)
{
    (void)state;
    size_t n = 16 * MiB;
    _Atomic int *verdict =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(verdict != MAP_FAILED);
    for (int how = 0; how < 3; how++) {
        atomic_store(verdict, 0);
        uint8_t *f = malloc(n);
        ht_fill(f, 0, n, 41);
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            close(pfd[1]);
            _exit(held_reader(f, n, pfd[0], how, verdict));
        }
        close(pfd[0]);
        uintptr_t fa = (uintptr_t)f;
        free(f);
        struct arcomm_heap_stats s = ht_stats();
        if (s.held_bytes < n)
            fail_msg("case %d: the freed frozen block is not held (%" PRIu64 " bytes held)", how,
                     s.held_bytes);
        /* Everything the parent allocates now, in f's size and around it, is rewritten. */
        uint8_t *b[12];
        for (int i = 0; i < 12; i++) {
            b[i] = malloc(i % 2 ? n : n / 2);
            memset(b[i], 0xee, i % 2 ? n : n / 2);
            if ((uintptr_t)b[i] >= fa && (uintptr_t)b[i] < fa + n)
                fail_msg("case %d: malloc returned %p, inside the held block %#lx", how,
                         (void *)b[i], (unsigned long)fa);
        }
        if (how != 1) /* (that child is gone already: its grandchild closed the pipe) */
            assert_int_equal(write(pfd[1], "x", 1), 1);
        close(pfd[1]);
        int st = ht_wait(pid, 60);
        if (st != 0)
            fail_msg("case %d: the reader failed (status %d)", how, st);
        if (how == 1) {
            /* The child exited at once; its grandchild still reads f for a second. */
            usleep(200000);
            if (ht_stats().held_bytes < n)
                fail_msg("the grandchild of a child that exited still reads the block, but its "
                         "pages were released");
            for (int i = 0; i < 500 && atomic_load(verdict) == 0; i++)
                usleep(10000);
            if (atomic_load(verdict) != 1)
                fail_msg("the grandchild %s", atomic_load(verdict) == 0
                                                  ? "did not report in 5 s"
                                                  : "found the frozen block changed");
        }
        if (!held_released(how == 1 ? 5000 : 2000))
            fail_msg("case %d: every reader is gone, but %" PRIu64 " bytes are still held", how,
                     ht_stats().held_bytes);
        for (int i = 0; i < 12; i++)
            free(b[i]);
    }
    munmap((void *)verdict, 4096);
}

/* A frozen block comes back to the peers once its children are gone, for a collective
 * on the whole block only. */
static void fork_thaw(void **state)
{
    (void)state;
    size_t n = 8 * MiB;
    uint8_t *b = malloc(n);
    ht_fill(b, 0, n, 51);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[1]);
        _exit(wait_word(pfd[0]) == 0 && ht_check(b, n, 51) == SIZE_MAX ? 0 : 1);
    }
    close(pfd[0]);
    uint64_t off;
    ht_fill(b, 0, 4096, 52);                   /* the parent's own page, private */
    assert_int_equal(ht.share(b, n, &off), 0); /* the child may read its pages */
    assert_int_equal(write(pfd[1], "x", 1), 1);
    close(pfd[1]);
    assert_int_equal(ht_wait(pid, 60), 0);
    usleep(100000);                                       /* held pages are looked at every 50 ms */
    assert_int_equal(ht.share(b + 64, n - 128, &off), 0); /* not the whole block */
    assert_int_equal(ht.share(b, n, &off), 1);
    char perms[5];
    bool memfd;
    ht_maps(b, perms, &memfd);
    if (strcmp(perms, "rw-s") != 0)
        fail_msg("a thawed block is mapped %s, not shared", perms);
    if (ht_check(b, 4096, 52) != SIZE_MAX || ht_check_range(b, 4096, n, 51) != SIZE_MAX)
        fail_msg("thawing lost the block's contents");
    uint8_t *peer = peer_map();
    assert_non_null(peer);
    assert_int_equal(ht_check(peer + off, 4096, 52), SIZE_MAX);
    munmap(peer, ht.heap0.bytes);
    free(b);
}

/* ---- fork handlers that allocate (finding 2) ---- */

static uint8_t *hook_blocks[6];

/* What every handler does: allocate, fill, free, and free or grow blocks made before. */
static void hook_work(int k)
{
    uint8_t *p = malloc(MiB), *c = calloc(1, 2 * MiB);
    if (p == NULL || c == NULL || ht_first_nonzero(c, 2 * MiB) != SIZE_MAX)
        abort();
    memset(p, k, MiB);
    free(p);
    free(c);
    free(hook_blocks[k]); /* a heap block made before the fork */
    hook_blocks[k] = NULL;
}

static void hook_prepare(void)
{
    hook_work(0);
}
static void hook_parent(void)
{
    hook_work(1);
}
static void hook_child(void)
{
    hook_work(2);
}
static void hook_prepare_late(void)
{
    hook_work(3);
}
static void hook_parent_late(void)
{
    hook_work(4);
}
static void hook_child_late(void)
{
    hook_work(5);
}

/*
 * (In a process of its own: a hang is a kill after 60 s.)  Handlers registered before the
 * heap's (by a library's constructor) and after (by main), each kind allocating and
 * freeing large blocks: fork returns on both sides, and the blocks are as they should be.
 */
static int child_atfork(void)
{
    heap_test_early_hook[0] = hook_prepare;
    heap_test_early_hook[1] = hook_parent;
    heap_test_early_hook[2] = hook_child;
    pthread_atfork(hook_prepare_late, hook_parent_late, hook_child_late);
    for (int round = 0; round < 3; round++) {
        uint8_t *keep = malloc(4 * MiB);
        ht_fill(keep, 0, 4 * MiB, 61);
        for (int k = 0; k < 6; k++) {
            hook_blocks[k] = malloc(MiB + (size_t)k * 4096);
            CHILD_CHECK(ht_in_heap(hook_blocks[k]), "block %d not in the heap", k);
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            CHILD_CHECK(ht_check(keep, 4 * MiB, 61) == SIZE_MAX, "child: keep changed");
            uint8_t *q = malloc(8 * MiB);
            memset(q, 1, 8 * MiB);
            free(q);
            free(keep);
            for (int k = 0; k < 6; k++)
                free(hook_blocks[k]);
            _exit(0);
        }
        CHILD_CHECK(pid > 0, "fork failed");
        CHILD_CHECK(ht_wait(pid, 30) == 0, "round %d: the child failed or hung", round);
        CHILD_CHECK(hook_blocks[0] == NULL && hook_blocks[1] == NULL && hook_blocks[3] == NULL &&
                        hook_blocks[4] == NULL,
                    "round %d: a parent-side handler did not run", round);
        CHILD_CHECK(ht_check(keep, 4 * MiB, 61) == SIZE_MAX, "parent: keep changed");
        free(keep);
        for (int k = 0; k < 6; k++)
            free(hook_blocks[k]);
    }
    struct arcomm_heap_stats s = ht_stats();
    CHILD_CHECK(s.live_bytes == s.cached_bytes, "%" PRIu64 " bytes leaked", s.live_bytes);
    return 0;
}

static void fork_handlers(void **state)
{
    (void)state;
    char err[4096];
    const char *env[] = {NULL};
    int st = ht_run_self("atfork", env, err, sizeof(err), 60);
    if (st != 0)
        fail_msg("fork handlers that allocate: status %d%s, stderr '%s'", st,
                 st == 128 + SIGKILL ? " (hung: killed after 60 s)" : "", err);
}

/* ---- threads that allocate while another forks ---- */

struct racer {
    uint64_t seed;
    _Atomic int *stop;
    int rc;
};

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    uint8_t *b[8] = {NULL};
    size_t n[8] = {0};
    uint64_t id[8] = {0}, s = r->seed, next = r->seed << 20;
    while (!atomic_load(r->stop)) {
        int k = (int)(ht_rnd(&s) % 8);
        if (b[k] != NULL && ht_check(b[k], n[k], id[k]) != SIZE_MAX) {
            r->rc = 1;
            break;
        }
        if (ht_rnd(&s) % 2) {
            free(b[k]);
            n[k] = HEAP_MIN + ht_rnd(&s) % (3 * MiB);
            b[k] = malloc(n[k]);
        } else {
            n[k] = HEAP_MIN + ht_rnd(&s) % (3 * MiB);
            b[k] = realloc(b[k], n[k]);
        }
        id[k] = next++;
        ht_fill(b[k], 0, n[k], id[k]);
        uint64_t off;
        if (ht_rnd(&s) % 4 == 0)
            (void)ht.share(b[k], n[k], &off);
    }
    for (int k = 0; k < 8; k++)
        free(b[k]);
    return NULL;
}

static void fork_racing_threads(void **state)
{
    (void)state;
    _Atomic int stop = 0;
    struct racer r[4];
    pthread_t t[4];
    uint8_t *mine = malloc(6 * MiB);
    for (int i = 0; i < 4; i++) {
        r[i] = (struct racer){.seed = 100 + (uint64_t)i, .stop = &stop};
        assert_int_equal(pthread_create(&t[i], NULL, racer_main, &r[i]), 0);
    }
    for (int round = 0; round < 20; round++) {
        ht_fill(mine, 0, 6 * MiB, 70 + (uint64_t)round);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            if (ht_check(mine, 6 * MiB, 70 + (uint64_t)round) != SIZE_MAX)
                _exit(2);
            uint8_t *q = malloc(3 * MiB);
            memset(q, 3, 3 * MiB);
            free(q);
            free(mine);
            _exit(0);
        }
        assert_true(pid > 0);
        ht_fill(mine, 0, MiB, 99); /* at once after the fork: never in the child */
        int st = ht_wait(pid, 60);
        if (st != 0)
            fail_msg("round %d: the child failed (status %d)", round, st);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        if (r[i].rc != 0)
            fail_msg("thread %d found a block changed under it", i);
    }
    free(mine);
}

/* ---- children made without fork's handlers ---- */

/* _Fork: the child shares the parent's live blocks until it execs (too late to copy
 * them), but its own allocations and frees must never reach the parent's memory. */
static void fork_unhandled(void **state)
{
    (void)state;
    size_t n = 16 * MiB;
    uint8_t *live = malloc(n), *gap = malloc(n);
    ht_fill(live, 0, n, 81);
    free(gap); /* free room in the parent's heap, which the child must not take */
    fflush(NULL);
    pid_t pid = (pid_t)syscall(SYS_fork);
    if (pid == 0) {
        uint8_t *q = malloc(n);
        if (q == NULL || ht_in_heap(q))
            _exit(2); /* an allocation in the parent's heap */
        memset(q, 0x77, n);
        uint8_t *g = malloc(2 * n);
        memset(g, 0x78, 2 * n);
        free(live); /* the program's own cleanup: must not punch the parent's block */
        free(q);
        free(g);
        _exit(0);
    }
    assert_true(pid > 0);
    int st = ht_wait(pid, 60);
    if (st != 0)
        fail_msg("the _Fork child failed (status %d: 2 = it allocated in the parent's heap)", st);
    size_t off = ht_check(live, n, 81);
    if (off != SIZE_MAX)
        fail_msg("the _Fork child's free() changed the parent's live block at byte %zu", off);
    uint8_t *z = calloc(1, 3 * n);
    off = ht_first_nonzero(z, 3 * n);
    if (off != SIZE_MAX)
        fail_msg("calloc after a _Fork child wrote: byte %zu is 0x%02x (the child's data in the "
                 "parent's heap)",
                 off, z[off]);
    free(z);
    free(live);
}

static void spawn_and_vfork(void **state)
{
    (void)state;
    size_t n = 8 * MiB;
    uint8_t *b = malloc(n);
    ht_fill(b, 0, n, 91);
    _Atomic int stop = 0;
    struct racer r = {.seed = 900, .stop = &stop};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, racer_main, &r), 0);
    for (int i = 0; i < 10; i++) {
        pid_t pid;
        char *argv[] = {"sh", "-c", "exit 3", NULL};
        assert_int_equal(posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ), 0);
        assert_int_equal(ht_wait(pid, 30), 3);
        pid = vfork();
        if (pid == 0) {
            execve("/bin/sh", argv, environ);
            _exit(127);
        }
        assert_int_equal(ht_wait(pid, 30), 3);
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(ht_check(b, n, 91), SIZE_MAX);
    free(b);
}

/* An environment big enough that setenv's array lives in the heap, across fork and exec. */
static int child_environ(void)
{
    char name[32], value[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof(name), "HEAP_TEST_V%d", i);
        snprintf(value, sizeof(value), "%d", i * 3);
        setenv(name, value, 1);
    }
    CHILD_CHECK(ht_in_heap(environ), "an environment of 20000 variables is not in the heap");
    char *argv[] = {"sh", "-c", "test \"$HEAP_TEST_V19999\" = 59997", NULL};
    for (int i = 0; i < 3; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            execve("/bin/sh", argv, environ);
            _exit(127);
        }
        CHILD_CHECK(ht_wait(pid, 30) == 0, "fork + execve with the heap's environ failed");
        CHILD_CHECK(posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) == 0, "posix_spawn");
        CHILD_CHECK(ht_wait(pid, 30) == 0, "posix_spawn with the heap's environ failed");
        setenv("HEAP_TEST_V19999", "59997", 1);
    }
    return 0;
}

static void environ_in_heap(void **state)
{
    (void)state;
    char err[2048];
    const char *env[] = {NULL};
    int st = ht_run_self("environ", env, err, sizeof(err), 60);
    if (st != 0)
        fail_msg("environ: status %d, stderr '%s'", st, err);
}

static void dlopen_allocates(void **state)
{
    (void)state;
    const char *lib = getenv("HEAP_TEST_DL");
    if (lib == NULL)
        fail_msg("HEAP_TEST_DL (the path of heap_test_dl's library) is not set");
    for (int round = 0; round < 3; round++) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            fail_msg("dlopen %s: %s", lib, dlerror());
        uint8_t *(*kept)(size_t *) = (uint8_t * (*)(size_t *)) dlsym(h, "heap_test_dl_kept");
        uint8_t *(*vec)(size_t, unsigned) =
            (uint8_t * (*)(size_t, unsigned)) dlsym(h, "heap_test_dl_vector");
        assert_true(kept != NULL && vec != NULL);
        size_t kn;
        uint8_t *k = kept(&kn);
        assert_true(k != NULL && ht_in_heap(k));
        for (size_t i = 0; i < kn; i++)
            if (k[i] != 0x5a)
                fail_msg("the library's constructor block changed at byte %zu", i);
        uint8_t *v = vec(5 * MiB + 77, (unsigned)round);
        assert_true(v != NULL && ht_in_heap(v));
        for (size_t i = 0; i < 5 * MiB + 77; i++)
            if (v[i] != (uint8_t)(i * 7 + (unsigned)round))
                fail_msg("the library's vector is wrong at byte %zu", i);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0)
            _exit(k[kn - 1] == 0x5a && v[5 * MiB] == (uint8_t)(5 * MiB * 7 + (unsigned)round) ? 0
                                                                                              : 1);
        assert_int_equal(ht_wait(pid, 30), 0);
        free(v);
        assert_int_equal(dlclose(h), 0);
    }
}

int main(int argc, char **argv)
{
    if (!ht_init(argv[0]))
        return 1;
    if (argc > 1) {
        if (strcmp(argv[1], "atfork") == 0)
            return child_atfork();
        if (strcmp(argv[1], "environ") == 0)
            return child_environ();
        fprintf(stderr, "test_heap_fork: unknown mode %s\n", argv[1]);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fork_private),
        cmocka_unit_test(fork_cow),
        cmocka_unit_test(fork_sparse_exported),
        cmocka_unit_test(fork_held),
        cmocka_unit_test(fork_thaw),
        cmocka_unit_test(fork_handlers),
        cmocka_unit_test(fork_racing_threads),
        cmocka_unit_test(fork_unhandled),
        cmocka_unit_test(spawn_and_vfork),
        cmocka_unit_test(environ_in_heap),
        cmocka_unit_test(dlopen_allocates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
