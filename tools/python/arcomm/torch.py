# SPDX-License-Identifier: MIT
"""arcomm as a ``torch.distributed`` backend: ``import arcomm.torch`` registers ``arcomm``.

    import torch.distributed as dist
    import arcomm.torch  # noqa: F401  (registers the backend)
    dist.init_process_group("arcomm")          # under torchrun (or with RANK,
                                               # WORLD_SIZE, MASTER_ADDR/PORT set)
    dist.init_process_group("arcomm", init_method="arcomm://")   # under arrun, or
                                               # Open MPI's mpirun on one host

The native path (on unless ``ARCOMM_TORCH_NATIVE=0``): each process group's backend is
a C++ ``c10d::Backend`` (``csrc/torch_backend.cpp``, compiled against the torch in use
at first import and cached, see :func:`_native`) in front of an
:class:`ArcommProcessGroup`: the calls on one contiguous CPU tensor go from torch's
dispatcher straight to libarcomm (no Python, no GIL), everything else to the Python
group, under the GIL.  That is cheaper than a Python group calling into C++ for its hot
calls, which would still pay torch's trampoline into Python, the GIL and the Python
method on every call.  Without it (off, or a failed build: one warning) the group is
the Python :class:`ArcommProcessGroup` alone.

Each :class:`ArcommProcessGroup` (a Python ``ProcessGroup``) works over
one host communicator (:class:`arcomm.Comm`) and, from its first call on CUDA tensors,
one CUDA communicator.  Its ranks agree on the communicator's id through the store
torch gives the group: its rank 0 makes one (``arcomm.new_id``) and sets it, the others
read it, then every rank joins (``comm_init``).  ``new_group`` makes a new communicator
the same way over the group's ranks alone (torch asks only the members to build it).

What is served (the rest raises ``NotImplementedError`` naming what to do instead):
all_reduce (SUM, AVG, PRODUCT, MIN, MAX), broadcast, reduce, all_gather (list form and
all_gather_into_tensor), reduce_scatter (list form and reduce_scatter_tensor),
all_to_all_single with even splits, all_to_all with equal-sized tensors, barrier,
send/recv/isend/irecv (when the library has ``comm_send``), ``async_op=True``.

Host tensors: where the loaded library has the non-blocking calls (``comm_iallreduce``
...), each call is issued without blocking and its Work's ``wait()`` completes it
(``comm_wait``); the tensors are held until then.  Without them, each call completes
before it returns and its Work is already done.  CUDA tensors: each call is ordered on
the tensor's current stream (``torch.cuda.current_stream()``) and returns once
enqueued; ``Work.wait()`` makes the caller's current stream wait for it (as NCCL's
Work does).  Non-contiguous tensors are copied into contiguous ones and the results
copied back.
"""
from __future__ import annotations

import ctypes
import os
import tempfile
from ctypes import byref, c_int, c_void_p
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp
from torch.futures import Future

from . import _buffers, _lib, _torch_build
from ._comm import Comm
from ._errors import Error, last_error

__all__ = ["ArcommProcessGroup", "BACKEND", "native_backend", "native_enabled"]

#: The backend's name for ``init_process_group``.
BACKEND = "arcomm"

_OPS = (
    (ReduceOp.SUM, "sum", 0),
    (ReduceOp.AVG, "avg", 4),
    (ReduceOp.PRODUCT, "prod", 3),
    (ReduceOp.MIN, "min", 2),
    (ReduceOp.MAX, "max", 1),
)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DTYPES = _buffers._torch_codes(torch)


def _op(op: Any, t: torch.Tensor | None, call: str) -> tuple[str, int]:
    for rop, name, code in _OPS:
        if op == rop:
            if code == 4 and t is not None and t.dtype not in _FLOATS:
                raise ValueError(
                    f"arcomm.torch: {call}: ReduceOp.AVG is for floating-point tensors "
                    f"(got {t.dtype}); use SUM and divide"
                )
            return name, code
    raise NotImplementedError(
        f"arcomm.torch: {call}: ReduceOp.{_op_name(op)} is not served (SUM, AVG, PRODUCT, MIN, MAX are); "
        "for PREMUL_SUM scale the tensor first and use SUM; for BAND/BOR/BXOR use the "
        "gloo backend for this group"
    )


