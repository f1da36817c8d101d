"""DistributedOptimizer for Keras 3 optimizers (model.compile + model.fit, or apply())."""

from __future__ import annotations

import keras
import tensorflow as tf

import rdmacoll as rc

from ._reduce import GradientReducer
from .errors import RULES
from .compression import Compression
from .gradient_tape import local_layer_variables


class _DistributedOptimizer:
    """Mixed in before the wrapped optimizer's class: apply() (which apply_gradients()
    and model.fit's train step call) averages the gradients across ranks first, except
    those that compute_gradients() returned reduced already (Horovod's rule: gradients
    are reduced where they are computed, and applied as given)."""

    def build(self, variables):
        super().build(variables)
        if self._rdmacoll_passes_per_step > 1 and not hasattr(self, "_rdmacoll_accumulators"):
            # Plain tf.Variables, not optimizer variables: checkpoints stay loadable by the
            # unwrapped optimizer (and the accumulators start at zero on every rank).
            with tf.init_scope():
                self._rdmacoll_accumulators = [
                    tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in variables
                ]
                self._rdmacoll_passes = tf.Variable(tf.zeros((), tf.int64), trainable=False)

    def register_local_var(self, var):
        """Horovod's: var's gradient is not reduced (it stays this rank's)."""
        self._rdmacoll_reducer.register_local(var)

    def compute_gradients(self, loss, var_list, tape=None):
        """Horovod's: [(gradient, variable)], the gradients of `loss` reduced across ranks."""
        return self._compute_gradients(loss, var_list, None, tape)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """What Horovod's Keras DistributedOptimizer has (Keras 2's optimizers had it, Keras 3's
        have not): the gradients of `loss` (a tensor recorded on `tape`, or a callable run on
        a new tape) with respect to `var_list` (or a callable giving it), reduced across ranks
        as apply() would reduce them, as [(gradient, variable)]. The next apply_gradients()
        applies those variables' gradients as given, without reducing them again.
        backward_passes_per_step > 1: this pass's own gradients; apply_gradients() accumulates
        them and reduces every n-th pass (Horovod returns the running sum instead, and the
        reduced sum on the n-th pass)."""
        tape = tf.GradientTape() if tape is None else tape
        if callable(loss):
            with tape:
                if not callable(var_list):  # (a Keras variable's tf.Variable is its value)
                    tape.watch([v.value if isinstance(v, keras.Variable) else v for v in var_list])
                loss = loss()
        variables = list(var_list() if callable(var_list) else var_list)
        grads = tape.gradient(loss, variables, grad_loss)
        if self._rdmacoll_passes_per_step == 1:
            grads = self._rdmacoll_reducer.reduce(grads, variables)
            self._rdmacoll_reducer.reduced_ahead(variables)
        return list(zip(grads, variables))

    def apply(self, grads, trainable_variables=None):
        if self._rdmacoll_passes_per_step == 1:
            variables = self._trainable_variables if trainable_variables is None else trainable_variables
            return super().apply(self._rdmacoll_reducer.reduce_rest(grads, variables), trainable_variables)
        return self._rdmacoll_accumulate(list(grads), trainable_variables)

    def _rdmacoll_accumulate(self, grads, trainable_variables):
        """backward_passes_per_step > 1: add this pass's gradients to local accumulators;
        every n-th pass reduce the accumulated gradients once and apply them."""
        if not self.built:
            self.build(list(trainable_variables))
        variables = self._trainable_variables if trainable_variables is None else list(trainable_variables)
        accumulators = [self._rdmacoll_accumulators[self._get_variable_index(v)] for v in variables]
        n = self._rdmacoll_passes_per_step
        for acc, g in zip(accumulators, grads):
            if g is not None:
                acc.assign_add(tf.convert_to_tensor(g))
        self._rdmacoll_passes.assign_add(1)

        def reduce_and_apply():
            summed = [None if g is None else acc.read_value() for acc, g in zip(accumulators, grads)]
            if self._rdmacoll_average_aggregated:
                summed = [None if s is None else s / tf.cast(n, s.dtype) for s in summed]
            super(_DistributedOptimizer, self).apply(self._rdmacoll_reducer.reduce(summed, variables), variables)
            for acc in accumulators:
                acc.assign(tf.zeros(acc.shape, acc.dtype))
            return tf.constant(True)

        due = tf.equal(tf.math.floormod(self._rdmacoll_passes.read_value(), n), 0)
        if tf.executing_eagerly():
            if bool(due):
                reduce_and_apply()
            return None
        tf.cond(due, reduce_and_apply, lambda: tf.constant(False))
        return None


