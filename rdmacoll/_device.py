"""GPU arrays for the core: CUDA device memory described as the core takes it (pointer,
shape, dtype, device, stream), and the collectives that run on it.

Where they come from: any object with `__cuda_array_interface__` (CuPy, Numba, PyTorch's
CUDA tensors, JAX), or a `DeviceArray` an adapter builds (the torch adapter does, for
bfloat16 too). The interface's rules are the specification
(https://numba.readthedocs.io/en/stable/cuda/cuda_array_interface.html): C-contiguous only
here (strides None or the contiguous ones), no mask, `stream` the producer's (None: no
synchronisation needed, 1 the legacy default stream, 2 the per-thread default, else a
cudaStream_t), never 0. DLPack: producers of CUDA memory (`__dlpack_device__` types 2
and 13, asked for a capsule on the legacy default stream) and "dltensor" capsules themselves
(read, not consumed: rdmacoll/_dlpack.py); a capsule's results need `out=` (no library
to make them with).

allreduce and broadcast run in the core's pipeline (runtime/staging.h: chunks copied down,
reduced and copied back at once); allgather, alltoall and reducescatter take the input
down whole, run on the host and put the result up. Results are new arrays of the input's
own library on its device (`new`), ready on the input's stream. Everything here runs in
the call: `*_async` forms return a finished Handle.
"""

from __future__ import annotations

import sys

import numpy as np

from . import _core, _dlpack
from ._core import Handle, RdmacollValueError

# DLPack's device types (dlpack.h): which ones are CUDA memory.
DLPACK_CPU, DLPACK_CUDA, DLPACK_CUDA_HOST, DLPACK_ROCM, DLPACK_CUDA_MANAGED = 1, 2, 3, 10, 13
DLPACK_CUDA_TYPES = (DLPACK_CUDA, DLPACK_CUDA_MANAGED)
_CODE = _core.DTYPES  # the core's dtype codes by name


class DeviceArray:
    """C-contiguous CUDA memory: ptr (int), shape, dtype (a NumPy dtype, ml_dtypes' for
    bfloat16), device (-1: the one ptr is on), stream (a cudaStream_t as an int; 0 the
    default stream), owner (the object that holds the memory, returned as the result) and
    new(shape) -> DeviceArray, how results of the owner's kind are made (None: the owner's
    library, found by its module)."""

    __slots__ = ("ptr", "shape", "dtype", "device", "stream", "owner", "readonly", "_new", "_keep")

    def __init__(self, ptr, shape, dtype, device=-1, stream=0, owner=None, readonly=False, new=None, keep=None):
        self.ptr, self.shape, self.dtype = int(ptr), tuple(int(d) for d in shape), np.dtype(dtype)
        self.device, self.stream, self.owner, self.readonly, self._new = int(device), int(stream), owner, readonly, new
        self._keep = keep  # (what must stay alive while the memory is used: a DLPack capsule)
        if self.dtype.name not in _CODE:
            raise RdmacollValueError(f"unsupported dtype {self.dtype} of a GPU array")

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def code(self):
        return _CODE[self.dtype.name]

    def new(self, shape):
        """An array of the owner's kind, this dtype, on this device (a result)."""
        if self._new is not None:
            return self._new(tuple(shape))
        return from_object(_new_like(self.owner, tuple(shape), self.dtype, self.device), stream=self.stream)

    def result(self):
        return self.owner if self.owner is not None else self


def _new_like(owner, shape, dtype, device):
    """A new array of owner's library (CuPy, PyTorch, Numba), found through the module that
    made owner: nothing is imported."""
    if hasattr(owner, "new_empty"):  # torch
        return owner.new_empty(shape)
    mod = sys.modules.get(type(owner).__module__.split(".")[0])
    if mod is not None and hasattr(mod, "empty") and hasattr(getattr(mod, "cuda", None), "Device"):  # CuPy
        with mod.cuda.Device(device if device >= 0 else owner.device.id):
            return mod.empty(shape, dtype)
    cuda = getattr(mod, "cuda", None)
    if cuda is not None and hasattr(cuda, "device_array"):  # Numba
        return cuda.device_array(shape, dtype)
    what = "a DLPack capsule" if owner is None else type(owner).__name__
    raise RdmacollValueError(
        f"rdmacoll cannot make a result of {what} on the GPU; pass out= (in place: "
        "out=x), or CuPy arrays, torch tensors or Numba device arrays, or a DeviceArray with new="
    )


