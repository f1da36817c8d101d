"""Errors of the TensorFlow collectives as Horovod's TensorFlow ops raise them (the kinds of
../_horovod.py mapped to tf.errors types: RULES below).

Horovod's ops turn its statuses into TensorFlow's (horovod/tensorflow/mpi_ops.cc,
ConvertStatus): an argument its enqueue rejects (bad splits, a root or a rank outside the
process set, a name in flight) is INVALID_ARGUMENT, a mismatch between ranks found in
negotiation (ErrorOp) and "not initialized" are PRECONDITION_ERROR, a shut-down job (a
rank died or left) is UNKNOWN. Here:

    argument errors found before communicating  -> InvalidArgumentError (also ValueError)
    a mismatch between ranks, not initialised   -> FailedPreconditionError
    anything else from the core (a dead peer,
    a timeout, an aborted job)                  -> UnknownError

Each class here is both the tf.errors type and rdmacoll's (RdmacollError, or
RdmacollValueError for argument errors), so `except tf.errors.FailedPreconditionError`
(Horovod code), `except ValueError` and `except RdmacollError` all catch it. The message is
rdmacoll's text, unchanged.

Eagerly these classes are raised as they are. Inside a graph (tf.function, a
tf.compat.v1.Session) the collective runs in a Python op, and TensorFlow maps a Python
op's exception by its Python type only: ValueError becomes InvalidArgumentError, anything
else UnknownError (tensorflow/python/lib/core/py_func.cc). Argument errors and dead peers
keep Horovod's types that way. A FailedPreconditionError cannot leave a Python op as
itself, so the op returns its message instead and raise_in_graph() raises it from a stock
op that reports FAILED_PRECONDITION (docs/tensorflow.md, "Errors").
"""

from __future__ import annotations

import tensorflow as tf

from rdmacoll import RdmacollError, RdmacollValueError

from .._horovod import (
    BAD_ARGUMENT,
    INTERNAL,
    NOT_IMPLEMENTED,
    PYTHON_VALUE,
    RANKS_DISAGREE,
    Rules,
    core_error_kind,
)


class InvalidArgumentError(tf.errors.InvalidArgumentError, RdmacollValueError):
    """An invalid argument, found before communicating (Horovod: INVALID_ARGUMENT)."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class FailedPreconditionError(tf.errors.FailedPreconditionError, RdmacollError):
    """Ranks called different collectives, or rdmacoll is not initialised (Horovod:
    PRECONDITION_ERROR)."""

    def __init__(self, message):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)


class UnknownError(tf.errors.UnknownError, RdmacollError):
    """The job failed while communicating: a peer died, a wait timed out, the job was
    aborted (Horovod: its shut-down error, UNKNOWN)."""

    def __init__(self, message):
        tf.errors.UnknownError.__init__(self, None, None, message)


RULES = Rules(
    {
        PYTHON_VALUE: RdmacollValueError,  # Horovod's ValueError, raised in its Python code
        BAD_ARGUMENT: InvalidArgumentError,
        NOT_IMPLEMENTED: NotImplementedError,
        RANKS_DISAGREE: FailedPreconditionError,
        INTERNAL: UnknownError,
    }
)


def as_tf_error(error: BaseException) -> BaseException:
    """The exception to raise for `error` from a collective: one of the classes above for
    rdmacoll's errors and ValueError (already converted ones pass through), `error`
    itself for anything else (KeyboardInterrupt, TypeError, NotImplementedError...)."""
    if isinstance(error, tf.errors.OpError):
        return error
    if isinstance(error, (ValueError, RdmacollError)):
        return RULES.error(core_error_kind(error), str(error))
    return error


def converted(fn):
    """fn(*args), its rdmacoll and argument errors raised as as_tf_error() gives them."""

    def call(*args):
        try:
            return fn(*args)
        except (RdmacollError, ValueError) as e:
            mapped = as_tf_error(e)
            if mapped is e:
                raise
            raise mapped from e

    return call


# A path under a file that is not a directory: opening it fails with ENOTDIR, which
# TensorFlow reports as FAILED_PRECONDITION (tsl's errno mapping), the path in the text.
_NOT_A_DIRECTORY = "/dev/null/"
_MESSAGE_BYTES = 3000  # the path stays under PATH_MAX (4096)


def failure_path(message=None):
    """What a graph-mode collective op hands raise_in_graph(): "/dev/null" (no error) or,
    for a FailedPreconditionError's message, a file under /dev/null named by it, cut to
    _MESSAGE_BYTES, its slashes written as U+2215 (one path component: no directory to
    create, no "/../" that TensorFlow's path cleaning would follow out of /dev/null)."""
    if not message:
        return b"/dev/null"
    text = message.replace("/", "\u2215").encode("utf-8", "replace")[:_MESSAGE_BYTES]
    return _NOT_A_DIRECTORY.encode() + text


def raise_in_graph(path):
    """A graph op that raises FailedPreconditionError when `path` (a scalar string tensor
    from failure_path()) holds a message, and otherwise writes nothing to /dev/null (one
    open and close). TensorFlow has no op that raises that type with a given text, and a
    Python op cannot (the module docstring), so the error reads "/dev/null/<message>; Not
    a directory". A write, being stateful, is never pruned (a read was: TensorFlow drops
    control dependencies on stateless ops); no control flow either, whose functions
    TensorFlow would optimise again for every collective of a graph."""
    return tf.io.write_file(path, "")
