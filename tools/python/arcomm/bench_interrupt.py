# SPDX-License-Identifier: MIT
"""What Ctrl-C support costs and how fast it acts (the package's wait hook, _interrupt).

    python -m arcomm.bench_interrupt [--trials N] [--wait SEC]

* hook cost: rank 0 of two thread ranks waits ``--wait`` seconds in allreduce for rank
  1; the CPU time of the process over that wait (``time.process_time``), with the
  package's hook and with the hook removed (``comm_set_wait_hook(NULL)``), alternated;
  and the time rank 0's call takes to return once rank 1 arrived (the hook must not
  delay the wake-up).
* SIGINT latency: the main thread (rank 0) waits in allreduce for a rank that never
  comes; another thread sends SIGINT; the time from ``os.kill`` to KeyboardInterrupt
  caught.  The same for two thread ranks while the main thread waits: SIGINT to both
  calls returned COMM_ERR_ABORTED / COMM_ERR_PEER.

Prints medians, minimum and maximum over ``--trials``.
"""
from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import threading
import time

import numpy as np

import arcomm

from . import _interrupt, _lib


def _waited_call(hook: bool, wait: float) -> tuple[float, float]:
    """(process CPU seconds over the wait, seconds from rank 1's call to rank 0's return)."""
    cs = arcomm.Comm.init_all(2, timeout_ms=60000)
    if not hook:
        _lib.lib().comm_set_wait_hook(cs[0]._h, None, None, 0)
    x0, x1 = np.ones(256), np.ones(256)
    t_back: list = []

    def rank0() -> None:
        cs[0].allreduce(x0)
        t_back.append(time.perf_counter())

    t = threading.Thread(target=rank0)
    t.start()
    while not cs[0]._busy:
        time.sleep(0.0005)
    cpu0 = time.process_time()
    time.sleep(wait)
    cpu = time.process_time() - cpu0
    t1 = time.perf_counter()
    cs[1].allreduce(x1)
    t.join()
    for c in cs:
        c.close()
    return cpu, t_back[0] - t1


def _sigint_main() -> float:
    cs = arcomm.Comm.init_all(2, timeout_ms=60000)
    sent: list = []

    def body() -> None:
        while not cs[0]._busy:
            time.sleep(0.0005)
        time.sleep(0.1)
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=body).start()
    try:
        cs[0].allreduce(np.ones(256))
        raise SystemExit("bench_interrupt: the call was not interrupted")
    except KeyboardInterrupt:
        took = time.perf_counter() - sent[0]
    for c in cs:
        c.close()
    return took


def _sigint_threads() -> float:
    cs = arcomm.Comm.init_all(3, timeout_ms=60000)
    back: list = [0.0, 0.0]
    done = [threading.Event(), threading.Event()]

    def rank(r: int) -> None:
        try:
            cs[r].allreduce(np.ones(256))
        except arcomm.Error:
            back[r] = time.perf_counter()
        done[r].set()

    for r in (0, 1):
        threading.Thread(target=rank, args=(r,)).start()
    while not (cs[0]._busy and cs[1]._busy):
        time.sleep(0.0005)
    time.sleep(0.1)
    sent = time.perf_counter()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        pass
    done[0].wait(10)
    done[1].wait(10)
    for c in cs:
        c.close()
    return max(back) - sent


def _stats(xs: list, scale: float, unit: str) -> str:
    xs = [x * scale for x in xs]
    return (f"median {statistics.median(xs):.2f} {unit}, min {min(xs):.2f}, "
            f"max {max(xs):.2f} ({len(xs)} trials)")


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m arcomm.bench_interrupt")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--wait", type=float, default=2.0)
    a = p.parse_args()
    print(f"# arcomm {'.'.join(map(str, arcomm.version()))} ({arcomm.library_path()}), "
          f"python {platform.python_version()}, {os.cpu_count()} CPUs, hook period "
          f"{_interrupt.PERIOD_US} us")
    cpu: dict = {True: [], False: []}
    wake: dict = {True: [], False: []}
    for _ in range(a.trials):
        for hook in (True, False):
            c, w = _waited_call(hook, a.wait)
            cpu[hook].append(c / a.wait)
            wake[hook].append(w)
    for hook in (True, False):
        name = "with hook   " if hook else "without hook"
        print(f"wait {name}: CPU {_stats(cpu[hook], 100, '% of a core')}; "
              f"return after the peer came: {_stats(wake[hook], 1e6, 'us')}")
    print("SIGINT -> KeyboardInterrupt, main thread rank: "
          + _stats([_sigint_main() for _ in range(a.trials)], 1e3, "ms"))
    print("SIGINT -> both thread ranks' calls returned: "
          + _stats([_sigint_threads() for _ in range(a.trials)], 1e3, "ms"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
