"""Horovod's TensorFlow API over rdmacoll, for TensorFlow 2.16+ with Keras 3:

    import rdmacoll.frameworks.tensorflow as hvd          # was: horovod.tensorflow
    import rdmacoll.frameworks.tensorflow.keras as hvd    # was: horovod.tensorflow.keras

Pure Python over rdmacoll's core: nothing is compiled against TensorFlow. Collectives
take and return tensors, eagerly and inside tf.function (where they run as
tf.numpy_function ops chained in program order, so that every rank issues them in the
same order). See docs/tensorflow.md.
"""
from __future__ import annotations

from rdmacoll import (Average, Max, Min, Product, RdmacollError, Sum, cross_rank, cross_size,  # noqa: F401
                      is_homogeneous, is_initialized, local_rank, local_size, rank, shutdown, size)
import rdmacoll as _rc

from . import callbacks  # noqa: F401
from .compression import Compression  # noqa: F401
from .functions import (allgather, allgather_object, allreduce, alltoall, broadcast,  # noqa: F401
                        broadcast_, broadcast_object, broadcast_variables, grouped_allgather,
                        grouped_allreduce, grouped_reducescatter, reducescatter)
from .sync_batch_norm import SyncBatchNormalization  # noqa: F401
from .runtime_ops import (local_rank_op, local_size_op, process_set_included_op, rank_op,  # noqa: F401
                          size_op)
from .gradient_tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: F401
from .join import join  # noqa: F401
from .optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: F401


def init(comm=None, process_sets=None):
    """Join the job (under mpiexec). comm and process_sets: Horovod's arguments for
    sub-communicators; only the whole job (None) is supported."""
    if comm is not None or process_sets is not None:
        raise ValueError("rdmacoll.frameworks.tensorflow.init: only the whole job is supported "
                         "(comm=None, process_sets=None)")
    _rc.init()
