# SPDX-License-Identifier: MIT
"""One process rank of the Python tests, started by arrun (Comm.from_env) or mpirun
(Comm.from_mpi).  Usage: worker.py MODE; prints one line "rank R: ..." that the test
reads.  Modes: sweep, mpi-sweep (every collective; prints a digest of the allreduce
bits), mismatch, mpi-mismatch, exit, sigkill (rank 1 dies mid-communicator; the others
report what they raised), interrupt (rank 0 blocks in a call until SIGINT; rank 1
calls once it reads a line on stdin), cuda-torch, cuda-cupy (ARCOMM_DEVICE=cuda)."""
from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here.parents[1] / "tools" / "python"))
sys.path.insert(0, str(here))

import numpy as np  # noqa: E402

import arcomm  # noqa: E402


def report(comm_rank: int, text: str) -> None:
    sys.stdout.write(f"rank {comm_rank}: {text}\n")
    sys.stdout.flush()


def comm_id(c: arcomm.Comm) -> str:
    """The communicator's id (rt_hook_comm_id), for the tests' leak check."""
    import ctypes

    fn = arcomm._lib.lib().rt_hook_comm_id
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(arcomm._lib.CommId)]
    cid = arcomm._lib.CommId()
    fn(c._h, ctypes.byref(cid))
    return cid.str.decode()


def do_sweep(c: arcomm.Comm) -> None:
    from sweep import sweep

    digests = sweep(c, seed=23, counts=(1, 1000, 30000))
    h = hashlib.sha256()
    for name, d in digests:
        if name.startswith("allreduce/"):
            h.update(d)
    report(c.rank, f"ok {c.size} {c.transport} {len(digests)} {h.hexdigest()[:24]}")


def do_mismatch(c: arcomm.Comm) -> None:
    n = 10 + (c.rank == 1)
    recv = np.full(n, -3.0)
    try:
        c.allreduce(np.ones(n), recv)
        report(c.rank, "no error")
    except arcomm.Error as e:
        report(c.rank, f"{e.status} untouched={bool((recv == -3.0).all())} {e.message[:60]}")


def do_death(c: arcomm.Comm, how: str) -> None:
    x = np.ones(100)
    c.allreduce(x)  # a first call every rank completes
    if c.rank == 1:
        if how == "exit":
            os._exit(0)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        c.allreduce(x)
        report(c.rank, "no error")
    except arcomm.Error as e:
        report(c.rank, f"{e.status} {time.monotonic() - t0:.3f}s {e.message[:80]}")


def do_interrupt(c: arcomm.Comm) -> None:
    x = np.ones(100)
    c.barrier()  # every rank joined
    if c.rank == 0:
        def announce() -> None:
            runs = c._hs.runs
            while not (c._busy and c._hs.runs > runs):  # its wait hook ran: it waits in C
                time.sleep(0.001)
            report(0, "waiting")

        import threading

        threading.Thread(target=announce, daemon=True).start()
        try:
            c.allreduce(x)
            report(0, "no interrupt")
        except KeyboardInterrupt:
            t = time.monotonic()
            try:
                c.barrier()
                report(0, "KeyboardInterrupt; then barrier returned")
            except arcomm.Error as e:
                report(0, f"KeyboardInterrupt; then {e.status} {time.monotonic() - t:.3f}s")
        return
    sys.stdin.readline()
    t0 = time.monotonic()
    try:
        c.allreduce(x)
        report(c.rank, "no error")
    except arcomm.Error as e:
        report(c.rank, f"{e.status} {time.monotonic() - t0:.3f}s {e.message[:120]}")


def do_cuda(c: arcomm.Comm, module: str) -> None:
    import cuda_checks

    local = int(os.environ.get("ARCOMM_LOCAL_RANK", c.rank))
    if module == "torch":
        import torch

        dev = local % torch.cuda.device_count()
        torch.cuda.set_device(dev)
        fw = cuda_checks.torch_framework(dev)
    else:
        import cupy

        dev = local % cupy.cuda.runtime.getDeviceCount()
        cupy.cuda.Device(dev).use()
        fw = cuda_checks.cupy_framework(dev)
    cuda_checks.run(c, fw)
    report(c.rank, f"cuda-{module} ok")


def main() -> int:
    mode = sys.argv[1]
    if mode in ("exit", "sigkill"):
        # arrun ends the job with SIGTERM once a rank dies of a signal: the survivors
        # ignore it (from before they join) so that they report what they raised.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode.startswith("mpi-"):
        from mpi4py import MPI

        c = arcomm.Comm.from_mpi(MPI.COMM_WORLD, timeout_ms=20000)
        mode = mode[4:]
    else:
        c = arcomm.Comm.from_env()
    sys.stdout.write(f"comm-id {c.rank}: {comm_id(c)}\n")
    sys.stdout.flush()
    try:
        if mode == "sweep":
            do_sweep(c)
        elif mode == "mismatch":
            do_mismatch(c)
        elif mode in ("cuda-torch", "cuda-cupy"):
            do_cuda(c, mode[5:])
        elif mode in ("exit", "sigkill"):
            do_death(c, mode)
        elif mode == "interrupt":
            do_interrupt(c)
        else:
            raise SystemExit(f"worker.py: unknown mode {mode}")
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
