"""Horovod's ops that return the job's layout as int32 tensors: rank_op, size_op,
local_rank_op, local_size_op, process_set_included_op. As in Horovod, a graph evaluates
them when it runs, not when it is built (eagerly: at once)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import rdmacoll as rc


def _at_run_time(fn, name):
    if tf.executing_eagerly():
        return tf.constant(fn(), tf.int32)
    out = tf.numpy_function(lambda: np.int32(fn()), [], tf.int32, stateful=True, name=name)
    out.set_shape([])
    return out


def _global_set_only(process_set_id):
    if process_set_id != 0:
        raise ValueError(f"process set {process_set_id} does not exist here (only the global set, id 0)")


def rank_op(name=None):
    """This process's rank (int32), determined when the graph runs."""
    return _at_run_time(rc.rank, name)


def local_rank_op(name=None):
    return _at_run_time(rc.local_rank, name)


def size_op(process_set_id=0, name=None):
    """The number of processes (of the process set), determined when the graph runs."""
    _global_set_only(process_set_id)
    return _at_run_time(rc.size, name)


def local_size_op(name=None):
    return _at_run_time(rc.local_size, name)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this process is in the process set, else 0 (int32)."""
    _global_set_only(process_set_id)
    return _at_run_time(lambda: 1, name)
