# SPDX-License-Identifier: MIT
"""Every collective x dtype x op on one rank of a communicator, checked element by element.

Each rank draws every rank's inputs from the same seeds, so it computes the float64
reference locally; results that must agree across ranks are returned as digests (name,
bytes) for the caller to compare between ranks.
"""
from __future__ import annotations

import hashlib
import zlib

import numpy as np

import arcomm
from refs import (
    DTYPES,
    FLOATS,
    OPS,
    arcomm_dtype,
    check_equal,
    check_reduced,
    data,
    poison,
    reference,
    to_f64,
)


def _rng(seed: int, tag: str, rank: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(tag.encode()), rank])


def _inputs(seed: int, tag: str, dt: str, n: int, nranks: int, op: str = "sum") -> list:
    return [data(dt, n, _rng(seed, tag, r), op) for r in range(nranks)]


def _digest(a: np.ndarray) -> bytes:
    return hashlib.sha256(a.tobytes()).digest()[:12]


def sweep(
    comm: arcomm.Comm, seed: int = 1, counts: tuple = (1, 37, 5000, 40000), dtypes: list = DTYPES
) -> list[tuple[str, bytes]]:
    """Runs the sweep on this rank; returns the digests that must agree across ranks."""
    me, n = comm.rank, comm.size
    digests: list[tuple[str, bytes]] = []
    for dt in dtypes:
        kw = {"dtype": arcomm_dtype(dt)} if arcomm_dtype(dt) else {}
        for count in counts:
            for op in OPS:
                if op == "avg" and dt not in FLOATS:
                    continue
                tag = f"allreduce/{dt}/{count}/{op}"
                xs = _inputs(seed, tag, dt, count, n, op)
                recv = poison(np.empty_like(xs[me]), dt)
                send = xs[me].copy()
                assert comm.allreduce(send, recv, op, **kw) is recv
                check_equal(send, xs[me], tag + " (send changed)")
                check_reduced(recv, xs, dt, op, tag)
                digests.append((tag, _digest(recv)))
                inplace = xs[me].copy()
                comm.allreduce(inplace, op=op, **kw)
                check_equal(inplace, recv, tag + " in place vs out of place")

                tag = f"reduce/{dt}/{count}/{op}"
                root = (count + len(op)) % n
                xs = _inputs(seed, tag, dt, count, n, op)
                if me == root:
                    recv = poison(np.empty_like(xs[me]), dt)
                    assert comm.reduce(xs[me], recv, op, root, **kw) is recv
                    check_reduced(recv, xs, dt, op, tag)
                else:
                    assert comm.reduce(xs[me], None, op, root, **kw) is None
                buf = xs[me].copy()
                comm.reduce(buf, None, op, root, **kw)  # in place on root
                if me == root:
                    check_equal(buf, recv, tag + " in place vs out of place")
                else:
                    check_equal(buf, xs[me], tag + " non-root send changed")

                tag = f"reduce_scatter/{dt}/{count}/{op}"
                xs = _inputs(seed, tag, dt, count * n, n, op)
                recv = poison(np.empty(count, xs[me].dtype), dt)
                comm.reduce_scatter(xs[me], recv, op, **kw)
                block = [x[me * count : (me + 1) * count] for x in xs]
                check_reduced(recv, block, dt, op, tag)
                buf = xs[me].copy()
                view = comm.reduce_scatter(buf, None, op, **kw)
                check_equal(view, recv, tag + " in place vs out of place")
                others = np.ones(count * n, bool)
                others[me * count : (me + 1) * count] = False
                check_equal(buf[others], xs[me][others], tag + " in place: other blocks")

            if dt in FLOATS:
                for acount in (count, 1) if count > 1 else (1,):
                    tag = f"allreduce_add/{dt}/{count}/{acount}"
                    xs = _inputs(seed, tag, dt, count, n)
                    addend = data(dt, acount, _rng(seed, tag + "/addend", me))
                    recv = poison(np.empty_like(xs[me]), dt)
                    comm.allreduce_add(xs[me], addend, recv, **kw)
                    ref = reference(xs, dt, "sum") + np.tile(to_f64(addend, dt), count // acount)
                    got = to_f64(recv, dt)
                    eps = {"f64": 2.0**-52}.get(dt, 2.0**-23)
                    out = {"f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7, "f64": 2.0**-52}[dt]
                    mag = sum(np.abs(to_f64(x, dt)) for x in xs) + np.abs(
                        np.tile(to_f64(addend, dt), count // acount)
                    )
                    tol = out * np.abs(ref) + (n + 2) * eps * mag + 1e-300
                    bad = np.nonzero(~(np.abs(got - ref) <= tol))[0]
                    assert bad.size == 0, f"{tag}: {bad.size} elements off, first {bad[0]}"
                    buf = xs[me].copy()
                    comm.allreduce_add(buf, addend, **kw)
                    check_equal(buf, recv, tag + " in place vs out of place")

            tag = f"broadcast/{dt}/{count}"
            root = count % n
            xs = _inputs(seed, tag, dt, count, n)
            recv = poison(np.empty_like(xs[me]), dt)
            comm.broadcast(xs[me] if me == root else None, recv, root, **kw)
            check_equal(recv, xs[root], tag)
            buf = xs[me].copy() if me == root else poison(np.empty_like(xs[me]), dt)
            comm.broadcast(buf, None, root, **kw)
            check_equal(buf, xs[root], tag + " in place")

            tag = f"allgather/{dt}/{count}"
            xs = _inputs(seed, tag, dt, count, n)
            recv = poison(np.empty(count * n, xs[me].dtype), dt)
            comm.allgather(xs[me], recv, **kw)
            check_equal(recv, np.concatenate(xs), tag)
            buf = poison(np.empty(count * n, xs[me].dtype), dt)
            buf[me * count : (me + 1) * count] = xs[me]
            comm.allgather(None, buf, **kw)
            check_equal(buf, np.concatenate(xs), tag + " in place (send None)")
            buf = poison(np.empty(count * n, xs[me].dtype), dt)
            buf[me * count : (me + 1) * count] = xs[me]
            comm.allgather(buf[me * count : (me + 1) * count], buf, **kw)
            check_equal(buf, np.concatenate(xs), tag + " in place (a view)")

            tag = f"alltoall/{dt}/{count}"
            xs = _inputs(seed, tag, dt, count * n, n)
            recv = poison(np.empty(count * n, xs[me].dtype), dt)
            comm.alltoall(xs[me], recv, **kw)
            want = np.concatenate([xs[p][me * count : (me + 1) * count] for p in range(n)])
            check_equal(recv, want, tag)
        comm.barrier()
    return digests


def compare_digests(per_rank: list[list[tuple[str, bytes]]]) -> None:
    """The allreduce results' bits must be the same on every rank."""
    base = per_rank[0]
    for r, d in enumerate(per_rank[1:], 1):
        assert len(d) == len(base), f"rank {r} made {len(d)} checks, rank 0 {len(base)}"
        for (name0, dig0), (name, dig) in zip(base, d):
            assert name0 == name
            if name.startswith("allreduce/"):
                assert dig == dig0, f"{name}: rank {r}'s bits differ from rank 0's"
