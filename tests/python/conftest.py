# SPDX-License-Identifier: MIT
"""pytest setup for arcomm's Python tests: the package from tools/python (no install
needed), thread-rank helpers, and checks that nothing is left behind (threads, the
/dev/shm/arcomm-* names)."""
from __future__ import annotations

import glob
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("ARCOMM_LOG_LEVEL", "none")

import arcomm  # noqa: E402


def build_dir() -> Path:
    """The build tree under test: ARCOMM_BUILD_DIR (set by meson), else where the
    library was found."""
    env = os.environ.get("ARCOMM_BUILD_DIR")
    return Path(env) if env else Path(arcomm.library_path()).resolve().parent


def run_ranks(comms: list, fn: Callable[[Any], Any], timeout: float = 120.0) -> list:
    """Runs fn(comm) on a thread per rank; returns the results, raises the first error.
    A rank that fails aborts its communicator so its peers do not wait for it."""
    results: list = [None] * len(comms)
    errors: list = [None] * len(comms)

    def body(i: int) -> None:
        try:
            results[i] = fn(comms[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[i] = e
            comms[i].abort()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if any(t.is_alive() for t in threads):
        for c in comms:
            c.abort()
        for t in threads:
            t.join()
        raise AssertionError(f"ranks still running after {timeout} s (aborted)")
    for e in errors:
        if e is not None:
            raise e
    return results


def run_each(n: int, fn: Callable[[int], Any], timeout: float = 120.0) -> tuple[list, list]:
    """Runs fn(rank) on n threads; returns (results, exceptions), both per rank."""
    results: list = [None] * n
    errors: list = [None] * n

    def body(i: int) -> None:
        try:
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - returned
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), f"ranks still running after {timeout} s"
    return results, errors


def _shm() -> set[str]:
    return set(glob.glob("/dev/shm/arcomm-*"))


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """Every test: no new thread and no new /dev/shm/arcomm-* name survives it.  Other
    jobs on the host (a parallel meson test) make names of their own that live for a
    moment, so a new name counts as left behind only once it has lasted 3 s."""
    shm0 = _shm()
    threads0 = threading.active_count()
    yield
    import gc

    gc.collect()
    assert threading.active_count() == threads0, "a test left a thread running"
    deadline = time.monotonic() + 3.0
    left = _shm() - shm0
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left &= _shm()
    assert not left, f"left in /dev/shm: {sorted(left)}"


def pytest_sessionfinish(session, exitstatus):
    """Every test skipped (no GPU, no torch...): exit 77, which meson counts as skipped."""
    rep = session.config.pluginmanager.get_plugin("terminalreporter")
    if rep is None or exitstatus != 0:
        return
    stats = rep.stats
    ran = sum(len(stats.get(k, [])) for k in ("passed", "failed", "error", "xfailed", "xpassed"))
    if ran == 0 and stats.get("skipped"):
        session.exitstatus = 77


@pytest.fixture
def comms3():
    """Three thread ranks (comm_init_all), closed after the test."""
    cs = arcomm.Comm.init_all(3, timeout_ms=30000)
    yield cs
    for c in cs:
        c.close()
