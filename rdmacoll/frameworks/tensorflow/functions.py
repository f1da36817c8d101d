"""Horovod's tensor collectives for TensorFlow: tensors in, tensors out, eagerly or
inside a graph (see _graph.py for how graph mode keeps every rank's order).

process_set: Horovod's argument, a registered rdmacoll.ProcessSet (default the global
set): only its ranks take part, Average divides by its size, root_rank stays a global
rank, a rank outside the set gets InvalidArgumentError (errors.py). ignore_name_scope and
device_* are accepted for Horovod compatibility (names and devices of ops: no effect)."""

from __future__ import annotations

import tensorflow as tf

import rdmacoll as rc
from rdmacoll import global_process_set

from .. import _join as joinable  # collectives announced to ranks inside join()
from .._common import fusion_threshold
from . import _arrays, _checks, _graph, errors, gradients
from .compression import Compression


def _resolve_op(average, op):
    """Horovod's deprecated average= flag, or op= (default Average): ../_horovod.py."""
    return errors.RULES.resolve_op(average, op, stacklevel=4)


def _name(name, default):
    return default if name is None else str(name)


def _set_size(process_set):
    """The number of ranks of process_set (InvalidArgumentError, in Horovod's words, when
    it is not registered)."""
    return errors.RULES.set_size(process_set.size())


