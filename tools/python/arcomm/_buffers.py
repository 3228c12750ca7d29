# SPDX-License-Identifier: MIT
"""Buffers: from numpy arrays, DLPack, the buffer protocol, PyTorch tensors and
``__cuda_array_interface__`` objects to (pointer, element count, dtype, device, stream).

One resolved buffer is a tuple ``(ptr, count, dtype, device, device_index, stream, keep)``:
``dtype`` a ``comm_dtype_t`` value, ``device`` 0 (host) or 1 (CUDA), ``device_index`` the
GPU ordinal where the object says (-1 where it does not), ``stream`` the CUDA stream
handle its framework orders work on (``None`` where there is none), ``keep`` what holds
the memory for the call: the buffer export (a ctypes object made by ``from_buffer``, a
memoryview, a DLPack capsule with its producer) or the object itself.  The caller keeps
the tuple until the C call has returned, so that a ``bytearray`` cannot be resized nor an
``mmap`` closed while arcomm reads or writes it (Python refuses with BufferError).

Elements are taken only as what they are: a numpy dtype, a buffer format, a DLPack or
``__cuda_array_interface__`` type of one of arcomm's dtypes, in native byte order.
``dtype=`` (override) reads plain numbers (signed or unsigned integers, floats) of the
same size as another dtype (bf16 over uint16 storage); never objects, records, booleans,
complex numbers or byte-swapped data.
"""
from __future__ import annotations

import ctypes
import sys
from ctypes import POINTER, Structure, c_int32, c_int64, c_uint8, c_uint16, c_uint64, c_void_p
from typing import Any

import numpy as np

# comm_dtype_t values.
F32, F16, BF16, F64, I32, I64, I8, U8, U32, U64 = range(10)

#: arcomm's short dtype names (as ``arbench`` and the C API's docs spell them).
DTYPE_NAMES = ("f32", "f16", "bf16", "f64", "i32", "i64", "i8", "u8", "u32", "u64")
ITEMSIZE = (4, 2, 2, 8, 4, 8, 1, 1, 4, 8)

# numpy dtype -> comm_dtype_t (ml_dtypes' bfloat16 added when it is importable).
NP_CODES: dict[np.dtype, int] = {
    np.dtype(np.float32): F32,
    np.dtype(np.float16): F16,
    np.dtype(np.float64): F64,
    np.dtype(np.int32): I32,
    np.dtype(np.int64): I64,
    np.dtype(np.int8): I8,
    np.dtype(np.uint8): U8,
    np.dtype(np.uint32): U32,
    np.dtype(np.uint64): U64,
}
try:  # numpy has no bfloat16; ml_dtypes (if installed) supplies one.
    import ml_dtypes  # type: ignore[import-not-found]

    NP_CODES[np.dtype(ml_dtypes.bfloat16)] = BF16
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes = None

# comm_dtype_t -> numpy dtype (bf16: ml_dtypes' when present, else None).
NP_DTYPES: list[np.dtype | None] = [None] * 10
for _dt, _code in NP_CODES.items():
    NP_DTYPES[_code] = _dt

_NAME_CODES: dict[str, int] = {n: i for i, n in enumerate(DTYPE_NAMES)}
_NAME_CODES.update(
    {
        "float32": F32,
        "float16": F16,
        "half": F16,
        "bfloat16": BF16,
        "float64": F64,
        "double": F64,
        "float": F32,
        "int32": I32,
        "int64": I64,
        "int8": I8,
        "uint8": U8,
        "uint32": U32,
        "uint64": U64,
    }
)

# DLPack (dtype code, bits) -> comm_dtype_t.
_DL_CODES = {
    (2, 32): F32,
    (2, 16): F16,
    (4, 16): BF16,
    (2, 64): F64,
    (0, 32): I32,
    (0, 64): I64,
    (0, 8): I8,
    (1, 8): U8,
    (1, 32): U32,
    (1, 64): U64,
}
# __cuda_array_interface__ typestr (byte order stripped) -> comm_dtype_t.
_TYPESTR_CODES = {
    "f4": F32,
    "f2": F16,
    "f8": F64,
    "i4": I32,
    "i8": I64,
    "i1": I8,
    "u1": U8,
    "u4": U32,
    "u8": U64,
}


