# SPDX-License-Identifier: MIT
"""Ctrl-C during a blocking call (the package's wait hook, arcomm/_interrupt.py): a real
SIGINT interrupts a call within a wait-hook period, the call is stopped as comm_abort
stops it, and the peers return COMM_ERR_PEER at once, not after the timeout.  Process
ranks, the main thread of thread ranks, thread ranks while the main thread waits, and a
program's own SIGINT handler.  The bounds (10 s) only tell an interrupt from the 30-60 s
timeouts these tests set."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import arcomm

WORKER = str(Path(__file__).resolve().parent / "worker.py")


def _in_flight(*cs: arcomm.Comm) -> None:
    """Returns once the calls on cs wait in C (their wait hooks have run)."""
    runs = [c._hs.runs for c in cs]
    deadline = time.monotonic() + 30
    while not all(c._busy and c._hs.runs > r for c, r in zip(cs, runs)):
        assert time.monotonic() < deadline, "the calls never started waiting"
        time.sleep(0.001)


class _Later(list):
    """The time SIGINT was sent (its one item, once sent) and the sending thread."""

    thread: threading.Thread


def _sigint_later(*cs: arcomm.Comm) -> _Later:
    """Sends this process SIGINT once the calls on cs wait in C; join .thread after."""
    sent = _Later()

    def body() -> None:
        _in_flight(*cs)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    sent.thread = threading.Thread(target=body)
    sent.thread.start()
    return sent


def _readline(p: subprocess.Popen) -> str:
    """The worker's next report line (other lines skipped)."""
    while True:
        line = p.stdout.readline()
        if not line or line.startswith("rank "):
            return line


def test_sigint_process_rank():
    """Two process ranks; SIGINT to rank 0 while it waits in allreduce for rank 1: rank 0
    raises KeyboardInterrupt at once and its communicator is broken; rank 1's allreduce,
    made afterwards, returns COMM_ERR_PEER at once."""
    env = dict(os.environ, ARCOMM_ID=arcomm.new_id(), ARCOMM_SIZE="2", ARCOMM_LOCAL_SIZE="2",
               ARCOMM_TIMEOUT_MS="60000", ARCOMM_LOG_LEVEL="none")
    procs = []
    for r in (0, 1):
        e = dict(env, ARCOMM_RANK=str(r), ARCOMM_LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable, WORKER, "interrupt"], env=e, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    try:
        line = _readline(procs[0])
        assert line.strip() == "rank 0: waiting", line
        t0 = time.monotonic()
        procs[0].send_signal(signal.SIGINT)
        line = _readline(procs[0])
        took = time.monotonic() - t0
        m = re.match(r"rank 0: KeyboardInterrupt; then COMM_ERR_ABORTED (\d+\.\d+)s", line)
        assert m, line
        assert took < 10, f"KeyboardInterrupt {took:.1f} s after SIGINT"
        assert float(m.group(1)) < 10
        procs[1].stdin.write("go\n")
        procs[1].stdin.flush()
        line = _readline(procs[1])
        m = re.match(r"rank 1: COMM_ERR_PEER (\d+\.\d+)s .*rank 0 failed with COMM_ERR_ABORTED", line)
        assert m, line
        assert float(m.group(1)) < 10
        for p in procs:
            assert p.wait(30) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_sigint_main_thread_rank():
    """The main thread is rank 0, blocked in allreduce; rank 1 (a thread) has not come:
    SIGINT raises KeyboardInterrupt out of the call; rank 1 then gets COMM_ERR_PEER."""
    cs = arcomm.Comm.init_all(2, timeout_ms=30000)
    sent = _sigint_later(cs[0])
    with pytest.raises(KeyboardInterrupt):
        cs[0].allreduce(np.ones(64))
    took = time.monotonic() - sent[0]
    sent.thread.join()
    t0 = time.monotonic()
    with pytest.raises(arcomm.Error) as ei:
        cs[1].allreduce(np.ones(64))
    assert ei.value.status == "COMM_ERR_PEER"
    assert time.monotonic() - t0 < 10
    assert took < 10, f"KeyboardInterrupt {took:.1f} s after SIGINT"
    with pytest.raises(arcomm.Error) as ei:
        cs[0].barrier()  # broken, as after comm_abort
    assert ei.value.status in ("COMM_ERR_ABORTED", "COMM_ERR_PEER")
    for c in cs:
        c.close()


def test_sigint_thread_ranks():
    """Ranks 0 and 1 are threads blocked in allreduce (rank 2 never comes); the main
    thread waits for them.  SIGINT: the main thread gets KeyboardInterrupt, and the thread
    ranks' calls stop at once with COMM_ERR_ABORTED saying why (or COMM_ERR_PEER, for
    the one whose peer stopped first) instead of waiting for the timeout."""
    cs = arcomm.Comm.init_all(3, timeout_ms=30000)
    errors: list = [None, None]
    done = [threading.Event(), threading.Event()]

    def rank(r: int) -> None:
        try:
            cs[r].allreduce(np.ones(64))
        except BaseException as e:  # noqa: BLE001
            errors[r] = e
        done[r].set()

    ranks = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in ranks:
        t.start()
    sent = _sigint_later(cs[0], cs[1])
    with pytest.raises(KeyboardInterrupt):
        # An Event's wait, not join: an interrupted join() of Python 3.11 can mark the
        # thread stopped while it still runs.
        done[0].wait(30)
        done[1].wait(30)
    assert done[0].wait(10) and done[1].wait(10), "thread ranks still waiting after SIGINT"
    took = time.monotonic() - sent[0]
    for t in ranks + [sent.thread]:
        t.join()  # after their Events: an interrupted join() was never made on them
    st = sorted(e.status if isinstance(e, arcomm.Error) else repr(e) for e in errors)
    assert st in (["COMM_ERR_ABORTED", "COMM_ERR_ABORTED"], ["COMM_ERR_ABORTED", "COMM_ERR_PEER"]), st
    why = [e for e in errors if e.status == "COMM_ERR_ABORTED"][0].message
    assert re.search(r"rank \d: allreduce: interrupted: SIGINT \(Ctrl-C\) reached the main thread", why), why
    assert took < 10
    with pytest.raises(arcomm.Error) as ei:
        cs[2].allreduce(np.ones(64))
    assert ei.value.status == "COMM_ERR_PEER"
    for c in cs:
        c.close()


