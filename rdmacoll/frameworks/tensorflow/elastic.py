"""hvd.elastic for TensorFlow (horovod/tensorflow/elastic.py and horovod/tensorflow/keras/
elastic.py, 0.28.1): run, TensorFlowKerasState, TensorFlowState, and for Keras KerasState
and the callbacks that keep a state's epoch and batch and commit it, by Horovod's names.
The rules are frameworks/_elastic.py's (both adapters'); this module holds what is
TensorFlow's: variables saved, restored and broadcast from rank 0, and a failed collective
recognised as Horovod's TensorFlow run recognises it.

    import rdmacoll.frameworks.tensorflow.keras as hvd
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(dataset, epochs=epochs - state.epoch, callbacks=callbacks)

under `rdmacoll-run --elastic` (rdmacoll/elastic_run.py); docs/elastic.md. Eager TensorFlow
2 and Keras 3 only (TF1 sessions: no elastic state here).
"""

from __future__ import annotations

import keras
import tensorflow as tf

import rdmacoll as rc
from rdmacoll import RdmacollError

from .._elastic import ObjectState, State, run_fn
from .._horovod import HorovodInternalError, HostsUpdatedInterrupt
from . import errors
from .functions import broadcast_object, broadcast_variables


# Inside a graph (Keras' fit, tf.function) a collective's failure reaches the caller as
# TensorFlow's UnknownError of the Python op, whose text ends with the original exception's
# class and message: "...rdmacoll.frameworks.tensorflow.errors.UnknownError: rank 1 ... died"
_GRAPH_MARK = f"{errors.UnknownError.__module__}.{errors.UnknownError.__qualname__}: "


def _failed_collective(e: tf.errors.UnknownError) -> bool:
    """Whether a TensorFlow UnknownError is a collective's failure (Horovod's run looks for
    its ops' names in the text): eagerly rdmacoll's own errors.UnknownError, in a graph
    the Python op's error that names it."""
    return isinstance(e, RdmacollError) or _GRAPH_MARK in str(e)


def run(func):
    """Horovod's hvd.elastic.run for TensorFlow: func(state, ...) goes on through workers
    lost and added; a collective's failure (tf.errors.UnknownError from rdmacoll's ops,
    eager or in a graph) counts as HorovodInternalError, as in Horovod."""

    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.UnknownError as e:
            if _failed_collective(e):
                raise HorovodInternalError(str(e)) from e
            raise

    return run_fn(wrapper)


def _variables(optimizer) -> list:
    v = optimizer.variables  # (Keras 3: a list; Keras 2's optimizers: a method)
    return list(v() if callable(v) else v)


def _values(variables) -> list:
    return [tf.identity(tf.convert_to_tensor(v)) for v in variables]


def _assign(variables, values) -> None:
    for var, value in zip(variables, values):
        var.assign(value)


class TensorFlowKerasState(ObjectState):
    """Horovod's TensorFlowKerasState(model, optimizer=None, backend=None, **kwargs): a
    built Keras model's variables and its optimizer's (model.optimizer by default) saved by
    commit(), restored by restore(), rank 0's after sync(); the other keyword arguments
    are ObjectState attributes."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.optimizer = optimizer or model.optimizer
        self.backend = backend
        self._save_model()
        super().__init__(bcast_object=broadcast_object, get_rank=rc.rank, **kwargs)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        _assign(self.model.variables, self._saved_model)
        _assign(_variables(self.optimizer), self._saved_optimizer)
        super().restore()

    def sync(self):
        broadcast_variables(self.model.variables, root_rank=0)
        broadcast_variables(_variables(self.optimizer), root_rank=0)
        self._save_model()
        super().sync()

    def _save_model(self):
        self._saved_model = _values(self.model.variables)
        self._saved_optimizer = _values(_variables(self.optimizer))


class TensorFlowState(ObjectState):
    """Horovod's TensorFlowState(variables=None, session=None, **kwargs), eagerly: a list of
    tf.Variables saved by commit(), restored by restore(), rank 0's after sync()."""

    def __init__(self, variables=None, session=None, **kwargs):
        if not tf.executing_eagerly():
            raise ValueError("TensorFlowState: only eagerly here (TF1 sessions have no elastic state in rdmacoll)")
        self.variables = list(variables or [])
        self.session = session
        self._saved = _values(self.variables)
        super().__init__(bcast_object=broadcast_object, get_rank=rc.rank, **kwargs)

    def save(self):
        self._saved = _values(self.variables)
        super().save()

    def restore(self):
        _assign(self.variables, self._saved)
        super().restore()

    def sync(self):
        broadcast_variables(self.variables, root_rank=0)
        self._saved = _values(self.variables)
        super().sync()


class KerasState(TensorFlowKerasState):
    """Horovod's horovod.tensorflow.keras.elastic.KerasState(model, optimizer=None, **kwargs)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=keras.backend, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commit `state` every `batches_per_commit` batches and at each epoch's end."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # (every sync: the same on every rank)

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keep `state.batch` at the batch just ended (0 at each epoch's end); with
    steps_per_epoch, the first epoch after a reset is shortened by the batches done."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keep `state.epoch` at the epochs done across resets (Keras counts from 0 in each fit)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = [
    "run",
    "State",
    "ObjectState",
    "TensorFlowKerasState",
    "TensorFlowState",
    "KerasState",
    "CommitStateCallback",
    "UpdateBatchStateCallback",
    "UpdateEpochStateCallback",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
]
