"""Run a NumPy function over tensors eagerly, or as one op of a graph: a tf.function, or
a TF1 graph run by tf.compat.v1.Session.

Graph mode has no custom op to call: the collective runs inside tf.numpy_function.
TensorFlow may run independent ops in any order, and every rank must issue collectives
in the same order. Horovod gets there by negotiation: each op is keyed by its name, and a
background thread starts an op once every rank has submitted that name. rdmacoll's core
has no negotiation (a collective starts when called, its order is the order of calls), so
the order must be fixed before the ops reach it:

tf.function (TF2). Each collective op is bracketed by two writes to one "sequencer"
resource variable: it takes the first as an input and the second waits for it.
TensorFlow's automatic control dependencies run all writes to a resource in program
order, also across nested graphs (a tf.cond branch, a called tf.function), so every rank
runs its collectives in program order. A tf.function runs all its stateful ops, so the
chain never makes an op run that would not have run anyway.

TF1 graphs (tf.compat.v1.Session; also a tf.function called inside one). No automatic
control dependencies exist there, and a chain of explicit ones would be wrong: Session.run
runs only what its fetches need, and a dependency of op k on op k-1 would make fetching
the train op also run the broadcast built before it (or feed-less placeholders), every
step. So TF1 collectives are ordered when they run (_session_order.py): each op gets a key
at construction (0, 1, 2... per graph), and the ranks negotiate as Horovod does, in
rounds (one allgather of the keys each rank has reached): a collective runs once every
rank of its process set has reached it, the ready ones in key order. One collective per
Session.run, a train op and its broadcast in separate runs, several independent
collectives fetched together, and chains (a collective of another's result) all run in
one order on every rank. A TensorFlow Python op runs synchronously on an inter-op
thread, so a collective waiting for its turn would hold one: with more independent
collectives fetched together than the session has threads, each rank's threads could all
hold collectives other than the ones the others reached. So each collective is two ops
(_session_order.py): a submit that files it and returns, and a wait that holds the
graph's mutex (TensorFlow's MutexLock, which waits for the lock without a thread) and
drives the rounds. One thread waits; the others go on submitting. Limits, each ending in
an error after RDMACOLL_TIMEOUT rather than a hang: the ranks must fetch the same
collectives in a run, and the session needs two inter-op threads. Ops of one process set
are ordered among themselves; a rank in two sets that overlap, fetching collectives of
both in one run, may wait on one set while a peer waits on the other (same error).

Errors: errors.py (the tf.errors types Horovod raises, as far as a Python op can).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import rdmacoll as rc

from . import errors
from ._session_order import SessionOrder

try:  # TensorFlow's own test for "this graph will be compiled by XLA" (2.16-2.20 at least)
    from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext as _in_xla
except ImportError:  # pragma: no cover - a TensorFlow without it: XLA reports PyFunc itself

    def _in_xla(graph):
        return False


class XlaError(rc.RdmacollError):
    """A collective traced into XLA-compiled code. (Exception's own __init__, so that
    autograph re-raises it as this type rather than as a StagingError.)"""

    __init__ = Exception.__init__


class _Sequencer:
    """The resource variable that orders collective ops of tf.functions; made on first use."""

    variable = None

    @classmethod
    def get(cls):
        if cls.variable is None:
            with tf.init_scope():  # an eager variable, even when first used while tracing
                cls.variable = tf.Variable(0, dtype=tf.int64, trainable=False, name="rdmacoll_sequencer")
        return cls.variable


def _outermost(graph):
    """The graph that holds `graph` (a tf.function's graph inside a TF1 graph), or itself."""
    while getattr(graph, "outer_graph", None) is not None:
        graph = graph.outer_graph
    return graph


def run(fn, tensors, out_dtypes, out_shapes, process_set=None):
    """fn(*arrays) -> list of arrays, over `tensors`; returns a list of tensors of
    out_dtypes / out_shapes (None entries in a shape: unknown until run). process_set: the
    set fn communicates in (orders TF1 graphs; None: the global set)."""
    fn = errors.converted(fn)
    if tf.executing_eagerly():
        outs = fn(*[t.numpy() for t in tensors])
        return [tf.convert_to_tensor(o, dtype=d) for o, d in zip(outs, out_dtypes)]
    graph = tf.compat.v1.get_default_graph()
    if _in_xla(graph):
        raise XlaError(
            "rdmacoll collectives cannot run inside XLA-compiled code (tf.function(jit_compile=True)): "
            "compile the model with model.compile(..., jit_compile=False) (Keras 3's 'auto' picks XLA "
            "on GPU machines) or drop jit_compile from the tf.function"
        )
    if not tf.compat.v1.executing_eagerly_outside_functions():
        return _run_in_session(fn, tensors, out_dtypes, out_shapes, process_set, graph)
    sequencer = _Sequencer.get()
    ticket = sequencer.assign_add(1)  # after every earlier collective of this rank's program
    outs = numpy_op(lambda _, *a: fn(*a), [ticket] + list(tensors), out_dtypes, out_shapes)
    with tf.control_dependencies([outs[0].op]):
        sequencer.assign_add(1, read_value=False)  # before every later one
    return outs


def _run_in_session(fn, tensors, out_dtypes, out_shapes, process_set, graph):
    order = SessionOrder.of(_outermost(graph))
    key = order.next_key()
    submit = errors.converted(lambda *a: order.submit(key, process_set, fn, a))
    filed = tf.numpy_function(submit, list(tensors), tf.int64, stateful=True)
    filed.set_shape([])
    # the wait holds the graph's mutex (tf.CriticalSection's ops, without its scan of the
    # whole graph per use): taken once the submit ran, released once the wait returned
    with tf.control_dependencies([filed]):
        lock = tf.raw_ops.MutexLock(mutex=order.mutex)
    wait = errors.converted(lambda k: [k] + list(order.wait(key)))
    with tf.control_dependencies([lock]):
        ran, *outs = numpy_op(wait, [filed], [tf.int64] + list(out_dtypes), [[]] + list(out_shapes))
    with tf.control_dependencies([ran]):
        released = tf.raw_ops.ConsumeMutexLock(mutex_lock=lock)
    with tf.control_dependencies([released]):
        return [tf.identity(o) for o in outs]


def numpy_op(fn, inputs, out_dtypes, out_shapes, name=None):
    """fn(*arrays) as one graph op with outputs of out_dtypes / out_shapes. A
    FailedPreconditionError from fn (ranks disagree; not initialised) leaves the graph as
    that type (errors.raise_in_graph): the op returns placeholders and the message, and
    its outputs are released only after the check found no message."""

    def call(*a):
        try:
            return list(fn(*a)) + [np.bytes_(errors.failure_path())]
        except tf.errors.FailedPreconditionError as e:
            outs = [_placeholder(d, s) for d, s in zip(out_dtypes, out_shapes)]
            return outs + [np.bytes_(errors.failure_path(e.message))]

    outs = tf.numpy_function(call, inputs, list(out_dtypes) + [tf.string], stateful=True, name=name)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    *outs, path = outs
    path.set_shape([])
    with tf.control_dependencies([errors.raise_in_graph(path)]):
        outs = [tf.identity(o, name=name if i == 0 else None) for i, o in enumerate(outs)]
    for o, shape in zip(outs, out_shapes):
        o.set_shape(shape)
    return outs


def _placeholder(dtype, shape):
    """An array of dtype and shape (unknown dimensions: 0) for an output never read."""
    dims = tf.TensorShape(shape)
    dims = [d or 0 for d in dims.as_list()] if dims.rank is not None else []
    if dtype == tf.string:
        return np.full(dims, b"", dtype=object)
    return np.zeros(dims, dtype=dtype.as_numpy_dtype)
