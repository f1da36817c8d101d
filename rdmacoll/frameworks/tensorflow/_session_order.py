"""Run-time order of the collective ops of a TF1 graph (tf.compat.v1.Session): the ops
run in the order in which the leader rank of their process set reaches them. Why, and
the alternatives: _graph.py's docstring.

One SessionOrder per graph (an attribute of the tf.Graph, made with its first collective
op). Each op gets a key when it is built (0, 1, 2... in construction order, the same on
every rank that builds the same graph). When an op runs, its thread files a request and
waits; one waiting thread at a time "drives": it takes the process set of the smallest
key pending here, and

    on the set's leader (its first rank): broadcasts the smallest pending key of the set
    on the others: receives the key the leader broadcasts, then waits until the op with
                   that key runs here too (TensorFlow may start it later)

then runs that request's collective (for whichever thread filed it) and hands over the
result. So every rank of a set runs the set's collectives in the leader's order, one
8-byte broadcast before each.

A wait that cannot end gives an error, not a hang: the leader announces an op this rank
never runs (the ranks fetch different ops), or TensorFlow cannot start it because its
inter-op threads are all blocked in other collectives of the same run (more independent
collectives fetched together than the session has inter-op threads). Both wait at most
RDMACOLL_TIMEOUT, then fail every request of that set on this rank.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np

import rdmacoll as rc
from .._common import settings_in_effect


class _Request:
    __slots__ = ("key", "process_set", "fn", "args", "done", "result", "error")

    def __init__(self, key, process_set, fn, args):
        self.key, self.process_set, self.fn, self.args = key, process_set, fn, args
        self.done, self.result, self.error = False, None, None


class SessionOrder:
    """Orders the collective ops of one graph at run time (see the module docstring)."""

    def __init__(self):
        self._keys = itertools.count()
        self._cv = threading.Condition()
        self._pending = {}  # key -> _Request, filed and not yet run
        self._driving = False

    @classmethod
    def of(cls, graph):
        """The graph's SessionOrder (made on first use)."""
        order = getattr(graph, "_rdmacoll_session_order", None)
        if order is None:
            order = cls()
            graph._rdmacoll_session_order = order
        return order

    def next_key(self) -> int:
        """The key of the next collective op built in this graph."""
        return next(self._keys)

    def run(self, key, process_set, fn, args):
        """fn(*args) once every rank of process_set has reached the op `key` in the
        leader's order; returns its result or raises its error."""
        request = _Request(key, process_set, fn, args)
        with self._cv:
            if key in self._pending:
                raise rc.RdmacollError(
                    f"collective op #{key} of this graph runs twice at once "
                    "(two Session.run calls in parallel threads?)"
                )
            self._pending[key] = request
            self._cv.notify_all()
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
