# SPDX-License-Identifier: MIT
"""arcomm from Python: ctypes over libarcomm's public C API (include/arcomm.h).

Buffers are numpy arrays, anything with ``__dlpack__`` or the buffer protocol on the
host, and on CUDA anything with ``__dlpack__`` or ``__cuda_array_interface__`` (PyTorch
and CuPy tensors).  Every call that blocks releases the GIL (ctypes does for every
foreign call), so thread ranks of one interpreter run their collectives concurrently
and :meth:`Comm.abort` works from another thread.  A buffer is held (its buffer export,
DLPack capsule or tensor) until the C call returned; a communicator is never destroyed
while a call on it is in flight.  See docs/python.md.
"""
from __future__ import annotations

from ctypes import byref, c_int

from . import _interrupt, _lib
from ._buffers import DTYPE_NAMES
from ._comm import Comm, InitAbort
from ._collectives import OPS
from ._errors import STATUS_NAMES, Error, raise_status

__all__ = [
    "Comm",
    "Error",
    "InitAbort",
    "new_id",
    "version",
    "library_path",
    "DTYPE_NAMES",
    "OPS",
    "STATUS_NAMES",
]


def new_id() -> str:
    """A fresh communicator id (``comm_id_new``): give it to every rank of one communicator."""
    _interrupt.install_sigint()
    cid = _lib.CommId()
    st = _lib.lib().comm_id_new(byref(cid))
    if st:
        raise_status(st, None, "comm_id_new")
    return cid.str.decode()


def version() -> tuple[int, int, int]:
    """The loaded library's version (``comm_get_version``)."""
    a, b, c = c_int(), c_int(), c_int()
    _lib.lib().comm_get_version(byref(a), byref(b), byref(c))
    return (a.value, b.value, c.value)


def library_path() -> str:
    """The path libarcomm.so was loaded from (see the search order in ``arcomm._lib``)."""
    return _lib.lib_path()
