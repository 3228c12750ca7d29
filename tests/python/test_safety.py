# SPDX-License-Identifier: MIT
"""Memory safety of the package: elements taken only as what they are, buffers held
for the whole C call, no freed comm_t passed into C (close racing a call, threads
sharing one Comm, a fork() child), garbage collection of a Comm with a call in flight."""
from __future__ import annotations

import array
import gc
import mmap
import os
import threading
import time
import weakref

import numpy as np
import pytest

import arcomm
from conftest import run_each
from refs import check_equal


def _wait_in_flight(c: arcomm.Comm, timeout: float = 30.0) -> None:
    """Returns once a call on c is in flight (its buffers resolved and held)."""
    deadline = time.monotonic() + timeout
    while not c._busy:
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.001)


@pytest.fixture
def one():
    (c,) = arcomm.Comm.init_all(1)
    yield c
    c.close()


class _DLPackOnly:
    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class _FakeCAI:
    def __init__(self, a: np.ndarray, typestr: str) -> None:
        self.a = a
        self.__cuda_array_interface__ = {
            "data": (a.ctypes.data, False), "shape": a.shape, "typestr": typestr,
            "strides": None, "version": 3, "stream": 1,
        }


@pytest.mark.parametrize(
    "make, dtype",
    [
        (lambda: np.array([object(), "x", 3, None], dtype=object), "i64"),
        (lambda: np.zeros(4, [("a", "<i4"), ("b", "<i4")]), "i64"),
        (lambda: np.zeros(4, ">i8"), "i64"),
        (lambda: np.zeros(4, ">f4"), "f32"),
        (lambda: np.zeros(4, np.complex64), "f64"),
        (lambda: np.zeros(4, "M8[s]"), "i64"),
        (lambda: np.zeros(4, bool), "u8"),
        (lambda: np.zeros(4, "S2"), "bf16"),
    ],
    ids=["object", "structured", "big-endian-i8", "big-endian-f4", "complex", "datetime",
         "bool", "bytes"],
)
def test_dtype_keyword_reads_plain_numbers_only(one, make, dtype):
    """dtype= reinterprets plain numbers of the same size; an object array read as i64
    would send raw object addresses (and segfault in place), so every non-number is
    refused, as send, as recv and in place, before anything is sent."""
    a = make()
    plain = np.zeros(a.size, {1: np.uint8, 2: np.uint16, 4: np.int32, 8: np.int64}[a.itemsize])
    for call in (
        lambda: one.allreduce(a, dtype=dtype),  # in place
        lambda: one.allreduce(a, plain, dtype=dtype),  # as send
        lambda: one.allreduce(plain, a, dtype=dtype),  # as recv
        lambda: one.allgather(a, np.zeros_like(a), dtype=dtype),
        lambda: one.broadcast(a, dtype=dtype),
    ):
        with pytest.raises(TypeError, match=f"rank 0: .*dtype='{dtype}' reinterprets plain numbers"):
            call()
    try:
        mv = memoryview(a)
    except ValueError:  # numpy exports no buffer of this dtype
        return
    with pytest.raises(TypeError, match="reinterprets plain numbers|buffer format"):
        one.allreduce(mv, dtype=dtype)


def test_byte_swapped_without_keyword(one):
    with pytest.raises(TypeError, match="rank 0: allreduce: send \\(in place\\) is byte-swapped >f8 .*newbyteorder"):
        one.allreduce(np.zeros(4, ">f8"))


def test_dtype_keyword_other_buffer_kinds(one):
    """The same rule through DLPack, __cuda_array_interface__ and the buffer protocol."""
    with pytest.raises(TypeError, match="DLPack complex .*reinterprets plain numbers"):
        one.allreduce(_DLPackOnly(np.zeros(4, np.complex64)), dtype="f64")
    with pytest.raises(TypeError, match="typestr '>f4'.*reinterprets plain numbers"):
        one.allreduce(_FakeCAI(np.zeros(4, np.float32), ">f4"), dtype="f32")
    with pytest.raises(TypeError, match="typestr '<c8'.*reinterprets plain numbers"):
        one.allreduce(_FakeCAI(np.zeros(4, np.complex64), "<c8"), dtype="i64")
    with pytest.raises(TypeError, match="reinterprets plain numbers"):
        one.allreduce(memoryview(array.array("u", "abcd")), dtype="i32")


