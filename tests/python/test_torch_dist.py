# SPDX-License-Identifier: MIT
"""arcomm.torch: the ``arcomm`` torch.distributed backend, process ranks started as a
launcher does (RANK, WORLD_SIZE, MASTER_ADDR/PORT) or by arrun, each running
torch_dist_worker.py.  Skipped where this python has no torch (CI's machine: a CPU
build of torch is not installed there; the GPU machine runs these tests).

The tests run twice where the path matters: ``native`` (the C++ backend in front of the
Python group, built once by this module's import into the cache the ranks then load
from) and ``python`` (ARCOMM_TORCH_NATIVE=0: the Python group alone)."""
from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import build_dir

torch = pytest.importorskip("torch", reason="no torch in this python: arcomm.torch untested")
if not torch.distributed.is_available():
    pytest.skip("this torch has no torch.distributed", allow_module_level=True)

import arcomm  # noqa: E402
import arcomm.torch  # noqa: E402  (builds the native backend once, before the jobs)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORKER = str(HERE / "torch_dist_worker.py")
PYTHON = sys.executable


PATHS = ["native", "python"]


def _native_or_skip() -> None:
    """The native path must build wherever a C++ compiler and ninja are there."""
    if arcomm.torch.native_enabled():
        return
    if os.environ.get("ARCOMM_TORCH_NATIVE", "1") == "0":
        pytest.skip("ARCOMM_TORCH_NATIVE=0 in the environment")
    if shutil.which("c++") is None or shutil.which("ninja") is None:
        pytest.skip("no C++ compiler or ninja: the native path cannot be built here")
    pytest.fail(f"the native path did not build: {arcomm.torch._native_why}")


def _env(path: str = "native", **extra: str) -> dict:
    if path == "native":
        _native_or_skip()
    env = dict(os.environ)
    env["ARCOMM_TORCH_NATIVE"] = "1" if path == "native" else "0"
    env.setdefault("ARCOMM_LOG_LEVEL", "none")
    env["ARCOMM_LIBRARY"] = arcomm.library_path()
    env["PYTHONPATH"] = str(ROOT / "tools" / "python")
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lines(out: str) -> dict[int, str]:
    got: dict[int, str] = {}
    for line in out.splitlines():
        m = re.match(r"(?:\[\d+\] )?rank (\d+): (.*)", line)
        if m:
            got[int(m.group(1))] = m.group(2)
    return got


