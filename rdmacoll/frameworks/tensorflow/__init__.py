"""Horovod's TensorFlow API over rdmacoll, for TensorFlow 2.16+ with Keras 3:

    import rdmacoll.frameworks.tensorflow as hvd          # was: horovod.tensorflow
    import rdmacoll.frameworks.tensorflow.keras as hvd    # was: horovod.tensorflow.keras

Pure Python over rdmacoll's core: nothing is compiled against TensorFlow. Collectives
take and return tensors, eagerly, inside tf.function and in TF1 graphs run by
tf.compat.v1.Session (as tf.numpy_function ops, ordered alike on every rank: _graph.py).
Errors are the tf.errors types Horovod's ops raise (errors.py). Process sets are
rdmacoll's (rdmacoll.ProcessSet: the same objects as the plain and torch APIs). See
docs/tensorflow.md.
"""

from __future__ import annotations

from rdmacoll import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    RdmacollError,
    Sum,
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
import rdmacoll as _rc

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
from . import callbacks  # noqa: F401
from .compression import Compression  # noqa: F401
from .functions import (
    allgather,
    allgather_object,
    allreduce,
    alltoall,
    broadcast,
    broadcast_,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from .sync_batch_norm import SyncBatchNormalization  # noqa: F401
from . import util  # noqa: F401
from .util import _executing_eagerly  # noqa: F401
from .runtime_ops import (
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    size_op,
)
from .gradient_tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: F401
from .join import join  # noqa: F401
from .optimizer import PartialDistributedOptimizer  # noqa: F401
from .legacy_optimizer import DistributedOptimizer  # noqa: F401
from .global_variables import BroadcastGlobalVariablesHook, broadcast_global_variables  # noqa: F401
from . import elastic  # noqa: F401  (hvd.elastic)
from rdmacoll import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401


def init(comm=None, process_sets=None, config=None):
    """Horovod's hvd.init(comm=None, process_sets=None). comm: None (the whole launch), an
    mpi4py communicator (the job is its ranks) or a list of ranks of MPI_COMM_WORLD (the
    job is those ranks, in the list's order; a rank not in it gets ValueError).
    process_sets: ProcessSet objects to register (every rank the same list), or "dynamic"
    to allow add_process_set / remove_process_set later. config: rdmacoll's settings
    (rdmacoll.init)."""
    _rc.init(config, process_sets, comm=comm)
