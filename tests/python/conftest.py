# SPDX-License-Identifier: MIT
"""pytest setup for arcomm's Python tests: the package from tools/python (no install
needed), thread-rank helpers, and checks that a test leaves nothing of its own behind
(threads, child processes, the /dev/shm names of its own communicators)."""
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
    """The build tree under test: ARCOMM_TEST_BUILD_DIR (set by meson), else where the
    library was found."""
    env = os.environ.get("ARCOMM_TEST_BUILD_DIR")
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


# ---- what a test made, and checks that it left none of it behind ----
#
# Another arcomm job may run beside the tests (a second suite, a benchmark): its
# /dev/shm/arcomm-* names come and go, and can live long (a rank waiting in comm_init
# for its peers).  So a test checks only the names of its own communicators: every id
# the package made in this process (new_id), every communicator's id (made by
# comm_init_all or comm_split inside the library, read back through rt_hook_comm_id),
# and the ids its process ranks report (made(): arrun's and mpirun's jobs).

_ids: set[str] = set()  # the hex digits of every id this process saw made or used
_ids_lock = threading.Lock()


def made(comm_id: str) -> None:
    """Counts comm_id ("arc1-<hex>") as one of the running test's communicators."""
    hexpart = comm_id.split("-", 1)[-1]
    with _ids_lock:
        _ids.add(hexpart)


def _comm_id(handle: int) -> str:
    import ctypes

    lib = arcomm._lib.lib()
    fn = lib.rt_hook_comm_id
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(arcomm._lib.CommId)]
    cid = arcomm._lib.CommId()
    return cid.str.decode() if fn(handle, ctypes.byref(cid)) == 0 else ""


def _record_ids() -> None:
    """Wraps the package's constructors so that every id it makes or joins is made()."""
    if getattr(arcomm, "_test_ids_recorded", False):
        return
    arcomm._test_ids_recorded = True
    setup, new_id, init = arcomm.Comm._setup, arcomm.new_id, arcomm.Comm.__init__

    def _setup(self, handle, device):
        cid = _comm_id(handle)
        if cid:
            made(cid)
        return setup(self, handle, device)

    def _new_id():
        cid = new_id()
        made(cid)
        return cid

    def _init(self, id, *args, **kw):
        if isinstance(id, str) and id.startswith("arc1-"):
            made(id)
        return init(self, id, *args, **kw)

    arcomm.Comm._setup = _setup
    arcomm.new_id = _new_id
    arcomm.Comm.__init__ = _init


_record_ids()


def _children() -> set[int]:
    """This process's child processes (alive or not yet reaped)."""
    kids: set[int] = set()
    for f in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        try:
            with open(f) as fh:
                kids.update(int(p) for p in fh.read().split())
        except OSError:
            pass
    return kids


class LeakCheck:
    """One test's leak check: begin() before it, end() after it.  end() raises
    AssertionError naming what the test left: a thread, a child process, a /dev/shm name
    of one of its own communicators that outlived ``grace`` seconds (a rendezvous that
    failed leaves a stub for its stragglers up to 5 s); it removes those names first, so
    that one leak does not fail the tests after it."""

    def __init__(self, grace: float = 6.0) -> None:
        self.grace = grace

    def begin(self) -> None:
        with _ids_lock:
            _ids.clear()
        self.threads = threading.active_count()
        self.children = _children()

    def own_names(self) -> set[str]:
        with _ids_lock:
            ids = list(_ids)
        names: set[str] = set()
        for h in ids:
            names.update(glob.glob(f"/dev/shm/arcomm-{h}*"))
        return names

    def end(self) -> None:
        import gc

        gc.collect()
        problems = []
        if threading.active_count() != self.threads:
            problems.append(
                f"{threading.active_count() - self.threads} thread(s) left running: "
                + ", ".join(t.name for t in threading.enumerate())
            )
        kids = _children() - self.children
        if kids:
            problems.append(f"child process(es) left: {sorted(kids)}")
        deadline = time.monotonic() + self.grace
        left = self.own_names()
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.own_names()
        for name in left:
            try:
                os.unlink(name)
            except OSError:
                pass
        if left:
            problems.append(f"its own communicators' names left in /dev/shm: {sorted(left)}")
        assert not problems, "; ".join(problems)


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """Every test: no thread, child process or /dev/shm name of its own survives it."""
    chk = LeakCheck()
    chk.begin()
    yield chk
    chk.end()


def pytest_sessionfinish(session, exitstatus):
    """Every test skipped (no GPU, no torch...): exit 77, which meson counts as skipped.
    A module skipped whole (pytest.importorskip at its top) collects no test: pytest's
    exit status 5, which counts the same."""
    rep = session.config.pluginmanager.get_plugin("terminalreporter")
    if rep is None or exitstatus not in (0, 5):
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
