/* SPDX-License-Identifier: MIT */
/*
 * Waiting for peers: spin, then yield, then sleep on the segment's doorbell futex, so
 * that 8 ranks on 2 cores still progress.  Every wait is bounded by the timeout and
 * ends early on comm_abort, on a peer's published failure and on a dead peer process.
 */
#include "shm.h"
#include "topo.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Longest single futex sleep: bounds how late a missed wake-up can be noticed. */
#define SLEEP_SLICE_NS 50000000ull
/* Polls before a wait first reads the clock (a few microseconds at most). */
#define PRESPIN_POLLS 128u

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

void shm_ring_after_rmw(struct shm_comm *s)
{
    if (atomic_load(&s->hdr->sleepers) != 0)
        shm_ring_all(s);
}

void shm_ring_lax(struct shm_comm *s)
{
    if (atomic_load_explicit(&s->hdr->sleepers, memory_order_relaxed) != 0)
        shm_ring_all(s);
}

void shm_ring_all(struct shm_comm *s)
{
    atomic_fetch_add(&s->hdr->bell, 1);
    futex(&s->hdr->bell, FUTEX_WAKE, INT_MAX, NULL);
}

/* "COMM_ERR_INVALID" out of "COMM_ERR_INVALID: bad argument or configuration". */
static int status_name_len(const char *s)
{
    const char *colon = strchr(s, ':');
    return colon ? (int)(colon - s) : (int)strlen(s);
}

static void set_root(struct shm_comm *s, int rank, int32_t status, uint32_t kind, const char *msg)
{
    s->root_rank1 = (uint32_t)rank + 1;
    s->root_status = status;
    s->root_kind = kind;
    snprintf(s->root_msg, sizeof(s->root_msg), "%s", msg);
}

comm_status_t shm_peer_failed(struct comm *c, int p, int32_t st)
{
    struct shm_comm *s = c->shm;
    const struct shm_rank *pr = &s->ranks[p];
    /* The peer's record is only trusted as far as it is bounded: a copy, terminated,
     * and a root rank that exists. */
    char msg[SHM_ERRMSG_BYTES];
    int32_t sticky = atomic_load_explicit(&pr->status, memory_order_acquire);
    if (sticky != COMM_OK) {
        memcpy(msg, pr->errmsg, sizeof(msg));
        msg[sizeof(msg) - 1] = '\0';
    } else {
        snprintf(msg, sizeof(msg), "(rank %d published no detail)", p);
    }
    uint32_t via = sticky != COMM_OK ? pr->root_rank1 : 0;
    int root = via != 0 && via <= (uint32_t)c->nranks ? (int)via - 1 : p;
    int32_t root_status = root != p ? pr->root_status : st;
    uint32_t kind = root != p && pr->root_kind == SHM_ROOT_DIED ? SHM_ROOT_DIED : SHM_ROOT_FAILED;
    const char *name = rt_status_string((comm_status_t)root_status);
    if (root == p)
        rt_error(c, COMM_ERR_PEER, "rank %d: rank %d failed with %.*s: %s", c->rank, p,
                 status_name_len(name), name, msg);
    else if (kind == SHM_ROOT_DIED)
        rt_error(c, COMM_ERR_PEER, "rank %d: rank %d died (seen through rank %d): %s", c->rank,
                 root, p, msg);
    else
        rt_error(c, COMM_ERR_PEER, "rank %d: rank %d failed with %.*s (seen through rank %d): %s",
                 c->rank, root, status_name_len(name), name, p, msg);
    set_root(s, root, root_status, kind, msg);
    return COMM_ERR_PEER;
}

comm_status_t shm_check_peers(struct comm *c)
{
    struct shm_comm *s = c->shm;
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank)
            continue;
        int32_t st = atomic_load_explicit(&s->ranks[p].status, memory_order_acquire);
        /* A mismatch is found in the handshake, after every rank arrived: each rank
         * finds it there itself (coll_wait_arrivals), so it is not a peer failure.  A
         * peer that completed this call failed later, in a call this rank has not
         * made yet (comm_destroy right after it, say): what it wrote for this call is
         * all there, and the caller's condition sees it on its next look. */
        if (st != COMM_OK && st != COMM_ERR_MISMATCH && !shm_peer_completed(s, p, c->seq))
            return shm_peer_failed(c, p, st);
    }
    return COMM_OK;
}

