# SPDX-License-Identifier: MIT
"""arcomm from Python: ctypes over libarcomm's public C API (include/arcomm.h).

Buffers are numpy arrays, anything with ``__dlpack__`` or the buffer protocol on the
host, and on CUDA anything with ``__dlpack__`` or ``__cuda_array_interface__`` (PyTorch
and CuPy tensors).  Every call that blocks releases the GIL (ctypes does for every
foreign call), so thread ranks of one interpreter run their collectives concurrently
and :meth:`Comm.abort` works from another thread.  See README.md, section "Python".
"""
from __future__ import annotations

import atexit
import ctypes
import threading
import weakref
from ctypes import byref, c_int, c_void_p
from typing import Any, Sequence

from . import _buffers, _lib
from ._buffers import NP_CODES as _NP_CODES
from ._buffers import DTYPE_NAMES, dtype_code

_ndarray = _buffers.np.ndarray
_addressof = ctypes.addressof
_c_char = ctypes.c_char

__all__ = [
    "Comm",
    "Error",
    "InitAbort",
    "new_id",
    "version",
    "library_path",
    "DTYPE_NAMES",
    "OPS",
]

#: comm_status_t values -> names.
STATUS_NAMES = {
    0: "COMM_OK",
    -1: "COMM_ERR_INVALID",
    -2: "COMM_ERR_NOMEM",
    -3: "COMM_ERR_UNSUPPORTED",
    -4: "COMM_ERR_SYSTEM",
    -5: "COMM_ERR_TIMEOUT",
    -6: "COMM_ERR_PEER",
    -7: "COMM_ERR_MISMATCH",
    -8: "COMM_ERR_ABORTED",
}
#: reduction names -> comm_op_t values.
OPS = {"sum": 0, "max": 1, "min": 2, "prod": 3, "avg": 4}
_DEVICES = {"host": 0, "cuda": 1, "hexagon": 2}
_DEVICE_NAMES = {v: k for k, v in _DEVICES.items()}


class Error(Exception):
    """A call of the C API returned an error.

    ``status`` is the ``comm_status_t`` name ("COMM_ERR_MISMATCH"), ``code`` its value,
    ``message`` what ``comm_last_error`` said.
    """

    def __init__(self, code: int, message: str, call: str = "") -> None:
        self.code = code
        self.status = STATUS_NAMES.get(code, f"COMM_STATUS_{code}")
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{self.status}: {message}" if message else f"{where}{self.status}")


def _raise(code: int, handle: int | None, call: str) -> None:
    msg = _lib.lib().comm_last_error(handle)
    if not msg and handle is not None:
        msg = _lib.lib().comm_last_error(None)
    raise Error(code, (msg or b"").decode(errors="replace"), call)


class InitAbort:
    """Ends a ``Comm(...)`` still waiting in ``comm_init`` (``comm_config_t.abort_flag``).

    Pass it as ``Comm(..., abort=flag)``; ``flag.set()`` from any thread makes that init
    raise :class:`Error` ``COMM_ERR_ABORTED`` at once, and the other ranks' inits
    ``COMM_ERR_PEER``.  Read during the init only: a live communicator ends with
    :meth:`Comm.abort`.
    """

    def __init__(self) -> None:
        self._word = c_int(0)

    def set(self) -> None:
        self._word.value = 1

    def is_set(self) -> bool:
        return self._word.value != 0


def new_id() -> str:
    """A fresh communicator id (``comm_id_new``): give it to every rank of one communicator."""
    cid = _lib.CommId()
    st = _lib.lib().comm_id_new(byref(cid))
    if st:
        _raise(st, None, "comm_id_new")
    return cid.str.decode()


def version() -> tuple[int, int, int]:
    """The loaded library's version (``comm_get_version``)."""
    a, b, c = c_int(), c_int(), c_int()
    _lib.lib().comm_get_version(byref(a), byref(b), byref(c))
    return (a.value, b.value, c.value)


