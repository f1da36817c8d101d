"""horovod.tensorflow's DistributedOptimizer: TF1 optimizers (tf.compat.v1.train.*, for
graphs run by tf.compat.v1.Session) wrapped here, Keras 3 optimizers by optimizer.py."""

from __future__ import annotations

import tensorflow as tf

import rdmacoll as rc

from . import optimizer as _keras_optimizer
from ._reduce import GradientReducer
from .compression import Compression


class _DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps a tf.compat.v1.train.Optimizer: compute_gradients() (which minimize() calls)
    returns the gradients averaged across ranks; everything else is the wrapped one's."""

    def __init__(self, optimizer, name, use_locking, reducer):
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._rdmacoll_reducer = reducer

    def register_local_var(self, var):
        """Horovod's: var's gradient is not reduced (it stays this rank's)."""
        self._rdmacoll_reducer.register_local(var)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, the gradients reduced in one
        fused collective per RDMACOLL_FUSION_THRESHOLD bucket."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(self._rdmacoll_reducer.reduce(list(grads), list(variables)), variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(
    optimizer,
    name=None,
    use_locking=False,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    sparse_as_dense=False,
    backward_passes_per_step=1,
    op=rc.Average,
    gradient_predivide_factor=1.0,
    average_aggregated_gradients=False,
    num_groups=0,
    groups=None,
    process_set=rc.global_process_set,
    scale_local_gradients=True,
):
    """Horovod's horovod.tensorflow.DistributedOptimizer: a tf.compat.v1.train.Optimizer
    comes back wrapped (its compute_gradients() averages across the ranks of process_set,
    so minimize() and a Session-run train op are data-parallel); a Keras 3 optimizer goes
    to the Keras DistributedOptimizer (optimizer.py), as Horovod hands it to
    horovod.tensorflow.keras.

        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
        train_op = opt.minimize(loss)

    TF1 optimizers: backward_passes_per_step must be 1 (ValueError otherwise; Horovod
    aggregates locally); device_*, sparse_as_dense, num_groups and groups have no effect
    (sparse gradients are reduced as dense, buckets follow the fusion threshold).
    """
    if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return _keras_optimizer.DistributedOptimizer(
            optimizer,
            name=name,
            device_dense=device_dense,
            device_sparse=device_sparse,
            compression=compression,
            sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor,
            op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients,
            num_groups=num_groups,
            groups=groups,
            process_set=process_set,
            scale_local_gradients=scale_local_gradients,
        )
    if op == rc.Adasum:
        raise NotImplementedError(
            "op=Adasum with a tf.compat.v1.train optimizer (Horovod's Adasum delta "
            "optimizer) is not supported by rdmacoll; Keras 3 optimizers, "
            "DistributedGradientTape and hvd.allreduce take op=Adasum"
        )
    if backward_passes_per_step != 1:
        raise ValueError(
            "backward_passes_per_step > 1 is not supported for tf.compat.v1.train optimizers "
            "by rdmacoll (Keras 3 optimizers support it)"
        )
    reducer = GradientReducer(
        op,
        compression,
        gradient_predivide_factor,
        name=f"DistributedOptimizer.{optimizer.get_name()}",
        scale_local_gradients=scale_local_gradients,
        process_set=process_set,
    )
    return _DistributedOptimizer(optimizer, name or f"Distributed{type(optimizer).__name__}", use_locking, reducer)
