# SPDX-License-Identifier: MIT
"""CUDA buffers (device="cuda"): PyTorch and CuPy tensors, on thread ranks (a GPU each:
two or more GPUs) and on process ranks under arrun (which may share one GPU).  Skipped
without a GPU, torch or CuPy."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import arcomm
import cuda_checks
from conftest import build_dir, run_ranks

EXACT = "ARCOMM_BF16_THRESHOLD=off"  # f32 stays f32 on the wire: references hold


def _gpus(module: str) -> int:
    try:
        if module == "torch":
            import torch

            return torch.cuda.device_count() if torch.cuda.is_available() else 0
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - missing module, driver or device: skip
        return 0


needs_torch = pytest.mark.skipif(_gpus("torch") < 1, reason="no torch with a CUDA GPU")
needs_cupy = pytest.mark.skipif(_gpus("cupy") < 1, reason="no CuPy with a CUDA GPU")


def _threads(module: str) -> None:
    if _gpus(module) < 2:
        pytest.skip("thread ranks need a GPU each: fewer than 2 GPUs")
    comms = arcomm.Comm.init_all(2, [0, 1], device="cuda", timeout_ms=60000, knob_defaults=EXACT)

    def body(c):
        if module == "torch":
            import torch

            torch.cuda.set_device(c.rank)
            fw = cuda_checks.torch_framework(c.rank)
        else:
            import cupy

            cupy.cuda.Device(c.rank).use()
            fw = cuda_checks.cupy_framework(c.rank)
        cuda_checks.run(c, fw)
        return True

    try:
        assert run_ranks(comms, body) == [True, True]
    finally:
        for c in comms:
            c.close()


@needs_torch
def test_torch_thread_ranks():
    _threads("torch")


@needs_cupy
def test_cupy_thread_ranks():
    _threads("cupy")


def _arrun(mode: str) -> None:
    arrun = build_dir() / "tools" / "arrun" / "arrun"
    if not arrun.is_file():
        pytest.skip("no arrun")
    env = dict(os.environ, ARCOMM_DEVICE="cuda", ARCOMM_BF16_THRESHOLD="off")
    env.setdefault("ARCOMM_LOG_LEVEL", "none")
    worker = str(Path(__file__).resolve().parent / "worker.py")
    p = subprocess.run([str(arrun), "-n", "2", "--bind", "none", "--", sys.executable, worker, mode],
                       capture_output=True, text=True, timeout=300, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert out.count(f"{mode} ok") == 2, out


@needs_torch
def test_torch_process_ranks():
    _arrun("cuda-torch")


@needs_cupy
def test_cupy_process_ranks():
    _arrun("cuda-cupy")


@needs_torch
def test_torch_checks_and_streams():
    """A host tensor on a CUDA communicator is a ValueError; stream= and the framework's
    current stream both order the call."""
    import torch

    (c,) = arcomm.Comm.init_all(1, device="cuda", knob_defaults=EXACT)
    with c:
        with pytest.raises(ValueError, match="host memory"):
            c.allreduce(torch.zeros(4))
        with pytest.raises(ValueError, match="CUDA memory"):
            (h,) = arcomm.Comm.init_all(1)
            with h:
                h.allreduce(torch.zeros(4, device="cuda"))
        s = torch.cuda.Stream()
        x = torch.arange(1000, dtype=torch.float32, device="cuda")
        with torch.cuda.stream(s):
            y = torch.empty_like(x)
            c.allreduce(x, y)  # ordered on s, torch's current stream here
            z = torch.empty_like(x)
            c.allreduce(y, z, stream=s.cuda_stream)
        s.synchronize()
        np.testing.assert_array_equal(z.cpu().numpy(), np.arange(1000, dtype=np.float32))
