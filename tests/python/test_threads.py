# SPDX-License-Identifier: MIT
"""Thread ranks in one interpreter: every collective x dtype x op, the buffer kinds, the
argument checks, split/dup, and failures surfacing as arcomm.Error on every rank."""
from __future__ import annotations

import array
import re
import threading
import time

import numpy as np
import pytest

import arcomm
from conftest import run_each, run_ranks
from refs import DTYPES, arcomm_dtype, check_equal, check_reduced, data, poison
from sweep import compare_digests, sweep


def test_new_id_and_version():
    a, b = arcomm.new_id(), arcomm.new_id()
    assert re.fullmatch(r"arc1-[0-9a-f]{32}", a), a
    assert a != b
    major, minor, _ = arcomm.version()
    assert (major, minor) == (0, 2)


def test_sweep_init_all(comms3):
    """comm_init_all's three thread ranks: every collective, dtype, op and in-place form."""
    assert [c.rank for c in comms3] == [0, 1, 2]
    assert all(c.size == 3 for c in comms3)
    digests = run_ranks(comms3, lambda c: sweep(c, seed=11))
    compare_digests(digests)


def test_sweep_comm_from_threads():
    """Comm(id, rank, n) called from each thread."""
    cid = arcomm.new_id()

    def rank(r: int):
        with arcomm.Comm(cid, r, 2, timeout_ms=30000) as c:
            assert (c.rank, c.size) == (r, 2)
            assert c.transport
            return sweep(c, seed=5, counts=(3, 1000))

    results, errors = run_each(2, rank)
    for e in errors:
        if e is not None:
            raise e
    compare_digests(results)


