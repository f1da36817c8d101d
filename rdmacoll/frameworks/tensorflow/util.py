"""Horovod's horovod.tensorflow.util, as far as its TensorFlow scripts and tests use it:
`from horovod.tensorflow.util import _executing_eagerly`, `hvd.util._executing_eagerly()`
and `hvd._executing_eagerly()`."""

from __future__ import annotations

import tensorflow as tf


def _executing_eagerly():
    """True where ops run at once (not while a graph is built), as Horovod's."""
    return tf.executing_eagerly()
