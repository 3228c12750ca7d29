/*
 * Waiting for peers: spin, then yield, then sleep on the segment's doorbell futex, so
 * that 8 ranks on 2 cores still progress.  Every wait is bounded by the timeout and
 * ends early on comm_abort, on a peer's published failure and on a dead peer process.
 */
#include "shm.h"
#include "topo.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How often a waiter in the yield or sleep phase checks that its peers still live. */
#define LIVENESS_PERIOD_NS 100000000ull
/* Longest single futex sleep: bounds how late a missed wake-up can be noticed. */
#define SLEEP_SLICE_NS 50000000ull

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    /* Not FUTEX_PRIVATE: the word is shared between processes. */
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

void shm_ring(struct shm_comm *s)
{
    /* Pairs with the sleeper's seq_cst increment of sleepers before it rechecks its
     * condition: either we see the sleeper, or the sleeper sees our publication. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->hdr->sleepers, memory_order_relaxed) != 0)
        shm_ring_all(s);
}

void shm_ring_all(struct shm_comm *s)
{
    atomic_fetch_add(&s->hdr->bell, 1);
    futex(&s->hdr->bell, FUTEX_WAKE, INT_MAX, NULL);
}

comm_status_t shm_check_peers(struct comm *c)
{
    struct shm_comm *s = c->shm;
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank)
            continue;
        int32_t st = atomic_load_explicit(&s->ranks[p].status, memory_order_acquire);
        /* A mismatch is found in the handshake, after every rank arrived: each rank
         * finds it there itself (coll_wait_arrivals), so it is not a peer failure. */
        if (st != COMM_OK && st != COMM_ERR_MISMATCH) {
            rt_error(c, COMM_ERR_PEER, "rank %d: peer rank %d failed with %s: %.*s", c->rank, p,
                     comm_status_string((comm_status_t)st), SHM_ERRMSG_BYTES, s->ranks[p].errmsg);
            return COMM_ERR_PEER;
        }
    }
    return COMM_OK;
}

static comm_status_t check_liveness(struct comm *c, const char *what)
{
    struct shm_comm *s = c->shm;
    pid_t self = getpid();
    for (int p = 0; p < c->nranks; p++) {
        pid_t pid = s->ranks[p].pid;
        if (p == c->rank || pid == self)
            continue;
        if (!rt_proc_alive(pid, s->ranks[p].start_time)) {
            rt_error(c, COMM_ERR_PEER,
                     "rank %d: peer rank %d (pid %d) exited or was killed while rank %d waited "
                     "for it in %s (call %u); the job cannot continue",
                     c->rank, p, (int)pid, c->rank, what, c->seq);
            return COMM_ERR_PEER;
        }
    }
    return COMM_OK;
}

enum phase { PHASE_SPIN, PHASE_YIELD, PHASE_SLEEP };

void shm_note_cpu(struct comm *c)
{
    if (c->same_cpu_check) {
        int cpu = sched_getcpu();
        struct shm_rank *me = &c->shm->ranks[c->rank];
        if (atomic_load_explicit(&me->cpu, memory_order_relaxed) != cpu)
            atomic_store_explicit(&me->cpu, cpu, memory_order_relaxed);
    }
}

/* Does a peer share this thread's CPU?  Then spinning only keeps it from running. */
static bool peer_on_my_cpu(struct comm *c)
{
    int cpu = sched_getcpu();
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank &&
            atomic_load_explicit(&c->shm->ranks[p].cpu, memory_order_relaxed) == cpu)
            return true;
    return false;
}

