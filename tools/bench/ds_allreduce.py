# SPDX-License-Identifier: MIT
"""Time DeepSpeed's CPU shared-memory allreduce (deepspeed.comm.inference_all_reduce).

The same method as arbench (arbench --help): every call timed on every rank, back
to back with no barrier between calls; per call the slowest rank; median and p90
over calls; warmup calls first; the result checked once per size on fresh random
data against a float64 reference.  f32 sum, sizes in bytes per rank.

Run it as a plain script: it starts its own N ranks (one process each, RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE = WORLD_SIZE, MASTER_ADDR/PORT in the
environment, one OpenMP thread, each rank pinned to its own core) and rank 0
prints the table.  DeepSpeed selects its shm kernel when LOCAL_SIZE equals the
world size (csrc/cpu/comm/shm_interface.cpp); the script refuses to run when the
op did not build or the CPU lacks the ISA its f32 path needs, since DeepSpeed
would then fall back to torch.distributed.all_reduce (gloo) without a word.

inference_all_reduce is in place only.  --outplace times what a caller has to do
to keep its input: copy the input into a preallocated output (Tensor.copy_), then
the in-place call on the output; the copy is inside the timed region.

Needs a Python with torch and deepspeed (tools/bench/ds-compare.sh says how the
venv was made), DS_ACCELERATOR=cpu (set here when unset).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in mult:
        return int(text[:-1]) * mult[text[-1]]
    return int(text)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--nranks", type=int, default=2)
    p.add_argument("-b", "--begin", type=parse_size, default=4)
    p.add_argument("-e", "--end", type=parse_size, default=64 << 20)
    p.add_argument("-f", "--factor", type=int, default=4)
    p.add_argument("--outplace", action="store_true",
                   help="copy the input into an output buffer, then the in-place call (timed together)")
    p.add_argument("--iters", type=int, default=0,
                   help="timed calls per size (default: ~0.2 s worth, 20..10000, as arbench)")
    p.add_argument("--warmup", type=int, default=0,
                   help="untimed calls first (default 10%% of iters, at least 5)")
    p.add_argument("--api", choices=["comm", "op"], default="comm",
                   help="comm: deepspeed.comm.inference_all_reduce (default); "
                        "op: torch.ops.deepspeed.inference_all_reduce_ directly, without the Python wrappers")
    p.add_argument("--json", metavar="FILE", help="the table as JSON")
    p.add_argument("--no-bind", action="store_true", help="do not pin each rank to its own core")
    return p.parse_args()


def launch(args):
    """Start the ranks as child processes running this script; wait for them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(args.nranks):
        env = dict(os.environ)
        env.update({
            "RANK": str(rank), "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(args.nranks), "LOCAL_SIZE": str(args.nranks),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"),
        })
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    rc = 0
    for p in procs:
        rc = max(rc, p.wait())
    # DeepSpeed leaves its per-rank segments in /dev/shm; remove the ones this run made.
    uid = os.getuid()
    for rank in range(args.nranks):
        path = f"/dev/shm/deepspeed_allreduce_buffer_{uid}_127.0.0.1_{port}_{rank}"
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return rc


