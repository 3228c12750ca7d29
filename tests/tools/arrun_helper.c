/* SPDX-License-Identifier: MIT */
/*
 * The rank program test_arrun starts under arrun.  One mode a behaviour:
 *
 *   env                 print this rank's ARCOMM_* environment, stray fds, cpus, group
 *   fail R CODE         rank R exits CODE after 100 ms; the others sleep
 *   selfkill R          rank R SIGKILLs itself after 200 ms; the others sleep
 *   sleep               every rank sleeps
 *   stubborn R CODE     rank R exits CODE after 100 ms; the others ignore SIGTERM, sleep
 *   label LINES LEN     every rank writes LINES long lines to stdout and stderr in small
 *                       pieces, then a last line without a newline
 *   stdin               print the first line this rank reads from stdin, or (eof)
 *   vars NAME...        print "rank=R pid=P cpus=LIST NAME=VALUE..." (VALUE "(unset)" when
 *                       unset) on stdout and "err rank=R" on stderr
 *   shm R               rank 0 creates the job's segment names in /dev/shm, then rank R
 *                       exits 1 while the others sleep (a job dying during rendezvous)
 *   heap                print "rank=R heap=yes|no LD_PRELOAD=VALUE": whether libarcomm_heap.so
 *                       is loaded in this process (its arcomm_heap_region is there)
 *
 * Every rank that sleeps first prints "pid=N" so the test can check it is gone after.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v ? atoi(v) : -1;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void print_pid_and_sleep(void)
{
    const char *id = getenv("ARCOMM_ID");
    printf("pid=%d id=%s\n", (int)getpid(), id ? id : "(unset)");
    fflush(stdout);
    sleep_ms(30000);
    /* Reaching here means nobody ended this rank: the test fails on the exit status. */
    exit(99);
}

/* Open fds other than stdin, stdout, stderr (and the one reading /proc/self/fd). */
static int stray_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        int fd;
        if (e->d_name[0] == '.')
            continue;
        fd = atoi(e->d_name);
        if (fd > 2 && fd != dirfd(d))
            n++;
    }
    closedir(d);
    return n;
}

static int mode_env(void)
{
    cpu_set_t set;
    char cpus[4096] = "";
    size_t len = 0;
    const char *id = getenv("ARCOMM_ID");

    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return 1;
    for (int c = 0; c < CPU_SETSIZE && len < sizeof(cpus) - 16; c++)
        if (CPU_ISSET(c, &set))
            len += (size_t)snprintf(cpus + len, sizeof(cpus) - len, "%s%d", len ? "," : "", c);
    printf("rank=%d size=%d local_rank=%d local_size=%d id=%s fds=%d pgid=%d cpus=%s\n",
           env_int("ARCOMM_RANK"), env_int("ARCOMM_SIZE"), env_int("ARCOMM_LOCAL_RANK"),
           env_int("ARCOMM_LOCAL_SIZE"), id ? id : "(unset)", stray_fds(), (int)getpgrp(), cpus);
    return 0;
}

static int mode_vars(int rank, int argc, char **argv)
{
    cpu_set_t set;
    char cpus[4096] = "";
    size_t len = 0;

    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return 1;
    for (int c = 0; c < CPU_SETSIZE && len < sizeof(cpus) - 16; c++)
        if (CPU_ISSET(c, &set))
            len += (size_t)snprintf(cpus + len, sizeof(cpus) - len, "%s%d", len ? "," : "", c);
    printf("rank=%d pid=%d cpus=%s", rank, (int)getpid(), cpus);
    for (int i = 2; i < argc; i++) {
        const char *v = getenv(argv[i]);
        printf(" %s=%s", argv[i], v ? v : "(unset)");
    }
    printf("\n");
    fprintf(stderr, "err rank=%d\n", rank);
    return 0;
}

/* Writes s in pieces of 7 bytes, yielding between them, so that ranks' pieces mix in time. */
static void write_in_pieces(int fd, const char *s, size_t n)
{
    while (n > 0) {
        size_t k = n < 7 ? n : 7;
        ssize_t w = write(fd, s, k);
        if (w <= 0)
            exit(2);
        s += w;
        n -= (size_t)w;
        sched_yield();
    }
}