def library_path() -> str:
    """The path libarcomm.so was loaded from (see the search order in ``arcomm._lib``)."""
    return _lib.lib_path()


def _config(
    nranks: int,
    rank: int,
    id: str | None,
    device: str,
    device_index: int,
    transport: str | None,
    timeout_ms: int,
    knob_defaults: str | None,
    abort: "InitAbort | None" = None,
) -> tuple[_lib.CommConfig, list]:
    cfg = _lib.CommConfig()
    _lib.lib().comm_config_init(byref(cfg))
    cfg.nranks = nranks
    cfg.rank = rank
    if id is not None:
        raw = id.encode()
        if len(raw) >= _lib.COMM_ID_BYTES:
            raise ValueError(f"arcomm: id longer than {_lib.COMM_ID_BYTES - 1} bytes")
        cfg.id.str = raw
    if device not in _DEVICES:
        raise ValueError(f"arcomm: device {device!r} is not one of {', '.join(_DEVICES)}")
    cfg.device = _DEVICES[device]
    cfg.device_index = device_index
    keep: list = []
    if transport is not None:
        t = transport.encode()
        keep.append(t)
        cfg.transport = t
    cfg.timeout_ms = timeout_ms
    if knob_defaults is not None:
        k = knob_defaults.encode()
        keep.append(k)
        cfg.knob_defaults = k
    if abort is not None:
        if not isinstance(abort, InitAbort):
            raise TypeError("arcomm: abort must be an arcomm.InitAbort")
        keep.append(abort)
        cfg.abort_flag = ctypes.pointer(abort._word)
    return cfg, keep


def _op(op: str) -> int:
    try:
        return OPS[op]
    except KeyError:
        raise ValueError(f"arcomm: op {op!r} is not one of {', '.join(OPS)}") from None


_mpi_comms: "weakref.WeakSet[Comm]" = weakref.WeakSet()
_mpi_atexit = False


def _close_mpi_comms() -> None:
    for c in list(_mpi_comms):
        try:
            c.close()
        except Error:
            pass


