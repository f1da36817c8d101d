"""Horovod's tensorflow.keras API for Keras 3:

import rdmacoll.frameworks.tensorflow.keras as hvd   # was: horovod.tensorflow.keras
hvd.init()
model.compile(optimizer=hvd.DistributedOptimizer(opt), ...)
model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                          hvd.callbacks.MetricAverageCallback()])
"""

from __future__ import annotations

import keras as _keras

from . import (
    Average,
    Compression,
    DistributedGradientTape,
    Max,
    Min,
    PartialDistributedOptimizer,
    Product,
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
    broadcast_global_variables,
    RdmacollError,
    Sum,
    allgather,
    allgather_object,
    allreduce,
    alltoall,
    broadcast,
    broadcast_object,
    broadcast_variables,
    callbacks,
    cross_rank,
    cross_size,
    grouped_allreduce,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    rank,
    reducescatter,
    shutdown,
    size,
)
from .optimizer import DistributedOptimizer  # noqa: F401  (horovod.tensorflow.keras's signature)
from . import elastic  # noqa: F401  (hvd.elastic: KerasState and the callbacks with the rest)
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


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
    """keras.models.load_model, with the model's optimizer wrapped in DistributedOptimizer
    (its saved state carried over)."""
    objects = dict(custom_objects or {})
    for opt in custom_optimizers or []:
        objects[opt.__name__] = opt
    model = _keras.models.load_model(filepath, custom_objects=objects)
    saved = getattr(model, "optimizer", None)
    if saved is not None:
        dist = DistributedOptimizer(saved, compression=compression)
        if saved.built:
            dist.build(model.trainable_variables)
            for mine, theirs in zip(dist.variables, saved.variables):
                mine.assign(theirs)
        model.optimizer = dist
    return model
