#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch.distributed with the nccl backend over whichever libnccl.so.2 is loaded (arcomm's
through LD_PRELOAD: libtorch_cuda finds NCCL through an RPATH, which LD_LIBRARY_PATH does
not override; or the wheel's real NCCL): a process per rank, rank r on GPU r % GPUs
(several may share one), a FileStore.  Required to work, every element checked against
a float64 reference, outputs that must agree compared bit for bit across ranks:
all_reduce (dtypes, ops), broadcast, all_gather_into_tensor, reduce_scatter_tensor,
reduce, barrier.  Tried and reported, not required: all_gather (list), all_to_all_single,
send/recv, batch_isend_irecv, gather and scatter, PREMUL_SUM.  Then the median time of an all_reduce at a few sizes.

    python3 torch_client.py [--ranks N] [--iters N]

Prints ok/FAIL/info lines, "time <op> <bytes> <us>" lines and PASS/FAIL; exit 0, 1 or
77 (no torch, no CUDA)."""
import argparse
import hashlib
import os
import sys
import tempfile
import time
import traceback


def inputs(torch, seed, n, count, dtype, kind):
    """Every rank's input, as the dtype holds it (CPU), and in float64."""
    out = []
    for r in range(n):
        g = torch.Generator().manual_seed(seed * 100 + r)
        if kind == "int":
            x = torch.randint(-50, 50, (count,), generator=g)
        elif kind == "prod":
            x = torch.randint(1, 3, (count,), generator=g)
        else:
            x = torch.rand(count, generator=g, dtype=torch.float64) * 2 - 1
        out.append(x.to(dtype))
    return out


