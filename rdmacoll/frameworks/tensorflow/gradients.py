"""The tensor collectives as differentiable ops, with the gradients Horovod 0.28.1
registers for its ops (horovod/tensorflow/mpi_ops.py), in eager mode and in tf.function.

Each function here is the collective alone (no compression, no scale factors: the
callers apply those with TensorFlow ops, whose gradients TensorFlow knows), wrapped in
tf.custom_gradient; the backward pass is itself a collective on the same process set
(Horovod: the op's process_set_id attribute), so every rank of the set must take
gradients of the same collectives in the same order, as with Horovod. Sizes and ranks
below are the set's (ps.size(), ps.rank()); broadcast's root_rank is a global rank.

    allreduce(op)        dx = allreduce(dy, op)
    grouped_allreduce    dx_i = grouped allreduce of the dy_i, same op
    allgather            dx = this rank's rows of allreduce(dy, Average) (row counts
                         allgathered in the backward pass)
    broadcast(root)      dx = allreduce(dy, Average) on the root, zeros elsewhere
    alltoall(splits)     dx = alltoall(dy, splits = the rows received from each rank)
    reducescatter(op)    dx = allgather(dy * size if op is Sum else dy)
    grouped_allgather    dx_i = this rank's rows of allreduce(dy_i, Average), all dy_i in
                         one fused op (the rows of every rank travel with the forward)
    grouped_reducescatter  dx_i = grouped allgather of (dy_i * size if op is Sum else dy_i)

The grouped ones are one op each way, running one collective (rdmacoll.grouped), whatever
the number of tensors: one turn of a TF1 session's agreed order (_session_order.py), one
core call.

Every function takes process_set (None: the global set).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import rdmacoll as rc

from .. import _join as joinable  # collectives announced to ranks inside join()
from . import _arrays, _checks, _graph

_UNBOUNDED = 1 << 62  # a fusion "threshold" that puts every tensor of a dtype into one bucket


def _set(process_set):
    return rc.global_process_set if process_set is None else process_set


def fused(tensors, op, threshold, name, process_set=None):
    """The raw (not differentiable) reduction of a list of tensors in as few collectives
    as `threshold` bytes per bucket allow."""
    return _graph.run(
        lambda *arrays: _arrays.allreduce_arrays(arrays, op, threshold, name, process_set),
        tensors,
        [t.dtype for t in tensors],
        [t.shape for t in tensors],
        process_set,
    )


def _allgather_raw(t, name, process_set):
    (out,) = _graph.run(
        lambda a: [joinable.allgather(a, name=name, process_set=process_set)],
        [t],
        [t.dtype],
        [[None] + t.shape[1:]],
        process_set,
    )
    return out


def _alltoall_raw(t, splits, name, process_set):
    inputs = [t] if splits is None else [t, tf.cast(tf.convert_to_tensor(splits), tf.int64)]

    def fn(a, s=None):
        rows = a.shape[0] if a.ndim else 1
        send = _checks.splits(
            rows, None if s is None else s.reshape(-1).tolist(), process_set, 1 if s is None else s.ndim
        )
        if send is not None and sum(send) < rows:
            a = a[: sum(send)]  # Horovod sends only the rows the splits cover
        out, received = joinable.alltoall(a, send, name=name, return_received_splits=True, process_set=process_set)
        return [out, np.asarray(received, np.int32)]

    return _graph.run(fn, inputs, [t.dtype, tf.int32], [[None] + t.shape[1:], [None]], process_set)


def grouped_allreduce(tensors, op, name, process_set=None):
    one = len(tensors) == 1  # (custom_gradient: a lone tensor in and out, not a list of one)

    @tf.custom_gradient
    def forward(*xs):
        def backward(*dys):
            grads = fused(list(dys), op, _UNBOUNDED, name + ".grad", process_set)
            return grads[0] if one else grads

        ys = fused(list(xs), op, _UNBOUNDED, name, process_set)
        return (ys[0] if one else ys), backward

    ys = forward(*tensors)
    return [ys] if one else list(ys)


def allreduce(tensor, op, name, process_set=None):
    return grouped_allreduce([tensor], op, name, process_set)[0]


def allgather(tensor, name, process_set=None):
    @tf.custom_gradient
    def forward(x):
        def backward(dy):
            (reduced,) = fused([dy], rc.Average, _UNBOUNDED, name + ".grad", process_set)
            rows = _allgather_raw(tf.shape(x, out_type=tf.int64)[:1], name + ".grad.rows", process_set)
            ps = _set(process_set)
            return tf.split(reduced, rows, num=ps.size(), axis=0)[ps.rank()]

        return _allgather_raw(x, name, process_set), backward

    return forward(tf.convert_to_tensor(tensor))


def broadcast(tensor, root_rank, name, process_set=None):
    def raw(t, n):
        def fn(a):
            _checks.root_rank(root_rank, process_set)
            return [joinable.broadcast(a, root_rank, name=n, process_set=process_set)]

        (out,) = _graph.run(fn, [t], [t.dtype], [t.shape], process_set)
        return out

    @tf.custom_gradient
    def forward(x):
        def backward(dy):
            (reduced,) = fused([dy], rc.Average, _UNBOUNDED, name + ".grad", process_set)
            return reduced if rc.rank() == root_rank else reduced * 0

        return raw(x, name), backward

    return forward(tf.convert_to_tensor(tensor))


def alltoall(tensor, splits, name, process_set=None):
    """(output, rows received from each rank)."""

    @tf.custom_gradient
    def forward(x):
        out, received = _alltoall_raw(x, splits, name, process_set)

        def backward(dy, _d_received=None):
            back, _ = _alltoall_raw(dy, received, name + ".grad", process_set)
            return back

        return (out, received), backward

    out, received = forward(tf.convert_to_tensor(tensor))
    return out, received


def reducescatter(tensor, op, name, process_set=None):
    def raw(t, n):
        (out,) = _graph.run(
            lambda a: [joinable.reducescatter(a, op=op, name=n, process_set=process_set)],
            [t],
            [t.dtype],
            [[None] + t.shape[1:]],
            process_set,
        )
        return out

    @tf.custom_gradient
    def forward(x):
        def backward(dy):
            size = _set(process_set).size()
            return _allgather_raw(dy * size if op == rc.Sum else dy, name + ".grad", process_set)

        return raw(x, name), backward

    return forward(tf.convert_to_tensor(tensor))


def _dense_grads(dys, ys):
    """The upstream gradients as tensors: None (an output nothing depends on, or one of an
    integer dtype, in a graph) as zeros of its output, so that every rank sends the same
    tensors through the backward collective."""
    return [tf.zeros_like(y) if d is None else tf.convert_to_tensor(d) for d, y in zip(dys, ys)]


def _grouped_allgather_raw(ts, name, process_set, with_rows=False):
    """One op: every tensor of ts allgathered, as one collective (rdmacoll.grouped). With
    with_rows, also an int64 (size, len(ts)) tensor: each rank's rows of each tensor."""
    n = len(ts)

    def fn(*arrays):
        mine = [np.asarray([a.shape[0] for a in arrays], np.int64)] if with_rows else []
        out = joinable.grouped_allgather_async(list(arrays) + mine, name=name, process_set=process_set).wait()
        if with_rows:
            out[-1] = out[-1].reshape(-1, n)
        return out

    dtypes = [t.dtype for t in ts] + ([tf.int64] if with_rows else [])
    shapes = [[None] + t.shape[1:] for t in ts] + ([[None, n]] if with_rows else [])
    return _graph.run(fn, ts, dtypes, shapes, process_set)


