"""Torch tensors <-> NumPy views of the same memory (what the core takes), never copies.

torch.Tensor.numpy() gives a zero-copy view of a CPU tensor; bfloat16, which NumPy lacks,
is viewed as int16 and reinterpreted as ml_dtypes.bfloat16 (the core's bfloat16).
"""
from __future__ import annotations

import numpy as np
import torch

from rdmacoll import RdmacollError, _core

_NP_OF_TORCH = {
    torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
    torch.int32: np.int32, torch.int64: np.int64, torch.uint8: np.uint8,
}


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        raise RdmacollError("bfloat16 tensors need the ml_dtypes package (pip install ml_dtypes)") from None
    return ml_dtypes.bfloat16


def check_tensor(t, what="tensor"):
    """Raise a clear RdmacollError for what the core cannot take (yet)."""
    if not isinstance(t, torch.Tensor):
        raise RdmacollError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise RdmacollError(f"{what} is on {t.device}: {t.device.type.upper()} tensors are not yet "
                            "supported by rdmacoll.frameworks.torch (GPU support has not landed); "
                            "move it to the CPU (tensor.cpu())")
    if t.layout != torch.strided:
        raise RdmacollError(f"{what} has layout {t.layout}: only dense tensors travel directly "
                            "(use allreduce, which densifies sparse tensors, or tensor.to_dense())")
    if t.dtype != torch.bfloat16 and t.dtype not in _NP_OF_TORCH:
        raise RdmacollError(f"{what} has dtype {t.dtype}; supported: float16, bfloat16, float32, "
                            "float64, int32, int64, uint8")


def as_numpy(t):
    """A NumPy array sharing t's memory (t: a checked CPU tensor, any strides)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_bfloat16())
    return t.numpy()


def flat(t):
    """A one-dimensional NumPy view of a contiguous tensor (0-d tensors included)."""
    return as_numpy(t).reshape(-1)


def as_torch(a, dtype=None):
    """A torch tensor sharing the NumPy array a's memory (bfloat16 included)."""
    if a.dtype.itemsize == 2 and a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def copy_into(dst, src):
    """dst.copy_(src); large contiguous copies of one dtype go through the core's streaming
    copy (non-temporal stores: the destination is not read first), for gradients moving
    into buckets that are reduced later."""
    if (src.dtype == dst.dtype and src.layout == torch.strided and src.shape == dst.shape
            and src.numel() * src.element_size() >= _core.STREAM_COPY_MIN_BYTES
            and src.is_contiguous() and dst.is_contiguous()):
        _core.stream_copy(flat(dst), flat(src))
    else:
        dst.copy_(src)


def contiguous(t):
    """t itself when it is C-contiguous, else a contiguous copy (what the core needs)."""
    return t if t.is_contiguous() else t.contiguous()


def library_tensor(nbytes: int):
    """A zero-filled uint8 tensor of nbytes in rdmacoll's allocated memory (rdmacoll.empty):
    peers on the same host reach it directly."""
    import rdmacoll

    t = torch.from_numpy(rdmacoll.empty((nbytes,), "uint8"))
    t.zero_()
    return t
