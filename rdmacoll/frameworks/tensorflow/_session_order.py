"""Run-time order of the collective ops of a TF1 graph (tf.compat.v1.Session): the ops
run in the order in which the leader rank of their process set reaches them. Why, and
the alternatives: _graph.py's docstring.

One SessionOrder per graph (an attribute of the tf.Graph, made with its first collective
op). Each op gets a key when it is built (0, 1, 2... in construction order, the same on
every rank that builds the same graph). A collective is two ops: `submit` files a request
with a copy of the inputs and returns at once; `wait`, which takes submit's output, runs
inside the graph's critical section (a tf.CriticalSection: TensorFlow waits for its lock
without holding an inter-op thread, so while one wait runs, the session's other threads
go on submitting). The wait inside "drives" until its own request is done: it takes the
process set of the smallest key pending here, and

    on the set's leader (its first rank): broadcasts the smallest pending key of the set
    on the others: receives the key the leader broadcasts, then waits until the op with
                   that key has been submitted here too (TensorFlow may reach it later)

then runs that request's collective (whichever op filed it) and keeps the result for its
wait. So every rank of a set runs the set's collectives in the leader's order, one
8-byte broadcast before each, and a session needs two inter-op threads however many
independent collectives a run fetches (one waits, one submits).

A wait that cannot end gives an error, not a hang: the leader announces an op this rank
never submits (the ranks fetch different ops, or a session with one inter-op thread).
It waits at most RDMACOLL_TIMEOUT, then fails every request of that set on this rank.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import tensorflow as tf

import rdmacoll as rc
from .._common import settings_in_effect


class _Request:
    __slots__ = ("key", "process_set", "fn", "args", "done", "waited", "result", "error")

    def __init__(self, key, process_set, fn, args):
        self.key, self.process_set, self.fn, self.args = key, process_set, fn, args
        self.done, self.waited, self.result, self.error = False, False, None, None


class SessionOrder:
    """Orders the collective ops of one graph at run time (see the module docstring)."""

    def __init__(self, graph):
        with graph.as_default():
            self._section = tf.CriticalSection(name="rdmacoll_session_order")
        self._keys = itertools.count()
        self._cv = threading.Condition()
        self._filed = {}  # key -> _Request, submitted and not yet waited for
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
    def section(self):
        """The graph's tf.CriticalSection, inside which every wait runs."""
        return self._section

    def submit(self, key, process_set, fn, args) -> np.int64:
        """File the collective of op `key`: fn(*args) on process_set, with args copied (the
        arrays TensorFlow lends a NumPy op are its own once the op returns). Returns key."""
        with self._cv:
            earlier = self._filed.get(key)
            if earlier is not None and earlier.waited:
                raise rc.RdmacollError(
                    f"collective op #{key} of this graph runs twice at once "
                    "(two Session.run calls in parallel threads?)"
                )
            # (one filed and never waited for: a run that ended early, e.g. on another op's
            # error, after its submit; this run's inputs replace its, if it has not run)
            request = _Request(key, process_set, fn, [np.array(a, copy=True) for a in args])
            self._filed[key] = request
            self._pending[key] = request
            self._cv.notify_all()
        return np.int64(key)

    def wait(self, key):
        """The result of op `key`'s collective (submitted before), once every rank of its
        process set has run it in the leader's order; raises its error."""
        with self._cv:
            request = self._filed.get(key)
            if request is None:
                raise rc.RdmacollError(f"internal: collective op #{key} waited for but never submitted")
            request.waited = True
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
            del self._filed[key]
        if request.error is not None:
            raise request.error
        return request.result

    # ------------------------------------------------------------------ driving (lock held)

    def _drive(self):
        first = self._pending[min(self._pending)]
        ps = first.process_set or rc.global_process_set
        try:
            key = self._agree(ps)
        except BaseException as e:  # the set's order is lost: fail every request of it here
            for k in [k for k, r in self._pending.items() if self._same_set(r.process_set, ps)]:
                self._finish(self._pending.pop(k), None, e)
            return
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
        """The key every rank of ps runs next: the leader's smallest pending key of ps,
        broadcast; on the others, once that op is pending here too."""
        mine = [k for k, r in self._pending.items() if self._same_set(r.process_set, ps)]
        leader = ps.ranks[0] if ps is not rc.global_process_set else 0
        buf = np.array([min(mine) if rc.rank() == leader else -1], np.int64)
        self._cv.release()
        try:
            rc.broadcast(buf, leader, name="tensorflow.session_order", out=buf, process_set=ps)
        finally:
            self._cv.acquire()
        key = int(buf[0])
        timeout = float(settings_in_effect()["timeout"])
        deadline = time.monotonic() + timeout
        while key not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise rc.RdmacollError(
                    f"rank {leader} ran collective op #{key} of this graph next, but it did not run here "
                    f"within {timeout:g} s (RDMACOLL_TIMEOUT): every rank must fetch the same collectives "
                    "in a Session.run, and the session needs an inter-op thread per independent "
                    "collective fetched together (or chain them with tf.control_dependencies)"
                )
            self._cv.wait(left)
        return key