def test_dtype_keyword_still_reads_numbers():
    """Plain numbers of the same size are read as the dtype: bf16 over uint16 and int16,
    f32 over int32 bits, u64 over int64, through numpy, DLPack and the buffer protocol."""
    cs = arcomm.Comm.init_all(2)
    rng = np.random.default_rng(41)
    xs = [rng.integers(0, 1 << 14, 64).astype(np.uint16) for _ in range(2)]
    ys = [rng.integers(-(1 << 40), 1 << 40, 64).astype(np.int64) for _ in range(2)]

    def body(r):
        c = cs[r]
        out = np.full(64, 0xFFFF, np.uint16)
        c.allreduce(xs[r].view(np.int16), out.view(np.int16), dtype="bf16", op="max")
        check_equal(out, np.maximum(xs[0], xs[1]), "bf16 over int16")
        out2 = np.zeros(64, np.int64)
        c.allreduce(_DLPackOnly(ys[r]), memoryview(out2), dtype="u64")
        check_equal(out2, ys[0] + ys[1], "u64 over int64")
        return True

    res, errs = run_each(2, body)
    for c in cs:
        c.close()
    assert errs == [None, None], errs
    assert res == [True, True]


def _recv_kinds():
    """name -> () -> (recv object, its dtype, resize or close it, its contents)."""
    n = 4096

    def bytearray_kind():
        ba = bytearray(n)
        return ba, np.uint8, lambda: ba.extend(b"\0" * (1 << 20)), lambda: np.frombuffer(ba, np.uint8)

    def array_kind():
        a = array.array("d", bytes(8 * n))
        return a, np.float64, lambda: a.extend([0.0] * (1 << 17)), lambda: np.frombuffer(a, np.float64)

    def mmap_kind():
        m = mmap.mmap(-1, n)
        return m, np.uint8, m.close, lambda: np.frombuffer(m, np.uint8).copy()

    return {"bytearray": bytearray_kind, "array": array_kind, "mmap": mmap_kind}


@pytest.mark.parametrize("kind", list(_recv_kinds()))
def test_recv_buffer_held_for_the_whole_call(kind):
    """Rank 0 receives into a resizable buffer and waits for rank 1; meanwhile another
    thread resizes (or closes) that buffer: Python must refuse (BufferError) because the
    export is held until the C call returned; else arcomm would write freed memory."""
    cs = arcomm.Comm.init_all(2, timeout_ms=30000)
    n = 4096
    obj, dt, resize, contents = _recv_kinds()[kind]()
    rng = np.random.default_rng(5)
    xs = [rng.integers(0, 100, n).astype(dt) for _ in range(2)]
    want = (xs[0] + xs[1]).astype(dt)
    out: list = [None, None]
    errors: list = [None, None]

    def rank0():
        try:
            cs[0].allreduce(xs[0], obj)
        except BaseException as e:  # noqa: BLE001
            errors[0] = e

    t = threading.Thread(target=rank0)
    t.start()
    _wait_in_flight(cs[0])
    try:
        resize()
        resized = True
    except BufferError:
        resized = False
    if resized:
        cs[0].abort()  # the old code: do not let arcomm write the freed buffer
    else:
        r1 = np.empty(n, dt)
        try:
            cs[1].allreduce(xs[1], r1)
        except BaseException as e:  # noqa: BLE001
            errors[1] = e
        out[1] = r1
    t.join(30)
    assert not t.is_alive()
    for c in cs:
        c.close()
    assert not resized, f"{kind} was resized while arcomm was writing into it"
    assert errors == [None, None], errors
    check_equal(contents()[:n], want, f"{kind} recv")
    check_equal(out[1], want, "rank 1")
    resize()  # once the call returned, the buffer is the owner's again


