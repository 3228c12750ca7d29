# SPDX-License-Identifier: MIT
"""arcomm.Comm: one rank's communicator, and how its calls reach the C API safely.

Every call that passes the communicator's handle into C runs through ``Comm._run``
(or, for the short accessors, holds ``Comm._lock``): under the lock it checks that
the communicator is open and that no other call is in flight on it, and marks itself
in flight (``_busy``, the calling thread's id); it clears the mark once the C call
returned and its error message was read.  ``close`` takes the handle away under the
same lock and destroys it only once no call is in flight (aborting one that is), so
no thread ever passes a freed ``comm_t`` into C.  Nothing here relies on the GIL: the
checks and the marks are made under the lock, which free-threaded builds need too.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import threading
import time
import weakref
from ctypes import byref, c_int, c_void_p
from typing import Any, Sequence

from . import _buffers, _interrupt, _lib
from ._buffers import NP_CODES as _NP_CODES
from ._buffers import DTYPE_NAMES, dtype_code
from ._collectives import OPS, Collectives
from ._errors import ABORTED, INVALID, Error, last_error, raise_status

_ndarray = _buffers.np.ndarray
_addressof = ctypes.addressof
_c_char = ctypes.c_char
_get_ident = threading.get_ident
_count = _interrupt.count

_DEVICES = {"host": 0, "cuda": 1, "hexagon": 2}
_DEVICE_NAMES = {v: k for k, v in _DEVICES.items()}

_CLOSED = "this Comm is closed (close() was called); make a new communicator"


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


_mpi_comms: "weakref.WeakSet[Comm]" = weakref.WeakSet()
_mpi_atexit = False

# Every open Comm of this process, for what a fork() child must forget.  Re-entrant: a
# signal handler may close a Comm while this thread is adding another.
_live: "weakref.WeakSet[Comm]" = weakref.WeakSet()
_live_lock = threading.RLock()


def _close_mpi_comms() -> None:
    for c in list(_mpi_comms):
        try:
            c.close()
        except Error:
            pass


def _after_fork_in_child() -> None:
    """A fork() child holds copies of its parent's communicators: the same ranks, the
    same shared segments.  Using one (or destroying it at exit) would act as the parent's
    rank and break the parent's communicator on every rank, so the child forgets them."""
    global _live_lock
    _live_lock = threading.RLock()
    for c in list(_live):
        c._lock = threading.RLock()
        c._busy = 0
        c._last = None
        if c._h is not None:
            c._h = None
            c._gone = (
                f"this Comm was made in process {c._pid} before fork(): a child process "
                "cannot use its parent's communicators (nor destroy them); make a new "
                "communicator in the child"
            )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _init_in_thread(h: c_void_p, cfg: Any, flag: InitAbort) -> tuple[int, str]:
    """comm_init for the main thread, interruptible: a communicator does not exist yet,
    so no wait hook can run Python's signal handlers.  The init runs in a helper thread
    while the main thread waits on an Event, which signal handlers interrupt; whatever
    a handler raises sets the init's abort flag (the init returns COMM_ERR_ABORTED at
    once, the other ranks' inits COMM_ERR_PEER), and is raised once the helper is done."""
    out: list = [INVALID, ""]
    done = threading.Event()

    def body() -> None:
        try:
            st = _lib.lib().comm_init(byref(h), byref(cfg))
            # comm_last_error(NULL) is the calling thread's: read it here.
            out[:] = [st, last_error(None) if st else ""]
        finally:
            done.set()

    helper = threading.Thread(target=body, name="arcomm comm_init", daemon=True)
    helper.start()
    raised: BaseException | None = None
    while True:
        try:
            done.wait()
            break
        except BaseException as e:  # noqa: BLE001 - raised again below
            if raised is None:
                raised = e
            flag.set()
    helper.join()  # it has returned from C: this only waits for the thread to end
    if raised is not None:
        if out[0] == 0 and h.value:
            _lib.lib().comm_destroy(h.value)  # completed before it saw the flag
        raise raised
    return out[0], out[1]


