/* SPDX-License-Identifier: MIT */
/*
 * The rank program of test_arrun_orphans: each rank makes shared-memory names of the
 * job's id (as a rendezvous would), forks a child that sleeps (a process arrun did not
 * start), writes "rank=PID child=PID id=ID" to DIR/rank<R>, and waits.
 *
 *   arrun_orphan DIR        the ranks wait until they are killed
 *   arrun_orphan DIR quick  the ranks end their child, remove their names and exit 0
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int main(int argc, char **argv)
{
    const char *id = getenv("ARCOMM_ID"), *rank_text = getenv("ARCOMM_RANK");
    int quick = argc > 2 && strcmp(argv[2], "quick") == 0;
    char names[2][128], path[4096], tmp[4200];
    int rank, fd;
    pid_t child;
    FILE *f;

    if (argc < 2 || !id || !rank_text || strncmp(id, "arc1-", 5) != 0)
        return 3;
    rank = atoi(rank_text);
    /* Rank 0 the rendezvous name itself, every rank one with a suffix. */
    snprintf(names[0], sizeof(names[0]), "/arcomm-%s", id + 5);
    snprintf(names[1], sizeof(names[1]), "/arcomm-%s-orphan%d", id + 5, rank);
    for (int k = rank == 0 ? 0 : 1; k < 2; k++) {
        fd = shm_open(names[k], O_CREAT | O_RDWR, 0600);
        if (fd < 0)
            return 4;
        close(fd);
    }

    child = fork();
    if (child < 0)
        return 5;
    if (child == 0) {
        sleep_ms(60000);
        _exit(99);
    }

    /* Written whole, then renamed: the test never reads half a file. */
    snprintf(path, sizeof(path), "%s/rank%d", argv[1], rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (!f)
        return 6;
    fprintf(f, "rank=%d child=%d id=%s\n", (int)getpid(), (int)child, id);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return 6;

    if (quick) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        for (int k = rank == 0 ? 0 : 1; k < 2; k++)
            shm_unlink(names[k]);
        return 0;
    }
    sleep_ms(60000);
    return 99; /* nobody ended this rank */
}
