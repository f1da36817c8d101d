"""Run-time order of the collective ops of a TF1 graph (tf.compat.v1.Session): a
collective runs once every rank of its process set has reached it, the ready ones in the
order the ops were built. Why, and the alternatives: _graph.py's docstring.

One SessionOrder per graph (an attribute of the tf.Graph, made with its first collective
op). Each op gets a key when it is built (0, 1, 2... in construction order, the same on
every rank that builds the same graph). A collective is two ops: `submit` files a request
with a copy of the inputs and returns at once; `wait`, which takes submit's output, runs
holding the graph's mutex (TensorFlow's MutexLock op, as tf.CriticalSection uses it: it
waits for the lock without holding an inter-op thread, so while one wait runs, the
session's other threads go on submitting). The wait inside "drives" until its own
request is done, in rounds on the process set of the smallest key pending here: one
allgather of every rank's pending keys of the set, then every key that all ranks have
submitted runs, in key order, whichever op filed it (a round that finds none waits a
millisecond for submits). Every rank of a set runs the same rounds, so the same
collectives in the same order, and a session needs two inter-op threads however many
collectives a run fetches (one waits, one submits).

Only keys every rank has submitted run: a rank never waits, holding the mutex, for an op
that TensorFlow cannot start there until another op's wait (queued behind the lock)
hands it its input (a collective of a collective's result, fetched beside others).

hvd.join(): the rounds are plain allgathers, which a rank inside join() serves as any
other (../_join.py: it takes part with no rows), so the order is agreed among the ranks
that take part: each sends its pending keys and a marker (-1), and the markers count
them. Ordering and join share the one mechanism; the training ranks pay nothing for it.

A wait that cannot end gives an error, not a hang: when rounds find nothing to run for
RDMACOLL_TIMEOUT (the ranks fetch different ops, or a session with one inter-op thread),
every request of that set fails on this rank.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import tensorflow as tf

import rdmacoll as rc
from .._common import settings_in_effect


_EMPTY_ROUND_WAIT_S = 0.001  # after a round that found nothing to run, before the next
_PRESENT = -1  # each rank's marker in a round (a rank inside join() sends no rows)


class _Request:
    __slots__ = ("key", "process_set", "fn", "args", "done", "waited", "result", "error")

    def __init__(self, key, process_set, fn, args):
        self.key, self.process_set, self.fn, self.args = key, process_set, fn, args
        self.done, self.waited, self.result, self.error = False, False, None, None


class SessionOrder:
    """Orders the collective ops of one graph at run time (see the module docstring)."""

    def __init__(self, graph):
        # (init_scope: outside any control dependencies or control flow of the op being
        # built, as tf.CriticalSection makes its mutex)
        with graph.as_default(), tf.init_scope():
            self._mutex = tf.raw_ops.MutexV2(name="rdmacoll_session_order")
        self._keys = itertools.count()
        self._cv = threading.Condition()
        self._empty_since = None  # when the current streak of rounds with nothing to run began
        self._filed = {}  # key -> _Request, submitted and not yet collected by its wait
        self._pending = {}  # key -> _Request, submitted and not yet run
        self._driving = False

    @classmethod
    def of(cls, graph):
        """The graph's SessionOrder (made on first use)."""
        order = getattr(graph, "_rdmacoll_session_order", None)
        if order is None:
            order = cls(graph)
            graph._rdmacoll_session_order = order
        return order

    def next_key(self) -> int:
        """The key of the next collective op built in this graph."""
        return next(self._keys)

    @property
    def mutex(self):
        """The graph's mutex (a resource), which every wait holds while it runs."""
        return self._mutex

    def submit(self, key, process_set, fn, args) -> np.int64:
        """File the collective of op `key`: fn(*args) on process_set, with args copied (the
        arrays TensorFlow lends a NumPy op are its own once the op returns). Returns key."""
        args = [np.array(a, copy=True) for a in args]
        with self._cv:
            earlier = self._filed.get(key)
            running = earlier is not None and not earlier.done and key not in self._pending
            if earlier is not None and (earlier.waited or running):
                raise rc.RdmacollError(
                    f"collective op #{key} of this graph runs twice at once "
                    "(two Session.run calls in parallel threads, or one tf.function called twice?)"
                )
            if earlier is not None and key in self._pending:
                # filed by a run that ended (another op's error) before it ran here: it
                # runs once, with this run's inputs (unless a round ran it first)
                earlier.process_set, earlier.fn, earlier.args = process_set, fn, args
            else:  # (one that ran but was never waited for, for the same reason, is dropped)
                request = _Request(key, process_set, fn, args)
                self._filed[key] = request
                self._pending[key] = request
            self._cv.notify_all()
        return np.int64(key)

    def wait(self, key):
        """The result of op `key`'s collective (submitted before), once every rank of its
        process set has submitted it and it ran (rounds: _drive); raises its error."""
        with self._cv:
            request = self._filed.get(key)
            if request is None:
                raise rc.RdmacollError(f"internal: collective op #{key} waited for but never submitted")
            request.waited = True
            try:
                while not request.done:
                    if self._driving:
                        self._cv.wait()
                        continue
                    self._driving = True
                    try:
                        self._drive()
                    finally:
                        self._driving = False
                        self._cv.notify_all()
            finally:  # (done, or this thread interrupted: the request is gone either way)
                self._filed.pop(key, None)
                self._pending.pop(key, None)
        if request.error is not None:
            raise request.error
        return request.result

    # ------------------------------------------------------------------ driving (lock held)

    def _drive(self):
        """One round on the process set of the smallest key pending here: the keys every
        rank of the set has submitted, each run in key order (none: wait a little for
        submits, so that the next round may find some)."""
        first = self._pending[min(self._pending)]
        ps = first.process_set or rc.global_process_set
        try:
            ready = self._agree(ps)
        except BaseException as e:  # the set's order is lost: fail every request of it here
            for k in [k for k, r in self._pending.items() if self._same_set(r.process_set, ps)]:
                self._finish(self._pending.pop(k), None, e)
            return
        if not ready:
            self._cv.wait(_EMPTY_ROUND_WAIT_S)
            return
        for key in ready:
            request = self._pending.pop(key)
            self._cv.release()
            try:
                result, error = request.fn(*request.args), None
            except BaseException as e:  # handed to the request's own thread
                result, error = None, e
            finally:
                self._cv.acquire()
            self._finish(request, result, error)

    @staticmethod
    def _same_set(a, b):
        return (a or rc.global_process_set) is (b or rc.global_process_set)

    @staticmethod
    def _finish(request, result, error):
        request.result, request.error, request.done = result, error, True

    def _agree(self, ps):
        """The keys of ps that every rank of ps taking part has submitted (one allgather of
        each rank's pending keys and its marker: ranks inside join() take part with none),
        ascending; raises once rounds found none for RDMACOLL_TIMEOUT."""
        mine = sorted(k for k, r in self._pending.items() if self._same_set(r.process_set, ps))
        mine = np.array([_PRESENT, *mine], np.int64)
        self._cv.release()
        try:
            every = rc.allgather(mine, name="tensorflow.session_order", process_set=ps)
        finally:
            self._cv.acquire()
        keys, counts = np.unique(every, return_counts=True)
        ranks = int(counts[0])  # (keys[0] is the marker: every rank sent one, keys are >= 0)
        ready = [int(k) for k in keys[1:][counts[1:] == ranks]]
        timeout = float(settings_in_effect()["timeout"])
        now = time.monotonic()
        if ready or self._empty_since is None:
            self._empty_since = None if ready else now
        elif now - self._empty_since > timeout:
            self._empty_since = None
            raise rc.RdmacollError(
                f"no collective op of this graph was submitted by every rank within {timeout:g} s "
                f"(RDMACOLL_TIMEOUT; pending here: {mine[1:].tolist()}): every rank must fetch the same "
                "collectives in a Session.run, and the session needs two inter-op threads"
            )
        return ready