class _DLPackOnly:
    """A host tensor seen only through DLPack (numpy underneath)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_dlpack_every_dtype(comms3):
    """Buffers seen only through DLPack (the capsule path): every dtype, sum and max."""

    def body(c):
        me, n = c.rank, c.size
        for dt in DTYPES:
            kw = {"dtype": arcomm_dtype(dt)} if arcomm_dtype(dt) else {}
            for op in ("sum", "max"):
                xs = [data(dt, 257, np.random.default_rng([3, r, len(dt)]), op) for r in range(n)]
                out = poison(np.empty_like(xs[me]), dt)
                c.allreduce(_DLPackOnly(xs[me]), _DLPackOnly(out), op, **kw)
                check_reduced(out, xs, dt, op, f"DLPack {dt} {op}")
        return True

    assert run_ranks(comms3, body) == [True] * 3


def test_buffer_kinds(comms3):
    """numpy, DLPack-only objects, bytearray, array.array, memoryview, bytes."""

    def body(c):
        n, r = c.size, c.rank
        x = np.arange(6, dtype=np.float32) + 10 * r
        want = sum(np.arange(6, dtype=np.float64) + 10 * q for q in range(n))
        out = _DLPackOnly(np.full(6, np.nan, np.float32))
        c.allreduce(_DLPackOnly(x), out)
        check_equal(out.a, want.astype(np.float32), "DLPack")
        ba = bytearray(np.arange(8, dtype=np.uint8) + r)
        c.allreduce(ba)
        check_equal(np.frombuffer(ba, np.uint8), (np.arange(8) * n + sum(range(n))).astype(np.uint8), "bytearray")
        aa = array.array("i", [r] * 5)
        got = array.array("i", [-1] * 5)
        c.allreduce(aa, memoryview(got), "max")
        assert list(got) == [n - 1] * 5
        ro = bytes(np.full(4, r + 1, np.uint8))  # read-only send is fine
        dst = np.zeros(4, np.uint8)
        c.allreduce(ro, dst, "prod")
        check_equal(dst, np.full(4, np.prod(np.arange(1, n + 1)), np.uint8), "bytes send")
        z = np.zeros(0, np.float64)
        c.allreduce(z, np.zeros(0, np.float64))  # count 0
        g = np.full(4 * n, -1, np.int64)
        c.allgather(np.full(4, r, np.int64), g.reshape(n, 4))  # any shape, C-contiguous
        check_equal(g, np.repeat(np.arange(n, dtype=np.int64), 4), "allgather 2-D recv")
        return True

    assert run_ranks(comms3, body) == [True] * 3


def test_argument_errors(comms3):
    """Wrong buffers raise TypeError/ValueError before anything is sent (so no rank
    waits: every rank makes the same bad calls, then a good one)."""
    c = comms3[0]

    def body(c):
        n = c.size
        f = np.zeros(8, np.float32)
        with pytest.raises(ValueError, match="recv has 7 elements, send 8"):
            c.allreduce(f, np.zeros(7, np.float32))
        with pytest.raises(TypeError, match="dtypes differ"):
            c.allreduce(f, np.zeros(8, np.int32))
        with pytest.raises(ValueError, match="C-contiguous"):
            c.allreduce(np.zeros(16, np.float32)[::2])
        with pytest.raises(TypeError, match="not one arcomm"):
            c.allreduce(np.zeros(4, np.complex64))
        with pytest.raises(TypeError, match="not a buffer"):
            c.allreduce([1.0, 2.0])
        with pytest.raises(ValueError, match="writable"):
            c.allreduce(np.zeros(4, np.float32), b"\0" * 16)
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="writable"):
            c.allreduce(ro)
        with pytest.raises(ValueError, match="op 'mean'"):
            c.allreduce(f, op="mean")
        with pytest.raises(ValueError, match=f"nranks \\* send = {n} \\* 8"):
            c.allgather(f, np.zeros(8 * n - 1, np.float32))
        with pytest.raises(ValueError, match=f"nranks \\* recv = {n} \\* 2"):
            c.reduce_scatter(np.zeros(2 * n + 1, np.float32), np.zeros(2, np.float32))
        with pytest.raises(ValueError, match="nranks \\* count"):
            c.alltoall(np.zeros(n + 1, np.float32), np.zeros(n + 1, np.float32))
        with pytest.raises(ValueError, match="not a multiple"):
            c.reduce_scatter(np.zeros(n + 1, np.float32))
        with pytest.raises(TypeError, match="2-byte elements; send \\(in place\\) has 4-byte"):
            c.allreduce(f, dtype="bf16")
        with pytest.raises(ValueError, match="stream= is for CUDA"):
            c.allreduce(f, stream=5)
        c.allreduce(f)  # still usable: nothing reached the library
        return True

    assert run_ranks(comms3, body) == [True] * 3
    assert "closed" not in repr(c)


def test_avg_of_integers_unsupported_and_usable(comms3):
    def body(c):
        with pytest.raises(arcomm.Error) as ei:
            c.allreduce(np.zeros(4, np.int32), op="avg")
        assert ei.value.status == "COMM_ERR_UNSUPPORTED"
        x = np.full(4, c.rank, np.int32)
        c.allreduce(x)
        return int(x[0])

    assert run_ranks(comms3, body) == [3] * 3


def test_split_and_dup(comms3):
    def body(c):
        r = c.rank
        sub = c.split(r % 2, key=-r)  # evens {0,2} ordered 2, 0; odd {1}
        with sub:
            want = {0: (1, 2), 1: (0, 1), 2: (0, 2)}[r]
            assert (sub.rank, sub.size) == want
            x = np.array([r + 1.0])
            sub.allreduce(x)
            assert x[0] == {0: 4.0, 1: 2.0, 2: 4.0}[r]
        none = c.split(None if r == 1 else 0)
        if r == 1:
            assert none is None
        else:
            with none:
                assert none.size == 2
                none.barrier()
        d = c.dup()
        with d:
            assert (d.rank, d.size) == (r, 3)
            y = np.array([r], np.int64)
            d.allreduce(y, op="max")
            assert y[0] == 2
        return True

    assert run_ranks(comms3, body) == [True] * 3


def test_context_manager_and_close():
    cs = arcomm.Comm.init_all(1)
    with cs[0] as c:
        x = np.array([2.5])
        c.allreduce(x)
        assert x[0] == 2.5
    assert c.closed and "closed" in repr(c)
    c.close()  # a second close does nothing
    with pytest.raises(ValueError, match="closed"):
        c.allreduce(x)
    c.abort()  # nothing happens once closed


def _statuses(errors: list) -> list:
    return [e.status if isinstance(e, arcomm.Error) else repr(e) for e in errors]


def test_mismatch_on_every_rank():
    """Ranks disagree on the count: arcomm.Error with COMM_ERR_MISMATCH on every rank,
    its message from comm_last_error, and no byte of recv written."""
    cs = arcomm.Comm.init_all(3, timeout_ms=20000)

    def rank(r: int):
        recv = np.full(10 + (r == 1), -7.0)
        try:
            cs[r].allreduce(np.ones(10 + (r == 1)), recv)
        finally:
            assert (recv == -7.0).all(), "recv written after a mismatch"

    _, errors = run_each(3, rank)
    for c in cs:
        c.close()
    assert _statuses(errors) == ["COMM_ERR_MISMATCH"] * 3
    for e in errors:
        assert "disagree" in e.message and e.code == -7
        assert str(e).startswith("allreduce: COMM_ERR_MISMATCH: ")


def test_dtype_mismatch_on_every_rank():
    cs = arcomm.Comm.init_all(2, timeout_ms=20000)

    def rank(r: int):
        cs[r].allgather(np.zeros(4, np.float32 if r else np.int32), np.zeros(8, np.float32 if r else np.int32))

    _, errors = run_each(2, rank)
    for c in cs:
        c.close()
    assert _statuses(errors) == ["COMM_ERR_MISMATCH"] * 2


def test_timeout_on_every_rank():
    """timeout_ms=300: rank 1 comes late; rank 0 times out, rank 1 then fails too."""
    cs = arcomm.Comm.init_all(2, timeout_ms=300)
    t0 = time.monotonic()

    def rank(r: int):
        if r == 1:
            time.sleep(1.0)
        cs[r].allreduce(np.ones(100))

    _, errors = run_each(2, rank)
    elapsed = time.monotonic() - t0
    for c in cs:
        c.close()
    st = _statuses(errors)
    assert st[0] == "COMM_ERR_TIMEOUT", st
    assert st[1] in ("COMM_ERR_PEER", "COMM_ERR_TIMEOUT"), st
    assert "timed out" in errors[0].message
    assert elapsed < 10


def test_init_timeout():
    t0 = time.monotonic()
    with pytest.raises(arcomm.Error) as ei:
        arcomm.Comm(arcomm.new_id(), 0, 2, timeout_ms=300)
    assert ei.value.status == "COMM_ERR_TIMEOUT"
    assert time.monotonic() - t0 < 10


def test_init_abort_from_another_thread():
    """Rank 0 of 2 waits in comm_init for a rank that never comes; the main thread sets its
    InitAbort: COMM_ERR_ABORTED at once, not at the 20 s timeout."""
    flag = arcomm.InitAbort()
    errors: list = [None]

    def rank0():
        try:
            arcomm.Comm(arcomm.new_id(), 0, 2, timeout_ms=20000, abort=flag)
        except arcomm.Error as e:
            errors[0] = e

    t = threading.Thread(target=rank0)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    flag.set()
    t.join(15)
    assert not t.is_alive()
    assert flag.is_set()
    assert _statuses(errors) == ["COMM_ERR_ABORTED"]
    assert "abort_flag" in errors[0].message
    assert time.monotonic() - t0 < 3.0
    with pytest.raises(TypeError):
        arcomm.Comm(arcomm.new_id(), 0, 1, abort=1)


def test_abort_from_another_thread():
    """Rank 0 blocks (rank 1 has not come); the main thread aborts it: ABORTED on rank 0,
    PEER on rank 1.  A Python thread keeps counting meanwhile: the GIL is released."""
    cs = arcomm.Comm.init_all(2, timeout_ms=60000)
    entered = threading.Event()
    release = threading.Event()
    errors: list = [None, None]
    ticks = [0]

    def rank0():
        entered.set()
        try:
            cs[0].allreduce(np.ones(1000))
        except arcomm.Error as e:
            errors[0] = e

    def rank1():
        release.wait()
        try:
            cs[1].allreduce(np.ones(1000))
        except arcomm.Error as e:
            errors[1] = e

    def counter():
        while not release.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    ts = [threading.Thread(target=f) for f in (rank0, rank1, counter)]
    for t in ts:
        t.start()
    entered.wait()
    time.sleep(0.3)
    t0 = time.monotonic()
    cs[0].abort()
    ts[0].join(10)
    abort_s = time.monotonic() - t0
    release.set()
    for t in ts:
        t.join(10)
    assert not any(t.is_alive() for t in ts)
    for c in cs:
        c.close()
    assert _statuses(errors) == ["COMM_ERR_ABORTED", "COMM_ERR_PEER"]
    assert abort_s < 2.0
    assert ticks[0] > 5, f"only {ticks[0]} ticks while rank 0 blocked: GIL held?"


def test_allreduce_same_arrays_again(comms3):
    """The fast path's cache of the last pair: new contents, a dtype changed in place and
    a recv made read-only are all seen on the next call."""

    def body(c):
        n, me = c.size, c.rank
        s = np.full(64, me + 1, np.float32)
        r = np.zeros(64, np.float32)
        c.allreduce(s, r)
        assert (r == sum(range(1, n + 1))).all()
        s[:] = 2 * (me + 1)
        c.allreduce(s, r, "max")
        assert (r == 2 * n).all()
        s.dtype = np.int32  # the same object, now 64 int32s
        r.dtype = np.int32
        s[:] = me
        c.allreduce(s, r)
        assert (r == sum(range(n))).all()
        r.flags.writeable = False
        with pytest.raises(ValueError, match="writable"):
            c.allreduce(s, r)
        r2 = np.zeros(64, np.int32)
        c.allreduce(s, r2)
        assert (r2 == sum(range(n))).all()
        return True

    assert run_ranks(comms3, body) == [True] * 3


def test_every_collective_same_arrays_again(comms3):
    """The fast path's last pair for each collective: the same arrays twice with new
    contents, then a size that no longer fits (the general path's ValueError)."""

    def body(c):
        n, me = c.size, c.rank
        for k in (1, 2):
            s = np.full(6, k * (me + 1), np.int64)
            r = np.zeros(6, np.int64)
            for _ in range(2):
                s[:] = k * (me + 1)
                r[:] = -1
                c.broadcast(s, r, 1)
                assert (r == k * 2).all()
                r[:] = -1
                c.reduce(s, r, "sum", 2)
                if me == 2:
                    assert (r == k * sum(range(1, n + 1))).all()
            g = np.zeros(6 * n, np.int64)
            for _ in range(2):
                g[:] = -1
                c.allgather(s, g)
                assert (g == np.repeat(k * np.arange(1, n + 1), 6)).all()
            big = np.arange(6 * n, dtype=np.int64) * k
            for _ in range(2):
                r[:] = -1
                c.reduce_scatter(big, r, "max")
                assert (r == big[me * 6 : (me + 1) * 6]).all()
            a = np.zeros(6 * n, np.int64)
            for _ in range(2):
                a[:] = -1
                c.alltoall(g, a)
                assert (a == me * k + k).all()
        with pytest.raises(ValueError, match="nranks \\* send"):
            c.allgather(s, g[:-1])
        return True

    assert run_ranks(comms3, body) == [True] * 3


def test_ml_dtypes_bfloat16(comms3):
    """numpy arrays of ml_dtypes' bfloat16 (when installed) are bf16 buffers."""
    ml_dtypes = pytest.importorskip("ml_dtypes")

    def body(c):
        n, me = c.size, c.rank
        xs = [data("bf16", 999, np.random.default_rng([9, r]), "sum") for r in range(n)]
        send = xs[me].view(ml_dtypes.bfloat16)
        recv = poison(np.empty(999, np.uint16), "bf16").view(ml_dtypes.bfloat16)
        c.allreduce(send, recv)
        check_reduced(recv.view(np.uint16), xs, "bf16", "sum", "ml_dtypes bfloat16")
        g = np.zeros(999 * n, ml_dtypes.bfloat16)
        c.allgather(send, g)
        check_equal(g.view(np.uint16), np.concatenate(xs), "ml_dtypes allgather")
        return True

    assert run_ranks(comms3, body) == [True] * 3


class _FakeCAI:
    """A __cuda_array_interface__ object over host memory: parsed, then refused by a
    host communicator (the CUDA path itself is test_cuda.py's, on a GPU)."""

    def __init__(self, a: np.ndarray, typestr: str | None = None, strides=None) -> None:
        self.a = a
        self.__cuda_array_interface__ = {
            "data": (a.ctypes.data, False),
            "shape": a.shape,
            "typestr": typestr or a.dtype.str,
            "strides": strides,
            "version": 3,
            "stream": 1,
        }


def test_cuda_array_interface_checks():
    (c,) = arcomm.Comm.init_all(1)
    with c:
        a = np.zeros(8, np.float32)
        with pytest.raises(ValueError, match="send \\(in place\\) is CUDA memory; this communicator's device is host"):
            c.allreduce(_FakeCAI(a))
        with pytest.raises(TypeError, match="typestr '<c8'"):
            c.allreduce(_FakeCAI(a, "<c8"))
        with pytest.raises(ValueError, match="C-contiguous"):
            c.allreduce(_FakeCAI(np.zeros((4, 2), np.float32), strides=(4, 16)))
        with pytest.raises(TypeError, match="2-byte elements; send \\(in place\\) has 4-byte"):
            c.allreduce(_FakeCAI(a), dtype="bf16")