def test_close_while_a_call_waits():
    """close() from another thread while rank 0 waits in a call: the call is aborted
    (COMM_ERR_ABORTED naming close), close returns once it returned and frees the
    communicator, rank 1 gets COMM_ERR_PEER, and calls after close raise ValueError."""
    cs = arcomm.Comm.init_all(2, timeout_ms=60000)
    errors: list = [None, None]

    def rank0():
        try:
            cs[0].allreduce(np.ones(1000))
        except arcomm.Error as e:
            errors[0] = e

    t = threading.Thread(target=rank0)
    t.start()
    _wait_in_flight(cs[0])
    t0 = time.monotonic()
    cs[0].close()
    took = time.monotonic() - t0
    assert not t.is_alive(), "close() returned while the call was still running"
    t.join()
    assert cs[0].closed
    assert isinstance(errors[0], arcomm.Error) and errors[0].status == "COMM_ERR_ABORTED", errors
    assert "Comm.close() was called (in another thread" in errors[0].message
    assert "rank 0" in errors[0].message
    assert took < 5.0
    with pytest.raises(arcomm.Error) as ei:
        cs[1].allreduce(np.ones(1000))
    assert ei.value.status == "COMM_ERR_PEER"
    with pytest.raises(ValueError, match="rank 0: barrier: this Comm is closed"):
        cs[0].barrier()
    for c in cs:
        c.close()


def test_close_racing_calls():
    """A thread makes calls in a loop while another closes the Comm at varying moments:
    each call either completes, or raises ValueError (closed before it started) or
    COMM_ERR_ABORTED (closed while it ran); never anything else, never a crash."""
    outcomes: dict = {}
    for i in range(60):
        (c,) = arcomm.Comm.init_all(1)
        x = np.arange(64, dtype=np.float64)
        stop = threading.Event()
        seen: list = []

        def loop():
            while not stop.is_set():
                try:
                    c.allreduce(x, np.empty(64))
                    c.barrier()
                except ValueError as e:
                    seen.append("closed" if "closed" in str(e) else repr(e))
                    return
                except arcomm.Error as e:
                    seen.append(e.status if "close()" in e.message else repr(e))
                    return

        t = threading.Thread(target=loop)
        t.start()
        time.sleep(0.0005 * (i % 7))
        c.close()
        stop.set()
        t.join(10)
        assert not t.is_alive()
        for s in seen:
            outcomes[s] = outcomes.get(s, 0) + 1
    assert set(outcomes) <= {"closed", "COMM_ERR_ABORTED"}, outcomes


def test_two_threads_on_one_comm():
    """Thread A waits in a call on rank 0's Comm; thread B makes a call on the same
    Comm: B gets COMM_ERR_INVALID at once, naming the problem and the fix; the
    communicator is aborted on every rank (A gets COMM_ERR_ABORTED naming B's call,
    rank 1 COMM_ERR_PEER): the ranks could no longer agree on the order of calls."""
    cs = arcomm.Comm.init_all(2, timeout_ms=60000)
    errors: list = [None, None]

    def thread_a():
        try:
            cs[0].allreduce(np.ones(100))
        except arcomm.Error as e:
            errors[0] = e

    t = threading.Thread(target=thread_a)
    t.start()
    _wait_in_flight(cs[0])
    with pytest.raises(arcomm.Error) as ei:
        cs[0].barrier()
    t.join(10)
    assert not t.is_alive()
    e = ei.value
    assert e.status == "COMM_ERR_INVALID"
    assert "rank 0: barrier: another call is in flight on this Comm" in e.message
    assert "one thread at a time" in e.message
    assert errors[0] is not None and errors[0].status == "COMM_ERR_ABORTED", errors
    assert "called barrier on this Comm while this call ran" in errors[0].message
    with pytest.raises(arcomm.Error) as ei:
        cs[1].allreduce(np.ones(100))
    assert ei.value.status == "COMM_ERR_PEER"
    for c in cs:
        c.close()


def test_fork_child_leaves_parent_comm_alone():
    """A fork() child holds copies of its parent's communicators.  Using one raises
    ValueError naming fork; closing it (or its garbage collection) does nothing: the
    parent's communicator keeps working (destroying it in the child would tell the
    parent's peers that this rank left)."""
    cs = arcomm.Comm.init_all(2, timeout_ms=20000)
    x = np.ones(8)
    run_each(2, lambda r: cs[r].allreduce(np.ones(8)))
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        code = 0
        try:
            try:
                cs[0].allreduce(x)
                code = 3
            except ValueError as e:
                if "before fork()" not in str(e) or "rank 0" not in str(e):
                    code = 4
            cs[0].close()
            cs[1].close()
            del cs[:]
            gc.collect()
        except BaseException:  # noqa: BLE001
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    res, errs = run_each(2, lambda r: cs[r].allreduce(np.full(8, r + 1.0)).tolist())
    for c in cs:
        c.close()
    assert errs == [None, None], errs
    assert res == [[3.0] * 8] * 2


