"""Horovod's PyTorch API over rdmacoll: a Horovod script runs by changing its import line.

    import rdmacoll.frameworks.torch as hvd      # was: import horovod.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Pure Python over the core (nothing compiled against PyTorch, so any PyTorch >= 2.1).
CPU tensors only for now: tensors on other devices raise RdmacollError. See docs/torch.md.
"""
from __future__ import annotations

import torch as _torch

if not hasattr(_torch.Tensor, "register_post_accumulate_grad_hook"):
    raise ImportError(f"rdmacoll.frameworks.torch needs PyTorch >= 2.1 (found {_torch.__version__})")

from rdmacoll import (RdmacollError, init, is_initialized, local_rank, local_size, rank,  # noqa: E402
                      shutdown, size)

from .compression import Compression  # noqa: E402
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,  # noqa: E402
                        broadcast_parameters)
from .ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce,  # noqa: E402
                  allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier,
                  broadcast, broadcast_, broadcast_async, broadcast_async_, global_process_set,
                  grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                  grouped_allreduce_async_, join, poll, reducescatter, reducescatter_async,
                  synchronize)
from .ops import ProcessSet, add_process_set, remove_process_set  # noqa: E402
from .optimizer import DistributedOptimizer  # noqa: E402


def mpi_threads_supported() -> bool:
    return True


def cross_rank() -> int:
    """Index of this rank's host (ranks are grouped by host in rank order)."""
    return rank() // local_size()


def cross_size() -> int:
    return size() // local_size()


def is_homogeneous() -> bool:
    return True


def nccl_built() -> bool:
    return False


def mpi_built() -> bool:
    return True


def gloo_built() -> bool:
    return False


def cuda_built() -> bool:
    return False


def rocm_built() -> bool:
    return False


__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_threads_supported", "mpi_built",
    "nccl_built", "gloo_built", "cuda_built", "rocm_built",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "allgather",
    "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async", "barrier", "join",
    "poll", "synchronize", "Average", "Sum", "Min", "Max", "Product", "Adasum", "Compression",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object",
    "DistributedOptimizer", "global_process_set", "ProcessSet", "add_process_set",
    "remove_process_set", "RdmacollError",
]