class Comm(Collectives):
    """One rank's communicator (a ``comm_t``).

    ``Comm(id, rank, nranks)`` joins communicator ``id`` (from :func:`new_id`, the same on
    every rank) as ``rank``; it returns once every rank joined (``comm_init``).  Ranks
    may be threads of one interpreter or processes.  A communicator serves one thread at
    a time, except :meth:`abort` and :meth:`close`, which any thread may call at any
    time.  ``close`` (or leaving a ``with`` block) destroys it.

    Collectives take buffer objects; counts come from the buffers (element counts, any
    shape, C-contiguous), the dtype from the send buffer (``dtype=`` reads plain numbers
    as another dtype of the same element size, e.g. ``dtype="bf16"`` over uint16 data).
    On a CUDA communicator the call is ordered on ``stream=`` when given, else on the
    stream of the buffer's framework (torch's current stream,
    ``__cuda_array_interface__['stream']``, CuPy's current stream), else on the legacy
    default stream; it returns once enqueued.  Failures raise :class:`Error`; wrong
    buffers raise ``TypeError`` / ``ValueError`` before anything is sent.
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
        self._h = None
        main = threading.current_thread() is threading.main_thread()
        if abort is None and main:
            abort = InitAbort()  # for Ctrl-C, see _init_in_thread
        cfg, keep = _config(
            nranks, rank, id, device, device_index, transport, timeout_ms, knob_defaults, abort
        )
        h = c_void_p()
        if main:
            st, msg = _init_in_thread(h, cfg, abort)
        else:
            st = _lib.lib().comm_init(byref(h), byref(cfg))
            msg = last_error(None) if st else ""
        del keep
        if st:
            raise Error(st, msg, "comm_init")
        self._setup(h.value, _DEVICES[device])

    @classmethod
    def _wrap(cls, handle: int, device: int) -> "Comm":
        c = cls.__new__(cls)
        c._setup(handle, device)
        return c

    def _setup(self, handle: int | None, device: int) -> None:
        lib = _lib.lib()
        # Re-entrant: a signal handler may call abort() or close() while this thread is
        # between acquiring and releasing it in _run.
        self._lock = threading.RLock()
        self._busy = 0  # the id of the thread whose call is in flight, 0 when none
        self._defer: int | None = None  # a handle close() left to the call in flight
        self._closing = False
        self._misuse: tuple | None = None
        self._broken: tuple | None = None  # (call, message) of the last failure
        self._gone = _CLOSED
        self._pid = os.getpid()
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
        # The wait hook: Ctrl-C (any signal handler that raises) stops a waiting call.
        self._hs = _interrupt.CallState()
        fnptr, self._hook_keep = _interrupt.make_hook(self._hs)
        st = lib.comm_set_wait_hook(handle, fnptr, None, _interrupt.PERIOD_US)
        if st:
            msg = last_error(handle)
            lib.comm_destroy(handle)
            raise Error(st, msg, "comm_set_wait_hook")
        _interrupt.install_sigint()
        self._h = handle
        with _live_lock:
            _live.add(self)

    # ---- construction ----

    @classmethod
    def from_env(cls) -> "Comm":
        """Joins the job arrun started (``comm_init_env``: ARCOMM_RANK, ARCOMM_SIZE,
        ARCOMM_ID; ARCOMM_DEVICE picks the device)."""
        h = c_void_p()
        st = _lib.lib().comm_init_env(byref(h))
        if st:
            raise_status(st, None, "comm_init_env")
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
            raise_status(st, None, "comm_init_mpi")
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
            raise_status(st, None, "comm_init_all")
        return [cls._wrap(arr[i], _DEVICES[device]) for i in range(n)]

    def split(self, color: int | None, key: int = 0) -> "Comm | None":
        """Collective: ranks of one ``color >= 0`` form a new communicator ordered by
        (key, rank); ``color`` None or < 0 gets None."""
        c = -1 if color is None or color < 0 else color
        h = c_void_p()
        self._run("comm_split", _lib.lib().comm_split, c, key, byref(h))
        return None if not h.value else Comm._wrap(h.value, self._dev)

    def dup(self) -> "Comm":
        """Collective: a new communicator over the same ranks in the same order."""
        h = c_void_p()
        self._run("comm_dup", _lib.lib().comm_dup, byref(h))
        return Comm._wrap(h.value, self._dev)

    # ---- the calls ----

    def _run(self, name: str, fn: Any, *args: Any) -> None:
        """fn(handle, *args) as one call on this communicator; raises Error for a
        nonzero status, or what a signal handler raised while the call waited (see
        _interrupt).  See the module's docstring."""
        me = _get_ident()
        busy = 0
        hs = self._hs
        try:
            # Between acquiring the lock and marking the call there are only loads,
            # stores and comparisons: no point at which a signal handler can run.
            with self._lock:
                h = self._h
                if h is None or self._busy:
                    raise self._refusal(name, me)
                busy = self._busy = me
            hs.sigint0 = _count.sigint
            st = fn(h, *args)
            err = None
            if st or hs.exc is not None or hs.why:
                err = self._outcome(st, h, name, hs)
        finally:
            if busy:
                self._busy = 0
                if self._defer is not None:
                    self._destroy_deferred()
        if err is not None:
            raise err

    def _outcome(self, st: int, h: int, name: str, hs: Any) -> BaseException | None:
        """What a call that failed, or whose wait hook stopped it, raises: what a signal
        handler raised, else the Error of st (read while the call is still marked in
        flight); the hook's state is cleared for the next call."""
        exc, why = hs.exc, hs.why
        hs.exc, hs.why = None, ""
        if exc is not None:
            return exc
        return self._failure(st, h, name, why) if st else None

    def _refusal(self, name: str, me: int) -> Exception:
        """Why a call cannot start (called under the lock)."""
        h = self._h
        if h is None:
            return ValueError(f"arcomm: rank {self._rank}: {name}: {self._gone}")
        # Another call is in flight: the ranks could no longer agree on the order of the
        # calls, so the communicator is aborted on every rank, as comm_t's own check
        # breaks it (api.md: one thread at a time per comm_t).
        other = self._busy
        self._misuse = (name, me)
        _lib.lib().comm_abort(h)
        where = (
            "this same thread (from a signal handler?)"
            if other == me
            else f"thread {other}"
        )
        return Error(
            INVALID,
            f"rank {self._rank}: {name}: another call is in flight on this Comm in {where}: "
            "a Comm serves one thread at a time (give each thread its own communicator, "
            "or serialise the calls); the communicator is now aborted on every rank",
            name,
        )

    def _failure(self, st: int, h: int, name: str, why: str = "") -> Error:
        """The Error of a failed call, read while the call is still marked in flight."""
        msg = last_error(h)
        # A broken communicator answers every later call with the status that broke it
        # and leaves comm_last_error as that failure wrote it: say so, or the message of
        # an allreduce's overlap would seem to be about the next barrier.
        if msg and self._broken is not None and msg == self._broken[1]:
            return Error(
                st,
                f"rank {self._rank}: {name}: the communicator is broken since {self._broken[0]} "
                f"failed (make a new one): {msg}",
                name,
            )
        self._broken = (name, msg)
        if st == ABORTED:
            if why:
                msg = (
                    f"rank {self._rank}: {name}: interrupted: {why} while this call waited "
                    f"in thread {threading.current_thread().name}; the call was stopped as "
                    "comm_abort stops it: the communicator is broken on every rank (its "
                    "peers return COMM_ERR_PEER)"
                )
            elif self._closing:
                msg = (
                    f"rank {self._rank}: {name}: Comm.close() was called (in another thread "
                    "or a signal handler) while this call ran: the call was aborted (its "
                    "peers return COMM_ERR_PEER) and the communicator destroyed"
                )
            elif self._misuse is not None and self._misuse[1] != _get_ident():
                msg = (
                    f"rank {self._rank}: {name}: aborted because thread {self._misuse[1]} "
                    f"called {self._misuse[0]} on this Comm while this call ran: a Comm "
                    "serves one thread at a time; " + msg
                )
        return Error(st, msg, name)

    def _destroy(self, h: int) -> None:
        with _live_lock:
            _live.discard(self)
        st = _lib.lib().comm_destroy(h)
        if st:
            raise Error(st, last_error(None), "comm_destroy")

    def _destroy_deferred(self) -> None:
        h, self._defer = self._defer, None
        if h is not None:
            self._destroy(h)

    # ---- life ----

    def _handle(self) -> int:
        h = self._h
        if h is None:
            raise ValueError(f"arcomm: rank {self._rank}: {self._gone}")
        return h

    def abort(self) -> None:
        """Breaks the communicator (``comm_abort``), from any thread: a call blocked on it
        raises COMM_ERR_ABORTED, its peers COMM_ERR_PEER.  Nothing happens once closed."""
        with self._lock:
            if self._h is not None:
                _lib.lib().comm_abort(self._h)

    def close(self) -> None:
        """Destroys the communicator (``comm_destroy``); a second close does nothing.
        Any thread may close it: a call in flight in another thread is aborted first
        (it raises COMM_ERR_ABORTED, its peers COMM_ERR_PEER) and close returns once it
        has returned.  Calls after close raise ValueError."""
        me = _get_ident()
        with self._lock:
            h = self._h
            if h is None:
                return
            self._h = None
            self._last = None
            busy = self._busy
            if busy:
                self._closing = True
                _lib.lib().comm_abort(h)
                if busy == me:
                    # Called from within that call (a signal handler run by its wait
                    # hook): the call destroys the communicator once it returned.
                    self._defer = h
                    return
        # The aborted call returns promptly (comm_abort wakes its waits); _run clears
        # _busy once it no longer uses the handle.
        while self._busy:
            time.sleep(0.0005)
        self._destroy(h)

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
        with self._lock:
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
        with self._lock:
            return (_lib.lib().comm_last_error(self._handle()) or b"").decode(errors="replace")

    # ---- buffers ----

    def _buf(self, obj: Any, writable: bool, role: str, dtype: Any, stream: int | None,
             call: str) -> tuple:
        """One resolved buffer (see _buffers): keep it until the C call returned."""
        # Fast path: a non-empty numpy array of an arcomm dtype on a host communicator.
        # ctypes' from_buffer asks for a writable C-contiguous buffer, so it fails for
        # read-only or strided arrays, which the general path then handles (or refuses).
        if type(obj) is _ndarray and dtype is None and self._dev == 0:
            code = _NP_CODES.get(obj.dtype)
            n = obj.size
            if code is not None and n:
                try:
                    exp = _c_char.from_buffer(obj)
                    return (_addressof(exp), n, code, 0, -1, None, exp)
                except (TypeError, ValueError):
                    pass
        try:
            b = _buffers.resolve(
                obj, writable, role, stream, None if dtype is None else dtype_code(dtype)
            )
            if b[3] != self._dev:
                raise ValueError(
                    f"arcomm: {role} is {'CUDA' if b[3] else 'host'} memory; this "
                    f"communicator's device is {self.device}"
                )
        except (TypeError, ValueError) as e:
            raise self._argument_error(e, call) from None
        return b

    def _argument_error(self, e: Exception, call: str) -> Exception:
        """e, its message led by this rank and the call."""
        msg = str(e)
        if msg.startswith("arcomm: "):
            msg = msg[len("arcomm: "):]
        return type(e)(f"arcomm: rank {self._rank}: {call}: {msg}")

    def _bad(self, exc: type, call: str, msg: str) -> Exception:
        return exc(f"arcomm: rank {self._rank}: {call}: {msg}")

    def _pair(self, send: Any, recv: Any) -> tuple | None:
        """The fast path's (send, recv, send ptr, recv ptr, dtype, send count, recv count,
        code, send export, recv export) for two non-empty numpy arrays of one arcomm
        dtype on a host communicator, else None (the general path then checks and
        explains).  The last pair is kept with its buffer exports (so the arrays'
        memory stays put): the same objects again skip the exports when dtype, sizes
        and recv's writability are unchanged."""
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
                    se = _c_char.from_buffer(send)
                    re = _c_char.from_buffer(recv)
                except (TypeError, ValueError):
                    return None
                last = (send, recv, _addressof(se), _addressof(re), dt, ns, nr, code, se, re)
                self._last = last
                return last
        return None

    def _stream(self, call: str, stream: int | None, *bufs: tuple | None) -> int | None:
        if self._dev == 0:
            if stream:
                raise self._bad(ValueError, call, "stream= is for CUDA communicators")
            return None
        if stream is not None:
            return stream or None
        for b in bufs:
            if b is not None and b[5] is not None:
                return b[5] or None
        return None

    def _same_dtype(self, a: tuple, b: tuple, what: str) -> None:
        if a[2] != b[2]:
            raise self._bad(
                TypeError, what, f"dtypes differ ({DTYPE_NAMES[a[2]]} and {DTYPE_NAMES[b[2]]})"
            )

    def _same_device(self, call: str, *bufs: tuple) -> None:
        idx = {b[4] for b in bufs if b is not None and len(b) > 4 and b[4] >= 0}
        if len(idx) > 1:
            raise self._bad(
                ValueError, call,
                f"buffers on different GPUs ({', '.join(f'cuda:{i}' for i in sorted(idx))}); "
                "a call's buffers live on its communicator's GPU",
            )
