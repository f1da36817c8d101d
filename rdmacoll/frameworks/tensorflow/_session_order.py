"""Run-time order of the collective ops of a TF1 graph (tf.compat.v1.Session): every rank
of a process set runs the set's collective ops in one order, agreed at run time among the
ops each rank has started. Why, and the alternatives: _graph.py's docstring.

One SessionOrder per graph (an attribute of the tf.Graph, made with its first collective
op). Each op gets a key when it is built (0, 1, 2... in construction order, the same on
every rank that builds the same graph). When an op runs, its thread files a request and
waits; one waiting thread at a time "drives": it takes the process set of the smallest
key pending here, and in rounds, each one allgather of every rank's pending keys of that
set (the smallest 64), picks the smallest key pending on every rank, the same choice
everywhere. Then it runs that request's collective (for whichever thread filed it) and
hands over the result. A round that finds no common key waits for another op to start
here (2 ms at most) and goes again.

Each pending op holds one of the session's inter-op threads (TensorFlow runs Python ops
synchronously), and a session has as many as the machine has cores unless configured:
Horovod's "fused" tests fetch 21 independent collectives in one run on 2 threads. The
ranks' TensorFlow executors start those ops in different orders, so a rank may hold ops
its peers cannot start yet. An order chosen by one rank (the set's first, as before:
one broadcast of its smallest pending key) deadlocked there until the timeout whenever
the peers' threads were all held by other ops; a key every rank holds always lets one of
them finish and frees a thread on every rank.

A wait that cannot end gives an error, not a hang: ranks that fetch different ops, or
whose threads all hold ops no peer holds, find no common key; after RDMACOLL_TIMEOUT a
rank says so in its next round and every rank of the set fails every request of that set.
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

    _WINDOW = 64  # pending keys a rank offers per round (a session holds far fewer at once)

    def _agree(self, ps):
        """The key every rank of ps runs next: the smallest key pending on every rank of
        ps (rounds of one allgather each, until there is one; the module docstring)."""
        timeout = float(settings_in_effect()["timeout"])
        deadline = time.monotonic() + timeout
        while True:
            mine = sorted(k for k, r in self._pending.items() if self._same_set(r.process_set, ps))[: self._WINDOW]
            row = np.full((1, self._WINDOW + 1), -1, np.int64)
            row[0, 0] = time.monotonic() > deadline  # this rank gives up: so does every rank, this round
            row[0, 1 : 1 + len(mine)] = mine
            self._cv.release()
            try:
                rows = rc.allgather(row, name="tensorflow.session_order", process_set=ps)
            finally:
                self._cv.acquire()
            if (rows[:, 0] > 0).any():
                late = [ps.ranks[i] if ps is not rc.global_process_set else i for i in np.flatnonzero(rows[:, 0] > 0)]
                raise rc.RdmacollError(
                    f"the ranks' collective ops of this graph had none in common for {timeout:g} s "
                    f"(RDMACOLL_TIMEOUT; rank {late[0]} gave up first): every rank must fetch the same "
                    "collectives in a Session.run, and each pending collective holds one of the session's "
                    "inter-op threads (chain them with tf.control_dependencies, or give the session more "
                    "threads: ConfigProto(inter_op_parallelism_threads=...))"
                )
            common = set(rows[0, 1:].tolist())
            for other in rows[1:]:
                common &= set(other[1:].tolist())
            common.discard(-1)
            if common:
                return min(common)
            self._cv.wait(0.002)  # (a request filed here wakes it)
