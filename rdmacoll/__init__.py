"""rdmacoll: collective communication for data-parallel deep learning.

    import rdmacoll as rc
    rc.init()                      # under mpiexec; MPI only bootstraps
    y = rc.allreduce(x)            # Average by default, like Horovod
    rc.allreduce(x, op=rc.Sum, out=x)   # in place
    g = rc.empty((1 << 20,), "float32") # zero-copy: memory peers reach directly
"""
from __future__ import annotations

import atexit as _atexit

from . import _core
from ._core import Average, Max, Min, Product, RdmacollError, Sum

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "allreduce", "empty", "algorithms",
    "Sum", "Average", "Min", "Max", "Product", "RdmacollError",
]


class _Uninitialized:
    """Stands in for the communicator before init() and after shutdown()."""

    def __getattr__(self, name):
        raise RdmacollError("rdmacoll is not initialised: call rdmacoll.init() first")


_world = None
_comm = _Uninitialized()


def init() -> None:
    """Join the job: bootstrap over MPI, connect to every peer. Idempotent."""
    global _world, _comm
    if _world is not None:
        return
    from .bootstrap import bootstrap

    _world = bootstrap()
    _comm = _world.core


def shutdown() -> None:
    """Leave the job and release every resource; init() may be called again."""
    global _world, _comm
    if _world is None:
        return
    _world.core.close()
    _world, _comm = None, _Uninitialized()


_atexit.register(shutdown)


def is_initialized() -> bool:
    return _world is not None


def _w():
    if _world is None:
        raise RdmacollError("rdmacoll is not initialised: call rdmacoll.init() first")
    return _world


def rank() -> int:
    return _w().rank


def size() -> int:
    return _w().size


def local_rank() -> int:
    return _w().local_rank


def local_size() -> int:
    return _w().local_size


def allreduce(x, op=Average, name=None, out=None):
    """Reduce x across ranks; returns the result.

    out=None returns a new array (from the library's memory pool); out=x reduces in
    place; any other array of the same shape and dtype receives the result. x may be a
    NumPy array, anything with the buffer protocol, or a DLPack producer (CPU tensors).
    Every rank must call it in the same order with the same shape, dtype, op and name.
    """
    return _comm.allreduce(x, out, op, name)


def empty(shape, dtype="float32"):
    """A NumPy array in library-allocated memory, which peers on the same host read in
    place: allreduce on it skips the copies that user memory needs."""
    return _comm.empty(shape, dtype)


def algorithms():
    """The registered allreduce algorithms: [(name, description)]."""
    return _core.algorithms()