def _job(n: int, mode: str, backend: str = "arcomm", *args: str,
         timeout: float = 240, path: str = "native") -> tuple[dict, str]:
    """n ranks of torch_dist_worker.py as torchrun starts them; every rank must exit 0."""
    port = str(_port())
    procs = []
    for r in range(n):
        env = _env(path, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([PYTHON, WORKER, mode, backend, *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs, rcs = [], []
    try:
        for p in procs:
            o, _ = p.communicate(timeout=timeout)
            outs.append(o)
            rcs.append(p.returncode)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    out = "\n".join(outs)
    assert rcs == [0] * n, out
    return _lines(out), out


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives(n, path):
    """Every collective, every ReduceOp, async_op, non-contiguous tensors and two
    sub-groups against float64 references on every rank (f32 sums also bit-equal to the
    rank-order sum); every rank's all_reduce results bit-identical."""
    got, out = _job(n, "colls", path=path)
    assert sorted(got) == list(range(n)), out
    fields = [got[r].split() for r in range(n)]
    assert all(f[0] == "ok" and int(f[1]) > 100 for f in fields), out
    assert len({f[2] for f in fields}) == 1, out


@pytest.mark.parametrize("mode", ["colls", "tp"])
def test_nonblocking_path(mode):
    """The Work objects' pending path (host calls issued through comm_i*, completed by
    wait), with the library's non-blocking calls stood in for by ones that run only
    when waited for: the same results as the blocking path."""
    got, out = _job(3, mode + "-fakeasync", path="python")
    want, _ = _job(3, mode, path="python")
    assert got == want, out


def test_native_matches_python():
    """Both paths run the same library calls: every result bit-identical (the digests)."""
    got, out = _job(3, "colls", path="native")
    want, _ = _job(3, "colls", path="python")
    assert got == want, out


@pytest.mark.parametrize("path", PATHS)
def test_native_path_taken(path):
    """With the native path on, each hot call on a CPU tensor is served by the native
    backend and what it does not serve (a transposed tensor, all_gather's list form, a
    bitwise op) by the Python group; under ARCOMM_TORCH_NATIVE=0 the group is the Python
    ArcommProcessGroup alone."""
    got, out = _job(3, "native", path=path)
    for r in range(3):
        assert got[r].startswith("native ok" if path == "native" else "native off"), out


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("sync", ["sync", "async"])
@pytest.mark.parametrize("how", ["mismatch", "timeout"])
def test_failure_raises(how, sync, path):
    """A peer's mismatched call, or a peer that never calls, raises arcomm.Error on the
    ranks that called (COMM_ERR_MISMATCH at once; COMM_ERR_TIMEOUT after the group's
    3 s timeout), from the call or from its Work's wait, rather than hanging."""
    got, out = _job(2, "fail", "arcomm", how, sync, timeout=120, path=path)
    if how == "mismatch":
        for r in range(2):
            f = got[r].split()
            assert f[:2] == ["fail", "COMM_ERR_MISMATCH"] and float(f[2]) < 30, out
    else:
        f = got[0].split()
        assert f[:2] == ["fail", "COMM_ERR_TIMEOUT"] and 2.0 <= float(f[2]) < 30, out
        assert got[1] == "fail idle", out


@pytest.mark.parametrize("path", PATHS)
def test_errors(path):
    """What is not served raises NotImplementedError / ValueError naming the way out
    (BAND/BOR/BXOR, AVG on integers, uneven all_to_all splits, gather, all_to_all of
    different sizes, send with a tag or without comm_send); the group works after."""
    got, out = _job(2, "errors", path=path)
    assert got == {0: "errors ok", 1: "errors ok"}, out


def _ddp(n: int, backend: str, path: str = "native") -> tuple[str, list[list[float]]]:
    got, out = _job(n, "ddp", backend, "8", path=path)
    assert sorted(got) == list(range(n)), out
    lines = {got[r] for r in range(n)}
    assert len(lines) == 1, out  # every rank: the same parameters and losses
    f = got[0].split()
    assert f[0] == "ddp", out
    losses = [[float.fromhex(v) for v in step.split(",")] for step in f[2:]]
    return f[1], losses


@pytest.mark.parametrize("n", [2, 4])
def test_ddp_against_gloo(n):
    """DDP training of a small MLP, 8 steps: arcomm twice (bit-identical: its sums are
    in rank order), Gloo once.  2 ranks: a sum of two terms has one order, so Gloo's
    losses and parameters are arcomm's bit for bit.  4 ranks: Gloo's ring adds in
    another order per chunk, so its parameters differ in the last bits; the losses
    agree to 1e-5 relative.  The Python path (ARCOMM_TORCH_NATIVE=0): the native path's
    parameters and losses bit for bit."""
    digest, losses = _ddp(n, "arcomm")
    again = _ddp(n, "arcomm")
    assert again == (digest, losses)
    assert _ddp(n, "arcomm", "python") == (digest, losses)
    g_digest, g_losses = _ddp(n, "gloo")
    assert len(losses) == len(g_losses) == 8
    if n == 2:
        assert (g_digest, g_losses) == (digest, losses)
    else:
        for a, b in zip(losses, g_losses):
            for x, y in zip(a, b):
                assert abs(x - y) <= 1e-5 * abs(y), (losses, g_losses)
    # training moved: the last step's losses are not the first's
    assert losses[-1] != losses[0]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n", [2, 4])
def test_tensor_parallel_mlp(n, path):
    """Column- then row-parallel MLP, all_reduce(async_op=True) overlapped with the next
    batch's first matmul; every batch against the unsplit MLP in float64."""
    got, out = _job(n, "tp", path=path)
    assert sorted(got) == list(range(n)), out
    assert all(got[r].startswith("tp ok") for r in range(n)), out


@pytest.mark.parametrize("path", PATHS)
def test_pipeline(path):
    """Two pipeline stages over send/recv and isend/irecv (2 pairs of ranks): each
    stage's gradients equal the unsplit model's."""
    if not arcomm._lib.has("comm_send"):
        pytest.skip(f"{arcomm.library_path()} has no comm_send")
    got, out = _job(4, "pipe", path=path)
    assert all(got[r] == "pipe ok 3" for r in range(4)), out


def test_cuda_tensors():
    """CUDA tensors, one GPU a rank, calls on a side stream (async_op's wait orders the
    caller's stream): all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor
    against float64 references."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    got, out = _job(2, "cuda")
    fields = [got[r].split() for r in range(2)]
    assert all(f[0] == "cuda" and f[1] == "ok" for f in fields), out
    assert fields[0][3] == fields[1][3], out


@pytest.mark.parametrize("path", PATHS)
def test_arrun_init(path):
    """Under arrun with init_method='arcomm://' (no MASTER_ADDR): the collectives and
    errors; the FileStore the rendezvous made is gone once the job ended."""
    arrun = build_dir() / "tools" / "arrun" / "arrun"
    if not arrun.is_file():
        pytest.skip(f"no arrun at {arrun}")
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "arcomm-torch-store-*")))
    env = _env(path)
    for k in ("MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    for mode in ("colls", "errors"):
        p = subprocess.run([str(arrun), "-n", "3", "--bind", "none", "--grace", "20", "--",
                            PYTHON, WORKER, mode, "arcomm-url"],
                           capture_output=True, text=True, timeout=300, env=env)
        out = p.stdout + p.stderr
        assert p.returncode == 0, out
        got = _lines(p.stdout)
        assert sorted(got) == [0, 1, 2], out
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), "arcomm-torch-store-*")))
    assert after <= before, sorted(after - before)


@pytest.mark.parametrize("path", PATHS)
def test_mpirun_init(path):
    """Under Open MPI's mpirun with init_method='arcomm://' (one host, no MASTER_ADDR):
    the collectives; the store's file is gone after the job."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun")
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "arcomm-torch-store-*")))
    env = _env(path, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    for k in ("MASTER_ADDR", "MASTER_PORT", "ARCOMM_RANK", "ARCOMM_SIZE", "ARCOMM_ID"):
        env.pop(k, None)
    p = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                        "-np", "3", "-x", "ARCOMM_LIBRARY", "-x", "PYTHONPATH", "-x",
                        "ARCOMM_TORCH_NATIVE", PYTHON, WORKER,
                        "colls", "arcomm-url"],
                       capture_output=True, text=True, timeout=300, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    got = _lines(p.stdout)
    assert sorted(got) == [0, 1, 2] and all(got[r].startswith("ok ") for r in range(3)), out
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), "arcomm-torch-store-*")))
    assert after <= before, sorted(after - before)