def child(rank, n, store_path, iters, q):
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # noqa: BLE001
        q.put((rank, "skip", repr(e)))
        return
    results, extras, times = [], [], []
    try:
        ndev = torch.cuda.device_count()
        dev = torch.device("cuda", rank % ndev)
        torch.cuda.set_device(dev)
        store = dist.FileStore(store_path, n)
        dist.init_process_group("nccl", store=store, rank=rank, world_size=n)

        def check(name, got, want, tol, agree=True):
            got64 = got.detach().to("cpu", torch.float64)
            want64 = want.to(torch.float64)
            err = (got64 - want64).abs()
            okmask = err <= tol
            bad = int((~okmask).sum())
            why = ""
            if bad:
                i = int((~okmask).nonzero()[0])
                why = f"rank {rank}: {bad} wrong, element {i}: got {got64[i].item()!r}, want {want64[i].item()!r}"
            digest = hashlib.sha1(got.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest() if agree else ""
            results.append((name, bad == 0, why, digest))

        def red(xs, op):
            x64 = [x.to(torch.float64) for x in xs]
            mag = sum(x.abs() for x in x64)
            if op == "sum":
                return sum(x64), mag
            if op == "avg":  # integers: NCCL's sum divided, truncated (.to(dt) below)
                return sum(x64) / n, mag
            r = x64[0].clone()
            for x in x64[1:]:
                r = r * x if op == "prod" else (torch.maximum(r, x) if op == "max" else torch.minimum(r, x))
            return r, r.abs() if op == "prod" else mag

        R = dist.ReduceOp
        ops = {"sum": R.SUM, "prod": R.PRODUCT, "max": R.MAX, "min": R.MIN, "avg": R.AVG}
        types = {"f32": (torch.float32, 1e-5), "f64": (torch.float64, 1e-12),
                 "f16": (torch.float16, 4e-3), "bf16": (torch.bfloat16, 3e-2),
                 "i32": (torch.int32, 0), "i64": (torch.int64, 0), "u8": (torch.uint8, 0)}
        seed = 10
        cases = [(t, "sum") for t in types] + [("f32", o) for o in ops] + \
                [("i32", o) for o in ("prod", "max", "min", "avg")] + [("i64", "avg")]
        for t, o in cases:
            seed += 1
            dt, tol = types[t]
            kind = "prod" if (o == "prod" or t == "u8") else ("int" if tol == 0 else "float")
            xs = inputs(torch, seed, n, 1000 + seed, dt, kind)
            x = xs[rank].to(dev)
            dist.all_reduce(x, op=ops[o])
            torch.cuda.synchronize()
            want, mag = red(xs, o)
            if tol == 0:
                want = want.to(dt).to(torch.float64)
            check(f"all_reduce {t} {o}", x, want, tol * (mag + 1e-30) * 4)
        # A size on arcomm's copy-engine path (f32 stays f32 through the library).
        seed += 1
        xs = inputs(torch, seed, n, 3 << 20, torch.float32, "float")
        x = xs[rank].to(dev)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        want, mag = red(xs, "sum")
        check("all_reduce f32 sum 12 MiB", x, want, 1e-5 * (mag + 1e-30) * 4)

        seed += 1
        xs = inputs(torch, seed, n, 4321, torch.float32, "float")
        x = xs[rank].to(dev)
        dist.broadcast(x, src=n - 1)
        torch.cuda.synchronize()
        check("broadcast f32 src n-1", x, xs[n - 1], 0)

        seed += 1
        xs = inputs(torch, seed, n, 1111, torch.bfloat16, "float")
        out = torch.empty(1111 * n, dtype=torch.bfloat16, device=dev)
        dist.all_gather_into_tensor(out, xs[rank].to(dev))
        torch.cuda.synchronize()
        check("all_gather_into_tensor bf16", out, torch.cat(xs), 0)

        for o in ("sum", "avg"):
            seed += 1
            rc = 999
            xs = inputs(torch, seed, n, rc * n, torch.float32, "float")
            out = torch.empty(rc, dtype=torch.float32, device=dev)
            dist.reduce_scatter_tensor(out, xs[rank].to(dev), op=ops[o])
            torch.cuda.synchronize()
            want, mag = red(xs, o)
            sl = slice(rank * rc, (rank + 1) * rc)
            check(f"reduce_scatter_tensor f32 {o}", out, want[sl], 1e-5 * (mag[sl] + 1e-30) * 4, agree=False)

        seed += 1
        xs = inputs(torch, seed, n, 2000, torch.float64, "float")
        x = xs[rank].to(dev)
        dist.reduce(x, dst=0)
        torch.cuda.synchronize()
        want, mag = red(xs, "sum")
        if rank == 0:
            check("reduce f64 dst 0", x, want, 1e-12 * (mag + 1e-30) * 4)

        t0 = time.perf_counter()
        dist.barrier()
        torch.cuda.synchronize()
        results.append(("barrier", True, "", ""))

        # Tried, reported, not required.
        def extra(name, fn):
            try:
                fn()
                torch.cuda.synchronize()
                extras.append((name, "works"))
            except Exception as e:  # noqa: BLE001
                extras.append((name, "fails: " + str(e).strip().splitlines()[0][:200]))

        def ag_list():
            seed_xs = inputs(torch, 99, n, 100, torch.float32, "float")
            outs = [torch.empty(100, device=dev) for _ in range(n)]
            dist.all_gather(outs, seed_xs[rank].to(dev))
            torch.cuda.synchronize()
            for r in range(n):
                if not torch.equal(outs[r].cpu(), seed_xs[r]):
                    raise RuntimeError(f"wrong data from rank {r}")

        def a2a():
            x = torch.arange(4 * n, dtype=torch.float32, device=dev) + 100 * rank
            y = torch.empty_like(x)
            dist.all_to_all_single(y, x)
            torch.cuda.synchronize()
            want = torch.cat([torch.arange(4 * rank, 4 * rank + 4, dtype=torch.float32) + 100 * p
                              for p in range(n)])
            if not torch.equal(y.cpu(), want):
                raise RuntimeError("wrong data")

        def sendrecv():
            if n < 2:
                raise RuntimeError("needs 2 ranks")
            x = torch.arange(1000, dtype=torch.float32, device=dev) + 7
            if rank == 0:
                dist.send(x, dst=1)
            elif rank == 1:
                y = torch.zeros_like(x)
                dist.recv(y, src=0)
                torch.cuda.synchronize()
                if not torch.equal(y.cpu(), x.cpu()):
                    raise RuntimeError("wrong data")

        def batch_ring():
            x = torch.arange(513, dtype=torch.float32, device=dev) + 1000 * rank
            y = torch.full_like(x, -1)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, (rank + 1) % n),
                                           dist.P2POp(dist.irecv, y, (rank - 1) % n)])
            for q in reqs:
                q.wait()
            torch.cuda.synchronize()
            want = torch.arange(513, dtype=torch.float32) + 1000 * ((rank - 1) % n)
            if not torch.equal(y.cpu(), want):
                raise RuntimeError("wrong data")

        def premul():
            x = torch.ones(64, device=dev) * (rank + 1)
            dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
            torch.cuda.synchronize()
            want = 0.5 * n * (n + 1) / 2
            if not torch.allclose(x.cpu(), torch.full((64,), want)):
                raise RuntimeError(f"got {x[0].item()}, want {want}")

        def gather_scatter():
            root = n - 1
            x = torch.arange(300, dtype=torch.float32, device=dev) + 1000 * rank
            outs = [torch.full_like(x, -1) for _ in range(n)] if rank == root else None
            dist.gather(x, gather_list=outs, dst=root)
            torch.cuda.synchronize()
            if rank == root:
                for r in range(n):
                    want = torch.arange(300, dtype=torch.float32) + 1000 * r
                    if not torch.equal(outs[r].cpu(), want):
                        raise RuntimeError(f"gather: wrong data from rank {r}")
            ins = ([torch.arange(200, dtype=torch.float32, device=dev) + 10000 * r
                    for r in range(n)] if rank == root else None)
            y = torch.full((200,), -1.0, device=dev)
            dist.scatter(y, scatter_list=ins, src=root)
            torch.cuda.synchronize()
            if not torch.equal(y.cpu(), torch.arange(200, dtype=torch.float32) + 10000 * rank):
                raise RuntimeError("scatter: wrong data")

        extra("all_gather (list)", ag_list)
        extra("all_to_all_single", a2a)
        extra("PREMUL_SUM (_make_nccl_premul_sum)", premul)
        extra("send/recv", sendrecv)
        extra("batch_isend_irecv (a ring)", batch_ring)
        extra("gather and scatter", gather_scatter)

        ok_after = True
        try:
            x = torch.ones(4, device=dev)
            dist.all_reduce(x)
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            ok_after = False
        extras.append(("all_reduce after the above", "works" if ok_after else "fails"))

        if ok_after:
            for nbytes in (8, 4096, 1 << 20, 16 << 20):
                x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=dev)
                ts = []
                for i in range(iters + 5):
                    t0 = time.perf_counter()
                    dist.all_reduce(x)
                    torch.cuda.synchronize()
                    if i >= 5:
                        ts.append((time.perf_counter() - t0) * 1e6)
                ts.sort()
                times.append((nbytes, ts[len(ts) // 2]))
        # Reported before the teardown, which is checked by the exit code (see main).
        import nccl_loaded
        q.put((rank, "done", (results, extras, times, torch.cuda.nccl.version(),
                              nccl_loaded.describe())))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        q.put((rank, "error", traceback.format_exc()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=50)
    a = ap.parse_args()
    try:
        import torch
        import torch.multiprocessing as tmp
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA")
    except Exception as e:  # noqa: BLE001
        print(f"SKIP: {e!r}")
        return 77
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    store_dir = tempfile.mkdtemp(prefix="arcomm-torch-store-")
    store_path = os.path.join(store_dir, "store")
    procs = [ctx.Process(target=child, args=(r, a.ranks, store_path, a.iters, q)) for r in range(a.ranks)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.time() + 900
    while len(got) < a.ranks and time.time() < deadline:
        try:
            rank, what, payload = q.get(timeout=5)
        except Exception:  # noqa: BLE001
            if not any(p.is_alive() for p in procs) and q.empty():
                break
            continue
        got[rank] = (what, payload)
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    try:
        os.remove(store_path)
    except OSError:
        pass
    try:
        os.rmdir(store_dir)
    except OSError:
        pass
    failures = 0
    for r in range(a.ranks):
        if r in got and got[r][0] == "done" and procs[r].exitcode != 0:
            print(f"FAIL rank {r} reported, then exited with code {procs[r].exitcode} "
                  "(destroy_process_group or the interpreter's exit)")
            failures += 1
        if r not in got:
            print(f"FAIL rank {r} sent nothing (exit code {procs[r].exitcode})")
            failures += 1
        elif got[r][0] == "error":
            print(f"FAIL rank {r}:\n{got[r][1]}")
            failures += 1
        elif got[r][0] == "skip":
            print(f"SKIP: {got[r][1]}")
            return 77
    if failures:
        print(f"FAIL: {failures} failure(s)")
        return 1
    # torch.cuda.nccl.version() is the NCCL torch was built with; rank 0's process says
    # which library serves the calls.
    v = got[0][1][3]
    print(f"torch {torch.__version__}, torch.cuda.nccl.version() {v} (built with), "
          f"{got[0][1][4]}, {a.ranks} process ranks on {torch.cuda.device_count()} GPU(s)")
    # By name: a case that only the root checks is in the root's list only.
    res = {r: {name: (ok, why, digest) for name, ok, why, digest in got[r][1][0]} for r in got}
    names = []
    for r in sorted(got):
        names += [name for name, *_ in got[r][1][0] if name not in names]
    for name in names:
        ok, why, digest = True, "", None
        for r in sorted(res):
            if name not in res[r]:
                continue
            rok, rwhy, rdig = res[r][name]
            if not rok and ok:
                ok, why = False, rwhy
            if digest is None:
                digest = rdig
            elif ok and digest and rdig and rdig != digest:
                ok, why = False, f"rank {r}'s output differs from the first rank's"
        print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + why}")
        failures += not ok
    for name, what in got[0][1][1]:
        print(f"info {name}: {what}")
    for i, (nbytes, _) in enumerate(got[0][1][2]):
        worst = max(got[r][1][2][i][1] for r in got if i < len(got[r][1][2]))
        print(f"time all_reduce {nbytes} {worst:.2f}")
    print(f"{'PASS' if failures == 0 else 'FAIL'}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
