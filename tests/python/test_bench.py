# SPDX-License-Identifier: MIT
"""python -m arcomm.bench: thread ranks, arrun ranks and mpirun ranks (with the mpi4py
column) print arbench's table, one row per size and collective."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, build_dir

ARGS = ["-m", "arcomm.bench", "--coll", "all", "-b", "64", "-e", "256", "--iters", "20"]


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools" / "python"))
    env.setdefault("ARCOMM_LOG_LEVEL", "none")
    return env


def _rows(out: str, columns: int) -> list[list[str]]:
    rows = [line.split() for line in out.splitlines() if line and not line.startswith("#")]
    for r in rows:
        assert len(r) == columns, f"row {r} has {len(r)} columns, want {columns}:\n{out}"
        assert float(r[4]) > 0 and float(r[5]) >= float(r[4]) * 0.5, r
    return rows


def _check(out: str, columns: int, colls: int) -> None:
    assert out.startswith("# arcomm.bench"), out
    rows = _rows(out, columns)
    assert len(rows) == 3 * colls, out  # 64, 128, 256 B per collective
    assert out.count("# coll: ") == colls, out


def test_bench_threads():
    p = subprocess.run([sys.executable] + ARGS + ["-n", "2"], capture_output=True, text=True,
                       timeout=120, env=_env())
    assert p.returncode == 0, p.stdout + p.stderr
    _check(p.stdout, 8, 6)


def test_bench_arrun():
    arrun = build_dir() / "tools" / "arrun" / "arrun"
    if not arrun.is_file():
        pytest.skip("no arrun")
    p = subprocess.run([str(arrun), "-n", "2", "--bind", "none", "--", sys.executable] + ARGS,
                       capture_output=True, text=True, timeout=120, env=_env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ranks: 2 (processes, arrun)" in p.stdout
    _check(p.stdout, 8, 6)


def test_bench_mpirun():
    mpirun = shutil.which("mpirun")
    if mpirun is None or not (build_dir() / "libarcomm_mpi.so").exists():
        pytest.skip("no mpirun or no libarcomm_mpi")
    pytest.importorskip("mpi4py")
    env = _env()
    env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
    p = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                        "-np", "2", sys.executable] + ARGS, capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ranks: 2 (processes, mpirun)" in p.stdout
    _check(p.stdout, 11, 6)  # + mpi4py time, busbw, ratio


def test_bench_interrupt():
    """python -m arcomm.bench_interrupt runs and prints its four lines."""
    p = subprocess.run([sys.executable, "-m", "arcomm.bench_interrupt", "--trials", "1",
                        "--wait", "0.2"], capture_output=True, text=True, timeout=120, env=_env())
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("# arcomm "), p.stdout
    assert [line.split(":")[0] for line in lines[1:]] == [
        "wait with hook   ", "wait without hook",
        "SIGINT -> KeyboardInterrupt, main thread rank", "SIGINT -> both thread ranks' calls returned",
    ], p.stdout
