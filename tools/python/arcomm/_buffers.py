# SPDX-License-Identifier: MIT
"""Buffers: from numpy arrays, DLPack, the buffer protocol, PyTorch tensors and
``__cuda_array_interface__`` objects to (pointer, element count, dtype, device, stream).

One resolved buffer is a tuple ``(ptr, count, dtype, device, device_index, stream, keep)``:
``dtype`` a ``comm_dtype_t`` value, ``device`` 0 (host) or 1 (CUDA), ``device_index`` the
GPU ordinal where the object says (-1 where it does not), ``stream`` the CUDA stream
handle its framework orders work on (``None`` where there is none), ``keep`` an object
to hold on to until the call returns (a DLPack capsule) or ``None``.
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


def _pick(code: int | None, itemsize: int, desc: Any, role: str, override: int | None) -> int:
    """The dtype code: the override (same element size) or the buffer's own."""
    if override is not None:
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


def _numpy(a: np.ndarray, writable: bool, role: str, override: int | None = None) -> tuple:
    code = NP_CODES.get(a.dtype)
    if code is None or override is not None:
        code = _pick(code, a.itemsize, a.dtype, role, override)
    if not a.flags.c_contiguous:
        raise ValueError(f"arcomm: {role} must be C-contiguous (got strides {a.strides})")
    n = a.size
    if a.flags.writeable and n:
        try:
            return (_addressof(_c_char.from_buffer(a)), n, code, 0, -1, None, None)
        except ValueError:  # no buffer export for this dtype (ml_dtypes' bfloat16)
            return (a.ctypes.data, n, code, 0, -1, None, None)
    if writable and not a.flags.writeable:
        raise ValueError(f"arcomm: {role} must be writable (a read-only array was given)")
    return ((a.ctypes.data or None) if n else None, n, code, 0, -1, None, None)


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


def _dlpack(obj: Any, writable: bool, role: str, stream: int | None, override: int | None) -> tuple:
    dev_type, dev_id = obj.__dlpack_device__()
    if dev_type in _DL_CUDA:
        # DLPack: the stream the consumer will use; 1 = the legacy default stream.
        cap = obj.__dlpack__(stream=1 if stream in (None, 0) else stream)
    else:
        cap = obj.__dlpack__()
    if not _capsule_valid(cap, b"dltensor"):
        raise TypeError(f"arcomm: {role}: {_what(obj)}.__dlpack__ returned no DLPack tensor")
    t = _DLTensor.from_address(_capsule_ptr(cap, b"dltensor"))
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = None if not t.strides else [t.strides[i] for i in range(t.ndim)]
    code = _DL_CODES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if override is not None and t.dtype.lanes == 1:
        code = _pick(code, t.dtype.bits // 8, None, role, override)
    if code is None:
        raise TypeError(
            f"arcomm: {role}: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
            f"{t.dtype.lanes} lanes) is not one of {', '.join(DTYPE_NAMES)}"
        )
    if not _contiguous(shape, strides):
        raise ValueError(f"arcomm: {role} must be C-contiguous (DLPack strides {strides})")
    n = 1
    for d in shape:
        n *= d
    if t.device.device_type in _DL_HOST:
        dev = 0
    elif t.device.device_type in _DL_CUDA:
        dev = 1
    else:
        raise ValueError(f"arcomm: {role}: DLPack device type {t.device.device_type} unsupported")
    ptr = (t.data or 0) + t.byte_offset
    return (ptr or None, n, code, dev, t.device.device_id if dev else -1, None, cap)


def _cai(obj: Any, writable: bool, role: str, override: int | None) -> tuple:
    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    if writable and readonly:
        raise ValueError(f"arcomm: {role} must be writable (read-only CUDA array)")
    typestr = cai["typestr"]
    code = _TYPESTR_CODES.get(typestr[1:])
    if override is not None and typestr[0] != ">":
        code = _pick(code, int(typestr[2:]), None, role, override)
    if code is None or typestr[0] == ">":
        raise TypeError(f"arcomm: {role}: CUDA array typestr {typestr!r} is not an arcomm dtype")
    shape = list(cai["shape"])
    item = ITEMSIZE[code]
    strides = cai.get("strides")
    if strides is not None and not _contiguous(shape, [s // item for s in strides]):
        raise ValueError(f"arcomm: {role} must be C-contiguous (strides {tuple(strides)})")
    n = 1
    for d in shape:
        n *= d
    stream = cai.get("stream")
    if stream is None and "stream" not in cai:
        cupy = sys.modules.get("cupy")
        if cupy is not None and type(obj).__module__.startswith("cupy"):
            stream = cupy.cuda.get_current_stream().ptr
    return (ptr or None, n, code, 1, -1, stream, None)


def _torch(t: Any, writable: bool, role: str, override: int | None) -> tuple:
    torch = sys.modules["torch"]
    code = _torch_codes(torch).get(t.dtype)
    if code is None or override is not None:
        code = _pick(code, t.element_size(), t.dtype, role, override)
    if not t.is_contiguous():
        raise ValueError(f"arcomm: {role} must be contiguous (torch strides {t.stride()})")
    dev = t.device
    if dev.type == "cuda":
        stream = torch.cuda.current_stream(dev).cuda_stream
        return (t.data_ptr() or None, t.numel(), code, 1, dev.index, stream, None)
    if dev.type != "cpu":
        raise ValueError(f"arcomm: {role}: torch device {dev} is not cpu or cuda")
    return (t.data_ptr() or None, t.numel(), code, 0, -1, None, None)


def resolve(
    obj: Any, writable: bool, role: str, stream: int | None = None, override: int | None = None
) -> tuple:
    """Resolves one buffer object; raises TypeError or ValueError for what arcomm cannot
    use.  ``override``: a comm_dtype_t to read the elements as (same element size)."""
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
    return _numpy(np.asarray(mv), writable, role, override)
