"""The tensor collectives as differentiable ops, with the gradients Horovod 0.28.1
registers for its ops (horovod/tensorflow/mpi_ops.py), in eager mode and in tf.function.

Each function here is the collective alone (no compression, no scale factors: the
callers apply those with TensorFlow ops, whose gradients TensorFlow knows), wrapped in
tf.custom_gradient; the backward pass is itself a collective, so every rank must take
gradients of the same collectives in the same order, as with Horovod.

    allreduce(op)        dx = allreduce(dy, op)
    grouped_allreduce    dx_i = grouped allreduce of the dy_i, same op
    allgather            dx = this rank's rows of allreduce(dy, Average) (row counts
                         allgathered in the backward pass)
    broadcast(root)      dx = allreduce(dy, Average) on the root, zeros elsewhere
    alltoall(splits)     dx = alltoall(dy, splits = the rows received from each rank)
    reducescatter(op)    dx = allgather(dy * size if op is Sum else dy)
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import rdmacoll as rc

from .. import _join as joinable   # collectives announced to ranks inside join()
from . import _arrays, _graph

_UNBOUNDED = 1 << 62  # a fusion "threshold" that puts every tensor of a dtype into one bucket


def fused(tensors, op, threshold, name):
    """The raw (not differentiable) reduction of a list of tensors in as few collectives
    as `threshold` bytes per bucket allow."""
    return _graph.run(lambda *arrays: _arrays.allreduce_arrays(arrays, op, threshold, name),
                      tensors, [t.dtype for t in tensors], [t.shape for t in tensors])


def _allgather_raw(t, name):
    (out,) = _graph.run(lambda a: [joinable.allgather(a, name=name)], [t], [t.dtype], [[None] + t.shape[1:]])
    return out


def _alltoall_raw(t, splits, name):
    inputs = [t] if splits is None else [t, tf.cast(tf.convert_to_tensor(splits), tf.int64)]

    def fn(a, s=None):
        out, received = joinable.alltoall(a, None if s is None else s.tolist(), name=name, return_received_splits=True)
        return [out, np.asarray(received, np.int32)]

    return _graph.run(fn, inputs, [t.dtype, tf.int32], [[None] + t.shape[1:], [None]])


def grouped_allreduce(tensors, op, name):
    one = len(tensors) == 1  # (custom_gradient: a lone tensor in and out, not a list of one)

    @tf.custom_gradient
    def forward(*xs):
        def backward(*dys):
            grads = fused(list(dys), op, _UNBOUNDED, name + ".grad")
            return grads[0] if one else grads
        ys = fused(list(xs), op, _UNBOUNDED, name)
        return (ys[0] if one else ys), backward
    ys = forward(*tensors)
    return [ys] if one else list(ys)


def allreduce(tensor, op, name):
    return grouped_allreduce([tensor], op, name)[0]


def allgather(tensor, name):
    @tf.custom_gradient
    def forward(x):
        def backward(dy):
            (reduced,) = fused([dy], rc.Average, _UNBOUNDED, name + ".grad")
            rows = _allgather_raw(tf.shape(x, out_type=tf.int64)[:1], name + ".grad.rows")
            return tf.split(reduced, rows, num=rc.size(), axis=0)[rc.rank()]
        return _allgather_raw(x, name), backward
    return forward(tf.convert_to_tensor(tensor))


def broadcast(tensor, root_rank, name):
    def raw(t, n):
        (out,) = _graph.run(lambda a: [joinable.broadcast(a, root_rank, name=n)], [t], [t.dtype], [t.shape])
        return out

    @tf.custom_gradient
    def forward(x):
        def backward(dy):
            (reduced,) = fused([dy], rc.Average, _UNBOUNDED, name + ".grad")
            return reduced if rc.rank() == root_rank else reduced * 0
        return raw(x, name), backward
    return forward(tf.convert_to_tensor(tensor))


def alltoall(tensor, splits, name):
    """(output, rows received from each rank)."""
    @tf.custom_gradient
    def forward(x):
        out, received = _alltoall_raw(x, splits, name)

        def backward(dy, _d_received=None):
            back, _ = _alltoall_raw(dy, received, name + ".grad")
            return back
        return (out, received), backward
    out, received = forward(tf.convert_to_tensor(tensor))
    return out, received


def reducescatter(tensor, op, name):
    def raw(t, n):
        (out,) = _graph.run(lambda a: [joinable.reducescatter(a, op=op, name=n)], [t], [t.dtype],
                            [[None] + t.shape[1:]])
        return out

    @tf.custom_gradient
    def forward(x):
        def backward(dy):
            return _allgather_raw(dy * rc.size() if op == rc.Sum else dy, name + ".grad")
        return raw(x, name), backward
    return forward(tf.convert_to_tensor(tensor))
