"""Horovod's SyncBatchNormalization for Keras 3: batch statistics averaged across ranks
in training (each rank's mean and mean of squares, one allreduce per call), as Horovod
0.28.1 computes them (an unweighted average over ranks: equal batch sizes assumed).
Differentiable: the allreduce's gradient is Horovod's (gradients.py), so a rank's input
gradient is that of the union batch."""

from __future__ import annotations

import keras
import tensorflow as tf

import rdmacoll as rc

from . import gradients


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization whose training statistics are the job's."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if not kwargs.get("name"):
            kwargs["name"] = "sync_batch_normalization"
        super().__init__(**kwargs)

    def _moments(self, inputs, mask):
        mean, variance = super()._moments(inputs, mask)
        size = rc.size()
        if size == 1:
            return mean, variance
        # Var[X] = E[X^2] - E[X]^2, with both expectations averaged over the ranks
        stacked = tf.stack([mean, variance + tf.math.square(mean)])
        group = gradients.allreduce(stacked, rc.Sum, f"{self.name}.moments") / size
        group_mean, group_mean_of_square = tf.unstack(group)
        return group_mean, group_mean_of_square - tf.math.square(group_mean)
