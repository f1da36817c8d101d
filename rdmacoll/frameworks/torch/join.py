"""hvd.join(): a rank that ran out of data keeps serving the others' gradient reductions.

The core needs every rank to issue the same collectives in the same order, so the
adapter runs a small protocol:

- Every DistributedOptimizer step begins (before its first bucket is launched) with a
  one-element int64 Sum allreduce named CONTROL (asynchronous on training ranks, which do
  not need its result; step() waits for it before the buckets). A training rank contributes
  1 + ((index + 1) << 32), where index is the optimizer's creation number (the same on
  every rank, since construction is collective); a joined rank contributes 0. The sum
  tells everyone how many ranks still train, and which optimizer is stepping.
- join() loops: CONTROL with 0; while some rank still trains, it zeroes that optimizer's
  buckets and reduces them like a training rank would (same names, sizes, order), so
  the others' steps complete. Its own parameters are not updated (as in Horovod).
- When CONTROL says no rank trains, every rank is in join(): one Max allreduce of
  (rounds before joining) * size + rank names the last rank to join (ties: the higher rank).

Average keeps dividing by size() (joined ranks count as zeros: Horovod's allreduce
operations also divide an Average by the whole process set's size). Other collectives issued by a
training rank while some rank is joined meet CONTROL on the joined rank and fail on
both with the core's mismatch error (not supported, never a hang).
"""
from __future__ import annotations

import weakref

import numpy as np

import rdmacoll as rc
from rdmacoll import RdmacollError

CONTROL = "join.control"    # names reach error messages cut to 15 characters
LAST = "join.last"
_SHIFT = 32


class _JoinState:
    """Per process: the live DistributedOptimizers by creation number, and the number
    of CONTROL rounds taken part in (the same sequence on every rank)."""

    def __init__(self):
        self.optimizers = []            # weak references, never removed: indices stay put
        self.rounds = 0
        self.buf = np.zeros(1, np.int64)

    def register(self, opt):
        self.optimizers.append(weakref.ref(opt))
        return len(self.optimizers) - 1

    def training_control(self, index):
        """A training rank's CONTROL round for optimizer `index`, queued, not waited for:
        its result only matters to joined ranks, so the training rank does not stop at
        its first gradient until the slowest rank gets there (the bucket reductions queue
        behind it, in order). Returns the handle: wait for it before the buckets'."""
        self.rounds += 1
        buf = np.array([training_contribution(index)], np.int64)
        return rc.allreduce_async(buf, op=rc.Sum, name=CONTROL, out=buf)

    def control(self, contribution):
        """One CONTROL round; returns (ranks still training, optimizer index or -1)."""
        self.buf[0] = contribution
        rc.allreduce(self.buf, op=rc.Sum, name=CONTROL, out=self.buf)
        self.rounds += 1
        v = int(self.buf[0])
        training = v & ((1 << _SHIFT) - 1)
        return training, ((v >> _SHIFT) // training - 1) if training else -1


STATE = _JoinState()


def training_contribution(index):
    return 1 + ((index + 1) << _SHIFT)


def join():
    """Stand in with zeros for every DistributedOptimizer step the other ranks take, until
    all ranks have joined; returns the rank that joined last."""
    joined_at = STATE.rounds
    while True:
        try:
            training, index = STATE.control(0)
        except RdmacollError as e:
            raise RdmacollError(f"join(): while this rank was joined, another rank issued a collective "
                                f"other than a DistributedOptimizer step (not supported: call join() "
                                f"after the last collective of the training loop): {e}") from e
        if not training:
            break
        opt = STATE.optimizers[index]() if 0 <= index < len(STATE.optimizers) else None
        if opt is None:
            raise RdmacollError(f"join(): {training} rank(s) stepped DistributedOptimizer #{index}, "
                                "which does not exist (any more) on this rank")
        opt._rc_join_step()
    size = rc.size()
    last = np.array([joined_at * size + rc.rank()], np.int64)
    rc.allreduce(last, op=rc.Max, name=LAST, out=last)
    return int(last[0]) % size
