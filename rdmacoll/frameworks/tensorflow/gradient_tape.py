"""DistributedGradientTape: tape.gradient() returns gradients averaged across ranks."""

from __future__ import annotations

import keras
import tensorflow as tf

import rdmacoll as rc

from ._reduce import GradientReducer
from .compression import Compression


class _DistributedGradientTape:
    """Wraps a tf.GradientTape; everything but gradient() goes to the wrapped tape."""

    def __init__(self, tape, reducer):
        self._rdmacoll_tape = tape
        self._rdmacoll_reducer = reducer

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._rdmacoll_tape.gradient(target, sources, output_gradients, unconnected_gradients)
        flat = tf.nest.flatten(grads)
        return tf.nest.pack_sequence_as(grads, self._rdmacoll_reducer.reduce(flat, tf.nest.flatten(sources)))

    def register_local_source(self, source):
        """Horovod's: the gradient of `source` is not reduced (it stays this rank's)."""
        self._rdmacoll_reducer.register_local(source)

    def __enter__(self):
        self._rdmacoll_tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._rdmacoll_tape.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._rdmacoll_tape, name)


def DistributedGradientTape(
    gradtape,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    sparse_as_dense=False,
    op=rc.Average,
    gradient_predivide_factor=1.0,
    num_groups=0,
    groups=None,
    process_set=rc.global_process_set,
    scale_local_gradients=True,
):
    """A tape whose gradient() averages (op) the gradients across ranks, fused into as few
    collectives as RDMACOLL_FUSION_THRESHOLD allows; works eagerly and in tf.function.

        with tf.GradientTape() as tape:
            loss = ...
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    device_*, sparse_as_dense, num_groups and groups are accepted for Horovod
    compatibility: sparse gradients are always reduced as dense tensors and buckets
    follow the fusion threshold. process_set: gradients are averaged over its ranks; a
    rank outside it keeps its own (as in Horovod).
    """
    return _DistributedGradientTape(
        gradtape,
        GradientReducer(
            op,
            compression,
            gradient_predivide_factor,
            name="DistributedGradientTape",
            scale_local_gradients=scale_local_gradients,
            process_set=process_set,
        ),
    )


def local_layer_variables(local_layers) -> list:
    """The trainable variables of Horovod's local_layers argument (a Keras layer or a list
    of them); ValueError in Horovod's words otherwise."""
    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    return [v for layer in local_layers for v in layer.trainable_weights]


def PartialDistributedGradientTape(
    gradtape,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    sparse_as_dense=False,
    op=rc.Average,
    gradient_predivide_factor=1.0,
    num_groups=0,
    groups=None,
    process_set=rc.global_process_set,
    local_layers=None,
    scale_local_gradients=True,
):
    """DistributedGradientTape that leaves the gradients of local_layers' variables
    unreduced (divided by the size when scale_local_gradients), as Horovod's."""
    tape = DistributedGradientTape(
        gradtape,
        device_dense,
        device_sparse,
        compression,
        sparse_as_dense,
        op,
        gradient_predivide_factor,
        num_groups,
        groups,
        process_set,
        scale_local_gradients=scale_local_gradients,
    )
    for v in local_layer_variables(local_layers):
        tape.register_local_source(v)
    return tape
