"""Picklable Python objects over a core communicator (rdmacoll.allgather_object, and the
process sets' registration, which runs before any set exists)."""

from __future__ import annotations

import pickle

import numpy as np


def allgather(comm, obj, name=None):
    """Every rank's picklable obj, as a list in the rank order of comm."""
    payload = np.frombuffer(pickle.dumps(obj), np.uint8)
    lengths = comm.allgather(np.array([payload.size], np.int64), None if name is None else name + ".len")
    data = memoryview(comm.allgather(payload, name))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return [pickle.loads(data[offsets[r] : offsets[r + 1]]) for r in range(len(lengths))]