int shm_dead_peer(const struct comm *c, enum shm_peers which)
{
    const struct shm_comm *s = c->shm;
    pid_t self = getpid();
    for (int p = 0; p < c->nranks; p++) {
        const struct shm_rank *r = &s->ranks[p];
        /* claimed == 2 once the member published its pid (release). */
        if (p == c->rank ||
            (which == SHM_PEERS_CLAIMED &&
             atomic_load_explicit(&r->claimed, memory_order_acquire) != 2) ||
            r->pid == self)
            continue;
        if (!rt_proc_alive(r->pid, r->start_time) &&
            !(which == SHM_PEERS_IN_CALL && shm_peer_completed(s, p, c->seq)))
            return p;
    }
    return -1;
}

/* shm_check_peers for the peers watch names alone, whatever call they completed (a
 * wait that is no collective's: point-to-point). */
static comm_status_t check_watched(struct comm *c, shm_behind_fn watch, void *arg)
{
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank || !watch(c, arg, p))
            continue;
        int32_t st = atomic_load_explicit(&c->shm->ranks[p].status, memory_order_acquire);
        if (st != COMM_OK)
            return shm_peer_failed(c, p, st);
    }
    return COMM_OK;
}

/* shm_dead_peer for the peers watch names alone. */
static int dead_watched(const struct comm *c, shm_behind_fn watch, void *arg)
{
    const struct shm_comm *s = c->shm;
    pid_t self = getpid();
    for (int p = 0; p < c->nranks; p++) {
        const struct shm_rank *r = &s->ranks[p];
        if (p != c->rank && r->pid != self && watch((struct comm *)c, arg, p) &&
            !rt_proc_alive(r->pid, r->start_time))
            return p;
    }
    return -1;
}

static comm_status_t check_liveness_of(struct comm *c, const char *what, shm_behind_fn watch,
                                       void *arg)
{
    struct shm_comm *s = c->shm;
    int p = watch ? dead_watched(c, watch, arg) : shm_dead_peer(c, SHM_PEERS_IN_CALL);
    if (p < 0)
        return COMM_OK;
    /* A peer that failed, published why and then exited (its failure ends its job) is
     * not the root cause: what it published is.  Read again now that it is gone. */
    comm_status_t published = watch ? check_watched(c, watch, arg) : shm_check_peers(c);
    if (published != COMM_OK)
        return published;
    char msg[SHM_ERRMSG_BYTES];
    snprintf(msg, sizeof(msg),
             "rank %d (pid %d) exited or was killed while rank %d waited for it in %s (call %u); "
             "the job cannot continue: see rank %d's own output for why (a crash, the OOM "
             "killer, an exit without comm_destroy) and restart the job",
             p, (int)s->ranks[p].pid, c->rank, what, c->seq, p);
    rt_error(c, COMM_ERR_PEER, "rank %d: %s", c->rank, msg);
    set_root(s, p, COMM_ERR_PEER, SHM_ROOT_DIED, msg);
    return COMM_ERR_PEER;
}

static comm_status_t check_liveness(struct comm *c, const char *what)
{
    return check_liveness_of(c, what, NULL, NULL);
}

comm_status_t shm_parent_check(struct comm *c)
{
    struct comm *p = c->parent;
    if (p == NULL || p->shm == NULL)
        return COMM_OK;
    comm_status_t st = shm_check_peers(p);
    if (st == COMM_OK && !p->shm->same_process)
        st = check_liveness(p, "comm_split (joining the new communicators)");
    if (st == COMM_OK)
        return COMM_OK;
    rt_error(c, st,
             "%s (while joining communicator %s as its rank %d, split from %s: the "
             "split's ranks cannot all come)",
             p->errmsg, c->id.str, c->rank, p->id.str);
    return st;
}

/* "rank 2 did not arrive (ranks 1, 3 did)", or "a rank did not ..." without behind. */
/* waited (NULL: every peer) says which peers the wait is for: the others are neither
 * late nor there (a pipelined rooted call waits for the root alone, or for every rank
 * but the root). */
