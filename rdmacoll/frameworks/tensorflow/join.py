"""hvd.join() for TensorFlow: a rank that ran out of data takes part with zeros in the
collectives the other ranks still issue, until every rank has joined (Horovod's join).

The protocol is rdmacoll/frameworks/_join.py (shared with torch): joined ranks learn each
collective from the call itself; allreduce (and grouped_allreduce, and the optimizers'
fused gradient reductions) are served with zeros, Average dividing by size()
as Horovod's does; allgather, broadcast, alltoall and reducescatter raise Horovod's
"... is not supported with Join at this time." on the training ranks while a rank is
joined.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from .. import _join
from . import _graph


def join():
    """Horovod's join op: an int32 scalar, the rank that joined last (ties: the higher
    rank); eagerly at once, in a tf.function when the graph runs (in program order with
    the other collectives)."""
    (last,) = _graph.run(lambda: [np.asarray(_join.join(), np.int32)], [], [tf.int32], [[]])
    return last
