"""Run a NumPy function over tensors eagerly, or as one op of a graph (tf.function).

Graph mode has no custom op to call: the collective runs inside tf.numpy_function.
TensorFlow may run independent ops in any order, and every rank must issue collectives
in the same order. So each collective op is bracketed by two writes to one "sequencer"
resource variable: it takes the first as an input and the second waits for it.
TensorFlow's automatic control dependencies run all writes to a resource in program
order, also across nested graphs (a tf.cond branch, a called tf.function), so every
rank runs its collectives in program order.
"""
from __future__ import annotations

import tensorflow as tf

import rdmacoll as rc

try:   # TensorFlow's own test for "this graph will be compiled by XLA" (2.16-2.20 at least)
    from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext as _in_xla
except ImportError:  # pragma: no cover - a TensorFlow without it: XLA reports PyFunc itself
    def _in_xla(graph):
        return False


class XlaError(rc.RdmacollError):
    """A collective traced into XLA-compiled code. (Exception's own __init__, so that
    autograph re-raises it as this type rather than as a StagingError.)"""

    __init__ = Exception.__init__


class _Sequencer:
    """The resource variable that orders collective ops; made on first use."""

    variable = None

    @classmethod
    def get(cls):
        if cls.variable is None:
            with tf.init_scope():   # an eager variable, even when first used while tracing
                cls.variable = tf.Variable(0, dtype=tf.int64, trainable=False, name="rdmacoll_sequencer")
        return cls.variable


def run(fn, tensors, out_dtypes, out_shapes):
    """fn(*arrays) -> list of arrays, over `tensors`; returns a list of tensors of
    out_dtypes / out_shapes (None entries in a shape: unknown until run)."""
    if tf.executing_eagerly():
        outs = fn(*[t.numpy() for t in tensors])
        return [tf.convert_to_tensor(o, dtype=d) for o, d in zip(outs, out_dtypes)]
    if _in_xla(tf.compat.v1.get_default_graph()):
        raise XlaError(
            "rdmacoll collectives cannot run inside XLA-compiled code (tf.function(jit_compile=True)): "
            "compile the model with model.compile(..., jit_compile=False) (Keras 3's 'auto' picks XLA "
            "on GPU machines) or drop jit_compile from the tf.function")
    sequencer = _Sequencer.get()
    ticket = sequencer.assign_add(1)   # after every earlier collective of this rank's program
    outs = tf.numpy_function(lambda _, *a: list(fn(*a)), [ticket] + list(tensors), list(out_dtypes),
                             stateful=True)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for o, shape in zip(outs, out_shapes):
        o.set_shape(shape)
    with tf.control_dependencies([outs[0].op]):
        sequencer.assign_add(1, read_value=False)   # before every later one
    return outs