def test_garbage_collection_with_a_call_in_flight():
    """The only reference to rank 0's Comm is the thread blocked in its call: collecting
    garbage meanwhile neither frees nor closes it; once the call returned and the thread
    ended, the Comm is collected and destroyed (the conftest checks that its segment and
    threads are gone)."""
    cs = arcomm.Comm.init_all(2, timeout_ms=60000)
    ref = weakref.ref(cs[0])
    got: list = [None]

    def rank0(c):
        x = np.full(16, 2.0)
        c.allreduce(x)
        got[0] = x

    t = threading.Thread(target=rank0, args=(cs[0],))
    t.start()
    _wait_in_flight(cs[0])
    c1 = cs[1]
    del cs
    for _ in range(3):
        gc.collect()
    assert ref() is not None and not ref().closed
    x1 = np.full(16, 1.0)
    c1.allreduce(x1)
    t.join(10)
    del t
    gc.collect()
    assert ref() is None, "the Comm outlived its last reference"
    check_equal(got[0], np.full(16, 3.0), "rank 0")
    check_equal(x1, np.full(16, 3.0), "rank 1")
    c1.close()


def test_refused_dlpack_export_is_named(one):
    """numpy exports no read-only array through DLPack: the refusal comes as a
    ValueError naming the rank, the call, the buffer and what to pass instead."""
    ro = np.arange(4.0)
    ro.flags.writeable = False
    for call in (lambda: one.allreduce(_DLPackOnly(ro), np.zeros(4)),
                 lambda: one.allreduce(np.zeros(4), _DLPackOnly(ro))):
        with pytest.raises(ValueError, match="rank 0: allreduce: (send|recv): .*__dlpack__ refused "
                           "the export .*; pass a numpy array or a buffer-protocol object"):
            call()


def test_broken_communicator_says_so():
    """After a failure the communicator answers every call with that failure's status,
    and comm_last_error still holds that failure's text: the package says that the
    communicator is broken since that call, instead of repeating the old text as if it
    were the new call's."""
    (c,) = arcomm.Comm.init_all(1)
    y = np.arange(20.0)
    with pytest.raises(arcomm.Error) as first:
        c.allreduce(y[0:10], y[5:15])  # overlapping views: COMM_ERR_INVALID
    assert "overlap" in first.value.message
    with pytest.raises(arcomm.Error) as later:
        c.barrier()
    assert later.value.status == first.value.status
    assert later.value.message.startswith(
        "rank 0: barrier: the communicator is broken since allreduce failed (make a new one): "
    ), later.value.message
    c.close()


def test_awkward_arrays(one):
    """0-d arrays, numpy scalars, Fortran-ordered and negative-stride views, huge claimed
    shapes: used where arcomm can, else refused with the fix."""
    z = np.array(3.0)
    one.allreduce(z)
    assert z == 3.0
    out = np.array(0.0)
    one.allreduce(np.array(2.5), out)
    assert out == 2.5
    r = np.zeros(1)
    one.allreduce(np.float64(1.5), r)  # a numpy scalar is a read-only buffer: send only
    assert r[0] == 1.5
    with pytest.raises(ValueError, match="rank 0: allreduce: recv must be writable"):
        one.allreduce(np.zeros(1), np.float64(1.5))
    x = np.arange(10.0)
    with pytest.raises(ValueError, match="C-contiguous \\(got strides \\(-8,\\) .*np.ascontiguousarray"):
        one.allreduce(x[::-1])
    with pytest.raises(ValueError, match="C-contiguous .*np.ascontiguousarray\\(x\\) and copy the result back"):
        one.allreduce(np.zeros(10), np.zeros((5, 2), order="F").reshape(5, 2))
    one.allreduce(np.zeros((3, 1), order="F"))  # one column: contiguous all the same
    huge = _FakeCAI(np.zeros(1, np.float32), "<f4")
    huge.__cuda_array_interface__["shape"] = (1 << 62,)
    with pytest.raises(ValueError, match="more than a process can address"):
        one.allreduce(huge)
