"""Horovod's PyTorch API over rdmacoll: a Horovod script runs by changing its import line.

    import rdmacoll.frameworks.torch as hvd      # was: import horovod.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Pure Python over the core (nothing compiled against PyTorch, so any PyTorch >= 2.1).
CPU tensors only for now: tensors on other devices raise RdmacollError. A failed collective
raises HorovodInternalError (an RdmacollError), as Horovod's. See docs/torch.md.
"""

from __future__ import annotations

import torch as _torch

if not hasattr(_torch.Tensor, "register_post_accumulate_grad_hook"):
    raise ImportError(f"rdmacoll.frameworks.torch needs PyTorch >= 2.1 (found {_torch.__version__})")

import rdmacoll as _rc  # noqa: E402
from rdmacoll import (
    RdmacollError,
    RdmacollValueError,
    cross_rank,
    cross_size,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)

from .._horovod import HorovodInternalError, HostsUpdatedInterrupt
from ..capabilities import (
    ccl_built,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rocm_built,
    start_timeline,
    stop_timeline,
)
from .compression import Compression  # noqa: E402
from .functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from .collectives import (
    allgather,
    allreduce,
    alltoall,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from .ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather_async,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall_async,
    barrier,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    global_process_set,
    grouped_allgather_async,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter_async,
    synchronize,
)
from .ops import ProcessSet, add_process_set, remove_process_set  # noqa: E402
from .optimizer import DistributedOptimizer  # noqa: E402
from .sparse import sparse_allreduce_async  # noqa: E402
from .sync_batch_norm import SyncBatchNorm  # noqa: E402
from . import elastic  # noqa: E402  (hvd.elastic)


def init(comm=None, process_sets=None, config=None):
    """Horovod's hvd.init(comm=None, process_sets=None). comm: None (the whole launch), an
    mpi4py communicator (the job is its ranks) or a list of ranks of MPI_COMM_WORLD (the
    job is those ranks, in the list's order; a rank not in it gets ValueError).
    process_sets: ProcessSet objects or "dynamic". config: rdmacoll's settings
    (rdmacoll.init). Idempotent."""
    _rc.init(config, process_sets, comm=comm)


__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "rank",
    "size",
    "local_rank",
    "local_size",
    "cross_rank",
    "cross_size",
    "is_homogeneous",
    "mpi_threads_supported",
    "mpi_built",
    "nccl_built",
    "gloo_built",
    "cuda_built",
    "rocm_built",
    "ccl_built",
    "ddl_built",
    "mpi_enabled",
    "gloo_enabled",
    "start_timeline",
    "stop_timeline",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce",
    "grouped_allreduce_",
    "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "grouped_allgather",
    "grouped_allgather_async",
    "grouped_reducescatter",
    "grouped_reducescatter_async",
    "allgather",
    "allgather_async",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "alltoall",
    "alltoall_async",
    "reducescatter",
    "reducescatter_async",
    "barrier",
    "join",
    "poll",
    "synchronize",
    "Average",
    "Sum",
    "Min",
    "Max",
    "Product",
    "Adasum",
    "Compression",
    "broadcast_parameters",
    "broadcast_optimizer_state",
    "broadcast_object",
    "allgather_object",
    "DistributedOptimizer",
    "global_process_set",
    "ProcessSet",
    "add_process_set",
    "remove_process_set",
    "RdmacollError",
    "RdmacollValueError",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "SyncBatchNorm",
    "sparse_allreduce_async",
    "elastic",
]