def _op_name(op: Any) -> str:
    for name, member in getattr(ReduceOp.RedOpType, "__members__", {}).items():
        try:
            if op == member:
                return name
        except Exception:  # noqa: BLE001 - a ReduceOp that compares with nothing
            pass
    return str(op)


class _Work(dist._Work):
    """One call's Work: done already, a pending host request (``comm_wait`` completes
    it), or a CUDA call enqueued on a stream (``wait`` orders the current stream after
    it).  ``finish`` (copying results out of temporaries) runs once, when complete."""

    def __init__(self, result: list, req: Any = None, comm: Comm | None = None,
                 finish: Callable[[], None] | None = None, event: Any = None,
                 keep: Any = None) -> None:
        super().__init__()
        self._result = result
        self._req = req
        self._comm = comm
        self._event = event
        self._keep = keep  # tensors and resolved buffers the pending call uses
        if req is None and event is None and finish is not None:
            finish()
            finish = None
        self._finish = finish

    def _done(self) -> None:
        f, self._finish = self._finish, None
        self._keep = None
        if f is not None:
            f()

    def _complete(self) -> None:
        req = self._req
        if req is not None:
            self._req = None
            st = _lib.lib().comm_wait(byref(req))
            if st:
                h = self._comm._h if self._comm is not None else None
                raise Error(st, last_error(h), "comm_wait")
            self._done()

    def is_completed(self) -> bool:
        if self._req is not None:
            done = c_int(0)
            st = _lib.lib().comm_test(byref(self._req), byref(done))
            if st:
                self._req = None
                h = self._comm._h if self._comm is not None else None
                raise Error(st, last_error(h), "comm_test")
            if not done.value:
                return False
            self._req = None
            self._done()
        if self._event is not None:
            return self._event.query()
        return True

    def wait(self, timeout: timedelta | None = None) -> bool:
        self._complete()
        if self._event is not None:
            torch.cuda.current_stream().wait_event(self._event)
        return True

    def __del__(self) -> None:
        # A pending host request nobody waited for: completed here, so that its
        # buffers are not freed while the library still uses them.
        if getattr(self, "_req", None) is not None:
            try:
                self._complete()
            except Exception:  # noqa: BLE001 - nowhere to raise it
                pass

    def get_future(self) -> Future:
        # torch's Futures complete on their own; this Work completes when waited for,
        # so the future is given complete (DDP's comm hooks chain on it).
        self.wait()
        fut: Future = Future()
        fut.set_result(self._result)
        return fut

    def result(self) -> list:
        return self._result


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _contig(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


class ArcommProcessGroup(dist.ProcessGroup):
    """One torch process group over arcomm communicators (see the module's docstring)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._store = store
        self._timeout_ms = _timeout_ms(timeout)
        self._host = self._join("host", -1)
        self._cuda: Comm | None = None
        self._lib = _lib.lib()
        self._nonblocking = _lib.has("comm_iallreduce")

    # ---- communicators ----

    def _join(self, device: str, index: int) -> Comm:
        """Every rank of the group joins one new communicator; the id goes through the
        group's store (rank 0 sets it; it is deleted once every rank has joined)."""
        key = f"arcomm-id-{device}"
        rank, size = self.rank(), self.size()
        if rank == 0:
            import arcomm

            cid = arcomm.new_id()
            self._store.set(key, cid)
        else:
            cid = self._store.get(key).decode()
        c = Comm(cid, rank, size, device=device, device_index=index,
                 timeout_ms=self._timeout_ms)
        if rank == 0:
            try:
                self._store.delete_key(key)
            except Exception:  # noqa: BLE001 - a store without delete keeps the key
                pass
        return c

    def _comm(self, t: torch.Tensor) -> Comm:
        if t.device.type == "cpu":
            return self._host
        if t.device.type != "cuda":
            raise ValueError(f"arcomm.torch: tensors on {t.device} are not served (cpu, cuda)")
        if self._cuda is None:
            # Collective over the group: the group's first call on CUDA tensors (every
            # rank makes it, as every collective).
            self._cuda = self._join("cuda", t.device.index
                                    if t.device.index is not None else torch.cuda.current_device())
        return self._cuda

    def getBackendName(self) -> str:
        return BACKEND

    def __repr__(self) -> str:
        return f"<arcomm.torch.ArcommProcessGroup rank {self.rank()} of {self.size()}>"

    def shutdown(self) -> None:
        for c in (self._cuda, self._host):
            if c is not None:
                c.close()

    def abort(self) -> None:
        for c in (self._cuda, self._host):
            if c is not None:
                c.abort()

    def _native_failure(self, st: int, call: str) -> None:
        """Raises what a call of the native backend that returned st raises: what a
        signal handler raised while it waited (the wait hook keeps it), else arcomm.Error
        with comm_last_error's message, as the Python path does."""
        c = self._host
        hs = c._hs
        exc, why = hs.exc, hs.why
        hs.exc, hs.why = None, ""
        if exc is not None:
            raise exc
        h = c._h
        if h is None:
            raise Error(st, last_error(None), call)
        raise c._failure(st, h, call, why)

    # ---- how one call runs ----

    def _issue(self, call: str, t: torch.Tensor, result: list, blocking: Callable[[Comm], Any],
               nonblocking: tuple | None, finish: Callable[[], None] | None,
               keep: Any) -> _Work:
        """blocking(comm) for CUDA tensors (then an event on the stream) and where the
        library has no non-blocking call; else ``nonblocking`` = (function name, build)
        where build(comm) gives the C arguments after the handle (without the request)
        and whatever holds their memory."""
        c = self._comm(t)
        if t.device.type == "cuda":
            blocking(c)
            if finish is not None:
                finish()  # copies out, ordered after the call on the same stream
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(t.device))
            return _Work(result, event=ev, keep=keep)
        if nonblocking is not None and _lib.has(nonblocking[0]):
            name, build = nonblocking
            args, held = build(c)
            req = c_void_p()
            c._run(call, getattr(self._lib, name), *args, byref(req))
            if not req.value:
                return _Work(result, finish=finish)
            return _Work(result, req=req, comm=c, finish=finish, keep=(keep, held))
        blocking(c)
        return _Work(result, finish=finish)

    @staticmethod
    def _one(tensors: list, call: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise ValueError(
                f"arcomm.torch: {call}: one tensor per call (got {len(tensors)}); "
                "make one call per tensor"
            )
        return tensors[0]

    @staticmethod
    def _out(t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None] | None]:
        """A contiguous tensor to write into, and what copies it back into t."""
        if t.is_contiguous():
            return t, None
        tmp = t.contiguous()
        return tmp, lambda: t.copy_(tmp)

    @staticmethod
    def _chain(*fs: Callable[[], None] | None) -> Callable[[], None] | None:
        fs2 = [f for f in fs if f is not None]
        if not fs2:
            return None

        def run() -> None:
            for f in fs2:
                f()
        return run

    # ---- collectives ----

    def allreduce(self, tensors: list, opts: Any = None) -> _Work:
        call = "all_reduce"
        if len(tensors) == 1 and not self._nonblocking and opts is not None:
            # Fast path: one contiguous CPU tensor of an arcomm dtype, SUM, no
            # non-blocking calls in the library: straight to comm_allreduce.
            t = tensors[0]
            code = _DTYPES.get(t.dtype)
            if (code is not None and opts.reduceOp == ReduceOp.SUM
                    and t.device.type == "cpu" and t.is_contiguous() and not t.is_neg()):
                n = t.numel()
                if n:
                    p = t.data_ptr()
                    c = self._host
                    c._run(call, c._allreduce, p, p, n, code, 0, None)
                return _Work(tensors)
        t = self._one(tensors, call)
        name, code = _op(opts.reduceOp if opts is not None else ReduceOp.SUM, t, call)
        buf, fin = self._out(t)

        def build(c: Comm) -> tuple:
            b = c._buf(buf, True, "tensor", None, None, call)
            return (b[0], b[0], b[1], b[2], code), b

        with torch.no_grad():
            return self._issue(call, t, tensors, lambda c: c.allreduce(buf, op=name),
                               ("comm_iallreduce", build), fin, buf)

    def allreduce_coalesced(self, tensors: list, opts: Any = None) -> _Work:
        works = [self.allreduce([t], opts) for t in tensors]
        for w in works[:-1]:
            w.wait()
        return works[-1] if works else _Work(tensors)

    def broadcast(self, tensors: list, opts: Any = None) -> _Work:
        call = "broadcast"
        t = self._one(tensors, call)
        root = opts.rootRank if opts is not None else 0
        buf, fin = self._out(t)

        def build(c: Comm) -> tuple:
            b = c._buf(buf, True, "tensor", None, None, call)
            return (b[0], b[0], b[1], b[2], root), b

        with torch.no_grad():
            return self._issue(call, t, tensors, lambda c: c.broadcast(buf, root=root),
                               ("comm_ibroadcast", build), fin, buf)

    def reduce(self, tensors: list, opts: Any = None) -> _Work:
        call = "reduce"
        t = self._one(tensors, call)
        root = opts.rootRank if opts is not None else 0
        name, code = _op(opts.reduceOp if opts is not None else ReduceOp.SUM, t, call)
        buf, fin = self._out(t)
        if self.rank() != root:
            fin = None  # only root's tensor is written

        def build(c: Comm) -> tuple:
            b = c._buf(buf, True, "tensor", None, None, call)
            return (b[0], b[0], b[1], b[2], code, root), b

        with torch.no_grad():
            return self._issue(call, t, tensors,
                               lambda c: c.reduce(buf, op=name, root=root),
                               ("comm_ireduce", build), fin, buf)

    def _gather_into(self, call: str, out: torch.Tensor, inp: torch.Tensor, result: list,
                     fin: Callable[[], None] | None) -> _Work:
        n = self.size()
        if out.numel() != n * inp.numel() or out.dtype != inp.dtype:
            raise ValueError(
                f"arcomm.torch: {call}: the output needs {n} x the input's {inp.numel()} "
                f"elements of {inp.dtype} (got {out.numel()} of {out.dtype})"
            )
        src = _contig(inp)

        def build(c: Comm) -> tuple:
            s = c._buf(src, False, "input", None, None, call)
            r = c._buf(out, True, "output", None, None, call)
            return (s[0], r[0], s[1], s[2]), (s, r)

        with torch.no_grad():
            return self._issue(call, out, result, lambda c: c.allgather(src, out),
                               ("comm_iallgather", build), fin, (src, out))

    def allgather(self, outputs: list, inputs: list, opts: Any = None) -> _Work:
        call = "all_gather"
        inp = self._one(inputs, call)
        outs = self._one(outputs, call)
        if len(outs) != self.size():
            raise ValueError(f"arcomm.torch: {call}: {len(outs)} output tensors for "
                             f"{self.size()} ranks")
        for o in outs:
            if o.numel() != inp.numel() or o.dtype != inp.dtype or o.device != inp.device:
                raise ValueError(
                    f"arcomm.torch: {call}: every output tensor must match the input "
                    f"({inp.numel()} elements of {inp.dtype} on {inp.device}); uneven "
                    "all_gather is not served"
                )
        flat = torch.empty(self.size() * inp.numel(), dtype=inp.dtype, device=inp.device)

        def fin() -> None:
            with torch.no_grad():
                for i, o in enumerate(outs):
                    o.copy_(flat[i * inp.numel():(i + 1) * inp.numel()].view_as(o))

        return self._gather_into(call, flat, inp, outputs, fin)

    def all_gather_single(self, output: torch.Tensor, inp: torch.Tensor,
                          opts: Any = None) -> _Work:
        buf, fin = self._out(output)
        return self._gather_into("all_gather_into_tensor", buf, inp, [output], fin)

    _allgather_base = all_gather_single

    def _scatter_from(self, call: str, out: torch.Tensor, inp: torch.Tensor, opts: Any,
                      result: list, fin: Callable[[], None] | None) -> _Work:
        n = self.size()
        name, code = _op(opts.reduceOp if opts is not None else ReduceOp.SUM, out, call)
        if inp.numel() != n * out.numel() or out.dtype != inp.dtype:
            raise ValueError(
                f"arcomm.torch: {call}: the input needs {n} x the output's {out.numel()} "
                f"elements of {out.dtype} (got {inp.numel()} of {inp.dtype})"
            )
        src = _contig(inp)

        def build(c: Comm) -> tuple:
            s = c._buf(src, False, "input", None, None, call)
            r = c._buf(out, True, "output", None, None, call)
            return (s[0], r[0], r[1], r[2], code), (s, r)

        with torch.no_grad():
            return self._issue(call, out, result,
                               lambda c: c.reduce_scatter(src, out, op=name),
                               ("comm_ireduce_scatter", build), fin, (src, out))

    def reduce_scatter(self, outputs: list, inputs: list, opts: Any = None) -> _Work:
        call = "reduce_scatter"
        out = self._one(outputs, call)
        ins = self._one(inputs, call)
        if len(ins) != self.size():
            raise ValueError(f"arcomm.torch: {call}: {len(ins)} input tensors for "
                             f"{self.size()} ranks")
        if any(i.numel() != out.numel() for i in ins):
            raise ValueError(f"arcomm.torch: {call}: every input tensor must have the "
                             f"output's {out.numel()} elements; uneven reduce_scatter is "
                             "not served")
        buf, fin = self._out(out)
        return self._scatter_from(call, buf, _flat(ins), opts, outputs, fin)

    def reduce_scatter_single(self, output: torch.Tensor, inp: torch.Tensor,
                              opts: Any = None) -> _Work:
        buf, fin = self._out(output)
        return self._scatter_from("reduce_scatter_tensor", buf, inp, opts, [output], fin)

    _reduce_scatter_base = reduce_scatter_single

    def _alltoall_flat(self, call: str, out: torch.Tensor, inp: torch.Tensor, result: list,
                       fin: Callable[[], None] | None) -> _Work:
        n = self.size()
        if out.numel() != inp.numel() or inp.numel() % n or out.dtype != inp.dtype:
            raise ValueError(
                f"arcomm.torch: {call}: input and output need the same number of elements, "
                f"a multiple of {n} ranks, of one dtype (got {inp.numel()} of {inp.dtype} "
                f"and {out.numel()} of {out.dtype})"
            )
        src = _contig(inp)

        def build(c: Comm) -> tuple:
            s = c._buf(src, False, "input", None, None, call)
            r = c._buf(out, True, "output", None, None, call)
            return (s[0], r[0], s[1] // n, s[2]), (s, r)

        with torch.no_grad():
            return self._issue(call, out, result, lambda c: c.alltoall(src, out),
                               ("comm_ialltoall", build), fin, (src, out))

    def all_to_all_single(self, output: torch.Tensor, inp: torch.Tensor,
                          output_split_sizes: list, input_split_sizes: list,
                          opts: Any = None) -> _Work:
        call = "all_to_all_single"
        n = self.size()
        for what, t, splits in (("input", inp, input_split_sizes),
                                ("output", output, output_split_sizes)):
            if splits:
                rows = t.shape[0] if t.dim() else 1
                if len(splits) != n or any(s * n != rows for s in splits):
                    raise NotImplementedError(
                        f"arcomm.torch: {call}: uneven {what} splits {list(splits)} are not "
                        f"served (arcomm's alltoall moves equal blocks): pad every block to "
                        "the largest split and pass even splits (or none), or use the gloo "
                        "backend for this call"
                    )
        if inp.dim() and inp.shape[0] % n:
            raise ValueError(f"arcomm.torch: {call}: the first dimension ({inp.shape[0]}) "
                             f"must be a multiple of {n} ranks")
        buf, fin = self._out(output)
        return self._alltoall_flat(call, buf, inp, [output], fin)

    alltoall_base = all_to_all_single

    def alltoall(self, outputs: list, inputs: list, opts: Any = None) -> _Work:
        call = "all_to_all"
        n = self.size()
        if len(inputs) != n or len(outputs) != n:
            raise ValueError(f"arcomm.torch: {call}: {n} input and output tensors needed")
        m = inputs[0].numel()
        if any(t.numel() != m for t in list(inputs) + list(outputs)):
            raise NotImplementedError(
                f"arcomm.torch: {call}: tensors of different sizes are not served "
                "(arcomm's alltoall moves equal blocks): pad them to one size"
            )
        flat_out = torch.empty(n * m, dtype=inputs[0].dtype, device=inputs[0].device)

        def fin() -> None:
            with torch.no_grad():
                for i, o in enumerate(outputs):
                    o.copy_(flat_out[i * m:(i + 1) * m].view_as(o))

        return self._alltoall_flat(call, flat_out, _flat(inputs), outputs, fin)

    def barrier(self, opts: Any = None) -> _Work:
        c = self._host
        if _lib.has("comm_ibarrier"):
            req = c_void_p()
            c._run("barrier", self._lib.comm_ibarrier, byref(req))
            if req.value:
                return _Work([], req=req, comm=c)
            return _Work([])
        c.barrier()
        return _Work([])

    # ---- point-to-point ----

    def _p2p(self, call: str, tensors: list, peer: int, tag: int, send: bool) -> _Work:
        t = self._one(tensors, call)
        if tag:
            raise NotImplementedError(
                f"arcomm.torch: {call}: tag {tag} is not served: arcomm matches sends and "
                "receives in call order per pair of ranks; pass tag=0 and issue them in "
                "the same order on both ranks"
            )
        fn_name = "comm_send" if send else "comm_recv"
        if not _lib.has(fn_name):
            raise NotImplementedError(
                f"arcomm.torch: {call}: the loaded libarcomm ({_lib.lib_path()}) has no "
                f"{fn_name}: use a newer arcomm for send/recv"
            )
        c = self._comm(t)
        if send:
            buf, fin = _contig(t), None
        else:
            buf, fin = self._out(t)
        b = c._buf(buf, not send, "tensor", None, None, call)
        nb_name = "comm_isend" if send else "comm_irecv"
        if t.device.type != "cuda" and _lib.has(nb_name):
            # Queued with this rank's other asynchronous calls: a send and a receive
            # issued back to back run as one group (no deadlock), and isend/irecv return
            # at once; the Work's wait completes the request.
            req = c_void_p()
            c._run(call, getattr(self._lib, nb_name), b[0], b[1], b[2], peer, byref(req))
            if req.value:
                return _Work(tensors, req=req, comm=c, finish=fin, keep=(buf, b))
            return _Work(tensors, finish=fin)
        stream = b[5] if t.device.type == "cuda" else None
        c._run(call, getattr(self._lib, fn_name), b[0], b[1], b[2], peer, stream)
        if t.device.type == "cuda":
            if fin is not None:
                fin()  # ordered after the receive on the same stream
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(t.device))
            return _Work(tensors, event=ev, keep=(buf, b))
        return _Work(tensors, finish=fin)

    def send(self, tensors: list, dst: int, tag: int = 0) -> _Work:
        return self._p2p("send", tensors, dst, tag, True)

    def recv(self, tensors: list, src: int, tag: int = 0) -> _Work:
        with torch.no_grad():
            return self._p2p("recv", tensors, src, tag, False)

    def recv_anysource(self, tensors: list, tag: int = 0) -> _Work:
        raise NotImplementedError(
            "arcomm.torch: recv from any source is not served: name the source rank"
        )

    # ---- what is not served ----

    def gather(self, outputs: list, inputs: list, opts: Any = None) -> _Work:
        raise NotImplementedError(
            "arcomm.torch: gather is not served: use all_gather (every rank gets the "
            "result) or a gloo group for it"
        )

    def scatter(self, outputs: list, inputs: list, opts: Any = None) -> _Work:
        raise NotImplementedError(
            "arcomm.torch: scatter is not served: broadcast the whole tensor and take "
            "this rank's slice, or use a gloo group for it"
        )