static int mode_label(int rank, int lines, int len)
{
    size_t cap = (size_t)len + 64;
    char *line = malloc(cap);

    if (!line)
        return 1;
    for (int j = 0; j < lines; j++) {
        for (int fd = 1; fd <= 2; fd++) {
            int n = snprintf(line, cap, "r%d %s l%d ", rank, fd == 1 ? "out" : "err", j);
            memset(line + n, 'a' + rank % 26, (size_t)len);
            line[n + len] = '\n';
            write_in_pieces(fd, line, (size_t)n + (size_t)len + 1);
        }
    }
    for (int fd = 1; fd <= 2; fd++) {
        int n = snprintf(line, cap, "r%d tail", rank);
        write_in_pieces(fd, line, (size_t)n);
    }
    free(line);
    return 0;
}

static int mode_shm(int rank, int failing)
{
    const char *id = getenv("ARCOMM_ID");

    if (rank == 0) {
        /* The names the library uses: "/arcomm-" + the id's hex part, and suffixes of it. */
        const char *suffixes[] = {"", "-extra"};
        if (!id || strncmp(id, "arc1-", 5) != 0)
            return 3;
        for (int k = 0; k < 2; k++) {
            char name[128];
            int fd;
            snprintf(name, sizeof(name), "/arcomm-%s%s", id + 5, suffixes[k]);
            fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
            if (fd < 0)
                return 4;
            close(fd);
            printf("created=%s\n", name + 1);
        }
        fflush(stdout);
    }
    if (rank == failing) {
        sleep_ms(300);
        return 1;
    }
    print_pid_and_sleep();
    return 0;
}

static int mode_heap(int rank)
{
    const char *preload = getenv("LD_PRELOAD");
    printf("rank=%d heap=%s LD_PRELOAD=%s\n", rank,
           dlsym(RTLD_DEFAULT, "arcomm_heap_region") != NULL ? "yes" : "no",
           preload ? preload : "(unset)");
    return 0;
}

int main(int argc, char **argv)
{
    int rank = env_int("ARCOMM_RANK");
    const char *mode = argc > 1 ? argv[1] : "";

    if (strcmp(mode, "env") == 0)
        return mode_env();
    if (strcmp(mode, "fail") == 0 && argc == 4) {
        if (rank == atoi(argv[2])) {
            sleep_ms(100);
            return atoi(argv[3]);
        }
        print_pid_and_sleep();
    }
    if (strcmp(mode, "selfkill") == 0 && argc == 3) {
        if (rank == atoi(argv[2])) {
            printf("pid=%d\n", (int)getpid());
            fflush(stdout);
            sleep_ms(200);
            raise(SIGKILL);
        }
        print_pid_and_sleep();
    }
    if (strcmp(mode, "sleep") == 0)
        print_pid_and_sleep();
    if (strcmp(mode, "stubborn") == 0 && argc == 4) {
        if (rank == atoi(argv[2])) {
            sleep_ms(100);
            return atoi(argv[3]);
        }
        signal(SIGTERM, SIG_IGN);
        print_pid_and_sleep();
    }
    if (strcmp(mode, "label") == 0 && argc == 4)
        return mode_label(rank, atoi(argv[2]), atoi(argv[3]));
    if (strcmp(mode, "stdin") == 0) {
        char text[64] = "";
        ssize_t n = read(STDIN_FILENO, text, sizeof(text) - 1);
        text[n > 0 ? n : 0] = '\0';
        text[strcspn(text, "\n")] = '\0';
        printf("rank=%d stdin=%s\n", rank, n > 0 ? text : n == 0 ? "(eof)" : "(error)");
        return 0;
    }
    if (strcmp(mode, "vars") == 0)
        return mode_vars(rank, argc, argv);
    if (strcmp(mode, "heap") == 0)
        return mode_heap(rank);
    if (strcmp(mode, "shm") == 0 && argc == 3)
        return mode_shm(rank, atoi(argv[2]));
    fprintf(stderr, "arrun_helper: unknown mode '%s'\n", mode);
    return 64;
}
