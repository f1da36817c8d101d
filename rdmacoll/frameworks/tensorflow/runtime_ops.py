"""Horovod's ops that return the job's layout as int32 tensors: rank_op, size_op,
local_rank_op, local_size_op, process_set_included_op. As in Horovod, a graph evaluates
them when it runs, not when it is built (eagerly: at once); before init() they raise
FailedPreconditionError (errors.py), and for a process set id that is not registered
size_op and process_set_included_op return Horovod's code for it,
HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET (-3)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import rdmacoll as rc
from rdmacoll.process_sets import registered

from . import errors
from ._graph import numpy_op

HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET = -3  # horovod/common/operations.cc


def _at_run_time(fn, name):
    fn = errors.converted(fn)
    if tf.executing_eagerly():
        return tf.constant(fn(), tf.int32)
    return numpy_op(lambda: [np.int32(fn())], [], [tf.int32], [[]], name=name)[0]


def _registered(process_set_id):
    """The registered set with that id, or None."""
    return registered(process_set_id)  # (RdmacollError before init(): FailedPreconditionError, as Horovod's)


def _set_size(process_set_id):
    ps = _registered(process_set_id)
    return HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET if ps is None else len(ps.ranks)


def _set_included(process_set_id):
    ps = _registered(process_set_id)
    return HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET if ps is None else int(rc.rank() in ps.ranks)


def rank_op(name=None):
    """This process's rank (int32), determined when the graph runs."""
    return _at_run_time(rc.rank, name)


def local_rank_op(name=None):
    return _at_run_time(rc.local_rank, name)


def size_op(process_set_id=0, name=None):
    """The number of processes (of the process set), determined when the graph runs."""
    return _at_run_time(lambda: _set_size(process_set_id), name)


def local_size_op(name=None):
    return _at_run_time(rc.local_size, name)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this process is in the process set, else 0 (int32)."""
    return _at_run_time(lambda: _set_included(process_set_id), name)