def _timeout_ms(timeout: Any) -> int:
    if not isinstance(timeout, timedelta):
        return 0
    ms = int(timeout.total_seconds() * 1000)
    return max(0, min(ms, 2**31 - 1))


def _create(opts: Any, backend_options: Any = None) -> Any:
    """The group's backend: the native one in front of an ArcommProcessGroup where the
    native path is on (see the module's docstring), else the ArcommProcessGroup."""
    pg = ArcommProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    mod = _native()
    if mod is None:
        return pg
    # The C functions' addresses, from the library ctypes loaded.  A library without the
    # non-blocking calls, or whose functions a program replaced with Python ones (as a
    # test does to stand in for them), is served by the Python path alone.
    lib = _lib.lib()
    fns = {n: getattr(lib, n, None) for n in _NATIVE_NEEDS + _NATIVE_OPTIONAL}
    if not all(isinstance(fns[n], ctypes._CFuncPtr) for n in _NATIVE_NEEDS):
        return pg
    addresses = {n: ctypes.cast(f, c_void_p).value for n, f in fns.items()
                 if isinstance(f, ctypes._CFuncPtr)}
    return mod.ArcommBackend(pg, pg._host._h, addresses, opts.group_rank, opts.group_size)


# ---- the native path: csrc/torch_backend.cpp, built at first import ----

