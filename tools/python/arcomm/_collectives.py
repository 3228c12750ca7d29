# SPDX-License-Identifier: MIT
"""The collectives of arcomm.Comm: buffers checked and resolved, then one guarded C call
(``Comm._run``).  The resolved buffers stay referenced in each method's locals until
``_run`` returned: they hold the buffer exports for the whole call."""
from __future__ import annotations

from typing import Any

from . import _buffers
from ._buffers import DTYPE_NAMES

#: reduction names -> comm_op_t values.
OPS = {"sum": 0, "max": 1, "min": 2, "prod": 3, "avg": 4}


class Collectives:
    """Mixed into arcomm.Comm, which supplies _run, _buf, _pair, _stream, _same_dtype,
    _same_device, _bad, _rank, _size, _dev and the C functions."""

    def _opcode(self, op: str, call: str) -> int:
        opc = OPS.get(op)
        if opc is None:
            raise self._bad(ValueError, call, f"op {op!r} is not one of {', '.join(OPS)}")
        return opc

    def _same_shape(self, send: Any, recv: Any, dtype: Any, stream: Any, call: str) -> tuple:
        """The out-of-place send and recv of a call whose two buffers hold the same
        elements (allreduce, allreduce_add, broadcast, reduce): both checked, the counts,
        the dtypes and (CUDA) the devices alike."""
        s = self._buf(send, False, "send", dtype, stream, call)
        r = self._buf(recv, True, "recv", dtype, stream, call)
        if r[1] != s[1]:
            raise self._bad(ValueError, call, f"recv has {r[1]} elements, send {s[1]}")
        self._same_dtype(s, r, call)
        if self._dev:
            self._same_device(call, s, r)
        return s, r

    def allreduce(
        self,
        send: Any,
        recv: Any = None,
        op: str = "sum",
        *,
        stream: int | None = None,
        dtype: Any = None,
    ) -> Any:
        """Reduces ``send`` over all ranks into every rank's ``recv`` (same element count
        and dtype); ``recv`` None: in place, into ``send``.  Returns the result buffer."""
        opc = OPS.get(op)
        if opc is None:
            opc = self._opcode(op, "allreduce")
        if recv is not None and dtype is None and stream is None:
            # Fast path (see _pair): two numpy arrays of one dtype and size, on the host.
            p = self._pair(send, recv)
            if p is not None and p[5] == p[6]:
                self._run("allreduce", self._allreduce, p[2], p[3], p[5], p[7], opc, None)
                return recv
        call = "allreduce"
        if recv is None:
            s = self._buf(send, True, "send (in place)", dtype, stream, call)
            r = s
            recv = send
        else:
            s, r = self._same_shape(send, recv, dtype, stream, call)
        strm = None if self._dev == 0 and stream is None else self._stream(call, stream, s, r)
        self._run(call, self._allreduce, s[0], r[0], s[1], s[2], opc, strm)
        return recv

    def allreduce_add(
        self,
        send: Any,
        addend: Any,
        recv: Any = None,
        *,
        stream: int | None = None,
        dtype: Any = None,
    ) -> Any:
        """A SUM allreduce plus this rank's ``addend``: element by element when it has as
        many elements as ``send``, else one row added to every row (its element count
        must divide send's); ``recv`` None: in place.  Returns the result buffer."""
        call = "allreduce_add"
        if recv is None:
            s = self._buf(send, True, "send (in place)", dtype, stream, call)
            r = s
            recv = send
        else:
            s, r = self._same_shape(send, recv, dtype, stream, call)
        a = self._buf(addend, False, "addend", dtype, stream, call)
        self._same_dtype(s, a, "allreduce_add (send and addend)")
        if a[1] == 0 or s[1] % a[1]:
            raise self._bad(
                ValueError, call, f"addend's {a[1]} elements must divide send's {s[1]}"
            )
        if self._dev:
            self._same_device(call, s, r, a)
        strm = None if stream is None and self._dev == 0 else self._stream(call, stream, s, r, a)
        self._run(call, self._allreduce_add, s[0], r[0], a[0], a[1], s[1], s[2], strm)
        return recv

    def broadcast(
        self,
        send: Any,
        recv: Any = None,
        root: int = 0,
        *,
        stream: int | None = None,
        dtype: Any = None,
    ) -> Any:
        """``root``'s ``send`` into every rank's ``recv``; ``recv`` None: in place (``send``
        is the source on root and the destination elsewhere).  ``send`` is read on root
        only and may be None elsewhere.  Returns the result buffer."""
        call = "broadcast"
        if recv is not None and send is not None and dtype is None and stream is None:
            p = self._pair(send, recv)
            if p is not None and p[5] == p[6]:
                self._run(call, self._broadcast, p[2], p[3], p[6], p[7], root, None)
                return recv
        if recv is None:
            if send is None:
                raise self._bad(ValueError, call, "needs send or recv")
            s = self._buf(send, self._rank != root, "send (in place)", dtype, stream, call)
            r = s
            recv = send
        else:
            r = self._buf(recv, True, "recv", dtype, stream, call)
            if send is None or self._rank != root:
                s = (None, r[1], r[2])
            else:
                s, r = self._same_shape(send, recv, dtype, stream, call)
        strm = None if stream is None and self._dev == 0 else self._stream(call, stream, r)
        self._run(call, self._broadcast, s[0], r[0], r[1], r[2], root, strm)
        return recv

    def reduce(
        self,
        send: Any,
        recv: Any = None,
        op: str = "sum",
        root: int = 0,
        *,
        stream: int | None = None,
        dtype: Any = None,
    ) -> Any:
        """The reduction of every rank's ``send`` into ``root``'s ``recv`` only; ``recv``
        None: in place on root (into ``send``), ignored elsewhere.  Returns the result
        buffer on root, None elsewhere."""
        call = "reduce"
        opc = self._opcode(op, call)
        if recv is not None and dtype is None and stream is None:
            p = self._pair(send, recv)
            if p is not None and p[5] == p[6]:
                self._run(call, self._reduce, p[2], p[3], p[5], p[7], opc, root, None)
                return recv if self._rank == root else None
        is_root = self._rank == root
        if recv is None:
            s = self._buf(send, is_root, "send (in place)" if is_root else "send", dtype,
                          stream, call)
            r = s if is_root else (None,)
            recv = send if is_root else None
        else:
            s, r = self._same_shape(send, recv, dtype, stream, call)
        strm = None if stream is None and self._dev == 0 else self._stream(call, stream, s)
        self._run(call, self._reduce, s[0], r[0], s[1], s[2], opc, root, strm)
        return recv if is_root else None

    def allgather(
        self,
        send: Any,
        recv: Any,
        *,
        stream: int | None = None,
        dtype: Any = None,
    ) -> Any:
        """Rank r's ``send`` lands in block r of every rank's ``recv`` (size * send's
        elements).  ``send`` None, or the view of block ``rank`` of ``recv``: in place.
        Returns ``recv``."""
        call = "allgather"
        if send is not None and dtype is None and stream is None:
            p = self._pair(send, recv)
            if p is not None and p[6] == self._size * p[5]:
                self._run(call, self._allgather, p[2], p[3], p[5], p[7], None)
                return recv
        r = self._buf(recv, True, "recv", dtype, stream, call)
        n = self._size
        s = None
        if send is None:
            if r[1] % n:
                raise self._bad(
                    ValueError, call, f"recv has {r[1]} elements, not a multiple of {n} ranks"
                )
            count = r[1] // n
            sp = None if r[0] is None else r[0] + self._rank * count * _buffers.ITEMSIZE[r[2]]
        else:
            s = self._buf(send, False, "send", dtype, stream, call)
            self._same_dtype(s, r, call)
            if r[1] != n * s[1]:
                raise self._bad(
                    ValueError, call,
                    f"recv must have nranks * send = {n} * {s[1]} = {n * s[1]} elements, "
                    f"has {r[1]}",
                )
            count = s[1]
            sp = s[0]
        if self._dev:
            self._same_device(call, s, r)
        strm = None if stream is None and self._dev == 0 else self._stream(call, stream, r)
        self._run(call, self._allgather, sp, r[0], count, r[2], strm)
        return recv

    def reduce_scatter(
        self,
        send: Any,
        recv: Any = None,
        op: str = "sum",
        *,
        stream: int | None = None,
        dtype: Any = None,
    ) -> Any:
        """Rank r gets in ``recv`` the reduction of block r of every rank's ``send``
        (size * recv's elements).  ``recv`` None (or the view of block ``rank`` of
        ``send``): in place, into that block of ``send``; returns the result buffer (in
        place: a view of that block where ``send`` is a numpy array, else ``send``)."""
        call = "reduce_scatter"
        opc = self._opcode(op, call)
        if recv is not None and dtype is None and stream is None:
            p = self._pair(send, recv)
            if p is not None and p[5] == self._size * p[6]:
                self._run(call, self._reduce_scatter, p[2], p[3], p[6], p[7], opc, None)
                return recv
        n = self._size
        if recv is None:
            s = self._buf(send, True, "send (in place)", dtype, stream, call)
            if s[1] % n:
                raise self._bad(
                    ValueError, call, f"send has {s[1]} elements, not a multiple of {n} ranks"
                )
            count = s[1] // n
            rp = None if s[0] is None else s[0] + self._rank * count * _buffers.ITEMSIZE[s[2]]
            strm = None if stream is None and self._dev == 0 else self._stream(call, stream, s)
            self._run(call, self._reduce_scatter, s[0], rp, count, s[2], opc, strm)
            if hasattr(send, "reshape") and hasattr(send, "__getitem__"):
                try:
                    return send.reshape(-1)[self._rank * count : (self._rank + 1) * count]
                except Exception:
                    return send
            return send
        s = self._buf(send, False, "send", dtype, stream, call)
        r = self._buf(recv, True, "recv", dtype, stream, call)
        self._same_dtype(s, r, call)
        if s[1] != n * r[1]:
            raise self._bad(
                ValueError, call,
                f"send must have nranks * recv = {n} * {r[1]} = {n * r[1]} elements, "
                f"has {s[1]}",
            )
        if self._dev:
            self._same_device(call, s, r)
        strm = None if stream is None and self._dev == 0 else self._stream(call, stream, s, r)
        self._run(call, self._reduce_scatter, s[0], r[0], r[1], r[2], opc, strm)
        return recv

    def alltoall(
        self,
        send: Any,
        recv: Any,
        *,
        stream: int | None = None,
        dtype: Any = None,
    ) -> Any:
        """Block p of this rank's ``send`` lands in block ``rank`` of rank p's ``recv``;
        both have size * count elements.  Out of place only.  Returns ``recv``."""
        call = "alltoall"
        if dtype is None and stream is None:
            p = self._pair(send, recv)
            if p is not None and p[5] == p[6] and p[5] % self._size == 0:
                self._run(call, self._alltoall, p[2], p[3], p[5] // self._size, p[7], None)
                return recv
        n = self._size
        s = self._buf(send, False, "send", dtype, stream, call)
        r = self._buf(recv, True, "recv", dtype, stream, call)
        self._same_dtype(s, r, call)
        if s[1] != r[1] or s[1] % n:
            raise self._bad(
                ValueError, call,
                f"send and recv must both have nranks * count elements ({n} ranks; send "
                f"has {s[1]}, recv {r[1]})",
            )
        if self._dev:
            self._same_device(call, s, r)
        strm = None if stream is None and self._dev == 0 else self._stream(call, stream, s, r)
        self._run(call, self._alltoall, s[0], r[0], s[1] // n, s[2], strm)
        return recv

    def barrier(self) -> None:
        """Returns once every rank has entered the barrier."""
        self._run("barrier", self._barrier)


__all__ = ["Collectives", "OPS", "DTYPE_NAMES"]