class _Stop(Exception):
    pass


def test_program_handler_that_raises():
    """A SIGINT handler of the program's own: what it raises stops the call the same way
    and comes out of it; arcomm's handler is not involved."""
    cs = arcomm.Comm.init_all(2, timeout_ms=30000)

    def handler(signum, frame):
        raise _Stop("stop")

    old = signal.signal(signal.SIGINT, handler)
    try:
        sent = _sigint_later(cs[0])
        with pytest.raises(_Stop):
            cs[0].allreduce(np.ones(64))
        sent.thread.join()
    finally:
        signal.signal(signal.SIGINT, old)
    with pytest.raises(arcomm.Error) as ei:
        cs[1].allreduce(np.ones(64))
    assert ei.value.status == "COMM_ERR_PEER"
    for c in cs:
        c.close()


def test_program_handler_that_returns():
    """A handler that returns (it only logs): the call waits on and completes when the
    peer comes, with the right result."""
    cs = arcomm.Comm.init_all(2, timeout_ms=30000)
    seen: list = []
    old = signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
    try:
        sent = _sigint_later(cs[0])

        def rank1() -> None:
            while not sent or not seen:
                time.sleep(0.01)
            time.sleep(0.1)
            cs[1].allreduce(np.full(64, 2.0))

        t = threading.Thread(target=rank1)
        t.start()
        x = np.full(64, 1.0)
        cs[0].allreduce(x)
        t.join(30)
        sent.thread.join()
    finally:
        signal.signal(signal.SIGINT, old)
    assert seen == [signal.SIGINT]
    assert (x == 3.0).all()
    for c in cs:
        c.close()


def test_handler_closes_the_comm():
    """A handler that closes the communicator whose call it interrupted: the call is
    aborted (COMM_ERR_ABORTED naming close), the communicator destroyed once the call
    returned, the peer gets COMM_ERR_PEER."""
    cs = arcomm.Comm.init_all(2, timeout_ms=30000)
    old = signal.signal(signal.SIGINT, lambda s, f: cs[0].close())
    try:
        sent = _sigint_later(cs[0])
        with pytest.raises(arcomm.Error) as ei:
            cs[0].allreduce(np.ones(64))
        sent.thread.join()
    finally:
        signal.signal(signal.SIGINT, old)
    assert ei.value.status == "COMM_ERR_ABORTED"
    assert "Comm.close() was called" in ei.value.message
    assert cs[0].closed
    with pytest.raises(arcomm.Error) as ei:
        cs[1].allreduce(np.ones(64))
    assert ei.value.status == "COMM_ERR_PEER"
    cs[1].close()


def test_sigint_main_thread_in_comm_init():
    """The main thread waits in Comm(...) for a rank that never comes: SIGINT raises
    KeyboardInterrupt at once (the init is aborted), not after the 30 s timeout; an
    InitAbort of the program's own still works beside it."""
    sent: list = []

    def body() -> None:
        time.sleep(0.3)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    killer = threading.Thread(target=body)
    killer.start()
    with pytest.raises(KeyboardInterrupt):
        arcomm.Comm(arcomm.new_id(), 0, 2, timeout_ms=30000)
    assert time.monotonic() - sent[0] < 10
    killer.join()
    flag = arcomm.InitAbort()
    timer = threading.Timer(0.3, flag.set)
    timer.start()
    with pytest.raises(arcomm.Error) as ei:
        arcomm.Comm(arcomm.new_id(), 0, 2, timeout_ms=30000, abort=flag)
    assert ei.value.status == "COMM_ERR_ABORTED"
    timer.join()


_CLOSE_IN_HANDLER = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import arcomm
from arcomm import _comm

(a,) = arcomm.Comm.init_all(1)
signal.signal(signal.SIGINT, lambda s, f: a.close())


class Adding(set):
    # The registry's add, where the signal arrives: its handler runs here, while this
    # thread holds the registry's lock.
    def add(self, c):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):
            pass
        return super().add(c)


_comm._live = Adding(_comm._live)
(b,) = arcomm.Comm.init_all(1)
print("closed" if a.closed else "open", flush=True)
b.close()
"""


def test_handler_closes_a_comm_while_another_is_made():
    """A signal handler closes Comm a while the main thread is registering Comm b (the
    handler runs inside the registry's lock): no deadlock, a is closed."""
    pkg = str(Path(__file__).resolve().parents[2] / "tools" / "python")
    p = subprocess.run([sys.executable, "-c", _CLOSE_IN_HANDLER, pkg], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, ARCOMM_LOG_LEVEL="none"))
    assert p.returncode == 0 and p.stdout.strip() == "closed", p.stdout + p.stderr
