# SPDX-License-Identifier: MIT
"""Random data, float64 references and element-by-element checks for the Python tests.

Every dtype's data is exact in float64 (floats are rounded to the dtype first), so a
reference computed in float64 is exact up to its final rounding.  bf16 buffers are
uint16 arrays passed with ``dtype="bf16"`` (numpy has no bfloat16), or ml_dtypes'
bfloat16 when it is installed.
"""
from __future__ import annotations

import numpy as np

DTYPES = ["f32", "f16", "bf16", "f64", "i32", "i64", "i8", "u8", "u32", "u64"]
FLOATS = {"f32", "f16", "bf16", "f64"}
OPS = ["sum", "max", "min", "prod", "avg"]
STORAGE = {
    "f32": np.float32,
    "f16": np.float16,
    "bf16": np.uint16,
    "f64": np.float64,
    "i32": np.int32,
    "i64": np.int64,
    "i8": np.int8,
    "u8": np.uint8,
    "u32": np.uint32,
    "u64": np.uint64,
}
# Relative precision of the result's dtype (floats), and of the accumulation (f32
# for f16/bf16/f32, f64 for f64).
EPS_OUT = {"f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7, "f64": 2.0**-52}
EPS_ACC = {"f32": 2.0**-23, "f16": 2.0**-23, "bf16": 2.0**-23, "f64": 2.0**-52}


def arcomm_dtype(dt: str) -> str | None:
    """The ``dtype=`` keyword the package needs for this storage (bf16 only)."""
    return "bf16" if dt == "bf16" else None


def bf16_to_f64(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def f64_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even into bf16 bits (finite values)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def to_f64(a: np.ndarray, dt: str) -> np.ndarray:
    return bf16_to_f64(a) if dt == "bf16" else a.astype(np.float64)


def from_f64(x: np.ndarray, dt: str) -> np.ndarray:
    if dt == "bf16":
        return f64_to_bf16(x)
    return np.asarray(x).astype(STORAGE[dt])


def data(dt: str, n: int, rng: np.random.Generator, op: str = "sum") -> np.ndarray:
    """Random values of dtype dt (storage array) small enough that no op overflows."""
    if dt in FLOATS:
        lo, hi = (0.5, 1.5) if op == "prod" else (-1.0, 1.0)
        x = rng.uniform(lo, hi, n)
        if op == "prod":
            x *= rng.choice([-1.0, 1.0], n)
        return from_f64(x, dt)
    signed = dt.startswith("i")
    if op == "prod":
        lo, hi = (-3, 4) if signed else (0, 4)
    else:
        lo, hi = (-20, 21) if signed else (0, 41)
    return rng.integers(lo, hi, n).astype(STORAGE[dt])


def poison(a: np.ndarray, dt: str) -> np.ndarray:
    """Fills a with a value no result can have (NaN bits for floats, the dtype's max)."""
    if dt in FLOATS:
        a.view(np.uint8)[...] = 0xFF
    else:
        a[...] = np.iinfo(a.dtype).max
    return a


def reference(inputs: list[np.ndarray], dt: str, op: str) -> np.ndarray:
    """The float64 reduction of the ranks' inputs."""
    xs = np.stack([to_f64(x, dt) for x in inputs])
    if op == "sum":
        return xs.sum(0)
    if op == "avg":
        return xs.sum(0) / len(inputs)
    if op == "prod":
        return xs.prod(0)
    if op == "max":
        return xs.max(0)
    return xs.min(0)


def check_reduced(got: np.ndarray, inputs: list[np.ndarray], dt: str, op: str, what: str) -> None:
    """Every element of got against the float64 reference: integers and max/min exactly
    (bits of the reference rounded to the dtype), float sums/products/averages within the
    error of accumulating len(inputs) values and rounding once."""
    ref = reference(inputs, dt, op)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    if dt not in FLOATS or op in ("max", "min"):
        want = from_f64(ref, dt)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, (
            f"{what}: {bad.size} of {got.size} elements wrong, first at {bad[0]}: "
            f"got {got[bad[0]]}, want {want[bad[0]]}"
        )
        return
    g = to_f64(got, dt)
    xs = np.stack([to_f64(x, dt) for x in inputs])
    n = len(inputs)
    mag = np.abs(xs).prod(0) if op == "prod" else np.abs(xs).sum(0)
    if op == "avg":
        mag = mag / n
    tol = EPS_OUT[dt] * np.abs(ref) + (n + 1) * EPS_ACC[dt] * mag + 1e-300
    err = np.abs(g - ref)
    bad = np.nonzero(~(err <= tol))[0]
    assert bad.size == 0, (
        f"{what}: {bad.size} of {got.size} elements off, first at {bad[0]}: got {g[bad[0]]}, "
        f"want {ref[bad[0]]} (tolerance {tol[bad[0]]:.3g})"
    )


def check_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Bit equality, element by element."""
    gb = got.view(np.uint8).reshape(got.size, -1) if got.size else got
    wb = want.view(np.uint8).reshape(want.size, -1) if want.size else want
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if got.size:
        bad = np.nonzero((gb != wb).any(1))[0]
        assert bad.size == 0, (
            f"{what}: {bad.size} of {got.size} elements differ, first at {bad[0]}: "
            f"got {got[bad[0]]}, want {want[bad[0]]}"
        )