def quantile_sorted(xs, q):
    # nearest rank on sorted data, as a plain percentile
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def rank_main(args):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if not args.no_bind:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})

    import torch
    import deepspeed
    import deepspeed.comm as dist
    import torch.distributed as tdist

    torch.set_num_threads(1)
    quiet = rank != 0
    if quiet:
        sys.stdout = open(os.devnull, "w")
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    import deepspeed.comm.comm as ds_comm_state
    cdb = ds_comm_state.cdb
    level = getattr(cdb, "shm_vector_kernel_level", 0)
    if getattr(cdb, "shm_comm_op", None) is None or level < 1:
        sys.stderr.write(f"rank {rank}: DeepSpeed's shm op is not in use (op {getattr(cdb, 'shm_comm_op', None)}, "
                         f"vector level {level}); inference_all_reduce would be gloo\n")
        return 1

    if args.api == "comm":
        def allreduce(t):
            dist.inference_all_reduce(t)
    else:
        op = torch.ops.deepspeed.inference_all_reduce_

        def allreduce(t):
            op(t)

    sizes = []
    s = args.begin
    while s <= args.end:
        sizes.append(s)
        s *= args.factor

    def gen(r, size, salt):
        g = torch.Generator().manual_seed(1000003 * salt + 7919 * r + size)
        return torch.randn(size // 4, generator=g, dtype=torch.float32)

    rows = []
    clock = time.perf_counter_ns
    for size in sizes:
        count = size // 4
        inp = gen(rank, size, 1)
        out = torch.empty_like(inp) if args.outplace else None
        buf = out if args.outplace else inp

        def one():
            if args.outplace:
                out.copy_(inp)
            allreduce(buf)

        # iteration count: ~0.2 s worth from a few calls, rank 0's choice for all
        if args.iters > 0:
            iters = args.iters
        else:
            for _ in range(3):
                one()
            t0 = clock()
            probe = 5
            for _ in range(probe):
                one()
            per = (clock() - t0) / probe / 1e9
            iters = int(min(10000, max(20, 0.2 / max(per, 1e-9))))
        it = torch.tensor([iters], dtype=torch.int64)
        tdist.broadcast(it, 0)
        iters = int(it.item())
        warmup = args.warmup if args.warmup > 0 else max(5, iters // 10)

        tdist.barrier()
        for _ in range(warmup):
            one()
        times = [0] * iters
        for i in range(iters):
            t0 = clock()
            one()
            times[i] = clock() - t0

        # per call the slowest rank
        mine = torch.tensor(times, dtype=torch.int64)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        tdist.all_gather(gathered, mine)
        worst = torch.stack(gathered).max(dim=0).values.tolist()
        worst.sort()
        med = quantile_sorted(worst, 0.5) / 1e3
        p90 = quantile_sorted(worst, 0.9) / 1e3

        # check once on fresh random data against a float64 reference
        fresh = gen(rank, size, 2)
        keep = fresh.clone()
        if args.outplace:
            out.fill_(float("nan"))
            out.copy_(fresh)
            allreduce(out)
            result = out
        else:
            allreduce(fresh)
            result = fresh
        ref = torch.zeros(count, dtype=torch.float64)
        for r in range(world):
            ref += gen(r, size, 2).double()
        err = (result.double() - ref).abs()
        tol = 1e-6 * world * (ref.abs() + 1.0)
        wrong = int((err > tol).sum().item())
        if args.outplace and not torch.equal(fresh, keep):
            wrong += 1  # out of place: the input must be unchanged
        wt = torch.tensor([wrong], dtype=torch.int64)
        tdist.all_reduce(wt)
        wrong = int(wt.item())

        algbw = size / (med * 1e-6) / 1e9 if med > 0 else 0.0
        busbw = algbw * 2 * (world - 1) / world
        rows.append({"size": size, "count": count, "iters": iters, "time_us": med,
                     "p90_us": p90, "algbw_gbs": algbw, "busbw_gbs": busbw, "wrong": wrong})

    if rank == 0:
        import deepspeed as _ds
        mode = "out of place (copy_ + in-place call)" if args.outplace else "in place"
        api = ("deepspeed.comm.inference_all_reduce" if args.api == "comm"
               else "torch.ops.deepspeed.inference_all_reduce_")
        print(f"# DeepSpeed {_ds.__version__}, torch {torch.__version__}: {api}, {world} ranks, "
              f"f32 sum, {mode}, shm vector kernel level {level}")
        print("# per call the slowest rank; median and p90 over calls; busbw = algbw * 2(n-1)/n")
        print(f"{'size(B)':>10} {'count':>10} {'iters':>6} {'time(us)':>10} {'p90(us)':>10} "
              f"{'algbw':>8} {'busbw':>8} {'#wrong':>6}")
        for r in rows:
            print(f"{r['size']:>10} {r['count']:>10} {r['iters']:>6} {r['time_us']:>10.2f} "
                  f"{r['p90_us']:>10.2f} {r['algbw_gbs']:>8.3f} {r['busbw_gbs']:>8.3f} {r['wrong']:>6}")
        sys.stdout.flush()
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"tool": "ds_allreduce.py", "deepspeed": _ds.__version__,
                           "torch": torch.__version__, "api": api, "nranks": world,
                           "inplace": not args.outplace, "rows": rows}, f, indent=1)
    tdist.barrier()
    any_wrong = any(r["wrong"] for r in rows)
    return 1 if any_wrong else 0


def main():
    args = parse_args()
    if "RANK" not in os.environ:
        return launch(args)
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
