"""NumPy side of the adapter: many arrays through few collectives.

Everything here works on NumPy arrays (what TensorFlow hands a tf.numpy_function, or
EagerTensor.numpy()) and calls rdmacoll's core; nothing imports TensorFlow.
"""

from __future__ import annotations

import numpy as np

import rdmacoll as rc

from .. import _join as joinable  # collectives announced to ranks inside join()
from .._common import plan_buckets


def allreduce_arrays(arrays, op, threshold, name, process_set=None):
    """Reduce a list of arrays across ranks (of process_set; None: all) in buckets of at
    most `threshold` bytes (one dtype each): one collective per bucket, all submitted
    before any is waited on. Returns the reduced arrays (views of fresh library memory),
    in input order."""
    arrays = [np.asarray(a) for a in arrays]
    buckets = plan_buckets([(a.dtype, a.nbytes) for a in arrays], threshold)
    handles = [
        joinable.grouped_allreduce_async(
            [arrays[i] for i in bucket], op=op, name=f"{name}.{k}", process_set=process_set
        )
        for k, bucket in enumerate(buckets)
    ]
    out = [None] * len(arrays)
    for bucket, handle in zip(buckets, handles):
        for i, r in zip(bucket, rc.synchronize(handle)):
            out[i] = r
    return out


def broadcast_arrays(arrays, root_rank, name, process_set=None):
    """root_rank's arrays on every rank (of process_set; root_rank is a global rank), as
    one broadcast of their bytes (any dtype: bool, uint32 seeds and int64 counters travel
    with the floats). Returns new arrays."""
    arrays = [np.asarray(a) for a in arrays]  # (ascontiguousarray would make 0-d arrays 1-d)
    sizes = [a.nbytes for a in arrays]
    buf = rc.empty((sum(sizes),), np.uint8)
    offsets = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))).tolist()
    if rc.rank() == root_rank:
        for a, o, n in zip(arrays, offsets, sizes):
            buf[o : o + n] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    # the ranks compare every array's shape, as Horovod's broadcast of each variable does
    key = rc.shape_key(*(a.shape for a in arrays))
    joinable.broadcast(buf, root_rank, name=name, out=buf, process_set=process_set, shape=key)
    return [buf[o : o + n].copy().view(a.dtype).reshape(a.shape) for a, o, n in zip(arrays, offsets, sizes)]
