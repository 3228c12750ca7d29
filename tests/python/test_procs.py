# SPDX-License-Identifier: MIT
"""Process ranks: under arrun (Comm.from_env) and under mpirun with mpi4py
(Comm.from_mpi), each running worker.py; a killed rank under arrun."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import build_dir, made

WORKER = str(Path(__file__).resolve().parent / "worker.py")
PYTHON = sys.executable


def _arrun() -> str:
    p = build_dir() / "tools" / "arrun" / "arrun"
    if not p.is_file():
        pytest.skip(f"no arrun at {p}")
    return str(p)


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env.setdefault("ARCOMM_LOG_LEVEL", "none")
    env.update(extra)
    return env


def _lines(out: str) -> dict[int, str]:
    """The workers' "rank R: ..." lines by rank; their "comm-id R: ID" lines count
    those ids as the test's own (the leak check)."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"(?:\[\d+\] )?comm-id \d+: (arc1-[0-9a-f]+)", line)
        if m:
            made(m.group(1))
            continue
        m = re.match(r"(?:\[\d+\] )?rank (\d+): (.*)", line)
        if m:
            got[int(m.group(1))] = m.group(2)
    return got


def _arrun_job(n: int, mode: str, timeout: float = 120, opts: tuple = (),
               **env: str) -> tuple[int, dict, str]:
    p = subprocess.run(
        [_arrun(), "-n", str(n), "--bind", "none", "--grace", "20", *opts, "--", PYTHON, WORKER,
         mode],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**env),
    )
    return p.returncode, _lines(p.stdout), p.stdout + p.stderr


def test_arrun_sweep():
    """Three process ranks: every collective x dtype x op; the same allreduce bits."""
    rc, got, out = _arrun_job(3, "sweep")
    assert rc == 0, out
    assert sorted(got) == [0, 1, 2], out
    fields = [got[r].split() for r in range(3)]
    assert all(f[0] == "ok" and f[1] == "3" for f in fields), out
    assert len({f[3] for f in fields}) == 1 and len({f[4] for f in fields}) == 1, out


def test_arrun_sweep_shared_heap():
    """The same sweep under arrun --shared-heap, every numpy buffer from 4 KiB in the heap
    (ARCOMM_HEAP_MIN=4K, its smallest value) and every call a bulk call: the one-pass paths
    over the peers' heaps give the bits the other paths give."""
    if not (build_dir() / "libarcomm_heap.so").is_file():
        pytest.skip("no libarcomm_heap.so")
    rc, got, out = _arrun_job(3, "sweep", ARCOMM_FLAG_THRESHOLD="off")
    assert rc == 0, out
    want = [got[r].split() for r in range(3)]
    rc, got, out = _arrun_job(3, "sweep", opts=("--shared-heap",), ARCOMM_HEAP_MIN="4K",
                              ARCOMM_FLAG_THRESHOLD="off", ARCOMM_LOG_LEVEL="info")
    assert rc == 0, out
    assert "has a shared heap" in out, out
    fields = [got[r].split() for r in range(3)]
    assert all(f[0] == "ok" and f[1] == "3" for f in fields), out
    assert [f[3:5] for f in fields] == [w[3:5] for w in want], out


def test_arrun_mismatch():
    rc, got, out = _arrun_job(2, "mismatch")
    assert rc == 0, out
    for r in range(2):
        assert got[r].startswith("COMM_ERR_MISMATCH untouched=True"), out


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_arrun_killed_rank(how: str):
    """Rank 1 of 3 os._exit()s or SIGKILLs itself mid-communicator: ranks 0 and 2 raise
    COMM_ERR_PEER well within the timeout (20 s)."""
    rc, got, out = _arrun_job(3, how, ARCOMM_TIMEOUT_MS="20000")
    assert rc == (0 if how == "exit" else 128 + 9), out
    assert 1 not in got, out
    for r in (0, 2):
        m = re.match(r"COMM_ERR_PEER (\d+\.\d+)s", got.get(r, ""))
        assert m, out
        assert float(m.group(1)) < 5.0, out


def _mpirun(n: int, mode: str, timeout: float = 120) -> tuple[int, dict, str]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun")
    if not (build_dir() / "libarcomm_mpi.so").exists():
        pytest.skip("arcomm built without MPI (no libarcomm_mpi.so)")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("no mpi4py")
    p = subprocess.run(
        [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n),
         PYTHON, WORKER, "mpi-" + mode],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(OMPI_MCA_btl_vader_single_copy_mechanism="none"),
    )
    return p.returncode, _lines(p.stdout), p.stdout + p.stderr


def test_mpirun_sweep():
    """Two MPI processes through Comm.from_mpi: every collective x dtype x op."""
    rc, got, out = _mpirun(2, "sweep")
    assert rc == 0, out
    fields = [got[r].split() for r in range(2)]
    assert all(f[0] == "ok" and f[1] == "2" for f in fields), out
    assert len({f[4] for f in fields}) == 1, out


def test_mpirun_mismatch():
    rc, got, out = _mpirun(2, "mismatch")
    assert rc == 0, out
    for r in range(2):
        assert got[r].startswith("COMM_ERR_MISMATCH untouched=True"), out


def _py(code: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "ARCOMM_LIBRARY"}
    e["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "tools" / "python")
    e.update(env)
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=e)


def test_library_search_order():
    """ARCOMM_LIBRARY first (an error if it does not load), else the build tree above the
    package."""
    p = _py("import arcomm; arcomm.new_id()", ARCOMM_LIBRARY="/nonexistent/libarcomm.so")
    assert p.returncode != 0 and "ARCOMM_LIBRARY=/nonexistent/libarcomm.so does not load" in p.stderr
    lib = str(build_dir() / "libarcomm.so")
    p = _py("import arcomm; print(arcomm.library_path())", ARCOMM_LIBRARY=lib)
    assert p.returncode == 0 and p.stdout.strip() == lib, p.stdout + p.stderr
    p = _py("import arcomm; print(arcomm.library_path())")
    assert p.returncode == 0, p.stderr
    found = Path(p.stdout.strip())
    assert found.name == "libarcomm.so" and found.parent.name.startswith("build"), found
    assert found.parent.parent == Path(__file__).resolve().parents[2], found


def test_import_without_a_library(tmp_path):
    """The package copied where no build tree is above it, no ARCOMM_LIBRARY: import
    works; the first call raises OSError saying how to provide the library."""
    import shutil as sh

    import arcomm

    if arcomm._lib._installed_candidates():
        pytest.skip("an installed libarcomm would be found")
    pkg = Path(__file__).resolve().parents[2] / "tools" / "python" / "arcomm"
    sh.copytree(pkg, tmp_path / "arcomm")
    e = {k: v for k, v in os.environ.items() if k != "ARCOMM_LIBRARY"}
    e["PYTHONPATH"] = str(tmp_path)
    p = subprocess.run([PYTHON, "-c", "import arcomm; print('imported'); arcomm.new_id()"],
                       capture_output=True, text=True, timeout=60, env=e, cwd=tmp_path)
    assert p.returncode != 0 and p.stdout.strip() == "imported", p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("OSError: arcomm: no usable libarcomm.so: install arcomm"), last
    for what in ("ninja -C build", "meson install", "ARCOMM_LIBRARY", "found none"):
        assert what in last, last