#: What the native backend calls (the blocking and the non-blocking host calls); a
#: library without them gets the Python path alone.
_NATIVE_NEEDS = [
    "comm_allreduce", "comm_broadcast", "comm_reduce", "comm_allgather", "comm_reduce_scatter",
    "comm_alltoall", "comm_barrier", "comm_iallreduce", "comm_ibroadcast", "comm_ireduce",
    "comm_iallgather", "comm_ireduce_scatter", "comm_ialltoall", "comm_ibarrier", "comm_wait",
    "comm_test",
]
#: Served natively where the library has them, by the Python path otherwise.
_NATIVE_OPTIONAL = ["comm_isend", "comm_irecv"]

_native_mod: Any = None
_native_why = ""


def native_enabled() -> bool:
    """Whether new process groups get the native backend: ARCOMM_TORCH_NATIVE is not 0
    and csrc/torch_backend.cpp was built (or loaded from the cache) for this torch."""
    return _native() is not None


def native_backend(group: Any = None) -> Any:
    """The native backend serving ``group``'s CPU tensors (default: the default group),
    or None where that group runs on the Python path alone.  Its ``native_calls`` and
    ``python_calls`` count the calls served by C++ and those handed to Python."""
    pg = group if group is not None else dist.group.WORLD
    if isinstance(pg, ArcommProcessGroup):
        return None
    try:
        b = pg._get_backend(torch.device("cpu"))
    except Exception:  # noqa: BLE001 - a group without a CPU backend
        return None
    return b if _native_mod is not None and isinstance(b, _native_mod.ArcommBackend) else None


