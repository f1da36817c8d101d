"""Horovod's Keras callbacks for Keras 3 (hvd.callbacks.* in the keras module)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

import rdmacoll as rc

from .. import _join as joinable  # collectives announced to ranks inside join()
from .functions import broadcast_variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """At the start of the first fit(), root_rank's model weights and optimizer state on
    every rank (ranks may start from different random weights). A model built lazily (a
    Sequential without an Input, built by its first step) has no weights then: it is
    broadcast at the end of the first batch instead, where Horovod always broadcasts (the
    optimizer is built by that step too; building it before, over no variables, made Keras
    refuse the model's variables later: "Unknown variable")."""

    def __init__(self, root_rank=0, device="", local_variables=None):
        """local_variables: variables (tf.Variable or Keras 3 Variable) each rank keeps
        its own value of: not broadcast."""
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif isinstance(local_variables, (tf.Variable, keras.Variable)):
            local_variables = [local_variables]
        elif not all(isinstance(v, (tf.Variable, keras.Variable)) for v in local_variables):
            raise ValueError("All local variables must be of tf.Variable type.")  # (Horovod's words)
        self._local = {id(v) for v in local_variables}

    def register_local_var(self, var):
        """Horovod's: var is not broadcast."""
        self._local.add(id(var))

    def on_train_begin(self, logs=None):
        if not self.broadcast_done and self.model.weights:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:  # (built by the step that just ran)
            self._broadcast()

    def _broadcast(self):
        variables = [v for v in self.model.weights if id(v) not in self._local]
        opt = getattr(self.model, "optimizer", None)
        if opt is not None:
            if not opt.built:
                opt.build(self.model.trainable_variables)
            variables += list(opt.variables)
        broadcast_variables(variables, self.root_rank, name="BroadcastGlobalVariablesCallback")
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """At the end of every epoch, replaces each metric in `logs` with its average over
    ranks (one collective for all of them). Put it before callbacks that read metrics."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.isscalar(v) or np.ndim(v) == 0)
        values = np.array([float(logs[k]) for k in keys], np.float64)
        averaged = joinable.allreduce(values, op=rc.Average, name="MetricAverageCallback")
        for k, v in zip(keys, averaged.tolist()):
            logs[k] = v


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """learning rate = initial_lr * multiplier(epoch) from start_epoch until end_epoch;
    multiplier is a number or a function of the (fractional, unless staircase) epoch.

    momentum_correction is accepted for Horovod compatibility: Keras 3 compiles an
    optimizer's momentum into the train step as a constant, so it cannot be rescaled
    per batch."""

    def __init__(
        self,
        initial_lr,
        multiplier,
        start_epoch=0,
        end_epoch=None,
        staircase=True,
        momentum_correction=True,
        steps_per_epoch=None,
    ):
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase if callable(multiplier) else True
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0

    def _active(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        self.model.optimizer.learning_rate = self.initial_lr * self.multiplier(epoch)

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = float(np.asarray(self.model.optimizer.learning_rate))
        if self.steps_per_epoch is None:
            self.steps_per_epoch = self.params.get("steps")
        if not self.staircase and not self.steps_per_epoch:
            raise ValueError(
                f"{type(self).__name__}: pass steps_per_epoch= (fit() does not know how many steps an epoch has)"
            )

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._active(epoch):
            self._adjust(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if not self.staircase and self._active(self.current_epoch):
            self._adjust(self.current_epoch + batch / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(np.asarray(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Goyal et al.'s gradual warmup: the learning rate grows from initial_lr / size to
    initial_lr over warmup_epochs (per batch), as in Horovod."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # end each epoch on a round number, as Horovod does
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / rc.size() * (epoch * (rc.size() - 1) / warmup_epochs + 1)

        super().__init__(
            initial_lr,
            multiplier,
            start_epoch=0,
            end_epoch=warmup_epochs,
            staircase=False,
            momentum_correction=momentum_correction,
            steps_per_epoch=steps_per_epoch,
        )
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            lr = float(np.asarray(self.model.optimizer.learning_rate))
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {lr:g}.")
