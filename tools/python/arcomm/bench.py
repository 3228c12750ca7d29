# SPDX-License-Identifier: MIT
"""arbench from Python: times the package's collectives in arbench's table format, and
beside them mpi4py's (``comm.Allreduce`` ... with the same numpy buffers) under mpirun.

    python -m arcomm.bench [-n N] [--coll C|all] [-b MIN] [-e MAX] [-f F] [-d DTYPE]
                           [-o OP] [--inplace] [--iters N] [--warmup N] [--compare mpi|none]

Where the ranks come from: under mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set)
each process is a rank (``Comm.from_mpi(MPI.COMM_WORLD)``) and mpi4py is timed too
(``--compare none`` leaves it out); under arrun (ARCOMM_ID set) each process is a rank
(``Comm.from_env``); otherwise ``-n`` thread ranks of this interpreter (``init_all``).
Every call is timed on every rank (``time.perf_counter_ns``) back to back; per call the
slowest rank; median and p90 over calls, as arbench does.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

import numpy as np

import arcomm
from ._buffers import DTYPE_NAMES, ITEMSIZE

COLLS = ["allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall"]
_NP = {
    "f32": np.float32,
    "f16": np.float16,
    "bf16": np.uint16,
    "f64": np.float64,
    "i32": np.int32,
    "i64": np.int64,
    "i8": np.int8,
    "u8": np.uint8,
    "u32": np.uint32,
    "u64": np.uint64,
}
_MPI_DTYPES = {"f32", "f64", "i32", "i64", "i8", "u8", "u32", "u64"}
_BUSBW = {
    "allreduce": lambda n: 2 * (n - 1) / n if n > 1 else 0.0,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def _size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(t[:-1] if mult > 1 else t) * mult


def _buffer(a: "np.ndarray", align: int) -> "np.ndarray":
    """a's contents in an array whose data starts at a multiple of align bytes, as
    arbench's buffers do (64); numpy's large arrays start 16 bytes past a line
    (docs/PERFORMANCE.md has both); align 0: a itself."""
    if align <= 0 or a.ctypes.data % align == 0:
        return a
    raw = np.empty(a.nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    out = raw[off:off + a.nbytes].view(a.dtype)
    out[...] = a
    return out


def _counts(coll: str, size: int, esize: int, n: int) -> tuple[int, int, int]:
    """(per-rank count the call takes, send elements, recv elements) of a size."""
    if coll in ("allreduce", "broadcast", "reduce"):
        c = max(size // esize, 1)
        return c, c, c
    block = max(size // (esize * n), 1)
    if coll == "allgather":
        return block, block, block * n
    if coll == "reduce_scatter":
        return block, block * n, block
    return block, block * n, block * n  # alltoall


class _Rank:
    """One rank's communicators and timing helpers (thread, arrun or MPI rank)."""

    def __init__(self, comm: arcomm.Comm, mpi: Any = None) -> None:
        self.comm = comm
        self.mpi = mpi  # mpi4py MPI.COMM_WORLD under mpirun, else None

    def agree_max(self, a: np.ndarray) -> np.ndarray:
        """The element-wise max over ranks (arcomm's own allreduce)."""
        self.comm.allreduce(a, op="max")
        return a


def _arcomm_call(c: arcomm.Comm, coll: str, s: np.ndarray, r: np.ndarray, inplace: bool,
                 op: str, kw: dict) -> Callable[[], Any]:
    me, n = c.rank, c.size
    if not kw and coll == "allreduce":  # the plain call, as a user writes it
        if inplace:
            return lambda: c.allreduce(r)
        return lambda: c.allreduce(s, r, op)
    if coll == "allreduce":
        if inplace:
            return lambda: c.allreduce(r, None, op, **kw)
        return lambda: c.allreduce(s, r, op, **kw)
    if coll == "broadcast":
        if inplace:
            return lambda: c.broadcast(r, None, 0, **kw)
        return lambda: c.broadcast(s, r, 0, **kw)
    if coll == "reduce":
        if inplace:
            return lambda: c.reduce(r, None, op, 0, **kw)
        return lambda: c.reduce(s, r, op, 0, **kw)
    if coll == "allgather":
        if inplace:
            return lambda: c.allgather(None, r, **kw)
        return lambda: c.allgather(s, r, **kw)
    if coll == "reduce_scatter":
        if inplace:
            return lambda: c.reduce_scatter(s, None, op, **kw)
        return lambda: c.reduce_scatter(s, r, op, **kw)
    return lambda: c.alltoall(s, r, **kw)