def grouped_allgather(tensors, name, process_set=None):
    one = len(tensors) == 1

    @tf.custom_gradient
    def forward(*xs):
        *ys, rows = _grouped_allgather_raw(list(xs), name, process_set, with_rows=True)

        def backward(*dys):
            dys = _dense_grads(dys, ys)
            reduced = fused(dys, rc.Average, _UNBOUNDED, name + ".grad", process_set)
            ps = _set(process_set)
            grads = [tf.split(r, rows[:, i], num=ps.size(), axis=0)[ps.rank()] for i, r in enumerate(reduced)]
            return grads[0] if one else grads

        return (ys[0] if one else ys), backward

    ys = forward(*[tf.convert_to_tensor(t) for t in tensors])
    return [ys] if one else list(ys)


def grouped_reducescatter(tensors, op, name, process_set=None):
    one = len(tensors) == 1

    def raw(ts, n):
        return _graph.run(
            lambda *arrays: joinable.grouped_reducescatter_async(
                list(arrays), op=op, name=n, process_set=process_set
            ).wait(),
            ts,
            [t.dtype for t in ts],
            [[None] + t.shape[1:] for t in ts],
            process_set,
        )

    @tf.custom_gradient
    def forward(*xs):
        ys = raw(list(xs), name)

        def backward(*dys):
            size = _set(process_set).size()
            dys = _dense_grads(dys, ys)
            grads = _grouped_allgather_raw([d * size if op == rc.Sum else d for d in dys], name + ".grad", process_set)
            return grads[0] if one else grads

        return (ys[0] if one else ys), backward

    ys = forward(*[tf.convert_to_tensor(t) for t in tensors])
    return [ys] if one else list(ys)
