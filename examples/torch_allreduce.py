#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch_allreduce: arcomm as torch.distributed's backend, on CPU tensors.

``import arcomm.torch`` registers the backend ``arcomm``; the program then uses
torch.distributed as it would use Gloo: a sum, an ``async_op=True`` sum overlapped with
independent work, a sub-group of the even ranks, and an all_gather; it checks each
and exits 0 when all is right.

    pip install <arcomm source>/tools/python      # the package (numpy); torch installed
    arrun -n 4 python3 torch_allreduce.py         # 4 ranks under arrun (arcomm://)
    torchrun --nproc-per-node 4 torch_allreduce.py   # 4 ranks under torchrun
    python3 torch_allreduce.py                    # 1 rank
    prints "rank R of N (arcomm): all_reduce, async, sub-group and all_gather right"

The package finds libarcomm.so installed, or where ARCOMM_LIBRARY says.
"""
import os
import sys

import torch
import torch.distributed as dist

import arcomm.torch  # noqa: F401  (registers the "arcomm" backend)


def init():
    if "ARCOMM_ID" in os.environ and "MASTER_ADDR" not in os.environ:
        # arrun's job: rank, size and a store from arrun's variables
        dist.init_process_group("arcomm", init_method="arcomm://")
    elif "RANK" in os.environ:
        # torchrun (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR/PORT)
        dist.init_process_group("arcomm")
    else:
        dist.init_process_group("arcomm", store=dist.HashStore(), rank=0, world_size=1)


def main():
    init()
    rank, size = dist.get_rank(), dist.get_world_size()
    ok = True
    # all_reduce: rank r gives (r + 1) * i; the sum is size (size + 1) / 2 * i everywhere.
    x = (rank + 1) * torch.arange(1000, dtype=torch.float32)
    dist.all_reduce(x)
    ok &= torch.equal(x, size * (size + 1) // 2 * torch.arange(1000, dtype=torch.float32))
    # async_op=True: the sum runs while this rank computes something independent of it.
    y = torch.full((1 << 16,), float(rank))
    work = dist.all_reduce(y, op=dist.ReduceOp.MAX, async_op=True)
    z = torch.randn(256, 256) @ torch.randn(256, 256)  # independent work
    work.wait()
    ok &= bool((y == size - 1).all()) and z.shape == (256, 256)
    # a sub-group: the even ranks sum their ranks
    evens = list(range(0, size, 2))
    group = dist.new_group(evens)
    if rank in evens:
        s = torch.tensor([float(rank)])
        dist.all_reduce(s, group=group)
        ok &= s.item() == sum(evens)
    # all_gather: block r is rank r's row, on every rank
    rows = [torch.empty(3, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(rows, torch.tensor([rank, rank * rank, -rank]))
    ok &= all(rows[r].tolist() == [r, r * r, -r] for r in range(size))
    # One write per line: the ranks may share one stdout.
    os.write(1, f"rank {rank} of {size} ({dist.get_backend()}): all_reduce, async, sub-group "
                f"and all_gather {'right' if ok else 'WRONG'}\n".encode())
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