@pytest.mark.parametrize("path", PATHS)
def test_bench_script(path):
    """tools/bench/torch_dist.py --backend arcomm: every collective, small sizes, each
    checked on fresh data (exit 1 on a wrong element)."""
    script = ROOT / "tools" / "bench" / "torch_dist.py"
    if not script.is_file():
        pytest.skip("no tools/bench/torch_dist.py in this tree")
    p = subprocess.run([PYTHON, str(script), "--backend", "arcomm", "-n", "2", "-b", "4",
                        "-e", "4K", "-f", "32", "--coll", "all", "--iters", "20", "--no-bind"],
                       capture_output=True, text=True, timeout=300, env=_env(path))
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert out.count("# torch.distributed arcomm:") == 6, out


def test_init_refuses_outside_arrun():
    """init_method='arcomm://' outside an arrun job: a ValueError saying what it is for."""
    code = ("import torch.distributed as d, arcomm.torch\n"
            "d.init_process_group('arcomm', init_method='arcomm://')\n")
    env = _env()
    for k in ("ARCOMM_RANK", "ARCOMM_SIZE", "ARCOMM_ID", "OMPI_COMM_WORLD_RANK"):
        env.pop(k, None)
    p = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode != 0
    assert "init_method='arcomm://' is for jobs started by arrun" in p.stderr, p.stderr


def test_native_build_failure_warns(tmp_path):
    """A native build that fails (here: no working compiler) warns once, naming why, and
    the group runs on the Python path."""
    code = ("import os, torch, torch.distributed as d, arcomm.torch as at\n"
            "d.init_process_group('arcomm', init_method='file://' + os.environ['STORE'],\n"
            "                     rank=0, world_size=1)\n"
            "t = torch.ones(3)\n"
            "d.all_reduce(t)\n"
            "print('enabled', at.native_enabled(), at.native_backend(), t.tolist())\n"
            "d.destroy_process_group()\n")
    env = _env("python", CXX="/bin/false", TORCH_EXTENSIONS_DIR=str(tmp_path / "cache"),
               STORE=str(tmp_path / "store"))
    env["ARCOMM_TORCH_NATIVE"] = "1"
    p = subprocess.run([PYTHON, "-W", "always", "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "enabled False None [1.0, 1.0, 1.0]" in p.stdout, p.stdout + p.stderr
    assert p.stderr.count("arcomm.torch: the native path is off: building") == 1, p.stderr
    assert "torch_backend.cpp failed" in p.stderr, p.stderr