def _mpi_call(comm: Any, coll: str, s: np.ndarray, r: np.ndarray, inplace: bool,
              op: str) -> Callable[[], Any]:
    from mpi4py import MPI

    mop = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]
    ip = MPI.IN_PLACE
    me = comm.Get_rank()
    if coll == "allreduce":
        return (lambda: comm.Allreduce(ip, r, mop)) if inplace else (lambda: comm.Allreduce(s, r, mop))
    if coll == "broadcast":
        return lambda: comm.Bcast(r, 0)
    if coll == "reduce":
        if inplace:
            return (lambda: comm.Reduce(ip, r, mop, 0)) if me == 0 else (lambda: comm.Reduce(r, None, mop, 0))
        return lambda: comm.Reduce(s, r, mop, 0)
    if coll == "allgather":
        return (lambda: comm.Allgather(ip, r)) if inplace else (lambda: comm.Allgather(s, r))
    if coll == "reduce_scatter":
        if inplace:
            return lambda: comm.Reduce_scatter_block(ip, s, mop)
        return lambda: comm.Reduce_scatter_block(s, r, mop)
    return lambda: comm.Alltoall(s, r)


def _time(rank: _Rank, fn: Callable[[], Any], iters: int, warmup: int) -> tuple[float, float]:
    """Median and p90 (us) over calls of the slowest rank's time per call."""
    for _ in range(warmup):
        fn()
    out = np.empty(iters, np.float64)
    clock = time.perf_counter_ns
    for i in range(iters):
        t0 = clock()
        fn()
        out[i] = clock() - t0
    rank.agree_max(out)
    return float(np.median(out)) / 1e3, float(np.percentile(out, 90)) / 1e3


def _iters(rank: _Rank, fn: Callable[[], Any], want: int | None) -> int:
    """The calls per size: --iters, else about 0.2 s worth (20..10000), rank 0's choice."""
    if want:
        return want
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    per = (time.perf_counter() - t0) / 5
    choice = np.array([min(10000, max(20, int(0.2 / max(per, 1e-9))))], np.int64)
    rank.comm.broadcast(choice, None, 0)
    return int(choice[0])


