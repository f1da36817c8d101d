"""Torch tensors <-> NumPy views of the same memory (what the core takes), never copies.

torch.Tensor.numpy() gives a zero-copy view of a CPU tensor; bfloat16, which NumPy lacks,
is viewed as int16 and reinterpreted as ml_dtypes.bfloat16 (the core's bfloat16).
"""

from __future__ import annotations

import numpy as np
import torch

import rdmacoll as rc
from rdmacoll import RdmacollError, RdmacollValueError, _core

from ._rules import RULES

_NP_OF_TORCH = {
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.bool: np.bool_,
}
if hasattr(torch, "uint16"):  # (torch 2.3 on: moved, never reduced, as the core takes it)
    _NP_OF_TORCH[torch.uint16] = np.uint16
_DTYPE_NAMES = {d: str(d).replace("torch.", "") for d in (*_NP_OF_TORCH, torch.bfloat16)}


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        # (ValueError as Horovod's refusal of a dtype: `except ValueError` keeps working)
        raise RdmacollValueError("bfloat16 tensors need the ml_dtypes package (pip install ml_dtypes)") from None
    return ml_dtypes.bfloat16


def check_tensor(t, what="tensor", collective="allgather"):
    """Raise a clear error for what the core cannot take (yet), before communicating: not a
    tensor, neither on the CPU nor CUDA (RdmacollError), not dense (Horovod's ValueError and words), a
    dtype `collective` does not take (../_horovod.py's table: ValueError)."""
    if not isinstance(t, torch.Tensor):
        raise RdmacollError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in ("cpu", "cuda"):
        raise RdmacollError(f"{what} is on {t.device}: rdmacoll takes CPU and CUDA tensors; move it (tensor.cpu())")
    if t.layout != torch.strided:  # Horovod's ValueError and words (every collective)
        raise RdmacollValueError(
            f"Tensor type {t.type()} is not supported. ({what} has layout {t.layout}: "
            "collectives take dense tensors; a sparse COO tensor is reduced by "
            "sparse_allreduce_async, or use tensor.to_dense())"
        )
    RULES.check_dtype(collective, _DTYPE_NAMES.get(t.dtype) or str(t.dtype), what)


def check_reducible(t, what="tensor", collective="allreduce"):
    """check_tensor for a reduction: bool is refused as Horovod does (ValueError)."""
    check_tensor(t, what, collective)


def scale_(t, factor):
    """t *= factor in place, as Horovod's ScaleBuffer computes it (pre/postscale_factor):
    float32, float16 and bfloat16 multiply by float32(factor) in float32, rounding once;
    float64 in float64; integers in float64, truncated toward zero (out-of-range products
    saturate to int64, then wrap to the dtype). Returns t."""
    if factor == 1.0:
        return t
    if t.dtype == torch.float64:
        return t.mul_(factor)
    if t.dtype.is_floating_point:
        f = torch.tensor(factor, dtype=torch.float32)
        return t.copy_(t.float() * f) if t.dtype != torch.float32 else t.mul_(f)
    p = t.double() * factor
    p = p.nan_to_num(0.0).clamp_(-(2.0**63), 2.0**63 - 1024).trunc_()
    return t.copy_(p.to(torch.int64).to(t.dtype))


def as_numpy(t):
    """A NumPy array sharing t's memory (t: a checked CPU tensor, any strides)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_bfloat16())
    return t.numpy()


def device_array(t):
    """A contiguous CUDA tensor as the core's rdmacoll.DeviceArray: its memory, dtype,
    device and current stream (the collective is ordered after the work queued on it, and
    its result is ready on it); results are new tensors like it."""
    dtype = _bfloat16() if t.dtype == torch.bfloat16 else _NP_OF_TORCH[t.dtype]
    stream = torch.cuda.current_stream(t.device).cuda_stream
    return rc.DeviceArray(
        t.data_ptr(),
        t.shape,
        dtype,
        t.device.index,
        stream,
        owner=t,
        new=lambda shape: device_array(t.new_empty(shape)),
    )


def to_core(t):
    """What the core takes for a contiguous tensor: a NumPy view of a CPU tensor, a
    DeviceArray of a CUDA one (the core stages it: ../../_device.py)."""
    return as_numpy(t) if t.device.type == "cpu" else device_array(t)


def on_host(t):
    """A NumPy view of a CPU tensor, or of a host copy of a CUDA one (the collectives that
    stage their tensors whole here: the grouped ones)."""
    return as_numpy(t if t.device.type == "cpu" else t.cpu())


def to_torch(r, device=None):
    """A core result as a tensor: a CUDA result is already one (the DeviceArray's owner);
    a NumPy array is viewed, then copied to `device` when that is not the CPU."""
    if isinstance(r, torch.Tensor):
        return r
    t = as_torch(r)
    return t if device is None or device.type == "cpu" else t.to(device)


def flat(t):
    """A one-dimensional NumPy view of a contiguous tensor (0-d tensors included)."""
    return as_numpy(t).reshape(-1)


def as_torch(a, dtype=None):
    """A torch tensor sharing the NumPy array a's memory (bfloat16 included)."""
    if a.dtype.itemsize == 2 and a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def copy_into(dst, src):
    """dst.copy_(src); large contiguous copies of one dtype between CPU tensors go through
    the core's streaming copy (non-temporal stores: the destination is not read first), for
    gradients moving into buckets that are reduced later."""
    if (
        src.device.type == "cpu"
        and dst.device.type == "cpu"
        and src.dtype == dst.dtype
        and src.layout == torch.strided
        and src.shape == dst.shape
        and src.numel() * src.element_size() >= _core.STREAM_COPY_MIN_BYTES
        and src.is_contiguous()
        and dst.is_contiguous()
    ):
        _core.stream_copy(flat(dst), flat(src))
    else:
        dst.copy_(src)


def contiguous(t):
    """t itself when it is C-contiguous, else a contiguous copy (what the core needs)."""
    return t if t.is_contiguous() else t.contiguous()


def library_tensor(nbytes: int):
    """A zero-filled uint8 tensor of nbytes in rdmacoll's allocated memory (rdmacoll.empty):
    peers on the same host reach it directly."""
    t = torch.from_numpy(rc.empty((nbytes,), "uint8"))
    t.zero_()
    return t
