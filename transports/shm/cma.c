/* SPDX-License-Identifier: MIT */
/*
 * Cross Memory Attach: process ranks copy straight between their private buffers with
 * process_vm_readv/process_vm_writev, one copy per byte where the staging slots take
 * two.  The kernel allows it where the caller may ptrace the peer (same uid, and Yama's
 * ptrace_scope 0): every rank probes every peer once, at join (segment.c), and the
 * communicator uses CMA only when every rank could read every peer.  The addresses a
 * peer publishes are only ever used through the kernel, which checks them against the
 * peer's own mappings: a bad one is an EFAULT, never a stray access of this process.
 */
#include "shm.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* What every peer's probe reads: its address goes into struct shm_rank.cma_word. */
static const uint64_t cma_probe_word = SHM_CMA_MAGIC;

uint64_t shm_cma_word(void)
{
    return (uint64_t)(uintptr_t)&cma_probe_word;
}

bool shm_cma_probe(const struct comm *c, const struct shm_comm *s)
{
    for (int r = 0; r < c->nranks; r++) {
        if (r == c->rank)
            continue;
        uint64_t v = 0;
        struct iovec local = {.iov_base = &v, .iov_len = sizeof(v)};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)s->ranks[r].cma_word,
                               .iov_len = sizeof(v)};
        errno = 0;
        ssize_t got = process_vm_readv(s->ranks[r].pid, &local, 1, &remote, 1, 0);
        if (got == (ssize_t)sizeof(v) && v == SHM_CMA_MAGIC)
            continue;
        int err = got < 0 ? errno : 0;
        rt_log(c, RT_LOG_DEBUG,
               "rank %d: cross-memory attach to rank %d (pid %d) is not available (%s%s): "
               "large messages between process ranks of this communicator go through the "
               "staging slots; %s",
               c->rank, r, (int)s->ranks[r].pid, got < 0 ? "process_vm_readv: " : "",
               got < 0 ? strerror(err) : "the probe word read back wrong",
               err == EPERM ? "Yama's kernel.yama.ptrace_scope = 0 (or running the ranks under "
                              "one ptracer) allows it"
                            : "nothing to do");
        return false;
    }
    return true;
}

/* Why a transfer with peer failed: what the errno most likely means here. */
static const char *cma_hint(int err)
{
    switch (err) {
    case ESRCH:
        return "the peer process has exited";
    case EFAULT:
        return "the peer published a buffer its process does not map (freed, or shorter "
               "than the call's count says): check the buffers every rank passes";
    case EPERM:
        return "the kernel no longer lets this rank reach the peer (ptrace_scope changed?); "
               "set ARCOMM_CMA_THRESHOLD=off";
    case ENOMEM:
        return "the kernel is out of memory";
    }
    return "set ARCOMM_CMA_THRESHOLD=off to use the staging slots instead";
}

static comm_status_t cma_copy(struct comm *c, int peer, void *local, uint64_t remote, size_t len,
                              bool write, const char *what)
{
    pid_t pid = shm_peer_pid(c, peer);
    size_t done = 0;
    while (done < len) {
        struct iovec l = {.iov_base = (char *)local + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(remote + done), .iov_len = len - done};
        ssize_t got = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                            : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (got > 0) {
            done += (size_t)got;
            continue;
        }
        if (got < 0 && errno == EINTR)
            continue;
        /* No progress and no error: the remote range ends here. */
        int err = got < 0 ? errno : EFAULT;
        /* A peer that left because another rank failed (it published why before it
         * exited) is not the cause: name the rank that is, as every wait does. */
        comm_status_t cause = shm_check_peers(c);
        if (cause != COMM_OK)
            return cause;
        rt_error(c, COMM_ERR_PEER,
                 "rank %d: %s %s of peer rank %d (pid %d) at 0x%llx failed after %zu of %zu "
                 "bytes in call %u: %s (%s)",
                 c->rank, write ? "process_vm_writev into" : "process_vm_readv of", what, peer,
                 (int)pid, (unsigned long long)remote, done, len, c->seq, strerror(err),
                 cma_hint(err));
        return COMM_ERR_PEER;
    }
    return COMM_OK;
}

comm_status_t shm_cma_read(struct comm *c, int peer, void *local, uint64_t remote, size_t len,
                           const char *what)
{
    return cma_copy(c, peer, local, remote, len, false, what);
}

comm_status_t shm_cma_write(struct comm *c, int peer, const void *local, uint64_t remote,
                            size_t len, const char *what)
{
    return cma_copy(c, peer, (void *)local, remote, len, true, what);
}
