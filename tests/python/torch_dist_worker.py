# SPDX-License-Identifier: MIT
"""One rank of a torch.distributed job for test_torch_dist.py.

    torch_dist_worker.py MODE BACKEND [ARGS...]

Started with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or by
arrun or mpirun with init_method "arcomm://" (BACKEND arcomm-url).  Prints "rank R: ..." lines;
exits 1 (with the failure on stderr) when a check fails.  Modes:

* colls: every collective, every ReduceOp, async_op, non-contiguous tensors and
  sub-groups on random data, each rank's result checked against a float64 reference
  computed from every rank's inputs (each rank can make them: seeded by rank);
  prints a digest of every result (the same on every rank where it should be).
* MODE-fakeasync: MODE with the library's non-blocking calls stood in for (see
  fake_nonblocking): the Work objects' pending path.
* errors: what the backend does not serve raises, saying what to do instead.
* ddp STEPS: DistributedDataParallel training of a small MLP on CPU; prints every
  step's loss as a hex float (bit-exact comparison between runs and backends).
* tp: a tensor-parallel MLP (column- then row-parallel), all_reduce after the second
  matmul with async_op=True while the next batch's first matmul runs; against the
  unsplit MLP in float64.
* cuda: CUDA tensors on a side stream (rank r on cuda:r), against float64 references.
* native: which path serves each call (the native backend's counters), or that there
  is no native backend under ARCOMM_TORCH_NATIVE=0.
* fail HOW SYNC|ASYNC: a mismatch or a timeout raises arcomm.Error on the ranks that
  called, within the group's 3 s timeout.
* pipe: a 2-stage pipeline (even ranks stage 0, odd ranks stage 1) with send/recv and
  isend/irecv, forward and backward; against the unsplit model in float64.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import arcomm  # noqa: E402
import arcomm.torch  # noqa: E402,F401  (registers the backend)

OPS = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG, "PRODUCT": dist.ReduceOp.PRODUCT,
       "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX}
EPS = {torch.float32: 2.0**-23, torch.float64: 2.0**-52, torch.bfloat16: 2.0**-7,
       torch.float16: 2.0**-10}


def say(rank: int, text: str) -> None:
    """One line "rank R: text" in one write (the ranks may share one stdout)."""
    os.write(1, f"rank {rank}: {text}\n".encode())


class Check:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.digest = hashlib.sha256()
        self.n = 0

    def close(self, got: torch.Tensor, ref64: torch.Tensor, scale: torch.Tensor | None,
              what: str, exact: bool = False, same: bool = False) -> None:
        """got against the float64 reference: exact for data movement, else within the
        dtype's rounding of the accumulation (n terms of |x| at most scale).  ``same``:
        a result every rank holds alike, added to the digest."""
        self.n += 1
        g = got.detach().to(torch.float64).reshape(-1)
        r = ref64.reshape(-1)
        if g.shape != r.shape:
            raise AssertionError(f"{what}: shape {tuple(g.shape)}, reference {tuple(r.shape)}")
        if exact or got.dtype not in EPS:
            bad = (g != r).nonzero()
        else:
            tol = 4 * EPS[got.dtype] * (scale.reshape(-1) if scale is not None else r.abs()) \
                + 1e-300
            bad = ((g - r).abs() > tol).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise AssertionError(f"rank {self.rank}: {what}: element {i}: got {g[i].item()!r}, "
                                 f"reference {r[i].item()!r} ({bad.numel()} wrong)")
        if same:
            self.digest.update(got.detach().contiguous().view(-1).view(torch.uint8)
                               .numpy().tobytes())


def data(rank: int, n: int, dtype: torch.dtype, salt: int, op: str = "SUM") -> torch.Tensor:
    """Rank's input: random, exact in dtype; small integers for PRODUCT (no overflow,
    products exact in float64), mixed signs elsewhere."""
    g = torch.Generator().manual_seed(7919 * salt + 104729 * rank + n)
    if op == "PRODUCT":
        x = torch.randint(1, 4, (n,), generator=g).to(torch.float64)
        x = x * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    elif dtype.is_floating_point:
        x = torch.randn(n, generator=g, dtype=torch.float64) * 8
    else:
        x = torch.randint(-1000, 1000, (n,), generator=g).to(torch.float64)
    return x.to(dtype)


def reduce_ref(xs: list, op: str) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.stack([x.to(torch.float64) for x in xs])
    scale = a.abs().sum(0)
    if op == "SUM":
        return a.sum(0), scale
    if op == "AVG":
        return a.sum(0) / len(xs), scale / len(xs)
    if op == "PRODUCT":
        return a.prod(0), a.prod(0).abs()
    if op == "MIN":
        return a.min(0).values, a.abs().max(0).values
    return a.max(0).values, a.abs().max(0).values


def mode_colls(rank: int, n: int) -> None:
    chk = Check(rank)
    salt = 1
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int32):
        for op in OPS:
            if op == "AVG" and not dtype.is_floating_point:
                continue
            for async_op in (False, True):
                salt += 1
                count = 1000 + salt
                xs = [data(r, count, dtype, salt, op) for r in range(n)]
                ref, scale = reduce_ref(xs, op)
                t = xs[rank].clone()
                w = dist.all_reduce(t, op=OPS[op], async_op=async_op)
                if async_op:
                    assert w is not None
                    w.wait()
                chk.close(t, ref, scale, f"all_reduce {dtype} {op} async={async_op}",
                          same=True)
                if op == "SUM" and dtype == torch.float32:
                    # arcomm's sums are the rank-order sum ((x0 + x1) + x2) + ... in f32
                    acc = xs[0].clone()
                    for x in xs[1:]:
                        acc += x
                    if not torch.equal(acc, t) and dist.get_backend() == "arcomm":
                        raise AssertionError(f"rank {rank}: f32 sum is not the rank-order "
                                             f"sum: {(acc - t).abs().max().item()}")
                # reduce to the last rank
                t = xs[rank].clone()
                w = dist.reduce(t, dst=n - 1, op=OPS[op], async_op=async_op)
                if async_op:
                    w.wait()
                if rank == n - 1:
                    chk.close(t, ref, scale, f"reduce {dtype} {op}")
                else:
                    chk.close(t, xs[rank].to(torch.float64), None, "reduce (not root)",
                              exact=True)
        # reduce_scatter (list and tensor forms), SUM and MAX
        for op in ("SUM", "MAX"):
            salt += 1
            blk = 37
            xs = [data(r, n * blk, dtype, salt) for r in range(n)]
            ref, scale = reduce_ref(xs, op)
            mine = slice(rank * blk, (rank + 1) * blk)
            out = torch.empty(blk, dtype=dtype)
            dist.reduce_scatter_tensor(out, xs[rank].clone(), op=OPS[op])
            chk.close(out, ref[mine], scale[mine], f"reduce_scatter_tensor {dtype} {op}")
            out2 = torch.empty(blk, dtype=dtype)
            w = dist.reduce_scatter(out2, list(xs[rank].clone().chunk(n)), op=OPS[op],
                                    async_op=True)
            w.wait()
            chk.close(out2, ref[mine], scale[mine], f"reduce_scatter {dtype} {op}")
        # broadcast from every root; all_gather (both forms); all_to_all_single
        salt += 1
        xs = [data(r, 301, dtype, salt) for r in range(n)]
        for root in range(n):
            t = xs[rank].clone()
            dist.broadcast(t, src=root)
            chk.close(t, xs[root].to(torch.float64), None, f"broadcast {dtype} root {root}",
                      exact=True)
        every = torch.cat([x.to(torch.float64) for x in xs])
        out = torch.empty(n * 301, dtype=dtype)
        dist.all_gather_into_tensor(out, xs[rank])
        chk.close(out, every, None, f"all_gather_into_tensor {dtype}", exact=True)
        outs = [torch.empty(301, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, xs[rank], async_op=True).wait()
        chk.close(torch.cat(outs), every, None, f"all_gather {dtype}", exact=True)
        salt += 1
        rows = 3 * n
        xs = [data(r, rows * 5, dtype, salt).reshape(rows, 5) for r in range(n)]
        out = torch.empty(rows, 5, dtype=dtype)
        dist.all_to_all_single(out, xs[rank])
        ref = torch.cat([x.to(torch.float64)[rank * 3:(rank + 1) * 3] for x in xs])
        chk.close(out, ref, None, f"all_to_all_single {dtype}", exact=True)
        out = torch.empty(rows, 5, dtype=dtype)
        dist.all_to_all_single(out, xs[rank], [3] * n, [3] * n)
        chk.close(out, ref, None, f"all_to_all_single even splits {dtype}", exact=True)
        outs = [torch.empty(3, 5, dtype=dtype) for _ in range(n)]
        dist.all_to_all(outs, list(xs[rank].chunk(n)))
        chk.close(torch.cat(outs), ref, None, f"all_to_all {dtype}", exact=True)
    # non-contiguous tensors: copied in and the results copied back
    salt += 1
    xs = [data(r, 64, torch.float32, salt).reshape(8, 8) for r in range(n)]
    ref, scale = reduce_ref([x.t() for x in xs], "SUM")
    t = xs[rank].clone().t()
    assert not t.is_contiguous()
    dist.all_reduce(t)
    chk.close(t, ref, scale, "all_reduce of a transposed tensor")
    t = xs[rank].clone().t()
    dist.broadcast(t, src=0)
    chk.close(t, xs[0].t().to(torch.float64), None, "broadcast of a transposed tensor",
              exact=True)
    out = torch.empty(8 * n, 2)[:, 0]
    assert not out.is_contiguous()
    dist.all_gather_into_tensor(out, xs[rank].reshape(-1)[:8])
    chk.close(out, torch.cat([x.reshape(-1)[:8].to(torch.float64) for x in xs]), None,
              "all_gather_into_tensor into a strided view", exact=True)
    # sub-groups: the even ranks, and every rank but the last
    for members in ([r for r in range(n) if r % 2 == 0], list(range(n - 1))):
        g = dist.new_group(members)
        salt += 1
        if rank in members:
            xs = [data(r, 500, torch.float32, salt) for r in members]
            ref, scale = reduce_ref(xs, "SUM")
            t = xs[members.index(rank)].clone()
            dist.all_reduce(t, group=g)
            chk.close(t, ref, scale, f"all_reduce in group {members}")
            gr = dist.get_group_rank(g, rank)
            assert gr == members.index(rank), (gr, members)
            out = torch.empty(500 * len(members))
            dist.all_gather_into_tensor(out, xs[gr], group=g)
            chk.close(out, torch.cat([x.to(torch.float64) for x in xs]), None,
                      f"all_gather in group {members}", exact=True)
            dist.barrier(group=g)
    dist.barrier()
    say(rank, f"ok {chk.n} {chk.digest.hexdigest()[:16]}")


def expect(exc: type, fn, *words: str) -> None:
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), f"{w!r} not in {str(e)!r}"
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"{fn}: raised {type(e).__name__}: {e}, not {exc.__name__}") from e
    raise AssertionError(f"{fn}: raised nothing")


def mode_errors(rank: int, n: int) -> None:
    t = torch.ones(4)
    for op in ("BAND", "BOR", "BXOR"):
        expect(NotImplementedError, lambda: dist.all_reduce(t, op=getattr(dist.ReduceOp, op)),
               f"ReduceOp.{op} is not served", "gloo")
    expect(ValueError, lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32),
                                               op=dist.ReduceOp.AVG),
           "ReduceOp.AVG is for floating-point tensors")
    splits = [1] * (n - 1) + [2]
    expect(NotImplementedError,
           lambda: dist.all_to_all_single(torch.empty(n + 1), torch.empty(n + 1), splits,
                                          splits),
           "uneven input splits", "pad every block")
    expect(NotImplementedError, lambda: dist.gather(t, [torch.empty(4)] * n if rank == 0
                                                    else None, dst=0),
           "gather is not served", "all_gather")
    expect(NotImplementedError,
           lambda: dist.all_to_all([torch.empty(2)] * n, [torch.empty(1 + (i == 0))
                                                          for i in range(n)]),
           "different sizes are not served")
    if arcomm._lib.has("comm_send"):
        expect(NotImplementedError, lambda: dist.send(t, (rank + 1) % n, tag=5),
               "tag 5 is not served", "call order")
    else:
        expect(NotImplementedError, lambda: dist.send(t, (rank + 1) % n),
               "has no comm_send")
    # after every refusal the group still works
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    assert t.tolist() == [n * (n - 1) / 2] * 3, t
    say(rank, "errors ok")


def mode_native(rank: int, n: int) -> None:
    """Which path serves each call: with the native path on, every hot call on a CPU
    tensor is counted by the native backend (native_calls) and what it does not serve is
    handed to the Python group (python_calls); with ARCOMM_TORCH_NATIVE=0 there is no
    native backend."""
    b = arcomm.torch.native_backend()  # the default group's backend, or None
    if os.environ.get("ARCOMM_TORCH_NATIVE", "1") == "0":
        assert b is None and not arcomm.torch.native_enabled(), b
        assert isinstance(dist.group.WORLD, arcomm.torch.ArcommProcessGroup)
        say(rank, "native off")
        return
    assert b is not None, "the native path is on but the group has no native backend"

    def served(native: bool, what: str, fn) -> None:
        n0, p0 = b.native_calls, b.python_calls
        fn()
        got = (b.native_calls - n0, b.python_calls - p0)
        want = (1, 0) if native else (0, 1)
        if got != want:
            raise AssertionError(f"rank {rank}: {what}: (native, python) calls {got}, "
                                 f"expected {want}")

    t = torch.ones(5)
    for op in OPS:
        t.fill_(2.0)
        served(True, f"all_reduce {op}", lambda: dist.all_reduce(t, op=OPS[op]))
        want = {"SUM": 2.0 * n, "AVG": 2.0, "PRODUCT": 2.0**n, "MIN": 2.0, "MAX": 2.0}[op]
        assert t.tolist() == [want] * 5, (op, t)
    t.fill_(1.0)
    served(True, "all_reduce async", lambda: dist.all_reduce(t, async_op=True).wait())
    assert t.tolist() == [float(n)] * 5, t
    t = torch.full((5,), float(rank))
    served(True, "broadcast", lambda: dist.broadcast(t, src=n - 1))
    assert t.tolist() == [float(n - 1)] * 5, t
    served(True, "reduce", lambda: dist.reduce(t, dst=0))
    out = torch.empty(5 * n)
    served(True, "all_gather_into_tensor",
           lambda: dist.all_gather_into_tensor(out, torch.full((5,), float(rank))))
    assert out.tolist() == [float(r) for r in range(n) for _ in range(5)], out
    out = torch.empty(2)
    served(True, "reduce_scatter_tensor",
           lambda: dist.reduce_scatter_tensor(out, torch.arange(2.0 * n)))
    assert out.tolist() == [2.0 * rank * n, (2.0 * rank + 1) * n], out
    out = torch.empty(n)
    served(True, "all_to_all_single",
           lambda: dist.all_to_all_single(out, torch.full((n,), float(rank))))
    assert out.tolist() == [float(r) for r in range(n)], out
    served(True, "barrier", lambda: dist.barrier())
    if arcomm._lib.has("comm_isend"):
        got = torch.empty(3)
        if rank % 2 == 0 and rank + 1 < n:
            served(True, "send", lambda: dist.send(torch.full((3,), 7.0), rank + 1))
        elif rank % 2 == 1:
            served(True, "recv", lambda: dist.recv(got, rank - 1))
            assert got.tolist() == [7.0] * 3, got
        # a ring of isend/irecv through batch_isend_irecv (the Python group alone has no
        # CPU backend for torch's coalescing manager)
        s, g = torch.full((3,), float(rank)), torch.empty(3)
        ops = [dist.P2POp(dist.isend, s, (rank + 1) % n),
               dist.P2POp(dist.irecv, g, (rank - 1) % n)]
        n0 = b.native_calls
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert b.native_calls - n0 == 2, b.native_calls - n0
        assert g.tolist() == [float((rank - 1) % n)] * 3, g
    # what the native backend hands to the Python group
    t = torch.ones(4, 4).t()
    served(False, "all_reduce of a transposed tensor", lambda: dist.all_reduce(t))
    assert t.tolist() == [[float(n)] * 4] * 4, t
    outs = [torch.empty(5) for _ in range(n)]
    served(False, "all_gather (list form)", lambda: dist.all_gather(outs, torch.ones(5)))
    served(False, "all_reduce BAND", lambda: expect(
        NotImplementedError, lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND),
        "ReduceOp.BAND is not served"))
    say(rank, f"native ok {b.native_calls} {b.python_calls}")


def mode_fail(rank: int, n: int, how: str, async_op: bool) -> None:
    """A failure raises arcomm.Error on every rank, within the bound, instead of hanging:
    how = mismatch (rank r all_reduces 4 + r elements) or timeout (rank 0 all_reduces,
    the others never call; the group's timeout is 3 s)."""
    t0 = time.monotonic()
    if how == "timeout" and rank != 0:
        time.sleep(8)
        say(rank, "fail idle")
        return
    t = torch.ones(4 + (rank if how == "mismatch" else 0))
    try:
        w = dist.all_reduce(t, async_op=async_op)
        if async_op:
            w.wait()
    except arcomm.Error as e:
        say(rank, f"fail {e.status} {time.monotonic() - t0:.1f}")
        return
    raise AssertionError(f"rank {rank}: all_reduce ({how}) raised nothing")


def mlp(seed: int, d: int, h: int, dtype=torch.float32) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.Tanh(), torch.nn.Linear(h, 4))
    return m.to(dtype)


