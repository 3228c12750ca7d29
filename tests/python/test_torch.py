# SPDX-License-Identifier: MIT
"""torch tensors on host communicators (CPU tensors; a CUDA tensor where a GPU is
there): bf16 and f16 sums against float64 references, what is refused and why
(requires_grad outside no_grad, complex, bool under dtype=, sparse, lazily negated
views, tensors on another device).  Skipped without torch."""
from __future__ import annotations

import numpy as np
import pytest

import arcomm
from conftest import run_ranks
from refs import check_reduced, data, poison

torch = pytest.importorskip("torch")


@pytest.fixture
def one():
    (c,) = arcomm.Comm.init_all(1)
    yield c
    c.close()


def _t(a: np.ndarray, dt: str):
    """A torch tensor over (a copy of) refs' storage for dt."""
    if dt == "bf16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _np(t, dt: str) -> np.ndarray:
    if dt == "bf16":
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
def test_half_types_sum(dt):
    """Three thread ranks sum torch bf16 / f16 / f32 tensors: each element against the
    float64 reference, every rank bit-identical; in place and out of place."""
    cs = arcomm.Comm.init_all(3)
    n = 1000
    xs = [data(dt, n, np.random.default_rng([17, r, len(dt)]), "sum") for r in range(3)]

    def body(c):
        out = _t(poison(np.empty_like(xs[c.rank]), dt), dt)
        c.allreduce(_t(xs[c.rank], dt), out)
        check_reduced(_np(out, dt), xs, dt, "sum", f"torch {dt}")
        inplace = _t(xs[c.rank], dt)
        c.allreduce(inplace)
        assert (_np(inplace, dt) == _np(out, dt)).all()
        return _np(out, dt).tobytes()

    try:
        res = run_ranks(cs, body)
    finally:
        for c in cs:
            c.close()
    assert res[0] == res[1] == res[2]


def test_requires_grad(one):
    """A tensor that requires grad is refused as a receive buffer while autograd is on
    (arcomm writes behind autograd's back); under no_grad, or as .detach(), it is the
    same memory and written; as a send buffer it is only read."""
    w = torch.ones(4, requires_grad=True)
    with pytest.raises(ValueError, match="rank 0: allreduce: send \\(in place\\) requires grad: "
                       ".*torch.no_grad\\(\\).*t.detach\\(\\)"):
        one.allreduce(w)
    with pytest.raises(ValueError, match="recv requires grad"):
        one.allreduce(torch.ones(4), w)
    with torch.no_grad():
        one.allreduce(w)
    one.allreduce(w.detach())
    r = torch.zeros(4)
    one.allreduce(w, r)
    assert r.tolist() == [1.0] * 4


def test_refused_tensors(one):
    with pytest.raises(TypeError, match="complex"):
        one.allreduce(torch.zeros(4, dtype=torch.complex64), dtype="f64")
    with pytest.raises(TypeError, match="torch.bool elements: dtype='u8' reinterprets plain numbers"):
        one.allreduce(torch.zeros(4, dtype=torch.bool), dtype="u8")
    with pytest.raises(ValueError, match="sparse"):
        one.allreduce(torch.zeros(4).to_sparse())
    if hasattr(torch, "_neg_view"):
        with pytest.raises(ValueError, match="lazily negated"):
            one.allreduce(torch._neg_view(torch.ones(4)))
    with pytest.raises(ValueError, match="C-contiguous|contiguous \\(torch strides"):
        one.allreduce(torch.zeros(4, 4).t())
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="rank 0: allreduce: send \\(in place\\) is CUDA "
                           "memory; this communicator's device is host"):
            one.allreduce(torch.zeros(4, device="cuda"))
