"""Picklable Python objects through a communicator's allgather: the plain API's
allgather_object, and the agreement of the ranks on a new process set (process_sets.py).
Each rank's pickle travels as uint8 rows, after an allgather of the lengths."""

from __future__ import annotations

import pickle

import numpy as np


def allgather(comm, obj, name=None) -> list:
    """Every rank's picklable obj, as a list in comm's rank order."""
    payload = np.frombuffer(pickle.dumps(obj), np.uint8)
    lengths = comm.allgather(np.array([payload.size], np.int64), None if name is None else name + ".len")
    data = memoryview(comm.allgather(payload, name))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return [pickle.loads(data[offsets[r] : offsets[r + 1]]) for r in range(len(lengths))]