def dtype_code(dtype: Any) -> int:
    """The ``comm_dtype_t`` of a name ("f32", "bfloat16"...), numpy dtype or torch dtype."""
    if isinstance(dtype, str):
        code = _NAME_CODES.get(dtype.lower())
        if code is None:
            raise TypeError(f"arcomm: unknown dtype {dtype!r} (one of {', '.join(DTYPE_NAMES)})")
        return code
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        code = _torch_codes(torch).get(dtype)
        return code if code is not None else _bad(dtype)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return _bad(dtype)
    code = NP_CODES.get(dt)
    return code if code is not None else _bad(dtype)


def _bad(dtype: Any) -> int:
    raise TypeError(
        f"arcomm: dtype {dtype} is not one arcomm reduces or moves "
        f"({', '.join(DTYPE_NAMES)}; bf16 as ml_dtypes.bfloat16, a torch.bfloat16 tensor, "
        "or dtype='bf16' over 16-bit data)"
    )


_torch_map: dict[Any, int] | None = None


def _torch_codes(torch: Any) -> dict[Any, int]:
    global _torch_map
    if _torch_map is None:
        _torch_map = {
            torch.float32: F32,
            torch.float16: F16,
            torch.bfloat16: BF16,
            torch.float64: F64,
            torch.int32: I32,
            torch.int64: I64,
            torch.int8: I8,
            torch.uint8: U8,
        }
        for name, code in (("uint32", U32), ("uint64", U64)):
            if hasattr(torch, name):
                _torch_map[getattr(torch, name)] = code
    return _torch_map


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", _DLDevice),
        ("ndim", c_int32),
        ("dtype", _DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype = c_void_p
_capsule_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_c_char = ctypes.c_char
_addressof = ctypes.addressof
_ndarray = np.ndarray

# DLPack device types: kDLCPU, kDLCUDA, kDLCUDAHost (pinned host memory), kDLCUDAManaged.
_DL_HOST = (1, 3)
_DL_CUDA = (2, 13)


# The largest buffer a call takes: count * itemsize must fit a signed size (ptrdiff_t).
_MAX_BYTES = (1 << 63) - 1


def _pick(code: int | None, plain: bool, itemsize: int, desc: Any, role: str,
          override: int | None) -> int:
    """The dtype code: the buffer's own, or the override where the buffer holds plain
    numbers (``plain``: integers or floats, native byte order) of the override's size."""
    if override is not None:
        if not plain:
            raise TypeError(
                f"arcomm: {role} holds {desc} elements: dtype={DTYPE_NAMES[override]!r} "
                "reinterprets plain numbers only (integers or floats in native byte order); "
                f"pass an array of {DTYPE_NAMES[override]} (or 16-bit storage for bf16)"
            )
        if ITEMSIZE[override] != itemsize:
            raise TypeError(
                f"arcomm: dtype={DTYPE_NAMES[override]!r} has {ITEMSIZE[override]}-byte "
                f"elements; {role} has {itemsize}-byte ones"
            )
        return override
    if code is None:
        _bad(desc)
    return code  # type: ignore[return-value]


def _what(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _count(shape: Any, itemsize: int, role: str) -> int:
    n = 1
    for d in shape:
        d = int(d)
        if d < 0:
            raise ValueError(f"arcomm: {role}: negative dimension in shape {tuple(shape)}")
        n *= d
    if n * itemsize > _MAX_BYTES:
        raise ValueError(
            f"arcomm: {role}: shape {tuple(shape)} of {itemsize}-byte elements is "
            f"{n * itemsize} bytes, more than a process can address"
        )
    return n


def _np_desc(dt: np.dtype) -> str:
    if not dt.isnative:
        return f"byte-swapped {dt.str} ({'big' if dt.byteorder == '>' else 'little'}-endian)"
    return f"{dt} (numpy kind {dt.kind!r})"


def _numpy(a: np.ndarray, writable: bool, role: str, override: int | None = None) -> tuple:
    dt = a.dtype
    code = NP_CODES.get(dt)
    if code is None or override is not None:
        if code is None and override is None and not dt.isnative and dt.kind in "iuf":
            raise TypeError(
                f"arcomm: {role} is {_np_desc(dt)}: arcomm reads numbers in this machine's "
                "byte order; pass x.astype(x.dtype.newbyteorder('='))"
            )
        plain = code is not None or (dt.kind in "iuf" and dt.isnative)
        code = _pick(code, plain, dt.itemsize, _np_desc(dt) if code is None else dt, role,
                     override)
    if not a.flags.c_contiguous:
        raise ValueError(
            f"arcomm: {role} must be C-contiguous (got strides {a.strides} for shape "
            f"{a.shape}); pass np.ascontiguousarray(x)"
            + (" and copy the result back" if writable else "")
        )
    n = a.size
    if writable and not a.flags.writeable:
        raise ValueError(f"arcomm: {role} must be writable (a read-only array was given)")
    if not n:
        return (None, 0, code, 0, -1, None, a)
    if a.flags.writeable:
        try:
            # The ctypes object holds the buffer export for as long as it lives.
            exp = _c_char.from_buffer(a)
            return (_addressof(exp), n, code, 0, -1, None, exp)
        except (TypeError, ValueError):  # no buffer export for this dtype (ml_dtypes' bfloat16)
            pass
    # Read-only (or unexportable) arrays: the array itself holds its memory and, through
    # its base, any export it was made from.
    return (a.ctypes.data, n, code, 0, -1, None, a)


def _contiguous(shape: list[int], strides: list[int] | None) -> bool:
    """Whether element strides describe a row-major compact layout."""
    if strides is None:
        return True
    expect = 1
    for dim, st in zip(reversed(shape), reversed(strides)):
        if dim != 1 and st != expect:
            return False
        expect *= dim
    return True


# DLPack type codes: kDLInt, kDLUInt, kDLFloat, kDLBfloat hold plain numbers.
_DL_PLAIN = (0, 1, 2, 4)
_DL_KINDS = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex",
             6: "bool"}


def _dlpack(obj: Any, writable: bool, role: str, stream: int | None, override: int | None) -> tuple:
    try:
        dev_type, dev_id = obj.__dlpack_device__()
        if dev_type in _DL_CUDA:
            # DLPack: the stream the consumer will use; 1 = the legacy default stream.
            cap = obj.__dlpack__(stream=1 if stream in (None, 0) else stream)
        else:
            cap = obj.__dlpack__()
    except (BufferError, TypeError, ValueError, RuntimeError) as e:
        # numpy, for one, exports no read-only array through (unversioned) DLPack.
        raise ValueError(
            f"arcomm: {role}: {_what(obj)}.__dlpack__ refused the export ({e}); pass a "
            "numpy array or a buffer-protocol object instead"
        ) from None
    if not _capsule_valid(cap, b"dltensor"):
        raise TypeError(f"arcomm: {role}: {_what(obj)}.__dlpack__ returned no DLPack tensor")
    t = _DLTensor.from_address(_capsule_ptr(cap, b"dltensor"))
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = None if not t.strides else [t.strides[i] for i in range(t.ndim)]
    dl = t.dtype
    desc = (f"DLPack {_DL_KINDS.get(dl.code, f'code {dl.code}')} ({dl.bits} bits, "
            f"{dl.lanes} lanes)")
    code = _DL_CODES.get((dl.code, dl.bits)) if dl.lanes == 1 else None
    if code is None or override is not None:
        plain = dl.lanes == 1 and dl.code in _DL_PLAIN and dl.bits % 8 == 0
        if code is None and override is None:
            raise TypeError(
                f"arcomm: {role}: {desc} is not one of {', '.join(DTYPE_NAMES)}"
            )
        code = _pick(code, plain, dl.bits // 8, desc, role, override)
    if not _contiguous(shape, strides):
        raise ValueError(f"arcomm: {role} must be C-contiguous (DLPack strides {strides})")
    n = _count(shape, ITEMSIZE[code], role)
    if t.device.device_type in _DL_HOST:
        dev = 0
    elif t.device.device_type in _DL_CUDA:
        dev = 1
    else:
        raise ValueError(f"arcomm: {role}: DLPack device type {t.device.device_type} unsupported")
    ptr = (t.data or 0) + t.byte_offset
    if n and not ptr:
        raise ValueError(f"arcomm: {role}: DLPack tensor of {n} elements has no data pointer")
    # The capsule (not yet consumed) keeps the producer's memory alive; obj too.
    return (ptr or None, n, code, dev, t.device.device_id if dev else -1, None, (cap, obj))


_NATIVE = "<" if sys.byteorder == "little" else ">"


def _cai(obj: Any, writable: bool, role: str, override: int | None) -> tuple:
    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    if writable and readonly:
        raise ValueError(f"arcomm: {role} must be writable (read-only CUDA array)")
    if cai.get("mask") is not None:
        raise ValueError(f"arcomm: {role}: masked CUDA arrays are not supported")
    typestr = cai["typestr"]
    native = typestr[0] in (_NATIVE, "|", "=")
    code = _TYPESTR_CODES.get(typestr[1:]) if native else None
    if code is None or override is not None:
        try:
            size = int(typestr[2:])
        except ValueError:
            size = 0
        plain = native and typestr[1:2] in ("i", "u", "f") and size > 0
        if code is None and override is None:
            raise TypeError(f"arcomm: {role}: CUDA array typestr {typestr!r} is not an arcomm dtype")
        code = _pick(code, plain, size, f"typestr {typestr!r}", role, override)
    shape = list(cai["shape"])
    item = ITEMSIZE[code]
    strides = cai.get("strides")
    if strides is not None and (
        any(s % item for s in strides) or not _contiguous(shape, [s // item for s in strides])
    ):
        raise ValueError(f"arcomm: {role} must be C-contiguous (strides {tuple(strides)})")
    n = _count(shape, item, role)
    stream = cai.get("stream")
    if stream is None and "stream" not in cai:
        cupy = sys.modules.get("cupy")
        if cupy is not None and type(obj).__module__.startswith("cupy"):
            stream = cupy.cuda.get_current_stream().ptr
    return (ptr or None, n, code, 1, -1, stream, obj)


def _torch(t: Any, writable: bool, role: str, override: int | None) -> tuple:
    torch = sys.modules["torch"]
    dt = t.dtype
    code = _torch_codes(torch).get(dt)
    if t.layout != torch.strided:
        raise ValueError(f"arcomm: {role}: a {t.layout} torch tensor; pass a dense one (t.to_dense())")
    if code is None or override is not None:
        plain = not (dt.is_complex or dt == torch.bool or t.is_quantized)
        code = _pick(code, plain, t.element_size(), dt, role, override)
    if not t.is_contiguous():
        raise ValueError(
            f"arcomm: {role} must be contiguous (torch strides {t.stride()}); pass "
            "t.contiguous()" + (" and copy the result back" if writable else "")
        )
    if t.is_neg() or t.is_conj():
        raise ValueError(
            f"arcomm: {role} is a lazily negated or conjugated view: its memory does not "
            "hold its values; pass t.resolve_neg() / t.resolve_conj()"
        )
    if writable and t.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"arcomm: {role} requires grad: arcomm writes it behind autograd's back; make "
            "the call under torch.no_grad(), or pass t.detach() (the same memory)"
        )
    dev = t.device
    n = t.numel()
    if dev.type == "cuda":
        stream = torch.cuda.current_stream(dev).cuda_stream
        return (t.data_ptr() or None, n, code, 1, dev.index, stream, t)
    if dev.type != "cpu":
        raise ValueError(f"arcomm: {role}: torch device {dev} is not cpu or cuda")
    return (t.data_ptr() or None, n, code, 0, -1, None, t)


def resolve(
    obj: Any, writable: bool, role: str, stream: int | None = None, override: int | None = None
) -> tuple:
    """Resolves one buffer object; raises TypeError or ValueError for what arcomm cannot
    use.  ``override``: a comm_dtype_t to read the elements as (plain numbers of the
    same size).  Keep the result until the C call returned: its last item holds the
    memory."""
    if isinstance(obj, _ndarray):
        return _numpy(obj, writable, role, override)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _torch(obj, writable, role, override)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai(obj, writable, role, override)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack(obj, writable, role, stream, override)
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"arcomm: {role}: {_what(obj)} is not a buffer (numpy array, DLPack, buffer "
            "protocol, torch tensor or __cuda_array_interface__ object)"
        ) from None
    if writable and mv.readonly:
        raise ValueError(f"arcomm: {role} must be writable ({_what(obj)} is read-only)")
    if not mv.c_contiguous:
        raise ValueError(f"arcomm: {role} must be C-contiguous")
    try:
        a = np.asarray(mv)
    except (TypeError, ValueError, NotImplementedError) as e:
        raise TypeError(
            f"arcomm: {role}: {_what(obj)}'s buffer format {mv.format!r} is not one arcomm "
            f"reads ({e})"
        ) from None
    # a's base is mv, which holds obj's buffer export as long as a lives (the tuple's
    # last item): obj cannot be resized or closed under the call.
    return _numpy(a, writable, role, override)
