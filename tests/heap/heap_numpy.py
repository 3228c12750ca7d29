# SPDX-License-Identifier: MIT
"""numpy under the shared heap (suite heap, LD_PRELOAD set by tests/heap/meson.build): arrays
and their temporaries in the heap, views and slices, arrays grown by resize, and workers
of a fork-started multiprocessing.Pool that read arrays made before the fork while the
parent rewrites them: every worker sees the values of the fork, the parent its own.
Exits 77 (skipped) without numpy."""
import ctypes
import multiprocessing as mp
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)

BIG = None


class Info(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("bytes", ctypes.c_uint64), ("fd", ctypes.c_int),
                ("pad", ctypes.c_int), ("min_bytes", ctypes.c_uint64)]


def heap_range() -> tuple[int, int]:
    info = Info()
    if ctypes.CDLL(None).arcomm_heap_region(ctypes.byref(info)) != 1:
        sys.exit("heap_numpy: no shared heap (is libarcomm_heap.so preloaded?)")
    return info.base, info.base + info.bytes


def in_heap(a: "np.ndarray") -> bool:
    lo, hi = heap_range()
    return lo <= a.ctypes.data < hi


def worker(i: int) -> float:
    # The array as it was at the fork: BIG[k] == k, whatever the parent did since.
    k = len(BIG) // 8
    part = BIG[i * k:(i + 1) * k]
    want = np.arange(i * k, (i + 1) * k, dtype=np.float64)
    if not np.array_equal(part, want):
        return -1.0
    return float(part.sum())


def main() -> None:
    global BIG
    rng = np.random.default_rng(5)
    a = rng.random(3_000_000)
    assert in_heap(a), "a 24 MB array is not in the heap"
    ref = a.astype(np.float64).copy()
    for _ in range(20):
        b = np.sqrt(a * a + 1.0) - a / 3.0
        c = b[::3].copy()
        assert in_heap(b) and in_heap(c)
        assert np.array_equal(b, np.sqrt(ref * ref + 1.0) - ref / 3.0)
    v = np.zeros(10, dtype=np.int64)
    for n in (100_000, 1_000_000, 4_000_000):
        v = np.resize(v, n)
        v[:] = np.arange(n)
    assert in_heap(v) and int(v[-1]) == 3_999_999
    BIG = np.arange(40_000_000, dtype=np.float64)
    ctx = mp.get_context("fork")
    with ctx.Pool(4) as pool:
        res = pool.map_async(worker, range(8))
        BIG[:] = -1.0  # after the fork: no worker may see it
        got = res.get(timeout=120)
    k = len(BIG) // 8
    want = [float(np.arange(i * k, (i + 1) * k, dtype=np.float64).sum()) for i in range(8)]
    assert got == want, f"workers saw {got}, want {want}"
    assert float(BIG.max()) == -1.0, "the parent's own writes are gone"
    print("heap_numpy: ok")


if __name__ == "__main__":
    main()