comm_status_t shm_wait(struct comm *c, shm_ready_fn ready, void *arg, const char *what)
{
    int r = ready(c, arg);
    if (r != 0)
        return r > 0 ? COMM_OK : (comm_status_t)r;

    struct shm_comm *s = c->shm;
    uint64_t start = rt_now_ns();
    uint64_t yield_at = start + (uint64_t)c->spin_ns;
    uint64_t sleep_at = yield_at + (uint64_t)(c->knobs.yield_ns > 0 ? c->knobs.yield_ns : 0);
    uint64_t deadline = rt_comm_deadline(c);
    uint64_t next_liveness = start + LIVENESS_PERIOD_NS;
    enum phase phase = c->spin_ns > 0 ? PHASE_SPIN : PHASE_YIELD;
    unsigned iter = 0;

    for (;;) {
        r = ready(c, arg);
        if (r != 0)
            return r > 0 ? COMM_OK : (comm_status_t)r;
        if (phase == PHASE_SPIN && (++iter & 63) != 0) {
            cpu_relax();
            continue;
        }
        if (atomic_load_explicit(&c->aborted, memory_order_relaxed)) {
            rt_error(c, COMM_ERR_ABORTED,
                     "rank %d: comm_abort was called while rank %d waited in %s (call %u)", c->rank,
                     c->rank, what, c->seq);
            return COMM_ERR_ABORTED;
        }
        comm_status_t st = shm_check_peers(c);
        if (st != COMM_OK)
            return st;
        uint64_t now = rt_now_ns();
        if (rt_passed(deadline, now)) {
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: timed out after %ld ms waiting for peers in %s (call %u); a rank "
                     "did not reach this collective: check that every rank makes the same calls,"
                     " or raise ARCOMM_TIMEOUT_MS",
                     c->rank, c->timeout_ms, what, c->seq);
            return COMM_ERR_TIMEOUT;
        }
        if (now >= next_liveness && !c->same_process) {
            next_liveness = now + LIVENESS_PERIOD_NS;
            st = check_liveness(c, what);
            if (st != COMM_OK)
                return st;
        }
        if (phase == PHASE_SPIN && (now >= yield_at || (c->same_cpu_check && peer_on_my_cpu(c))))
            phase = PHASE_YIELD;
        if (phase == PHASE_YIELD && now >= sleep_at)
            phase = PHASE_SLEEP;

        if (phase == PHASE_SPIN) {
            cpu_relax();
        } else if (phase == PHASE_YIELD) {
            sched_yield();
        } else {
            uint32_t bell = atomic_load(&s->hdr->bell);
            atomic_fetch_add(&s->hdr->sleepers, 1);
            r = ready(c, arg);
            if (r == 0 && !atomic_load(&c->aborted)) {
                uint64_t left = rt_left_ns(deadline, now);
                uint64_t slice = left < SLEEP_SLICE_NS ? left : SLEEP_SLICE_NS;
                if (!c->same_process && next_liveness - now < slice)
                    slice = next_liveness - now;
                struct timespec ts = {.tv_sec = (time_t)(slice / 1000000000u),
                                      .tv_nsec = (long)(slice % 1000000000u)};
                futex(&s->hdr->bell, FUTEX_WAIT, bell, &ts);
            }
            atomic_fetch_sub(&s->hdr->sleepers, 1);
            if (r != 0)
                return r > 0 ? COMM_OK : (comm_status_t)r;
        }
    }
}

struct progress_arg {
    uint64_t target;
};

static int progress_ready(struct comm *c, void *arg)
{
    const struct progress_arg *a = arg;
    struct shm_comm *s = c->shm;
    for (int p = 0; p < c->nranks; p++) {
        if (atomic_load_explicit(&s->ranks[p].progress, memory_order_acquire) < a->target)
            return 0;
    }
    return 1;
}

void shm_progress_publish(struct comm *c)
{
    c->steps++;
    atomic_store_explicit(&c->shm->ranks[c->rank].progress, c->steps, memory_order_release);
    shm_ring(c->shm);
}

comm_status_t shm_progress_wait_all(struct comm *c, const char *what)
{
    struct progress_arg a = {.target = c->steps};
    return shm_wait(c, progress_ready, &a, what);
}