def fused_allreduce(tensors, op=rc.Average, threshold=None, name=None, process_set=global_process_set):
    """Reduce a list of dense tensors in as few collectives as the fusion threshold
    allows (default: RDMACOLL_FUSION_THRESHOLD); returns the reduced tensors (not
    differentiable: the optimizers' gradient path)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    threshold = fusion_threshold() if threshold is None else threshold
    return gradients.fused(tensors, op, threshold, _name(name, "allreduce"), process_set)


def _checked(tensor, collective):
    """tensor as a tf.Tensor, of a dtype `collective` takes (../_horovod.py's table;
    InvalidArgumentError before anything is sent)."""
    t = tf.convert_to_tensor(tensor)
    errors.RULES.check_dtype(collective, t.dtype.name, f"{collective} input")
    if collective in ("allgather", "alltoall", "reducescatter") and t.shape.rank == 0:
        try:
            errors.RULES.check_rows(0, collective)  # (Horovod's shape functions: rank >= 1)
        except ValueError as e:
            if tf.executing_eagerly():
                raise
            # while a graph is built, as TensorFlow's shape functions: a plain ValueError
            # (autograph re-raises that type; any other reaches the caller as StagingError)
            raise ValueError(str(e)) from None
    return t


def _scale(t, factor):
    """t times factor, as Horovod's ScaleBuffer computes it (pre/postscale_factor; the torch
    adapter's scale_ is the same rule): float32, float16 and bfloat16 multiply by
    float32(factor) in float32, rounding once; float64 in float64; integers in float64,
    truncated toward zero (out-of-range products saturate to int64, then wrap to the
    dtype). Before, integers were multiplied by the factor cast to their own dtype (0 for
    any factor below 1) and float16 in float16."""
    if factor == 1.0:
        return t
    if t.dtype == tf.float64:
        return t * tf.constant(factor, tf.float64)
    if t.dtype.is_floating:
        f = tf.constant(factor, tf.float32)
        return t * f if t.dtype == tf.float32 else tf.cast(tf.cast(t, tf.float32) * f, t.dtype)
    p = tf.cast(t, tf.float64) * tf.constant(factor, tf.float64)
    p = tf.clip_by_value(tf.where(tf.math.is_nan(p), tf.zeros_like(p), p), -(2.0**63), 2.0**63 - 1024)
    return tf.cast(tf.cast(p, tf.int64), t.dtype)  # (the cast truncates toward zero)


def _scaled(tensors, collective, op, compression, prescale, postscale, process_set, reduce):
    """reduce(tensors, op) in Horovod's order, as the torch adapter: compress, prescale (in
    the compressed dtype), reduce, postscale, decompress; Average with a postscale factor
    is Sum and one multiply by postscale / size (RULES.fold_average)."""
    if op == rc.Average and postscale != 1.0:
        op, postscale = errors.RULES.fold_average(op, postscale, _set_size(process_set))
    pairs = [compression.compress(_checked(t, collective)) for t in tensors]
    reduced = reduce([_scale(c, prescale) for c, _ in pairs], op)
    return [compression.decompress(_scale(r, postscale), ctx) for r, (_, ctx) in zip(reduced, pairs)]


def check_adasum(process_set, sparse=False):
    """Horovod's refusals for op=Adasum on CPU tensors (../_horovod.py), in its order, before
    anything is sent: sparse tensors, a process set other than the global one, a number of
    ranks that is not a power of two."""
    errors.RULES.check_adasum(process_set is None or process_set is rc.global_process_set, rc.size(), sparse)


def allreduce(
    tensor,
    average=None,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    name=None,
    process_set=global_process_set,
    ignore_name_scope=False,
):
    """The reduction of tensor across ranks (op: Average by default, Sum, Min, Max,
    Product, Adasum: float tensors, the global set, a power-of-two number of ranks, as
    Horovod's CPU Adasum). tf.IndexedSlices are allgathered (values and indices), as
    Horovod does."""
    op = _resolve_op(average, op)
    if op == rc.Adasum:
        check_adasum(process_set, sparse=isinstance(tensor, tf.IndexedSlices))
    if isinstance(tensor, tf.IndexedSlices):  # (grouped_allreduce's rule: values and indices allgathered)
        return grouped_allreduce(
            [tensor],
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
            name=_name(name, "allreduce"),
        )[0]
    return _scaled(
        [tensor],
        "allreduce",
        op,
        compression,
        prescale_factor,
        postscale_factor,
        process_set,
        lambda ts, o: [gradients.allreduce(ts[0], o, _name(name, "allreduce"), process_set)],
    )[0]


def grouped_allreduce(
    tensors,
    average=None,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    ignore_name_scope=False,
    name=None,
):
    """allreduce of a list of tensors as one collective per dtype; returns a list.
    tf.IndexedSlices among them are allgathered (allreduce's rule, checked for all of them
    before anything is sent; all their values and indices in one grouped allgather), the
    dense ones reduced together, as Horovod does."""
    if not tensors:
        return tensors
    op = _resolve_op(average, op)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if op == rc.Adasum:
        check_adasum(process_set, sparse=bool(sparse))
    if sparse:
        # Horovod's rules and exception types (horovod/tensorflow/__init__.py), checked
        # before anything is sent; values divided by the size for Average
        errors.RULES.check_sparse_allreduce(op, prescale_factor, postscale_factor)
        name = _name(name, "grouped_allreduce")
        out = list(tensors)
        dense = [i for i in range(len(tensors)) if i not in sparse]
        reduced = grouped_allreduce(
            [tensors[i] for i in dense], compression=compression, op=op, process_set=process_set, name=name
        )
        for i, r in zip(dense, reduced):
            out[i] = r
        # every IndexedSlices' values and indices in one grouped allgather: one op, one
        # collective (in a TF1 session, one turn of the ranks' agreed order)
        parts = [tensors[i].values for i in sparse] + [tensors[i].indices for i in sparse]
        gathered = grouped_allgather(parts, name=f"{name}.sparse", process_set=process_set)
        for k, i in enumerate(sparse):
            values, indices = gathered[k], gathered[len(sparse) + k]
            if op == rc.Average:
                values = values / tf.cast(_set_size(process_set), values.dtype)
            out[i] = tf.IndexedSlices(values, indices, dense_shape=tensors[i].dense_shape)
        return out
    return _scaled(
        tensors,
        "grouped_allreduce",
        op,
        compression,
        prescale_factor,
        postscale_factor,
        process_set,
        lambda ts, o: gradients.grouped_allreduce(ts, o, _name(name, "grouped_allreduce"), process_set),
    )


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Every rank's tensor concatenated along the first dimension (which may differ)."""
    return gradients.allgather(_checked(tensor, "allgather"), _name(name, "allgather"), process_set)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """root_rank's tensor on every rank (of process_set; root_rank is a global rank)."""
    return gradients.broadcast(_checked(tensor, "broadcast"), root_rank, _name(name, "broadcast"), process_set)


def reducescatter(
    tensor,
    device_dense="",
    compression=Compression.none,
    op=rc.Average,
    name=None,
    process_set=global_process_set,
    ignore_name_scope=False,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    """The reduction of tensor across ranks, split along the first dimension: this rank's
    share (the first rows % size ranks get one row more)."""
    return _scaled(
        [tensor],
        "reducescatter",
        op,
        compression,
        prescale_factor,
        postscale_factor,
        process_set,
        lambda ts, o: [gradients.reducescatter(ts[0], o, _name(name, "reducescatter"), process_set)],
    )[0]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Send splits[j] rows of tensor to rank j (j: the position in process_set; splits=None:
    even split). Returns, as Horovod does, what every rank sent here in rank order, and
    with splits given also the rows received from each rank: (output, received_splits)."""
    out, received = gradients.alltoall(_checked(tensor, "alltoall"), splits, _name(name, "alltoall"), process_set)
    return out if splits is None else (out, received)


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """allgather of each tensor of a list, as one collective and one op (differentiable);
    returns a list."""
    if not tensors:
        return []
    checked = [_checked(t, "allgather") for t in tensors]
    return gradients.grouped_allgather(checked, _name(name, "grouped_allgather"), process_set)


def grouped_reducescatter(
    tensors,
    device_dense="",
    compression=Compression.none,
    op=rc.Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
    name=None,
):
    """reducescatter of each tensor of a list, as one collective per dtype and one op
    (differentiable); returns a list."""
    if not tensors:
        return []
    return _scaled(
        tensors,
        "reducescatter",
        op,
        compression,
        prescale_factor,
        postscale_factor,
        process_set,
        lambda ts, o: gradients.grouped_reducescatter(ts, o, _name(name, "grouped_reducescatter"), process_set),
    )


def _value(variable):
    """A tensor holding the current value of a tf.Variable or a Keras 3 Variable."""
    if isinstance(variable, tf.Variable):
        return variable.read_value()
    return tf.convert_to_tensor(variable.value)


def broadcast_variables(variables, root_rank=0, process_set=global_process_set, inplace=False, name=None):
    """Assign root_rank's values to `variables` (tf.Variable or Keras 3 Variable) on
    every rank (of process_set), all through one broadcast. Returns the grouped assign
    op in graph mode. inplace is accepted for Horovod compatibility (one staging buffer
    either way)."""
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    values = [_value(v) for v in variables]
    name = _name(name, "broadcast_variables")

    def fn(*arrays):
        _checks.root_rank(root_rank, process_set)
        return _arrays.broadcast_arrays(arrays, root_rank, name, process_set)

    new = _graph.run(fn, values, [v.dtype for v in values], [v.shape for v in values], process_set)
    assigns = [v.assign(n) for v, n in zip(variables, new)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's in-place broadcast: root_rank's values assigned to `variables` on every
    rank; returns their new values (a list of tensors)."""
    variables = list(variables)
    assign = broadcast_variables(variables, root_rank, process_set, name=_name(name, "broadcast_"))
    if tf.executing_eagerly():
        return [_value(v) for v in variables]
    with tf.control_dependencies([assign]):
        return [_value(v) for v in variables]


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's picklable obj on every rank (of process_set), as a Python object, in
    any mode (session: Horovod's TF1 argument; not needed, the object travels directly)."""
    return errors.converted(joinable.broadcast_object)(obj, root_rank, name, process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Horovod's TF1 helper: a function obj -> root_rank's obj, for calling repeatedly
    (Horovod builds placeholders and runs them in session; here each call broadcasts
    directly, in any mode, so session is accepted and not needed)."""
    name = name or "broadcast_object_fn"

    def _bcast(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)

    return _bcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's picklable obj, as a list in rank order (of process_set's ranks)."""
    return errors.converted(joinable.allgather_object)(obj, name, process_set)