class Comm:
    """One rank's communicator (a ``comm_t``).

    ``Comm(id, rank, nranks)`` joins communicator ``id`` (from :func:`new_id`, the same on
    every rank) as ``rank``; it returns once every rank joined (``comm_init``).  Ranks
    may be threads of one interpreter or processes.  A communicator serves one thread at
    a time, except :meth:`abort`, which any thread may call at any time.  ``close`` (or
    leaving a ``with`` block) destroys it.

    Collectives take buffer objects; counts come from the buffers (element counts, any
    shape, C-contiguous), the dtype from the send buffer (``dtype=`` reinterprets data of
    the same element size, e.g. ``dtype="bf16"`` over uint16 data).  On a CUDA
    communicator the call is ordered on ``stream=`` when given, else on the stream of the
    buffer's framework (torch's current stream, ``__cuda_array_interface__['stream']``,
    CuPy's current stream), else on the legacy default stream; it returns once enqueued.
    Failures raise :class:`Error`; wrong buffers raise ``TypeError`` / ``ValueError``
    before anything is sent.
    """

    _h: int | None

    def __init__(
        self,
        id: str,
        rank: int,
        nranks: int,
        *,
        device: str = "host",
        device_index: int = -1,
        transport: str | None = None,
        timeout_ms: int = 0,
        knob_defaults: str | None = None,
        abort: InitAbort | None = None,
    ) -> None:
        cfg, keep = _config(
            nranks, rank, id, device, device_index, transport, timeout_ms, knob_defaults, abort
        )
        h = c_void_p()
        st = _lib.lib().comm_init(byref(h), byref(cfg))
        del keep
        if st:
            _raise(st, None, "comm_init")
        self._setup(h.value, _DEVICES[device])

    @classmethod
    def _wrap(cls, handle: int, device: int) -> "Comm":
        c = cls.__new__(cls)
        c._setup(handle, device)
        return c

    def _setup(self, handle: int | None, device: int) -> None:
        lib = _lib.lib()
        self._lock = threading.Lock()
        self._h = handle
        self._dev = device
        self._last: tuple | None = None  # the fast path's last numpy pair (see _pair)
        self._rank = lib.comm_rank(handle)
        self._size = lib.comm_size(handle)
        self._allreduce = lib.comm_allreduce
        self._allreduce_add = lib.comm_allreduce_add
        self._broadcast = lib.comm_broadcast
        self._reduce = lib.comm_reduce
        self._allgather = lib.comm_allgather
        self._reduce_scatter = lib.comm_reduce_scatter
        self._alltoall = lib.comm_alltoall
        self._barrier = lib.comm_barrier

    # ---- construction ----

    @classmethod
    def from_env(cls) -> "Comm":
        """Joins the job arrun started (``comm_init_env``: ARCOMM_RANK, ARCOMM_SIZE,
        ARCOMM_ID; ARCOMM_DEVICE picks the device)."""
        import os

        h = c_void_p()
        st = _lib.lib().comm_init_env(byref(h))
        if st:
            _raise(st, None, "comm_init_env")
        dev = _DEVICES.get(os.environ.get("ARCOMM_DEVICE", "host").lower(), 0)
        return cls._wrap(h.value, dev)

    @classmethod
    def from_mpi(
        cls,
        mpi_comm: Any,
        *,
        device: str = "host",
        device_index: int = -1,
        transport: str | None = None,
        timeout_ms: int = 0,
        knob_defaults: str | None = None,
    ) -> "Comm":
        """A communicator over every rank of an mpi4py communicator (``comm_init_mpi`` in
        libarcomm_mpi.so; collective over ``mpi_comm``).  Ranks keep their MPI rank.
        ``split`` and ``dup`` are unsupported on it.  Close it before MPI_Finalize; one
        still open at exit is closed before mpi4py finalizes MPI."""
        from mpi4py import MPI

        mlib = _lib.mpi_lib()
        handle = MPI._handleof(mpi_comm)
        handle_type = c_void_p if MPI._sizeof(MPI.Comm) == ctypes.sizeof(c_void_p) else c_int
        f = mlib.comm_init_mpi
        f.argtypes = [ctypes.POINTER(c_void_p), handle_type, ctypes.POINTER(_lib.CommConfig)]
        cfg, keep = _config(1, 0, None, device, device_index, transport, timeout_ms, knob_defaults)
        h = c_void_p()
        st = f(byref(h), handle, byref(cfg))
        del keep
        if st:
            _raise(st, None, "comm_init_mpi")
        c = cls._wrap(h.value, _DEVICES[device])
        global _mpi_atexit
        if not _mpi_atexit:
            # atexit runs last-registered first: this runs before mpi4py's MPI_Finalize
            # (registered when mpi4py was imported), destroying what is still open.
            atexit.register(_close_mpi_comms)
            _mpi_atexit = True
        _mpi_comms.add(c)
        return c

    @classmethod
    def init_all(
        cls,
        n: int,
        devices: Sequence[int] | None = None,
        *,
        device: str = "host",
        transport: str | None = None,
        timeout_ms: int = 0,
        knob_defaults: str | None = None,
    ) -> list["Comm"]:
        """The n communicators of n thread ranks, made by one thread (``comm_init_all``);
        element i is rank i (on GPU ``devices[i]``, default i, for ``device="cuda"``).
        Each must then be used from its own thread."""
        if n < 1:
            raise ValueError("arcomm: init_all needs n >= 1")
        cfg, keep = _config(1, 0, None, device, -1, transport, timeout_ms, knob_defaults)
        arr = (c_void_p * n)()
        devs = None
        if devices is not None:
            if len(devices) != n:
                raise ValueError(f"arcomm: init_all: {len(devices)} devices for {n} ranks")
            devs = (c_int * n)(*devices)
        st = _lib.lib().comm_init_all(arr, n, devs, byref(cfg))
        del keep
        if st:
            _raise(st, None, "comm_init_all")
        return [cls._wrap(arr[i], _DEVICES[device]) for i in range(n)]

    def split(self, color: int | None, key: int = 0) -> "Comm | None":
        """Collective: ranks of one ``color >= 0`` form a new communicator ordered by
        (key, rank); ``color`` None or < 0 gets None."""
        c = -1 if color is None or color < 0 else color
        h = c_void_p()
        st = _lib.lib().comm_split(self._handle(), c, key, byref(h))
        if st:
            _raise(st, self._h, "comm_split")
        return None if not h.value else Comm._wrap(h.value, self._dev)

    def dup(self) -> "Comm":
        """Collective: a new communicator over the same ranks in the same order."""
        h = c_void_p()
        st = _lib.lib().comm_dup(self._handle(), byref(h))
        if st:
            _raise(st, self._h, "comm_dup")
        return Comm._wrap(h.value, self._dev)

    # ---- life ----

    def _handle(self) -> int:
        h = self._h
        if h is None:
            raise ValueError("arcomm: the communicator is closed")
        return h

    def abort(self) -> None:
        """Breaks the communicator (``comm_abort``), from any thread: a call blocked on it
        raises COMM_ERR_ABORTED, its peers COMM_ERR_PEER.  Nothing happens once closed."""
        with self._lock:
            if self._h is not None:
                _lib.lib().comm_abort(self._h)

    def close(self) -> None:
        """Destroys the communicator (``comm_destroy``); a second close does nothing.
        Raises Error while another thread is inside a call on it (abort that first)."""
        with self._lock:
            h = self._h
            if h is None:
                return
            st = _lib.lib().comm_destroy(h)
            self._last = None
            if st == -1:
                # refused: another thread is inside a call; the communicator lives on
                msg = (_lib.lib().comm_last_error(None) or b"").decode(errors="replace")
                raise Error(st, msg, "comm_destroy")
            self._h = None

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_h", None) is not None:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        if self._h is None:
            return "<arcomm.Comm closed>"
        return f"<arcomm.Comm rank {self._rank} of {self._size}, {self.transport}>"

    # ---- properties ----

    @property
    def rank(self) -> int:
        """This rank (0 .. size-1)."""
        return self._rank

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self._size

    @property
    def transport(self) -> str:
        """The transport's name (``comm_transport_name``: "shm", "thread", "shm+mpi" for
        ``from_mpi`` on several hosts...)."""
        return (_lib.lib().comm_transport_name(self._handle()) or b"").decode()

    @property
    def device(self) -> str:
        """Where the buffers of this communicator's collectives live."""
        return _DEVICE_NAMES[self._dev]

    @property
    def closed(self) -> bool:
        """Whether close() has destroyed the communicator."""
        return self._h is None

    def last_error(self) -> str:
        """``comm_last_error`` of this communicator ("" when none)."""
        return (_lib.lib().comm_last_error(self._handle()) or b"").decode(errors="replace")

    # ---- buffers ----

    def _buf(self, obj: Any, writable: bool, role: str, dtype: Any, stream: int | None) -> tuple:
        # Fast path: a non-empty numpy array of an arcomm dtype on a host communicator.
        # ctypes' from_buffer asks for a writable C-contiguous buffer, so it fails for
        # read-only or strided arrays, which the general path then handles (or refuses).
        if type(obj) is _ndarray and dtype is None and self._dev == 0:
            code = _NP_CODES.get(obj.dtype)
            n = obj.size
            if code is not None and n:
                try:
                    return (_addressof(_c_char.from_buffer(obj)), n, code, 0, -1, None, None)
                except (TypeError, ValueError):
                    pass
        b = _buffers.resolve(
            obj, writable, role, stream, None if dtype is None else dtype_code(dtype)
        )
        if b[3] != self._dev:
            raise ValueError(
                f"arcomm: {role} is {'CUDA' if b[3] else 'host'} memory; this communicator's "
                f"device is {self.device}"
            )
        return b

    def _pair(self, send: Any, recv: Any) -> tuple | None:
        """The fast path's (send, recv, send ptr, recv ptr, dtype, send count, recv count,
        code) for two non-empty numpy arrays of one arcomm dtype on a host communicator,
        else None (the general path then checks and explains).  The last pair is kept,
        with references to the arrays (so they cannot be resized in place): the same
        objects again skip the buffer exports when dtype, sizes and recv's writability
        are unchanged."""
        last = self._last
        if last is not None and last[0] is send and last[1] is recv:
            dt = last[4]
            if (
                send.dtype is dt
                and recv.dtype is dt
                and send.size == last[5]
                and recv.size == last[6]
                and recv.flags.writeable
            ):
                return last
        if type(send) is _ndarray and type(recv) is _ndarray and self._dev == 0:
            dt = send.dtype
            code = _NP_CODES.get(dt)
            ns = send.size
            nr = recv.size
            if code is not None and recv.dtype is dt and ns and nr:
                try:
                    sp = _addressof(_c_char.from_buffer(send))
                    rp = _addressof(_c_char.from_buffer(recv))
                except (TypeError, ValueError):
                    return None
                last = (send, recv, sp, rp, dt, ns, nr, code)
                self._last = last
                return last
        return None

    def _stream(self, stream: int | None, *bufs: tuple | None) -> int | None:
        if self._dev == 0:
            if stream:
                raise ValueError("arcomm: stream= is for CUDA communicators")
            return None
        if stream is not None:
            return stream or None
        for b in bufs:
            if b is not None and b[5] is not None:
                return b[5] or None
        return None

    @staticmethod
    def _same_dtype(a: tuple, b: tuple, what: str) -> None:
        if a[2] != b[2]:
            raise TypeError(
                f"arcomm: {what}: dtypes differ ({DTYPE_NAMES[a[2]]} and {DTYPE_NAMES[b[2]]})"
            )

    # ---- collectives ----

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
        h = self._h
        if h is None:
            self._handle()
        opc = OPS.get(op)
        if opc is None:
            _op(op)
        # Fast path (see _buf): two numpy arrays of one dtype and size, on the host.  The
        # last pair's addresses are kept with (strong references to) the arrays: the
        # same objects again skip the buffer exports when dtype, size and writability
        # are unchanged (a referenced array cannot be resized in place).
        last = self._last
        if last is not None and last[0] is send and last[1] is recv and dtype is None:
            dt = last[4]
            if (
                send.dtype is dt
                and recv.dtype is dt
                and send.size == last[5]
                and recv.size == last[5]
                and recv.flags.writeable
                and stream is None
            ):
                st = self._allreduce(h, last[2], last[3], last[5], last[7], opc, None)
                if st:
                    _raise(st, h, "allreduce")
                return recv
        if (
            type(send) is _ndarray
            and type(recv) is _ndarray
            and dtype is None
            and stream is None
            and self._dev == 0
            and send.dtype is recv.dtype
        ):
            code = _NP_CODES.get(send.dtype)
            n = send.size
            if code is not None and n and recv.size == n:
                try:
                    sp = _addressof(_c_char.from_buffer(send))
                    rp = _addressof(_c_char.from_buffer(recv))
                except (TypeError, ValueError):
                    pass
                else:
                    self._last = (send, recv, sp, rp, send.dtype, n, n, code)
                    st = self._allreduce(h, sp, rp, n, code, opc, None)
                    if st:
                        _raise(st, h, "allreduce")
                    return recv
        if recv is None:
            s = self._buf(send, True, "send (in place)", dtype, stream)
            r = s
            recv = send
        else:
            s = self._buf(send, False, "send", dtype, stream)
            r = self._buf(recv, True, "recv", dtype, stream)
            if r[1] != s[1]:
                raise ValueError(f"arcomm: allreduce: recv has {r[1]} elements, send {s[1]}")
            if r[2] != s[2]:
                self._same_dtype(s, r, "allreduce")
        strm = None if self._dev == 0 and stream is None else self._stream(stream, s, r)
        st = self._allreduce(h, s[0], r[0], s[1], s[2], opc, strm)
        if st:
            _raise(st, h, "allreduce")
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
        h = self._handle()
        if recv is None:
            s = self._buf(send, True, "send (in place)", dtype, stream)
            r = s
            recv = send
        else:
            s = self._buf(send, False, "send", dtype, stream)
            r = self._buf(recv, True, "recv", dtype, stream)
            if r[1] != s[1]:
                raise ValueError(f"arcomm: allreduce_add: recv has {r[1]} elements, send {s[1]}")
            self._same_dtype(s, r, "allreduce_add")
        a = self._buf(addend, False, "addend", dtype, stream)
        self._same_dtype(s, a, "allreduce_add (send and addend)")
        if a[1] == 0 or s[1] % a[1]:
            raise ValueError(
                f"arcomm: allreduce_add: addend's {a[1]} elements must divide send's {s[1]}"
            )
        strm = None if stream is None and self._dev == 0 else self._stream(stream, s, r, a)
        st = self._allreduce_add(h, s[0], r[0], a[0], a[1], s[1], s[2], strm)
        if st:
            _raise(st, h, "allreduce_add")
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
        h = self._handle()
        if recv is not None and send is not None and dtype is None and stream is None:
            p = self._pair(send, recv)
            if p is not None and p[5] == p[6]:
                st = self._broadcast(h, p[2], p[3], p[6], p[7], root, None)
                if st:
                    _raise(st, h, "broadcast")
                return recv
        if recv is None:
            if send is None:
                raise ValueError("arcomm: broadcast needs send or recv")
            s = self._buf(send, self._rank != root, "send (in place)", dtype, stream)
            r = s
            recv = send
        else:
            r = self._buf(recv, True, "recv", dtype, stream)
            if send is None or self._rank != root:
                s = (None, r[1], r[2])
            else:
                s = self._buf(send, False, "send", dtype, stream)
                if r[1] != s[1]:
                    raise ValueError(f"arcomm: broadcast: recv has {r[1]} elements, send {s[1]}")
                self._same_dtype(s, r, "broadcast")
        strm = None if stream is None and self._dev == 0 else self._stream(stream, r)
        st = self._broadcast(h, s[0], r[0], r[1], r[2], root, strm)
        if st:
            _raise(st, h, "broadcast")
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
        h = self._handle()
        if recv is not None and dtype is None and stream is None:
            opc = OPS.get(op)
            p = self._pair(send, recv) if opc is not None else None
            if p is not None and p[5] == p[6]:
                st = self._reduce(h, p[2], p[3], p[5], p[7], opc, root, None)
                if st:
                    _raise(st, h, "reduce")
                return recv if self._rank == root else None
        opc = _op(op)
        is_root = self._rank == root
        if recv is None:
            s = self._buf(send, is_root, "send (in place)" if is_root else "send", dtype, stream)
            r = s if is_root else (None,)
            recv = send if is_root else None
        else:
            s = self._buf(send, False, "send", dtype, stream)
            r = self._buf(recv, True, "recv", dtype, stream)
            if r[1] != s[1]:
                raise ValueError(f"arcomm: reduce: recv has {r[1]} elements, send {s[1]}")
            self._same_dtype(s, r, "reduce")
        strm = None if stream is None and self._dev == 0 else self._stream(stream, s)
        st = self._reduce(h, s[0], r[0], s[1], s[2], opc, root, strm)
        if st:
            _raise(st, h, "reduce")
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
        h = self._handle()
        if send is not None and dtype is None and stream is None:
            p = self._pair(send, recv)
            if p is not None and p[6] == self._size * p[5]:
                st = self._allgather(h, p[2], p[3], p[5], p[7], None)
                if st:
                    _raise(st, h, "allgather")
                return recv
        r = self._buf(recv, True, "recv", dtype, stream)
        n = self._size
        if send is None:
            if r[1] % n:
                raise ValueError(
                    f"arcomm: allgather: recv has {r[1]} elements, not a multiple of {n} ranks"
                )
            count = r[1] // n
            sp = None if r[0] is None else r[0] + self._rank * count * _buffers.ITEMSIZE[r[2]]
        else:
            s = self._buf(send, False, "send", dtype, stream)
            self._same_dtype(s, r, "allgather")
            if r[1] != n * s[1]:
                raise ValueError(
                    f"arcomm: allgather: recv must have nranks * send = {n} * {s[1]} = "
                    f"{n * s[1]} elements, has {r[1]}"
                )
            count = s[1]
            sp = s[0]
        strm = None if stream is None and self._dev == 0 else self._stream(stream, r)
        st = self._allgather(h, sp, r[0], count, r[2], strm)
        if st:
            _raise(st, h, "allgather")
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
        h = self._handle()
        if recv is not None and dtype is None and stream is None:
            opc = OPS.get(op)
            p = self._pair(send, recv) if opc is not None else None
            if p is not None and p[5] == self._size * p[6]:
                st = self._reduce_scatter(h, p[2], p[3], p[6], p[7], opc, None)
                if st:
                    _raise(st, h, "reduce_scatter")
                return recv
        opc = _op(op)
        n = self._size
        if recv is None:
            s = self._buf(send, True, "send (in place)", dtype, stream)
            if s[1] % n:
                raise ValueError(
                    f"arcomm: reduce_scatter: send has {s[1]} elements, not a multiple of {n} ranks"
                )
            count = s[1] // n
            rp = None if s[0] is None else s[0] + self._rank * count * _buffers.ITEMSIZE[s[2]]
            strm = None if stream is None and self._dev == 0 else self._stream(stream, s)
            st = self._reduce_scatter(h, s[0], rp, count, s[2], opc, strm)
            if st:
                _raise(st, h, "reduce_scatter")
            if hasattr(send, "reshape") and hasattr(send, "__getitem__"):
                try:
                    return send.reshape(-1)[self._rank * count : (self._rank + 1) * count]
                except Exception:
                    return send
            return send
        s = self._buf(send, False, "send", dtype, stream)
        r = self._buf(recv, True, "recv", dtype, stream)
        self._same_dtype(s, r, "reduce_scatter")
        if s[1] != n * r[1]:
            raise ValueError(
                f"arcomm: reduce_scatter: send must have nranks * recv = {n} * {r[1]} = "
                f"{n * r[1]} elements, has {s[1]}"
            )
        strm = None if stream is None and self._dev == 0 else self._stream(stream, s, r)
        st = self._reduce_scatter(h, s[0], r[0], r[1], r[2], opc, strm)
        if st:
            _raise(st, h, "reduce_scatter")
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
        h = self._handle()
        if dtype is None and stream is None:
            p = self._pair(send, recv)
            if p is not None and p[5] == p[6] and p[5] % self._size == 0:
                st = self._alltoall(h, p[2], p[3], p[5] // self._size, p[7], None)
                if st:
                    _raise(st, h, "alltoall")
                return recv
        n = self._size
        s = self._buf(send, False, "send", dtype, stream)
        r = self._buf(recv, True, "recv", dtype, stream)
        self._same_dtype(s, r, "alltoall")
        if s[1] != r[1] or s[1] % n:
            raise ValueError(
                f"arcomm: alltoall: send and recv must both have nranks * count elements "
                f"({n} ranks; send has {s[1]}, recv {r[1]})"
            )
        strm = None if stream is None and self._dev == 0 else self._stream(stream, s, r)
        st = self._alltoall(h, s[0], r[0], s[1] // n, s[2], strm)
        if st:
            _raise(st, h, "alltoall")
        return recv

    def barrier(self) -> None:
        """Returns once every rank has entered the barrier."""
        h = self._handle()
        st = self._barrier(h)
        if st:
            _raise(st, h, "barrier")
