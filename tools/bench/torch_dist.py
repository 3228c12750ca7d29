# SPDX-License-Identifier: MIT
"""Time torch.distributed's collectives on CPU tensors with one backend (gloo, arcomm, ...).

The same method as arbench (arbench --help): every call timed on every rank, back to
back with no barrier between calls; per call the slowest rank; median and p90 over
calls; warmup calls first (10% of the calls, at least 5); ~0.2 s worth of calls per
size (20..10000, rank 0's count for all).  Sizes are bytes as arbench counts them
(allreduce, broadcast, reduce: the tensor; all_gather and reduce_scatter: the gathered
or scattered whole, n blocks; all_to_all: each rank's tensor of n blocks), f32, sum.
After the timed calls of each size one more call on fresh random data is checked
against a float64 reference on every rank (data movement exact, sums within f32
rounding), so a backend that returns garbage fast is caught.

Run it as a plain script: it starts its own N ranks (processes; RANK, WORLD_SIZE,
MASTER_ADDR/PORT set; one torch thread; each rank on its own core unless --no-bind)
and rank 0 prints one table per collective, in arbench's columns.  --backend arcomm
imports arcomm.torch first (which registers the backend), so the same script measures
arcomm under torch.distributed against Gloo on the same machine; the table's title says
whether arcomm's native path served the calls (ARCOMM_TORCH_NATIVE=0 measures the Python
path).  --async-op times each call as async_op=True followed by the Work's wait (as
DDP and overlapping code issue them) instead of the blocking call.  --backend fake times
torch's own cost of a blocking all_reduce on its do-nothing backend, in one process: the
floor under any backend's time.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

COLLS = ["allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall"]


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in mult:
        return int(text[:-1]) * mult[text[-1]]
    return int(text)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="gloo")
    p.add_argument("-n", "--nranks", type=int, default=2)
    p.add_argument("-b", "--begin", type=parse_size, default=4)
    p.add_argument("-e", "--end", type=parse_size, default=64 << 20)
    p.add_argument("-f", "--factor", type=int, default=4)
    p.add_argument("--coll", default="allreduce", help="one of %s, or all" % " ".join(COLLS))
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--max-seconds", type=float, default=0.2, help="time per size (default 0.2)")
    p.add_argument("--json", metavar="FILE", help="every table as JSON")
    p.add_argument("--no-bind", action="store_true")
    p.add_argument("--async-op", action="store_true",
                   help="time async_op=True and the Work's wait, not the blocking call")
    return p.parse_args()


def launch(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(args.nranks):
        env = dict(os.environ)
        env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(args.nranks),
                    "LOCAL_WORLD_SIZE": str(args.nranks), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"})
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    rc = 0
    for p in procs:
        rc = max(rc, p.wait())
    return rc


def quantile_sorted(xs, q):
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def busbw_factor(coll, n):
    # nccl-tests' bus bandwidth factors, as arbench prints them
    if coll == "allreduce":
        return 2.0 * (n - 1) / n
    if coll in ("allgather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def rank_main(args):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if not args.no_bind:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    import torch
    import torch.distributed as dist
    if args.backend == "arcomm":
        import arcomm.torch  # registers the backend
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    path = ""
    if args.backend == "arcomm":
        native = arcomm.torch.native_backend() is not None
        path = "native path, " if native else "Python path, "
    kw = {"async_op": True} if args.async_op else {}
    if args.async_op:
        path += "async_op=True + wait, "

    def done(w):
        if w is not None and args.async_op:
            w.wait()
    clock = time.perf_counter_ns
    colls = COLLS if args.coll == "all" else [args.coll]
    tables = {}

    def gen(r, count, salt):
        g = torch.Generator().manual_seed(1000003 * salt + 7919 * r + count)
        return torch.randn(count, generator=g, dtype=torch.float32)

    for coll in colls:
        rows = []
        size = args.begin
        while size <= args.end:
            unit = world if coll in ("allgather", "reduce_scatter", "alltoall") else 1
            count = max(unit, (size // 4) // unit * unit)
            blk = count // unit
            if coll == "allgather":
                inp, out = gen(rank, blk, 1), torch.empty(count)
                call = lambda: done(dist.all_gather_into_tensor(out, inp, **kw))
            elif coll == "reduce_scatter":
                inp, out = gen(rank, count, 1), torch.empty(blk)
                call = lambda: done(dist.reduce_scatter_tensor(out, inp, **kw))
            elif coll == "alltoall":
                inp, out = gen(rank, count, 1), torch.empty(count)
                call = lambda: done(dist.all_to_all_single(out, inp, **kw))
            elif coll == "broadcast":
                inp = gen(rank, count, 1)
                call = lambda: done(dist.broadcast(inp, 0, **kw))
            elif coll == "reduce":
                inp = gen(rank, count, 1)
                call = lambda: done(dist.reduce(inp, 0, **kw))
            else:
                inp = gen(rank, count, 1)
                call = lambda: done(dist.all_reduce(inp, **kw))
            if args.iters > 0:
                iters = args.iters
            else:
                for _ in range(3):
                    call()
                t0 = clock()
                for _ in range(5):
                    call()
                per = (clock() - t0) / 5 / 1e9
                iters = int(min(10000, max(20, args.max_seconds / max(per, 1e-9))))
            it = torch.tensor([iters], dtype=torch.int64)
            dist.broadcast(it, 0)
            iters = int(it.item())
            dist.barrier()
            for _ in range(max(5, iters // 10)):
                call()
            times = [0] * iters
            for i in range(iters):
                t0 = clock()
                call()
                times[i] = clock() - t0
            mine = torch.tensor(times, dtype=torch.int64)
            gathered = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(gathered, mine)
            worst = sorted(torch.stack(gathered).max(dim=0).values.tolist())
            med = quantile_sorted(worst, 0.5) / 1e3
            p90 = quantile_sorted(worst, 0.9) / 1e3
            wrong = check(coll, rank, world, count, blk, gen, dist, torch)
            nbytes = count * 4
            algbw = nbytes / (med * 1e-6) / 1e9
            rows.append({"bytes": nbytes, "time_us": med, "p90_us": p90, "algbw": algbw,
                         "busbw": algbw * busbw_factor(coll, world), "wrong": wrong,
                         "iters": iters})
            size *= args.factor
        tables[coll] = rows
        if rank == 0:
            print(f"# torch.distributed {args.backend}: {coll}, {world} ranks, f32 sum, "
                  f"{path}median and p90 of the slowest rank per call")
            print(f"{'bytes':>12} {'time_us':>10} {'p90_us':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}")
            for r in rows:
                print(f"{r['bytes']:>12} {r['time_us']:>10.2f} {r['p90_us']:>10.2f} "
                      f"{r['algbw']:>8.2f} {r['busbw']:>8.2f} {r['wrong']:>7}")
            sys.stdout.flush()
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "nranks": world, "path": path.rstrip(", "),
                       "tables": tables}, f)
    bad = sum(r["wrong"] for rows in tables.values() for r in rows)
    dist.destroy_process_group()
    return 1 if bad else 0


def check(coll, rank, world, count, blk, gen, dist, torch):
    """One call on fresh data; the number of wrong elements on this rank (summed over ranks)."""
    ins = [gen(r, count if coll not in ("allgather",) else blk, 2) for r in range(world)]
    ref64 = torch.stack([x.double() for x in ins]).sum(dim=0)
    tol = lambda ref: 1e-5 * world * (ref.abs() + 1.0)
    if coll == "allreduce" or coll == "reduce":
        t = ins[rank].clone()
        (dist.all_reduce(t) if coll == "allreduce" else dist.reduce(t, 0))
        if coll == "reduce" and rank != 0:
            bad = 0
        else:
            bad = int(((t.double() - ref64).abs() > tol(ref64)).sum())
    elif coll == "broadcast":
        t = ins[rank].clone()
        dist.broadcast(t, 0)
        bad = int((t != ins[0]).sum())
    elif coll == "allgather":
        out = torch.full((count,), float("nan"))
        dist.all_gather_into_tensor(out, ins[rank])
        bad = int((out != torch.cat(ins)).sum())
    elif coll == "reduce_scatter":
        out = torch.full((blk,), float("nan"))
        dist.reduce_scatter_tensor(out, ins[rank])
        ref = ref64[rank * blk:(rank + 1) * blk]
        bad = int(((out.double() - ref).abs() > tol(ref)).sum())
    else:
        out = torch.full((count,), float("nan"))
        dist.all_to_all_single(out, ins[rank])
        ref = torch.cat([ins[p][rank * blk:(rank + 1) * blk] for p in range(world)])
        bad = int((out != ref).sum())
    b = torch.tensor([bad], dtype=torch.int64)
    dist.all_reduce(b)
    return int(b.item())


def fake_floor(args):
    """--backend fake: torch's own cost of a call, on its do-nothing backend ("fake",
    torch.testing's FakeProcessGroup) in this process alone (world size 1): what any
    backend's call costs at least.  The blocking all_reduce of args.begin bytes; median
    and p90 over the calls."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if not args.no_bind:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    torch.set_num_threads(1)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    t = torch.zeros(max(1, args.begin // 4))
    iters = args.iters if args.iters > 0 else 20000
    for _ in range(max(5, iters // 10)):
        dist.all_reduce(t)
    clock = time.perf_counter_ns
    times = [0] * iters
    for i in range(iters):
        t0 = clock()
        dist.all_reduce(t)
        times[i] = clock() - t0
    times.sort()
    print(f"# torch.distributed fake (does nothing): allreduce of {t.numel() * 4} bytes, "
          f"1 rank, median and p90 of {iters} calls")
    print(f"{'bytes':>12} {'time_us':>10} {'p90_us':>10}")
    print(f"{t.numel() * 4:>12} {quantile_sorted(times, 0.5) / 1e3:>10.2f} "
          f"{quantile_sorted(times, 0.9) / 1e3:>10.2f}")
    dist.destroy_process_group()
    return 0


def main():
    args = parse_args()
    if args.backend == "fake":
        return fake_floor(args)
    if "RANK" in os.environ:
        return rank_main(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