def _native() -> Any:
    """The compiled extension (_torch_build.load: built on first use, then loaded from
    the cache), or None where ARCOMM_TORCH_NATIVE=0 or the build failed (one warning
    says why, kept in _native_why)."""
    global _native_mod, _native_why
    _native_mod = _torch_build.load()
    _native_why = _torch_build.why
    return _native_mod


# ---- init_method="arcomm://": a store for jobs that arrun or mpirun started ----

def _job_env() -> tuple[int, int, str]:
    """(rank, size, a name of this job the same on every rank) from arrun's variables,
    else Open MPI's (one host: the store is a file)."""
    env = os.environ
    if all(k in env for k in ("ARCOMM_RANK", "ARCOMM_SIZE", "ARCOMM_ID")):
        return int(env["ARCOMM_RANK"]), int(env["ARCOMM_SIZE"]), env["ARCOMM_ID"]
    if all(k in env for k in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                              "PMIX_NAMESPACE")):
        size = int(env["OMPI_COMM_WORLD_SIZE"])
        if int(env.get("OMPI_COMM_WORLD_LOCAL_SIZE", size)) != size:
            raise ValueError(
                "arcomm.torch: init_method='arcomm://' under mpirun serves one host (its "
                "store is a file); on several hosts set MASTER_ADDR and MASTER_PORT and "
                "leave init_method out"
            )
        return int(env["OMPI_COMM_WORLD_RANK"]), size, "ompi-" + env["PMIX_NAMESPACE"]
    raise ValueError(
        "arcomm.torch: init_method='arcomm://' is for jobs started by arrun (ARCOMM_RANK, "
        "ARCOMM_SIZE, ARCOMM_ID) or by Open MPI's mpirun on one host; under torchrun "
        "leave init_method out"
    )


def _arcomm_rendezvous(url: str, timeout: timedelta = timedelta(minutes=30), **kw: Any):
    """The store of a job started by arrun or mpirun: a torch FileStore in the
    temporary directory, named after the job (ARCOMM_ID, or Open MPI's PMIX_NAMESPACE:
    the same on every rank, fresh per job); torch removes it once every rank is done."""
    rank, size, job = _job_env()
    name = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in job)
    path = os.path.join(tempfile.gettempdir(), f"arcomm-torch-store-{name}")
    store = dist.FileStore(path, size)
    store.set_timeout(timeout)
    yield (store, rank, size)
    raise RuntimeError("arcomm.torch: the arcomm:// rendezvous cannot be used twice")


def _register() -> None:
    if "arcomm" in getattr(dist.Backend, "backend_list", ()) and \
            dist.Backend._plugins.get("ARCOMM") is not None:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])
    try:
        import importlib

        # (torch.distributed.rendezvous is also the name of a function there)
        importlib.import_module("torch.distributed.rendezvous").register_rendezvous_handler("arcomm", _arcomm_rendezvous)
    except RuntimeError:
        pass  # registered already


_register()
_native()
