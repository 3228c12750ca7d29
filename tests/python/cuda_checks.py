# SPDX-License-Identifier: MIT
"""Every collective on CUDA buffers of one framework (torch or CuPy), checked element by
element against float64 references on the host.  ``fw`` supplies to_dev(numpy storage
array) -> device buffer, to_host(device buffer) -> numpy storage array, sync(), the
dtypes it can hold, and whether bf16 needs ``dtype="bf16"`` over uint16 storage."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import arcomm
from refs import FLOATS, OPS, check_equal, check_reduced, data, poison


@dataclass
class Framework:
    name: str
    to_dev: Callable[[np.ndarray], Any]
    to_host: Callable[[Any], np.ndarray]
    sync: Callable[[], None]
    dtypes: list
    bf16_keyword: bool


def _rng(tag: str, rank: int) -> np.random.Generator:
    return np.random.default_rng([7, zlib.crc32(tag.encode()), rank])


def run(comm: arcomm.Comm, fw: Framework, counts: tuple = (5, 3000)) -> None:
    me, n = comm.rank, comm.size
    for dt in fw.dtypes:
        kw = {"dtype": "bf16"} if dt == "bf16" and fw.bf16_keyword else {}
        for count in counts:
            for op in OPS:
                if op == "avg" and dt not in FLOATS:
                    continue
                tag = f"{fw.name}/allreduce/{dt}/{count}/{op}"
                xs = [data(dt, count, _rng(tag, r), op) for r in range(n)]
                recv = fw.to_dev(poison(np.empty_like(xs[me]), dt))
                comm.allreduce(fw.to_dev(xs[me]), recv, op, **kw)
                fw.sync()
                check_reduced(fw.to_host(recv), xs, dt, op, tag)
                buf = fw.to_dev(xs[me])
                comm.allreduce(buf, None, op, **kw)
                fw.sync()
                check_equal(fw.to_host(buf), fw.to_host(recv), tag + " in place")

                tag = f"{fw.name}/reduce_scatter/{dt}/{count}/{op}"
                xs = [data(dt, count * n, _rng(tag, r), op) for r in range(n)]
                recv = fw.to_dev(poison(np.empty(count, xs[me].dtype), dt))
                comm.reduce_scatter(fw.to_dev(xs[me]), recv, op, **kw)
                fw.sync()
                check_reduced(
                    fw.to_host(recv), [x[me * count : (me + 1) * count] for x in xs], dt, op, tag
                )

                tag = f"{fw.name}/reduce/{dt}/{count}/{op}"
                root = count % n
                xs = [data(dt, count, _rng(tag, r), op) for r in range(n)]
                recv = fw.to_dev(poison(np.empty_like(xs[me]), dt)) if me == root else None
                comm.reduce(fw.to_dev(xs[me]), recv, op, root, **kw)
                fw.sync()
                if me == root:
                    check_reduced(fw.to_host(recv), xs, dt, op, tag)

            if dt in FLOATS:
                tag = f"{fw.name}/allreduce_add/{dt}/{count}"
                xs = [data(dt, count, _rng(tag, r)) for r in range(n)]
                zero = fw.to_dev(np.zeros(count, xs[me].dtype))
                recv = fw.to_dev(poison(np.empty_like(xs[me]), dt))
                comm.allreduce_add(fw.to_dev(xs[me]), zero, recv, **kw)
                fw.sync()
                check_reduced(fw.to_host(recv), xs, dt, "sum", tag + " (addend 0)")

            tag = f"{fw.name}/broadcast/{dt}/{count}"
            root = (count + 1) % n
            xs = [data(dt, count, _rng(tag, r)) for r in range(n)]
            recv = fw.to_dev(poison(np.empty_like(xs[me]), dt))
            comm.broadcast(fw.to_dev(xs[me]), recv, root, **kw)
            fw.sync()
            check_equal(fw.to_host(recv), xs[root], tag)

            tag = f"{fw.name}/allgather/{dt}/{count}"
            xs = [data(dt, count, _rng(tag, r)) for r in range(n)]
            recv = fw.to_dev(poison(np.empty(count * n, xs[me].dtype), dt))
            comm.allgather(fw.to_dev(xs[me]), recv, **kw)
            fw.sync()
            check_equal(fw.to_host(recv), np.concatenate(xs), tag)

            tag = f"{fw.name}/alltoall/{dt}/{count}"
            xs = [data(dt, count * n, _rng(tag, r)) for r in range(n)]
            recv = fw.to_dev(poison(np.empty(count * n, xs[me].dtype), dt))
            comm.alltoall(fw.to_dev(xs[me]), recv, **kw)
            fw.sync()
            want = np.concatenate([xs[p][me * count : (me + 1) * count] for p in range(n)])
            check_equal(fw.to_host(recv), want, tag)


def torch_framework(device: int) -> Framework:
    import torch

    dev = torch.device("cuda", device)
    bf16 = torch.bfloat16

    def to_dev(a: np.ndarray):
        if a.dtype == np.uint16:  # bf16 bits
            return torch.from_numpy(a.view(np.int16).copy()).view(bf16).to(dev)
        return torch.from_numpy(a.copy()).to(dev)

    def to_host(t) -> np.ndarray:
        if t.dtype == bf16:
            return t.view(torch.int16).cpu().numpy().view(np.uint16)
        return t.cpu().numpy()

    return Framework(
        "torch",
        to_dev,
        to_host,
        lambda: torch.cuda.current_stream(dev).synchronize(),
        ["f32", "f16", "bf16", "f64", "i32", "i64", "i8", "u8"],
        False,
    )


def cupy_framework(device: int) -> Framework:
    import cupy

    def to_dev(a: np.ndarray):
        with cupy.cuda.Device(device):
            return cupy.asarray(a)

    return Framework(
        "cupy",
        to_dev,
        lambda x: cupy.asnumpy(x),
        lambda: cupy.cuda.get_current_stream().synchronize(),
        ["f32", "f16", "bf16", "f64", "i32", "i64", "i8", "u8", "u32", "u64"],
        True,
    )
