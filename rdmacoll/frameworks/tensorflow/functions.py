"""Horovod's tensor collectives for TensorFlow: tensors in, tensors out, eagerly or
inside tf.function (see _graph.py for how graph mode keeps every rank's order)."""
from __future__ import annotations

import tensorflow as tf

import rdmacoll as rc

from .. import _join as joinable   # collectives announced to ranks inside join()
from .._common import fusion_threshold
from . import _arrays, _graph, gradients
from .compression import Compression


def _resolve_op(average, op):
    """Horovod's deprecated average= flag, or op= (default Average)."""
    if average is not None and op is not None:
        raise ValueError("pass either average= (deprecated) or op=, not both")
    if average is not None:
        return rc.Average if average else rc.Sum
    return rc.Average if op is None else op


def _name(name, default):
    return default if name is None else str(name)


def fused_allreduce(tensors, op=rc.Average, threshold=None, name=None):
    """Reduce a list of dense tensors in as few collectives as the fusion threshold
    allows (default: RDMACOLL_FUSION_THRESHOLD); returns the reduced tensors (not
    differentiable: the optimizers' gradient path)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    threshold = fusion_threshold() if threshold is None else threshold
    return gradients.fused(tensors, op, threshold, _name(name, "allreduce"))


def _scale(t, factor):
    return t if factor == 1.0 else t * tf.cast(factor, t.dtype)


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None):
    """The reduction of tensor across ranks (op: Average by default, Sum, Min, Max,
    Product). tf.IndexedSlices are allgathered (values and indices), as Horovod does."""
    op = _resolve_op(average, op)
    if isinstance(tensor, tf.IndexedSlices):
        # Horovod's rules and exception types (horovod/tensorflow/__init__.py), checked
        # before anything is sent: two allgathers, values divided by the size for Average
        if op not in (rc.Average, rc.Sum):
            raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
        if prescale_factor != 1.0 or postscale_factor != 1.0:
            raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")
        values = allgather(tensor.values, name=_name(name, "allreduce") + ".values")
        indices = allgather(tensor.indices, name=_name(name, "allreduce") + ".indices")
        if op == rc.Average:
            values = values / tf.cast(rc.size(), values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    compressed, ctx = compression.compress(_scale(tf.convert_to_tensor(tensor), prescale_factor))
    reduced = gradients.allreduce(compressed, op, _name(name, "allreduce"))
    return _scale(compression.decompress(reduced, ctx), postscale_factor)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, name=None):
    """allreduce of a list of tensors as one collective per dtype; returns a list."""
    op = _resolve_op(average, op)
    pairs = [compression.compress(_scale(tf.convert_to_tensor(t), prescale_factor)) for t in tensors]
    reduced = gradients.grouped_allreduce([p[0] for p in pairs], op, _name(name, "grouped_allreduce"))
    return [_scale(compression.decompress(r, ctx), postscale_factor) for r, (_, ctx) in zip(reduced, pairs)]


def allgather(tensor, name=None):
    """Every rank's tensor concatenated along the first dimension (which may differ)."""
    return gradients.allgather(tensor, _name(name, "allgather"))


def broadcast(tensor, root_rank, name=None):
    """root_rank's tensor on every rank."""
    return gradients.broadcast(tensor, root_rank, _name(name, "broadcast"))


def reducescatter(tensor, op=rc.Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """The reduction of tensor across ranks, split along the first dimension: this rank's
    share (the first rows % size ranks get one row more)."""
    t = _scale(tf.convert_to_tensor(tensor), prescale_factor)
    return _scale(gradients.reducescatter(t, op, _name(name, "reducescatter")), postscale_factor)


def alltoall(tensor, splits=None, name=None):
    """Send splits[j] rows of tensor to rank j (splits=None: even split). Returns, as
    Horovod does, what every rank sent here in rank order, and with splits given also
    the rows received from each rank: (output, received_splits)."""
    out, received = gradients.alltoall(tensor, splits, _name(name, "alltoall"))
    return out if splits is None else (out, received)


def grouped_allgather(tensors, name=None):
    """allgather of each tensor of a list (each differentiable); returns a list."""
    name = _name(name, "grouped_allgather")
    return [allgather(t, name=f"{name}.{i}") for i, t in enumerate(tensors)]


def grouped_reducescatter(tensors, op=rc.Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of each tensor of a list; returns a list."""
    name = _name(name, "grouped_reducescatter")
    return [reducescatter(t, op=op, name=f"{name}.{i}", prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor) for i, t in enumerate(tensors)]


def _value(variable):
    """A tensor holding the current value of a tf.Variable or a Keras 3 Variable."""
    if isinstance(variable, tf.Variable):
        return variable.read_value()
    return tf.convert_to_tensor(variable.value)


def broadcast_variables(variables, root_rank=0, name=None):
    """Assign root_rank's values to `variables` (tf.Variable or Keras 3 Variable) on
    every rank, all through one broadcast. Returns the grouped assign op in graph mode."""
    variables = list(variables)
    if not variables:
        return None
    values = [_value(v) for v in variables]
    name = _name(name, "broadcast_variables")
    new = _graph.run(lambda *arrays: _arrays.broadcast_arrays(arrays, root_rank, name),
                     values, [v.dtype for v in values], [v.shape for v in values])
    assigns = [v.assign(n) for v, n in zip(variables, new)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_(variables, root_rank, name=None):
    """Horovod's in-place broadcast: root_rank's values assigned to `variables` on every
    rank; returns their new values (a list of tensors)."""
    variables = list(variables)
    broadcast_variables(variables, root_rank, name=_name(name, "broadcast_"))
    return [_value(v) for v in variables]


def broadcast_object(obj, root_rank=0, name=None):
    """root_rank's picklable obj on every rank (eager: a Python object)."""
    return joinable.broadcast_object(obj, root_rank, name=name)


def allgather_object(obj, name=None):
    """Every rank's picklable obj, as a list in rank order."""
    return joinable.allgather_object(obj, name=name)