def mode_ddp(rank: int, n: int, steps: int) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mlp(5, 16, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(24, 16, generator=g)
        y = torch.randn(24, 4, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        # every rank's loss, so that each line holds the whole step
        all_l = torch.zeros(n)
        all_l[rank] = loss.detach()
        dist.all_reduce(all_l)
        losses.append(",".join(float(v).hex() for v in all_l))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()[:16]
    say(rank, f"ddp {digest} " + " ".join(losses))


def mode_tp(rank: int, n: int) -> None:
    """y = relu(x W1) W2: W1 split by columns, W2 by rows; each rank's partial product
    summed by all_reduce (async), while the next batch's first matmul runs."""
    d, h = 24, 16 * n
    torch.manual_seed(11)
    w1 = torch.randn(d, h, dtype=torch.float64)
    w2 = torch.randn(h, d, dtype=torch.float64)
    cols = slice(rank * h // n, (rank + 1) * h // n)
    w1r, w2r = w1[:, cols].contiguous(), w2[cols, :].contiguous()
    batches = [torch.randn(32, d, dtype=torch.float64, generator=torch.Generator()
                           .manual_seed(50 + b)) for b in range(4)]
    a = torch.relu(batches[0] @ w1r)
    outs = []
    for b in range(len(batches)):
        y = a @ w2r
        work = dist.all_reduce(y, async_op=True)
        if b + 1 < len(batches):
            a = torch.relu(batches[b + 1] @ w1r)  # independent of y: overlaps the sum
        work.wait()
        outs.append(y)
    worst = 0.0
    for b, y in enumerate(outs):
        ref = torch.relu(batches[b] @ w1) @ w2
        scale = torch.relu(batches[b] @ w1).abs() @ w2.abs()
        err = ((y - ref).abs() / scale.clamp_min(1e-300)).max().item()
        worst = max(worst, err)
        if err > 64 * 2.0**-52:
            raise AssertionError(f"rank {rank}: tp batch {b}: relative error {err}")
    say(rank, f"tp ok {worst:.3g}")


def mode_pipe(rank: int, n: int) -> None:
    """Pairs (0, 1), (2, 3)...: the even rank runs stage 0 (Linear + tanh), sends the
    activations, receives their gradient, backpropagates; the odd rank runs stage 1
    (Linear + loss); micro-batches with isend/irecv; against the unsplit model."""
    if not arcomm._lib.has("comm_send"):
        say(rank, "pipe skip: the library has no comm_send")
        return
    if n % 2:
        raise SystemExit("pipe needs an even number of ranks")
    peer = rank ^ 1
    full = mlp(3, 12, 20, torch.float64)
    first, last = full[:2], full[2]
    micro = [(torch.randn(8, 12, dtype=torch.float64, generator=torch.Generator()
                          .manual_seed(70 + i)),
              torch.randn(8, 4, dtype=torch.float64, generator=torch.Generator()
                          .manual_seed(90 + i))) for i in range(3)]
    losses = []
    if rank % 2 == 0:
        acts = []
        for x, _ in micro:
            a = first(x)
            acts.append(a)
            dist.send(a.detach().contiguous(), peer)
        for a in acts:
            ga = torch.empty_like(a)
            dist.irecv(ga, peer).wait()
            a.backward(ga)
        grads = [p.grad for p in first.parameters()]
    else:
        works, bufs = [], []
        for x, _ in micro:
            buf = torch.empty(x.shape[0], 20, dtype=torch.float64)
            works.append(dist.irecv(buf, peer))
            bufs.append(buf)
        sends = []
        for w, buf, (_, y) in zip(works, bufs, micro):
            w.wait()
            a = buf.requires_grad_()
            loss = torch.nn.functional.mse_loss(last(a), y)
            loss.backward()
            losses.append(loss.item())
            sends.append(dist.isend(a.grad.contiguous(), peer))
        for s in sends:
            s.wait()
        grads = [p.grad for p in last.parameters()]
    # the unsplit model, float64
    ref = mlp(3, 12, 20, torch.float64)
    for x, y in micro:
        torch.nn.functional.mse_loss(ref(x), y).backward()
    refs = [p.grad for p in (ref[:2] if rank % 2 == 0 else ref[2]).parameters()]
    for g, r in zip(grads, refs):
        if not torch.allclose(g, r, rtol=1e-12, atol=1e-14):
            raise AssertionError(f"rank {rank}: pipe gradient differs by "
                                 f"{(g - r).abs().max().item()}")
    say(rank, f"pipe ok {len(micro)}")


def mode_cuda(rank: int, n: int) -> None:
    """CUDA tensors (rank r on cuda:r), the calls issued on a side stream: all_reduce
    (sync and async_op, whose wait() orders the current stream after it), broadcast,
    all_gather_into_tensor, reduce_scatter_tensor; against float64 references."""
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    chk = Check(rank)
    side = torch.cuda.Stream(dev)
    for salt, count in ((1, 1), (2, 4099), (3, 1 << 20)):
        xs = [data(r, count, torch.float32, salt) for r in range(n)]
        ref, scale = reduce_ref(xs, "SUM")
        with torch.cuda.stream(side):
            t = xs[rank].to(dev)
            dist.all_reduce(t)
            u = xs[rank].to(dev)
            w = dist.all_reduce(u, async_op=True)
        w.wait()  # the default stream now waits for the side stream's call
        torch.cuda.synchronize(dev)
        chk.close(t.cpu(), ref, scale, f"cuda all_reduce {count}", same=True)
        chk.close(u.cpu(), ref, scale, f"cuda all_reduce async {count}", same=True)
        b = xs[rank].to(dev)
        dist.broadcast(b, src=n - 1)
        chk.close(b.cpu(), xs[n - 1].to(torch.float64), None, "cuda broadcast", exact=True)
        out = torch.empty(n * count, device=dev)
        dist.all_gather_into_tensor(out, xs[rank].to(dev))
        chk.close(out.cpu(), torch.cat([x.to(torch.float64) for x in xs]), None,
                  "cuda all_gather_into_tensor", exact=True)
        ys = [data(r, n * count, torch.float32, salt + 10) for r in range(n)]
        ref, scale = reduce_ref(ys, "SUM")
        out = torch.empty(count, device=dev)
        dist.reduce_scatter_tensor(out, ys[rank].to(dev))
        mine = slice(rank * count, (rank + 1) * count)
        chk.close(out.cpu(), ref[mine], scale[mine], "cuda reduce_scatter_tensor")
    say(rank, f"cuda ok {chk.n} {chk.digest.hexdigest()[:16]}")


def fake_nonblocking() -> None:
    """Stands in for a library with the non-blocking calls (comm_iallreduce ...,
    comm_wait, comm_test): each comm_i* records its blocking call and sets the request;
    comm_wait runs every recorded call up to its own, in issue order (comm_test: not
    done until waited for).  So results appear only once Work.wait() ran: a result read
    before, or a temporary copied out before, is caught by the checks."""
    lib = arcomm._lib.lib()
    pending: list = []  # (request id, thunk)
    ids = iter(range(1, 1 << 30))
    real = {"comm_iallreduce": lib.comm_allreduce, "comm_ibroadcast": lib.comm_broadcast,
            "comm_ireduce": lib.comm_reduce, "comm_iallgather": lib.comm_allgather,
            "comm_ireduce_scatter": lib.comm_reduce_scatter, "comm_ialltoall": lib.comm_alltoall}

    def issue(fn):
        def call(h, *args):
            *rest, preq = args
            rid = next(ids)
            pending.append((rid, lambda: fn(h, *rest, None)))
            preq._obj.value = rid
            return 0
        return call

    def ibarrier(h, preq):
        rid = next(ids)
        pending.append((rid, lambda: lib.comm_barrier(h)))
        preq._obj.value = rid
        return 0

    def wait(preq):
        rid = preq._obj.value
        while pending and pending[0][0] <= rid:
            st = pending.pop(0)[1]()
            if st:
                return st
        preq._obj.value = None
        return 0

    def test(preq, pdone):
        pdone._obj.value = 0
        return 0

    for name, fn in real.items():
        setattr(lib, name, issue(fn))
    lib.comm_ibarrier = ibarrier
    lib.comm_wait = wait
    lib.comm_test = test
    has = arcomm._lib.has
    arcomm._lib.has = lambda name: name in real or name in (
        "comm_ibarrier", "comm_wait", "comm_test") or has(name)


def main() -> int:
    mode, backend = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    if mode.endswith("-fakeasync"):
        mode = mode[: -len("-fakeasync")]
        fake_nonblocking()
    kw = {"timeout": timedelta(seconds=3)} if mode == "fail" else {}
    if backend == "arcomm-url":
        dist.init_process_group("arcomm", init_method="arcomm://", **kw)
    else:
        dist.init_process_group(backend, **kw)
    rank, n = dist.get_rank(), dist.get_world_size()
    try:
        assert dist.get_backend() == backend.split("-")[0], dist.get_backend()
        if mode == "colls":
            mode_colls(rank, n)
        elif mode == "errors":
            mode_errors(rank, n)
        elif mode == "ddp":
            mode_ddp(rank, n, int(sys.argv[3]))
        elif mode == "tp":
            mode_tp(rank, n)
        elif mode == "pipe":
            mode_pipe(rank, n)
        elif mode == "cuda":
            mode_cuda(rank, n)
        elif mode == "native":
            mode_native(rank, n)
        elif mode == "fail":
            mode_fail(rank, n, sys.argv[3], sys.argv[4] == "async")
            os._exit(0)  # the communicator is broken: nothing to destroy cleanly
        else:
            raise SystemExit(f"unknown mode {mode}")
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # no destroy: the peers' calls fail on their own (peer gone)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