def DistributedOptimizer(
    optimizer,
    name=None,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    sparse_as_dense=False,
    gradient_predivide_factor=1.0,
    op=rc.Average,
    backward_passes_per_step=1,
    average_aggregated_gradients=False,
    num_groups=0,
    groups=None,
    process_set=rc.global_process_set,
    scale_local_gradients=True,
):
    """A copy of the Keras 3 `optimizer` (same class and config, so still an instance of
    it) that averages gradients across ranks before applying them:

        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(1e-3)), ...)
        model.fit(...)                                   # data-parallel

    Gradients of one step go through as few collectives as RDMACOLL_FUSION_THRESHOLD
    allows. backward_passes_per_step=n accumulates n passes locally and reduces (and
    applies) once every n passes, averaging the n passes if average_aggregated_gradients.
    device_*, sparse_as_dense, num_groups and groups are accepted for Horovod
    compatibility and have no effect. Under a mixed_float16 policy the optimizer is first
    wrapped in a LossScaleOptimizer (as model.compile would), so that loss scaling sees
    the reduced gradients and every rank skips the same steps. The wrapped optimizer's variables are not copied:
    wrap before training (or use BroadcastGlobalVariablesCallback / load_model).
    process_set: gradients are averaged over its ranks; a rank outside it applies its own.
    """
    RULES.check_optimizer(op, gradient_predivide_factor, backward_passes_per_step)
    if keras.config.dtype_policy().name == "mixed_float16" and not isinstance(
        optimizer, keras.optimizers.LossScaleOptimizer
    ):
        # What model.compile would do, but outside: the loss scaler then sees the reduced
        # gradients (finite on every rank or on none) instead of each rank its own.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    base = type(optimizer)
    cls = type(
        base.__name__, (_DistributedOptimizer, base), {"__module__": base.__module__, "__qualname__": base.__qualname__}
    )
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    dist = cls.from_config(config)
    dist._rdmacoll_reducer = GradientReducer(
        op,
        compression,
        gradient_predivide_factor,
        name=f"DistributedOptimizer.{dist.name}",
        scale_local_gradients=scale_local_gradients,
        process_set=process_set,
    )
    dist._rdmacoll_passes_per_step = int(backward_passes_per_step)
    dist._rdmacoll_average_aggregated = bool(average_aggregated_gradients)
    return dist


def PartialDistributedOptimizer(
    optimizer,
    name=None,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    sparse_as_dense=False,
    gradient_predivide_factor=1.0,
    op=rc.Average,
    groups=None,
    process_set=rc.global_process_set,
    local_layers=None,
    scale_local_gradients=True,
):
    """DistributedOptimizer that leaves the gradients of local_layers' variables unreduced
    (divided by the size when scale_local_gradients), as Horovod's horovod.keras one."""
    RULES.check_optimizer(op, gradient_predivide_factor, 1, ops=(rc.Average, rc.Sum))
    local = local_layer_variables(local_layers)
    dist = DistributedOptimizer(
        optimizer,
        name=name,
        device_dense=device_dense,
        device_sparse=device_sparse,
        compression=compression,
        sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor,
        op=op,
        groups=groups,
        process_set=process_set,
        scale_local_gradients=scale_local_gradients,
    )
    for v in local:
        dist.register_local_var(v)
    return dist