static void describe_missing(struct comm *c, shm_behind_fn behind, shm_behind_fn waited, void *arg,
                             const char *missing, char *out, size_t len)
{
    if (behind == NULL) {
        snprintf(out, len, "a rank did not %s", missing ? missing : "reach this collective");
        return;
    }
    char late[160] = "", there[160] = "";
    size_t nl = 0, nt = 0;
    int late_n = 0, there_n = 0;
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank || (waited != NULL && !waited(c, arg, p)))
            continue;
        bool is_late = behind(c, arg, p);
        char *b = is_late ? late : there;
        size_t *n = is_late ? &nl : &nt;
        int *k = is_late ? &late_n : &there_n;
        if (*n + 12 < sizeof(late))
            *n += (size_t)snprintf(b + *n, sizeof(late) - *n, "%s%d", *k ? ", " : "", p);
        else if (*n + 4 < sizeof(late) && b[*n - 1] != '.')
            *n += (size_t)snprintf(b + *n, sizeof(late) - *n, "...");
        ++*k;
    }
    if (late_n == 0)
        snprintf(out, len, "every rank did %s; woken too late", missing);
    else if (there_n == 0)
        snprintf(out, len, "%s %s did not %s", late_n > 1 ? "ranks" : "rank", late, missing);
    else
        snprintf(out, len, "%s %s did not %s (%s %s did)", late_n > 1 ? "ranks" : "rank", late,
                 missing, there_n > 1 ? "ranks" : "rank", there);
}

enum phase { PHASE_SPIN, PHASE_YIELD, PHASE_SLEEP };

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

