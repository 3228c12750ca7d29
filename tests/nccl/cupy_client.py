#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""CuPy's NCCL binding (cupy.cuda.nccl) over whichever libnccl.so.2 the loader finds
(arcomm's through LD_LIBRARY_PATH, or a real NCCL): a process per rank, rank r on GPU
r % GPUs (several may share one), NcclCommunicator from get_unique_id, groupStart/End,
allReduce, broadcast, bcast, reduce, allGather and reduceScatter over several dtypes and
ops, every element checked against a float64 reference, outputs that must agree compared
bit for bit across ranks; then the median time of an allreduce at a few sizes.

    python3 cupy_client.py [--ranks N] [--iters N]

Prints ok/FAIL lines, "time <op> <bytes> <us>" lines and PASS/FAIL; exit 0, 1 (a
failure) or 77 (no CuPy or no GPU)."""
import argparse
import hashlib
import multiprocessing as mp
import sys
import time
import traceback


def reference_inputs(np, seed, n, count, dtype, kind):
    """Every rank's input, as the dtype holds it, and in float64."""
    out = []
    for r in range(n):
        rng = np.random.default_rng(seed * 100 + r)
        if kind == "int":
            x = rng.integers(-50, 50, size=count).astype(dtype)
        elif kind == "prod":
            x = rng.integers(1, 3, size=count).astype(dtype)
        else:
            x = rng.uniform(-1, 1, size=count).astype(dtype)
        out.append(x)
    return out


def child(rank, n, uid, iters, q):
    try:
        import cupy as cp
        import numpy as np
        from cupy.cuda import nccl
    except Exception as e:  # noqa: BLE001
        q.put((rank, "skip", repr(e)))
        return
    results = []

    def check(name, got, want, tol, ranks_agree=True):
        got64 = np.asarray(got, dtype=np.float64)
        want64 = np.asarray(want, dtype=np.float64)
        if got64.shape != want64.shape:
            results.append((name, False, f"shape {got64.shape} vs {want64.shape}", ""))
            return
        err = np.abs(got64 - want64)
        bad = int(np.count_nonzero(~(err <= tol)))
        why = ""
        if bad:
            i = int(np.argmax(~(err <= tol)))
            why = f"rank {rank}: {bad} wrong, element {i}: got {got64.flat[i]!r}, want {want64.flat[i]!r}"
        digest = hashlib.sha1(np.ascontiguousarray(got).tobytes()).hexdigest() if ranks_agree else ""
        results.append((name, bad == 0, why, digest))

    try:
        ndev = cp.cuda.runtime.getDeviceCount()
        cp.cuda.Device(rank % ndev).use()
        comm = nccl.NcclCommunicator(n, uid, rank)
        stream = cp.cuda.Stream(non_blocking=True)
        s = stream.ptr
        # CuPy's own work (the inputs, the poisoned outputs) on the collectives' stream:
        # on its default stream it would not be ordered before them (a non-blocking
        # stream does not wait for the legacy one), and a poison could land after a call.
        stream.use()
        types = {
            "f32": (np.float32, nccl.NCCL_FLOAT32, 1e-5),
            "f64": (np.float64, nccl.NCCL_FLOAT64, 1e-12),
            "f16": (np.float16, nccl.NCCL_FLOAT16, 4e-3),
            "i32": (np.int32, nccl.NCCL_INT32, 0),
            "i64": (np.int64, nccl.NCCL_INT64, 0),
            "u8": (np.uint8, nccl.NCCL_UINT8, 0),
        }
        ops = {"sum": nccl.NCCL_SUM, "prod": nccl.NCCL_PROD, "max": nccl.NCCL_MAX,
               "min": nccl.NCCL_MIN}
        if hasattr(nccl, "NCCL_AVG"):
            ops["avg"] = nccl.NCCL_AVG
        seed = 1

        def reduce_ref(xs, op):
            x64 = [x.astype(np.float64) for x in xs]
            if op == "sum":
                return sum(x64), sum(np.abs(x) for x in x64)
            if op == "avg":  # integers: NCCL's sum divided, truncated (astype below)
                return sum(x64) / n, sum(np.abs(x) for x in x64)
            if op == "prod":
                r = x64[0].copy()
                for x in x64[1:]:
                    r = r * x
                return r, np.abs(r)
            f = np.maximum if op == "max" else np.minimum
            r = x64[0].copy()
            for x in x64[1:]:
                r = f(r, x)
            return r, np.abs(r)

        # allReduce: every dtype with sum, every op on f32 and i32, in groups.
        cases = [(t, "sum") for t in types] + [("f32", o) for o in ops] + \
                [("i32", o) for o in ops] + [("u8", "avg")] * ("avg" in ops)
        for t, o in cases:
            seed += 1
            dt, nt, tol = types[t]
            if t == "u8" and o in ("sum", "avg"):
                kind = "prod"  # small values: no wrap
            else:
                kind = "prod" if o == "prod" else ("int" if tol == 0 else "float")
            count = 1000 + seed
            xs = reference_inputs(np, seed, n, count, dt, kind)
            send = cp.asarray(xs[rank])
            recv = cp.full(count, 77, dtype=dt)
            nccl.groupStart()
            comm.allReduce(send.data.ptr, recv.data.ptr, count, nt, ops[o], s)
            nccl.groupEnd()
            stream.synchronize()
            want, mag = reduce_ref(xs, o)
            if tol == 0:
                want = want.astype(dt)
            check(f"allReduce {t} {o}", cp.asnumpy(recv), want, tol * (mag + 1e-30) * 4)

        # In place, and a size on arcomm's copy-engine path (f32 stays f32 through the
        # library: no bf16 on the wire, so the same tolerance).
        for count, tol in ((4099, 1e-5), (3 << 20, 1e-5)):
            seed += 1
            xs = reference_inputs(np, seed, n, count, np.float32, "float")
            buf = cp.asarray(xs[rank])
            comm.allReduce(buf.data.ptr, buf.data.ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s)
            stream.synchronize()
            want, mag = reduce_ref(xs, "sum")
            check(f"allReduce f32 sum in place {count}", cp.asnumpy(buf), want, tol * (mag + 1e-30) * 4)

        # broadcast (root n-1) and bcast (root 0), exact.
        seed += 1
        xs = reference_inputs(np, seed, n, 5000, np.float32, "float")
        send = cp.asarray(xs[rank])
        recv = cp.zeros(5000, dtype=np.float32)
        comm.broadcast(send.data.ptr, recv.data.ptr, 5000, nccl.NCCL_FLOAT32, n - 1, s)
        stream.synchronize()
        check("broadcast f32 root n-1", cp.asnumpy(recv), xs[n - 1], 0)
        buf = cp.asarray(xs[rank])
        comm.bcast(buf.data.ptr, 5000, nccl.NCCL_FLOAT32, 0, s)
        stream.synchronize()
        check("bcast f32 root 0", cp.asnumpy(buf), xs[0], 0)

        # reduce to root 0: the root's output checked, the others' left alone.
        seed += 1
        xs = reference_inputs(np, seed, n, 3000, np.float64, "float")
        send = cp.asarray(xs[rank])
        recv = cp.full(3000, -5.0, dtype=np.float64)
        comm.reduce(send.data.ptr, recv.data.ptr, 3000, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, 0, s)
        stream.synchronize()
        want, mag = reduce_ref(xs, "sum")
        if rank == 0:
            check("reduce f64 sum root 0", cp.asnumpy(recv), want, 1e-12 * (mag + 1e-30) * 4)
        else:
            check("reduce f64 sum root 0 (non-root untouched)", cp.asnumpy(recv),
                  np.full(3000, -5.0), 0, ranks_agree=False)

        # allGather and reduceScatter.
        seed += 1
        xs = reference_inputs(np, seed, n, 1234, np.float32, "float")
        send = cp.asarray(xs[rank])
        recv = cp.zeros(1234 * n, dtype=np.float32)
        comm.allGather(send.data.ptr, recv.data.ptr, 1234, nccl.NCCL_FLOAT32, s)
        stream.synchronize()
        check("allGather f32", cp.asnumpy(recv), np.concatenate(xs), 0)
        seed += 1
        rc = 777
        xs = reference_inputs(np, seed, n, rc * n, np.float32, "float")
        send = cp.asarray(xs[rank])
        recv = cp.zeros(rc, dtype=np.float32)
        comm.reduceScatter(send.data.ptr, recv.data.ptr, rc, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s)
        stream.synchronize()
        want, mag = reduce_ref(xs, "sum")
        sl = slice(rank * rc, (rank + 1) * rc)
        check("reduceScatter f32 sum", cp.asnumpy(recv), want[sl], 1e-5 * (mag[sl] + 1e-30) * 4,
              ranks_agree=False)

        # Timings: allReduce f32 sum in place, each call followed by a synchronize.
        times = []
        for nbytes in (8, 4096, 1 << 20, 16 << 20):
            count = max(1, nbytes // 4)
            buf = cp.ones(count, dtype=np.float32)
            ts = []
            for i in range(iters + 5):
                t0 = time.perf_counter()
                comm.allReduce(buf.data.ptr, buf.data.ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s)
                stream.synchronize()
                if i >= 5:
                    ts.append((time.perf_counter() - t0) * 1e6)
            ts.sort()
            times.append((nbytes, ts[len(ts) // 2]))
        comm.destroy()
        q.put((rank, "done", (results, times)))
    except Exception:  # noqa: BLE001
        q.put((rank, "error", traceback.format_exc()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=50)
    a = ap.parse_args()
    try:
        import cupy as cp
        from cupy.cuda import nccl
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no GPU")
    except Exception as e:  # noqa: BLE001
        print(f"SKIP: {e!r}")
        return 77
    import nccl_loaded
    version = nccl.get_version()
    print(f"cupy {cp.__version__}, nccl.get_version() {version}, "
          f"{nccl_loaded.describe()}, {a.ranks} process ranks on "
          f"{cp.cuda.runtime.getDeviceCount()} GPU(s)", flush=True)
    uid = nccl.get_unique_id()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=child, args=(r, a.ranks, uid, a.iters, q)) for r in range(a.ranks)]
    for p in procs:
        p.start()
    got = {}
    failures = 0
    deadline = time.time() + 600
    while len(got) < a.ranks and time.time() < deadline:
        try:
            rank, what, payload = q.get(timeout=5)
        except Exception:  # noqa: BLE001
            if not any(p.is_alive() for p in procs) and q.empty():
                break
            continue
        got[rank] = (what, payload)
    for p in procs:
        p.join(timeout=30)
    for r in range(a.ranks):
        if r not in got:
            print(f"FAIL rank {r} sent nothing (exit code {procs[r].exitcode})")
            failures += 1
        elif got[r][0] == "error":
            print(f"FAIL rank {r}:\n{got[r][1]}")
            failures += 1
        elif got[r][0] == "skip":
            print(f"SKIP: rank {r}: {got[r][1]}")
            return 77
    if failures:
        print(f"FAIL: {failures} failure(s)")
        return 1
    res = {r: got[r][1][0] for r in got}
    for i, (name, ok, why, digest) in enumerate(res[0]):
        for r in range(1, a.ranks):
            rn, rok, rwhy, rdig = res[r][i]
            if not rok and ok:
                ok, why = False, rwhy
            if ok and digest and rdig and rdig != digest:
                ok, why = False, f"rank {r}'s output differs from rank 0's"
        print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + why}")
        failures += not ok
    for i, (nbytes, _) in enumerate(got[0][1][1]):
        worst = max(got[r][1][1][i][1] for r in got)
        print(f"time allReduce {nbytes} {worst:.2f}")
    print(f"{'PASS' if failures == 0 else 'FAIL'}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