def _check_contiguous(shape, strides, unit, what):
    """RdmacollValueError unless strides (in `unit`s; None: contiguous) are C-contiguous
    ones (a dimension of length 1 may have any stride)."""
    if strides is None:
        return
    expected, step = [], unit
    for n in reversed(shape):
        expected.append(step)
        step *= n
    if any(s != e for s, e, n in zip(strides, reversed(expected), shape) if n > 1):
        raise RdmacollValueError(f"GPU array is not C-contiguous ({what} {tuple(strides)}); make it contiguous")


def _numpy_dtype(name):
    """The NumPy dtype named `name` (bfloat16: ml_dtypes'); RdmacollValueError for one the
    core lacks."""
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise RdmacollValueError("bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)") from None
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(name)
    except TypeError:
        raise RdmacollValueError(f"unsupported dtype {name} of a GPU array") from None


def from_interface(cai, owner=None, stream=None):
    """A DeviceArray from a __cuda_array_interface__ dict (its rules above); raises
    RdmacollValueError for what the core cannot take. stream: overrides the dict's."""
    try:
        shape = tuple(int(d) for d in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        ptr, readonly = cai["data"]
    except (KeyError, TypeError, ValueError) as e:
        raise RdmacollValueError(f"malformed __cuda_array_interface__ ({e!r}): {cai!r}") from None
    if dtype.byteorder == ">":
        raise RdmacollValueError(f"GPU array of dtype {dtype.str} has non-native byte order")
    if cai.get("mask") is not None:
        raise RdmacollValueError("masked GPU arrays are not supported")
    _check_contiguous(shape, cai.get("strides"), dtype.itemsize, "strides")
    if stream is None:
        stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
        if stream == 0:
            raise RdmacollValueError("__cuda_array_interface__ stream 0 is disallowed (use 1 or 2)")
        if stream is None:
            stream = 0
    if ptr == 0 and any(shape) and all(shape):
        raise RdmacollValueError("GPU array has a null pointer")
    return DeviceArray(ptr, shape, dtype, -1, stream, owner, bool(readonly))


def _current_stream(x):
    """The stream x's library queues its work on, for producers whose interface names none
    (PyTorch's is version 2): torch's current stream of x's device, found through the
    module that made x (nothing is imported); None otherwise (the default stream)."""
    mod = sys.modules.get(type(x).__module__.split(".")[0])
    cuda = getattr(mod, "cuda", None)
    if hasattr(x, "new_empty") and hasattr(cuda, "current_stream"):
        return cuda.current_stream(x.device).cuda_stream
    return None


def _from_torch(x, stream):
    """A CUDA torch tensor (bfloat16 too, which its array interface lacks), read through
    its own attributes."""
    if not x.is_contiguous():
        raise RdmacollValueError("GPU tensor is not contiguous; pass tensor.contiguous()")
    dtype = _numpy_dtype(str(x.dtype).replace("torch.", ""))
    if stream is None:
        stream = _current_stream(x)
    return DeviceArray(x.data_ptr(), tuple(x.shape), dtype, x.device.index, stream, owner=x)


def from_object(x, stream=None):
    """x as a DeviceArray when it is CUDA memory, else None (host memory: the core views
    it). Raises for CUDA memory it cannot describe."""
    if isinstance(x, DeviceArray):
        return x
    cuda = getattr(x, "is_cuda", None)  # (torch tensors: CPU ones leave here, cheaply)
    if cuda is not None and hasattr(x, "new_empty"):
        return _from_torch(x, stream) if cuda else None
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        cai = None
    except Exception as e:  # (torch: CUDA tensors of dtypes the interface lacks, bfloat16)
        raise RdmacollValueError(f"this GPU array cannot be described: {e}") from None
    if cai is not None:
        if stream is None and cai.get("stream") is None:
            stream = _current_stream(x)
        return from_interface(cai, owner=x, stream=stream)
    if _dlpack.is_capsule(x):
        return _from_capsule(x, None)
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        try:
            kind = dev()[0]
        except Exception:
            return None
        if kind in DLPACK_CUDA_TYPES:
            try:  # (stream 1: the producer makes its work visible to the legacy default stream)
                capsule = x.__dlpack__(stream=1)
            except Exception as e:
                raise RdmacollValueError(f"{type(x).__name__}.__dlpack__() failed: {e}") from None
            return _from_capsule(capsule, x)
    return None


def _from_capsule(capsule, owner):
    """A DeviceArray of a "dltensor" capsule of CUDA memory (None for a producer of host
    memory: the core views that itself; a bare capsule of host memory is refused); the
    capsule stays alive with it."""
    d = _dlpack.describe(capsule)
    if d["device_type"] not in DLPACK_CUDA_TYPES:
        if owner is None:
            raise RdmacollValueError(
                f"a DLPack capsule of memory of device type {d['device_type']}: rdmacoll takes capsules of CUDA "
                "memory; pass host arrays themselves (NumPy, or numpy.from_dlpack of their producer)"
            )
        return None
    _check_contiguous(d["shape"], d["strides"], 1, "DLPack strides")
    return DeviceArray(d["ptr"], d["shape"], _numpy_dtype(d["dtype"]), d["device_id"], 0, owner=owner, keep=capsule)


# ---- the collectives (c: a core Communicator; d: a DeviceArray)


def _placed(c, d):
    """d with its device found (the core asks the CUDA runtime where d.ptr is: an address
    no GPU owns is refused here, before anything is allocated or sent)."""
    if d.device < 0:
        d.device = c.device.device_of(d.ptr, d.nbytes)
    return d


def _out(c, d, out):
    _placed(c, d)
    if out is None:
        return d.new(d.shape)
    o = from_object(out)
    if o is None:
        raise RdmacollValueError("out must be GPU memory like the input")
    if o.shape != d.shape or o.dtype != d.dtype:
        raise RdmacollValueError(f"out has shape {o.shape} and dtype {o.dtype}, the input {d.shape} and {d.dtype}")
    if o.readonly:
        raise RdmacollValueError("out is read-only")
    return _placed(c, o)


def _key(d, shape):
    return _core.shape_hash(list(d.shape)) if shape is None else shape


def allreduce(c, d, out, op, name, shape=None):
    o = _out(c, d, out)
    c.device.allreduce(d.ptr, o.ptr, d.size, d.code, op, d.device, d.stream, name, _key(d, shape))
    return out if out is not None else o.result()


def broadcast(c, d, root, out, name, shape=None):
    o = _out(c, d, out)
    c.device.broadcast(d.ptr, o.ptr, d.size, d.code, root, d.device, d.stream, name, _key(d, shape))
    return out if out is not None else o.result()


def download(c, d):
    """d's contents in host memory (a pool array of its shape and dtype)."""
    _placed(c, d)
    host = c.device.download(d.ptr, d.nbytes, d.device, d.stream).view(d.dtype)
    return host.reshape(d.shape)


def upload(c, like, host):
    """A new GPU array of like's kind holding host's contents."""
    o = _placed(c, like.new(host.shape))
    c.device.upload(host, o.ptr, o.device, o.stream)
    return o.result()


def allgather(c, d, name):
    return upload(c, d, c.allgather(download(c, d), name))


def reducescatter(c, d, op, name):
    return upload(c, d, c.reducescatter(download(c, d), op, name))


def alltoall(c, d, splits, name):
    data, received = c.alltoall(download(c, d), splits, name)
    return upload(c, d, data), received


def done(value):
    """A finished Handle of value (the *_async forms: GPU collectives run in the call)."""
    return Handle(value=value)