void shm_note_cpu(struct comm *c)
{
    if (c->shm->same_cpu_check) {
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
    return shm_wait_for(c, ready, NULL, arg, what, NULL);
}

/* comm_abort, an abort word or the wait hook stopped the wait. */
static comm_status_t aborted(struct comm *c, const char *what)
{
    rt_error(c, COMM_ERR_ABORTED, "rank %d: %s while rank %d waited in %s (call %u)", c->rank,
             rt_abort_cause(c), c->rank, what, c->seq);
    return COMM_ERR_ABORTED;
}

/* watch, when not NULL: the peers whose failure or death ends the wait (all others are
 * ignored, whatever call they are in); NULL: every peer still in call c->seq. */
/* what and missing of a wait whose describe fn makes them (only once needed: a wait that
 * ends well formats nothing).  Set with words_of, never by an initializer: that would
 * clear the buffers on every wait. */
struct wait_words {
    shm_describe_fn describe;
    const char *what, *missing;
    char what_buf[160], missing_buf[96];
};

static inline void words_of(struct wait_words *w, shm_describe_fn describe, const char *what,
                            const char *missing)
{
    w->describe = describe;
    w->what = what;
    w->missing = missing;
}

static void words_need(struct comm *c, void *arg, struct wait_words *w)
{
    if (w->describe == NULL)
        return;
    w->describe(c, arg, w->what_buf, sizeof(w->what_buf), w->missing_buf, sizeof(w->missing_buf));
    w->what = w->what_buf;
    w->missing = w->missing_buf;
    w->describe = NULL;
}

static comm_status_t wait_for(struct comm *c, shm_ready_fn ready, shm_behind_fn behind,
                              shm_behind_fn waited, shm_behind_fn watch, void *arg,
                              struct wait_words *w)
{
    int r = ready(c, arg);
    if (r != 0)
        return r > 0 ? COMM_OK : (comm_status_t)r;

    struct shm_comm *s = c->shm;
    /* Most waits for a small message end within a few hundred nanoseconds, which is
     * what reading the clock costs in a VM: poll a few times before the first reading,
     * where spinning is allowed at all (the deadline starts that much later). */
    if (s->spin_ns > 0) {
        for (unsigned i = 0; i < PRESPIN_POLLS; i++) {
            cpu_relax();
            r = ready(c, arg);
            if (r != 0)
                return r > 0 ? COMM_OK : (comm_status_t)r;
        }
    }
    uint64_t start = rt_now_ns();
    /* Phase ends saturate like deadlines: ARCOMM_SPIN_NS and ARCOMM_YIELD_NS may be
     * as large as a long. */
    uint64_t yield_at = sat_add(start, c->shm->spin_ns > 0 ? (uint64_t)c->shm->spin_ns : 0);
    uint64_t sleep_at = sat_add(yield_at, c->knobs.yield_ns > 0 ? (uint64_t)c->knobs.yield_ns : 0);
    uint64_t deadline = rt_deadline_after(start, rt_ms_to_ns(c->timeout_ms));
    uint64_t next_liveness = start + RT_LIVENESS_PERIOD_NS;
    uint64_t next_hook = rt_wait_hook_first(c, start);
    enum phase phase = c->shm->spin_ns > 0 ? PHASE_SPIN : PHASE_YIELD;
    unsigned iter = 0;

    for (;;) {
        r = ready(c, arg);
        if (r != 0)
            return r > 0 ? COMM_OK : (comm_status_t)r;
        if (phase == PHASE_SPIN && (++iter & 63) != 0) {
            cpu_relax();
            continue;
        }
        if (rt_abort_requested(c)) {
            words_need(c, arg, w);
            return aborted(c, w->what);
        }
        comm_status_t st = watch ? check_watched(c, watch, arg) : shm_check_peers(c);
        if (st != COMM_OK)
            return st;
        uint64_t now = rt_now_ns();
        if (rt_wait_hook_run(c, now, &next_hook)) {
            words_need(c, arg, w);
            return aborted(c, w->what);
        }
        if (rt_passed(deadline, now)) {
            /* One last look: the condition may have come true while this rank slept. */
            r = ready(c, arg);
            if (r != 0)
                return r > 0 ? COMM_OK : (comm_status_t)r;
            words_need(c, arg, w);
            char who[400];
            describe_missing(c, behind, waited, arg, w->missing, who, sizeof(who));
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: timed out after %ld ms in %s call %u: %s; check that every rank "
                     "makes the same calls in the same order (a rank that skipped one waits "
                     "in another), or raise ARCOMM_TIMEOUT_MS",
                     c->rank, c->timeout_ms, w->what, c->seq, who);
            return COMM_ERR_TIMEOUT;
        }
        if (now >= next_liveness) {
            next_liveness = now + RT_LIVENESS_PERIOD_NS;
            if (!c->shm->same_process)
                words_need(c, arg, w);
            st = c->shm->same_process ? COMM_OK : check_liveness_of(c, w->what, watch, arg);
            if (st == COMM_OK)
                st = shm_parent_check(c);
            if (st != COMM_OK)
                return st;
        }
        if (phase == PHASE_SPIN &&
            (now >= yield_at || (c->shm->same_cpu_check && peer_on_my_cpu(c))))
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
                uint64_t most = s->lax_wake_ns ? s->lax_wake_ns : SLEEP_SLICE_NS;
                uint64_t slice = left < most ? left : most;
                if ((!c->shm->same_process || c->parent != NULL) && next_liveness - now < slice)
                    slice = next_liveness - now;
                if (next_hook != RT_NEVER && next_hook > now && next_hook - now < slice)
                    slice = next_hook - now;
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

comm_status_t shm_wait_for(struct comm *c, shm_ready_fn ready, shm_behind_fn behind, void *arg,
                           const char *what, const char *missing)
{
    struct wait_words w;
    words_of(&w, NULL, what, missing);
    return wait_for(c, ready, behind, NULL, NULL, arg, &w);
}

comm_status_t shm_wait_watch(struct comm *c, shm_ready_fn ready, shm_behind_fn watch, void *arg,
                             shm_describe_fn describe)
{
    struct wait_words w;
    words_of(&w, describe, "a wait", NULL);
    return wait_for(c, ready, NULL, NULL, watch, arg, &w);
}

struct progress_arg {
    uint64_t target;
    int root;       /* with side: which ranks count */
    bool only_root; /* with side: root alone, else every rank but root */
    bool side;      /* false: every rank */
};

static bool progress_counts(const struct progress_arg *a, int p)
{
    return !a->side || (p == a->root) == a->only_root;
}

static int progress_ready(struct comm *c, void *arg)
{
    const struct progress_arg *a = arg;
    struct shm_comm *s = c->shm;
    for (int p = 0; p < c->nranks; p++) {
        if (progress_counts(a, p) &&
            atomic_load_explicit(&s->ranks[p].progress, memory_order_acquire) < a->target)
            return 0;
    }
    return 1;
}

static bool progress_waited(struct comm *c, void *arg, int p)
{
    (void)c;
    return progress_counts(arg, p);
}

static bool progress_behind(struct comm *c, void *arg, int p)
{
    const struct progress_arg *a = arg;
    return progress_counts(a, p) &&
           atomic_load_explicit(&c->shm->ranks[p].progress, memory_order_acquire) < a->target;
}

void shm_progress_publish(struct comm *c)
{
    c->shm->steps++;
    atomic_exchange(&c->shm->ranks[c->rank].progress, c->shm->steps);
    shm_ring_after_rmw(c->shm);
}

comm_status_t shm_progress_wait_all(struct comm *c, const char *what)
{
    struct progress_arg a = {.target = c->shm->steps};
    return shm_wait_for(c, progress_ready, progress_behind, &a, what, "reach this step");
}

comm_status_t shm_progress_wait_side(struct comm *c, int root, bool only_root, uint64_t target,
                                     const char *what)
{
    struct progress_arg a = {.target = target, .root = root, .only_root = only_root, .side = true};
    struct wait_words w;
    words_of(&w, NULL, what, "reach this step");
    return wait_for(c, progress_ready, progress_behind, progress_waited, NULL, &a, &w);
}
