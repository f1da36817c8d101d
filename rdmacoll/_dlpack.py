"""DLPack capsules read without a framework: what a "dltensor" capsule (dlpack.h's
DLManagedTensor, the form `__dlpack__()` returns when no max_version is asked) says about
its memory. The capsule is read, never consumed: its owner still frees it, so whoever
holds the memory keeps the capsule alive while the memory is used.
"""

from __future__ import annotations

import ctypes

from ._core import RdmacollValueError


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


# (type code, bits) -> NumPy dtype name: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
DTYPES = {
    **{(0, bits): f"int{bits}" for bits in (8, 16, 32, 64)},
    **{(1, bits): f"uint{bits}" for bits in (8, 16, 32, 64)},
    **{(2, bits): f"float{bits}" for bits in (16, 32, 64)},
    (4, 16): "bfloat16",
    (6, 8): "bool",
}

_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def is_capsule(x) -> bool:
    """Whether x is an unconsumed "dltensor" capsule."""
    return type(x).__name__ == "PyCapsule" and bool(_api.PyCapsule_IsValid(x, b"dltensor"))


def describe(capsule) -> dict:
    """{ptr (data + byte_offset), shape, strides (in elements, None: contiguous), dtype (a
    NumPy dtype name), device_type, device_id} of a "dltensor" capsule; RdmacollValueError
    for another object or a dtype the core lacks."""
    if not is_capsule(capsule):
        raise RdmacollValueError("not a DLPack capsule (a 'dltensor' PyCapsule that is not yet consumed)")
    t = _Managed.from_address(_api.PyCapsule_GetPointer(capsule, b"dltensor")).dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] for i in range(t.ndim))
    name = DTYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if name is None:
        raise RdmacollValueError(
            f"DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, {t.dtype.lanes} lanes) is not one rdmacoll takes"
        )
    return {
        "ptr": (t.data or 0) + t.byte_offset,
        "shape": shape,
        "strides": strides,
        "dtype": name,
        "device_type": t.device.device_type,
        "device_id": t.device.device_id,
    }
