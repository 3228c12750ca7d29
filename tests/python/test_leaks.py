# SPDX-License-Identifier: MIT
"""The tests' leak check itself (conftest.LeakCheck): it fails when a test leaves a
/dev/shm name of its own communicator behind, and ignores another job's arcomm-* names
that come, go or stay beside it."""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import arcomm
from conftest import LeakCheck

PKG = str(Path(__file__).resolve().parents[2] / "tools" / "python")


def _rank0_waiting(cid: str) -> subprocess.Popen:
    """A process that makes communicator cid's segment as rank 0 of 2 and waits in
    comm_init for a rank 1 that never comes."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import arcomm; "
        "arcomm.Comm(sys.argv[2], 0, 2, timeout_ms=60000)"
    )
    return subprocess.Popen([sys.executable, "-c", code, PKG, cid])


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_own_segment_left_behind_fails():
    """Rank 0 of this test's communicator is SIGKILLed while it waits in comm_init: its
    segment stays in /dev/shm.  The check fails naming it (and removes it)."""
    chk = LeakCheck(grace=0.5)
    chk.begin()
    cid = arcomm.new_id()
    name = "/dev/shm/arcomm-" + cid.split("-", 1)[1]
    p = _rank0_waiting(cid)
    _wait_for(name)
    p.send_signal(signal.SIGKILL)
    p.wait()
    with pytest.raises(AssertionError, match="its own communicators' names left in /dev/shm: "
                       f"\\['{name}'\\]"):
        chk.end()
    assert not os.path.exists(name)


def test_other_jobs_names_are_not_the_tests():
    """Names of another job (ids this test never made): one created and removed during
    the test, one that stays through the check.  The check passes."""
    chk = LeakCheck(grace=0.5)
    chk.begin()
    other = [f"/dev/shm/arcomm-{os.urandom(16).hex()}" for _ in range(2)]
    with open(other[0], "wb"), open(other[1], "wb"):
        pass
    try:
        os.unlink(other[0])
        (c,) = arcomm.Comm.init_all(1)  # a communicator of the test's own, closed
        c.close()
        chk.end()
    finally:
        os.unlink(other[1])


def test_child_process_left_fails():
    if not glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        pytest.skip("this kernel lists no /proc/PID/task/TID/children")
    chk = LeakCheck(grace=0.1)
    chk.begin()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(AssertionError, match=f"child process\\(es\\) left: \\[{p.pid}\\]"):
            chk.end()
    finally:
        p.kill()
        p.wait()