def _run(rank: _Rank, a: argparse.Namespace, out: Callable[[str], None]) -> None:
    c = rank.comm
    n, me = c.size, c.rank
    dt = a.dtype
    esize = ITEMSIZE[DTYPE_NAMES.index(dt)]
    kw = {"dtype": "bf16"} if dt == "bf16" else {}
    compare = rank.mpi is not None and a.compare == "mpi"
    if compare and (dt not in _MPI_DTYPES or a.op == "avg"):
        compare = False
        if me == 0:
            out(f"# mpi4py comparison left out: {dt}/{a.op} has no MPI equivalent here")
    colls = COLLS if a.coll == "all" else [a.coll]
    if a.inplace:
        colls = [x for x in colls if x != "alltoall"]
    rng = np.random.default_rng(me)
    for coll in colls:
        if me == 0:
            out(f"# coll: {coll}  dtype: {dt}  op: {a.op}  {'in-place' if a.inplace else 'out-of-place'}  root 0")
            head = f"#{'size':>11} {'count':>12} {'type':>6} {'redop':>6} {'time(us)':>11} {'p90(us)':>10} {'algbw':>8} {'busbw':>8}"
            unit = f"#{'(B)':>11} {'(elems)':>12} {'':>6} {'':>6} {'arcomm':>11} {'':>10} {'(GB/s)':>8} {'(GB/s)':>8}"
            if compare:
                head += f" {'time(us)':>11} {'busbw':>8} {'ratio':>7}"
                unit += f" {'mpi4py':>11} {'(GB/s)':>8} {'':>7}"
            out(head)
            out(unit)
        size = a.min_bytes
        while size <= a.max_bytes:
            count, ns, nr = _counts(coll, size, esize, n)
            if dt in ("f32", "f64", "f16"):
                s = _buffer(rng.uniform(-1, 1, ns).astype(_NP[dt]), a.align)
            else:
                s = _buffer(rng.integers(0, 4, ns).astype(_NP[dt]), a.align)
            r = _buffer(np.zeros(nr, _NP[dt]), a.align)
            if a.inplace and coll in ("allreduce", "broadcast", "reduce"):
                r[...] = s[:nr]
            fn = _arcomm_call(c, coll, s, r, a.inplace, a.op, kw)
            iters = _iters(rank, fn, a.iters)
            warm = a.warmup if a.warmup is not None else max(5, iters // 10)
            t, p90 = _time(rank, fn, iters, warm)
            nbytes = {"allgather": nr, "reduce_scatter": ns, "alltoall": ns}.get(coll, count) * esize
            algbw = nbytes / (t * 1e3)
            busbw = algbw * _BUSBW[coll](n)
            line = (f"{nbytes:12d} {count:12d} {dt:>6} {a.op if 'reduce' in coll else 'none':>6} "
                    f"{t:11.2f} {p90:10.2f} {algbw:8.3f} {busbw:8.3f}")
            if compare:
                mfn = _mpi_call(rank.mpi, coll, s, r, a.inplace, a.op)
                mt, _ = _time(rank, mfn, iters, warm)
                mbus = nbytes / (mt * 1e3) * _BUSBW[coll](n)
                line += f" {mt:11.2f} {mbus:8.3f} {mt / t:7.2f}"
            if me == 0:
                out(line)
            size = int(size * a.factor) if a.factor > 1 else a.max_bytes + 1


def _header(a: argparse.Namespace, c: arcomm.Comm, how: str, out: Callable[[str], None]) -> None:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S +0000")
    out("# arcomm.bench: arcomm's Python package timed like arbench")
    out(f"# host: {platform.node()}  python: {platform.python_version()}  numpy: {np.__version__}  nproc: {os.cpu_count()}")
    out(f"# date: {now}")
    out(f"# command: {' '.join([os.path.basename(sys.executable), '-m', 'arcomm.bench'] + sys.argv[1:])}")
    v = arcomm.version()
    out(f"# arcomm {v[0]}.{v[1]}  library: {arcomm.library_path()}  transport: {c.transport}  ranks: {c.size} ({how})  device: host")
    out(f"# iters: {a.iters or 'auto (~0.2 s per size, 20..10000)'}  warmup: {a.warmup if a.warmup is not None else '10% of iters, >= 5'}")
    out("# time: each call timed on every rank (perf_counter_ns), back to back; per call the slowest rank; median and p90 over calls")
    out("# size: as arbench (allgather: recv buffer; reduce_scatter: send buffer; alltoall: each buffer); algbw = size / time; busbw = algbw * nccl-tests' factor")
    out("# ratio = mpi4py time / arcomm time (mpi4py: comm.Allreduce etc. on the same numpy buffers)")
    out(f"# buffers: numpy arrays, {f'{a.align}-byte aligned' if a.align > 0 else 'as numpy allocates them'} (--align)")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m arcomm.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--nranks", type=int, default=2, help="thread ranks (without mpirun or arrun)")
    p.add_argument("--coll", default="allreduce", choices=COLLS + ["all"])
    p.add_argument("-b", dest="min_bytes", type=_size, default=_size("4"))
    p.add_argument("-e", dest="max_bytes", type=_size, default=_size("64M"))
    p.add_argument("-f", dest="factor", type=float, default=2.0)
    p.add_argument("-d", dest="dtype", default="f32", choices=list(DTYPE_NAMES))
    p.add_argument("-o", dest="op", default="sum", choices=list(arcomm.OPS))
    p.add_argument("--inplace", action="store_true")
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--compare", default="mpi", choices=["mpi", "none"], help="under mpirun")
    p.add_argument("--align", type=int, default=64,
                   help="byte alignment of the buffers (default 64, as arbench's); 0: numpy's own "
                        "(16 bytes for large arrays)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = _parse(argv)
    out = lambda s: print(s, flush=True)  # noqa: E731
    if any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")):
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        with arcomm.Comm.from_mpi(world) as c:
            if c.rank == 0:
                _header(a, c, "processes, mpirun", out)
            _run(_Rank(c, world), a, out)
        return 0
    if "ARCOMM_ID" in os.environ:
        with arcomm.Comm.from_env() as c:
            if c.rank == 0:
                _header(a, c, "processes, arrun", out)
            _run(_Rank(c), a, out)
        return 0
    comms = arcomm.Comm.init_all(a.nranks)
    _header(a, comms[0], "threads", out)
    errors: list = []

    def body(c: arcomm.Comm) -> None:
        try:
            if hasattr(os, "sched_setaffinity"):  # one core per rank, as arbench
                cpus = sorted(os.sched_getaffinity(0))
                os.sched_setaffinity(0, {cpus[c.rank % len(cpus)]})
            _run(_Rank(c), a, out)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            c.abort()

    ts = [threading.Thread(target=body, args=(c,)) for c in comms]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for c in comms:
        c.close()
    if errors:
        raise errors[0]
    return 0


if __name__ == "__main__":
    sys.exit(main())
