"""hvd.join() for both adapters: a rank that ran out of data keeps taking part in the
collectives the other ranks still issue, as Horovod's joined ranks do.

The core needs every rank to issue the same collectives in the same order, and a joined
rank cannot see what the others issue. It learns each from the call itself
(csrc/comm/join.cc): every algorithm opens by sending its call header, which carries the
call's descriptor, to each peer it will exchange data with, before it waits for that peer.
A rank in join() waits for the first message of its next call from any peer
(Communicator.join_wait), reads the descriptor there, and runs that call itself with its
own part empty (Communicator.stand_in: an allreduce or broadcast of zeros, an allgather or
alltoall of no rows, a barrier). The training ranks do nothing for it: a job that never calls join()
pays nothing per collective (benchmarks/join_overhead.py), and so do the adapters'
allreduces, grouped allreduces and barriers in a job that does, and DistributedOptimizer
(its buckets are allreduces, its sparse gradients allgathers that a joined rank serves
with no rows: an empty gradient; torch/optimizer.py), and the ordering rounds of TF1
graphs (tensorflow/_session_order.py), which a joined rank serves as any allgather.

What a joined rank does is what Horovod 0.28.1's does (common/controller.cc,
tensor_queue.cc): it reduces zeros in place of its tensor, with every op (Min, Max and
Product see the zeros too), and Average divides by the whole size (postscale 1/size,
operations.cc). A descriptor carries the name's hash and first 15 bytes, the shape's hash,
op, dtype and count: all a stand-in needs, except for what runs as several dependent
steps or where ranks must agree beforehand. Those the adapters announce first by a
CONTROL round: one Sum allreduce of CONTROL_LEN int64 values, queued asynchronously on
training ranks, that a joined rank recognises by its name and answers with zeros:

    element 0      1 from each training rank, 0 from joined ranks: the sum counts the
                   ranks still training
    element 1      n, the number of descriptor words
    elements 2..   the descriptor's first CONTROL_LEN - 2 words; the rest, if any, in a
                   second round of n - (CONTROL_LEN - 2) values (CONTROL_MORE)

Every word is below 2**32 (shape keys: rdmacoll.shape_key, 32 bits), so count * word never
overflows; joined ranks contribute zeros and read the descriptor as sum / count (and check
that it divides: training ranks that announced different collectives are an error).
Descriptors (WORDS):

    ALLREDUCE  op, dtype, elements (2 words), shape key, name: an Adasum allreduce (its
               steps depend on each other)       -> the whole Adasum with zeros
    GROUPED    op, groups, (dtype, elements, shape key) per dtype group, name: the same,
               of several tensors                 -> one zero array per group
    REFUSED    collective                         -> nothing: see below

A name is its length + 1 (0: no name) and its UTF-8 bytes, 4 to a word. Descriptors
are built once per distinct collective and kept (a cache of TEMPLATES).

Allgather, broadcast, alltoall and reducescatter are refused while a rank is joined, as
Horovod refuses them (ConstructResponse: "X is not supported with Join at this time."):
the training ranks announce each by a CONTROL round and raise Horovod's message
(RdmacollError, a RuntimeError like HorovodInternalError) when it counts a joined rank,
and the joined ranks go on. The synchronous forms, the object helpers, broadcast and
reducescatter wait for the round before the collective and send nothing when refused; the
asynchronous allgather and alltoall queue the round and the collective together (the
joined ranks take part in it with no rows) and raise from synchronize(). Barrier is served (Horovod 0.28.1 counts the joined
ranks in and then crashes them: a segmentation fault). Collectives of the plain rdmacoll
API are served as any other, each core call on its own: so not those whose later calls
depend on a rank's data (rdmacoll.allreduce with op=Adasum, whose pairwise steps need a
joined rank's half; the object helpers, which then list the training ranks' objects
only), and a reducescatter, whose parts a joined rank cannot know, makes every rank fail,
naming it. torch.distributed's world over rdmacoll is a session of its own, which join()
does not serve (as Horovod's join serves its own collectives only).

Process sets: as in Horovod, join() serves the global set only. Collectives on other
sets are not served; one that includes a joined rank waits for it, as Horovod's does
(the stall warning names the rank; stall_shutdown turns it into an error on every rank).

join() ends when every rank has entered it (each rank counts its entries in a word its
peers read: Communicator.join_mark); then one Max allreduce of (the sequence number of
the call at which it joined) * size + rank names the last rank to join (ties: the
higher rank), which every rank returns.
"""

from __future__ import annotations

import numpy as np

import rdmacoll as rc
from rdmacoll import Handle, RdmacollError, _session, global_process_set

CONTROL = "join.control"  # (names reach error messages cut to 15 characters)
CONTROL_MORE = "join.control+"
LAST = "join.last"
FAILED = "join.failed"
CONTROL_LEN = 16  # int64 values: one cache line and a half; 14 descriptor words
_INLINE = CONTROL_LEN - 2

ALLREDUCE, GROUPED, REFUSED = 1, 2, 6  # (3-5, 7: barrier, an optimizer's STEP and BUCKETS, device allreduce, once)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool")
_DTYPE_CODE = {name: i for i, name in enumerate(DTYPES)}
# Horovod's texts (controller.cc), by the collective a training rank issued
REFUSED_TEXT = (
    "Allgather is not supported with Join at this time. Specify sparse_to_dense=True if using DistributedOptimizer",
    "Broadcast is not supported with Join at this time.",
    "Alltoall is not supported with Join at this time.",
    "Reducescatter is not supported with Join at this time.",
)
ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER = range(4)
_TEMPLATES_MAX = 4096  # distinct collectives kept; then the cache starts again


def _is_global(process_set):
    return process_set is None or process_set is global_process_set


def _name_words(name):
    if name is None:
        return [0]
    raw = str(name).encode()
    padded = raw + b"\0" * (-len(raw) % 4)
    return [len(raw) + 1] + np.frombuffer(padded, "<u4").tolist()


def _read_name(words, i):
    """(name, next index) from words[i:]."""
    n = words[i]
    if n == 0:
        return None, i + 1
    k = (n - 1 + 3) // 4
    raw = np.asarray(words[i + 1 : i + 1 + k], "<u4").tobytes()[: n - 1]
    return raw.decode(), i + 1 + k


def _elements(n):
    return [n & 0xFFFFFFFF, n >> 32]


def _zeros(dtype_code, count):
    name = DTYPES[dtype_code]
    if name == "bfloat16":
        import ml_dtypes  # noqa: F401 - registers NumPy's bfloat16 (a bfloat16 rank has it)
    return np.zeros(count, np.dtype(name))


class JoinState:
    """One per process (STATE): the times this rank entered join() on the session (the
    same on every rank once each join() ends) and the descriptors built so far."""

    def __init__(self):
        self.episode = 0
        self.templates = {}  # key -> (input, output) arrays of the CONTROL round(s)
        self.retired = []  # (templates, handle): cleared caches, until handle is done
        self.last = None  # the latest CONTROL round's handle
        self.scratch = np.zeros(CONTROL_LEN + 4096, np.int64)  # training ranks' results (unread)
        self.session = None  # the session whose reset hook drops the templates and handles

    def _reset(self):
        """The session the rounds ran on closed: its templates, handles and count of joins go."""
        self.templates, self.retired, self.last, self.session, self.episode = {}, [], None, None, 0

    def _bind(self):
        """The current session, whose reset drops this state's part of it."""
        session = _session.require()
        if self.session is not session:
            session.on_reset(self._reset)
            self.session = session
        return session

    # ------------------------------------------------------------------ training ranks
    def template(self, key, words):
        """The CONTROL round(s) of the descriptor `words`, kept under `key`: the input
        arrays, and as outputs views of one scratch array (training ranks never read them;
        the engine runs one operation at a time, so they may share it)."""
        self._bind()
        words = list(words)
        head = np.zeros(CONTROL_LEN, np.int64)
        head[0] = 1
        head[1] = len(words)
        head[2 : 2 + min(len(words), _INLINE)] = words[:_INLINE]
        arrays = [head]
        if len(words) > _INLINE:
            arrays.append(np.asarray(words[_INLINE:], np.int64))
        if len(self.templates) >= _TEMPLATES_MAX:
            # the queued rounds still read the old inputs: keep them until the latest is done
            self.retired = [(t, h) for t, h in self.retired if not h.poll()]
            if self.last is not None:
                self.retired.append((self.templates, self.last))
            self.templates = {}
        out = tuple((a, self.scratch[: a.size] if a.size <= self.scratch.size else np.empty_like(a)) for a in arrays)
        self.templates[key] = out
        return out

    def announce(self, key, words=None, result=False):
        """Queue the CONTROL round(s) of the collective `key` (descriptor: `words`, needed
        only the first time a key is seen). Nothing to wait for: the collective queued next
        runs after it. result=True: returns the Handle of the round, whose result's element
        0 is the number of ranks training."""
        arrays = self.templates.get(key)
        if arrays is None:
            arrays = self.template(key, words)
        (head, out), *more = arrays
        h = rc.allreduce_async(head, rc.Sum, CONTROL, None if result else out)
        for a, o in more:
            self.last = rc.allreduce_async(a, rc.Sum, CONTROL_MORE, o)
        if not more:
            self.last = h
        return h

    def refuse_if_joined(self, which):
        """A collective Horovod refuses while a rank is joined: its CONTROL round, waited
        for; raises Horovod's error (on every training rank alike) when some rank is."""
        self.refuse_if_training_fewer(which, self.announce((REFUSED, which), [REFUSED, which], result=True).wait())

    @staticmethod
    def refuse_if_training_fewer(which, control):
        """Horovod's error for `which` when the CONTROL round's result `control` counted
        fewer ranks training than there are."""
        training, size = int(control[0]), rc.size()
        if training < size:
            raise RdmacollError(f"{REFUSED_TEXT[which]} ({size - training} of {size} ranks are in join())")

    # ------------------------------------------------------------------ joined ranks
    def join(self):
        """Serve the training ranks' collectives until every rank has joined; returns the
        rank that joined last."""
        comm = self._bind().comm
        self.episode += 1
        joined_at = comm.join_mark(self.episode)
        while True:
            call = comm.join_wait(self.episode)
            if call is None:
                break  # every rank joined
            name = call.name.decode(errors="replace") if call.collective == "allreduce" else None
            if name == LAST:
                break  # every rank joined, and a peer saw it first
            if name == CONTROL:
                self._serve(self._receive())
            elif call.collective in ("allreduce", "allgather", "broadcast", "alltoall", "barrier"):
                try:
                    comm.stand_in(call)
                except RdmacollError as e:  # (raised before the call began: the peers must hear of it)
                    self._fail(f"join(): standing in for {call!r}: {e}")
            else:
                self._fail(
                    f"join(): a rank in join() cannot take part in {call.collective} (its part is "
                    f"unknown to it), which another rank started: {call!r}"
                )
        size = rc.size()
        last = np.array([joined_at * size + rc.rank()], np.int64)
        rc.allreduce(last, op=rc.Max, name=LAST, out=last)
        return int(last[0]) % size

    def _receive(self):
        """A CONTROL round (a peer started it) with zeros: the descriptor words."""
        buf = np.zeros(CONTROL_LEN, np.int64)
        rc.allreduce(buf, op=rc.Sum, name=CONTROL, out=buf)
        count, total = int(buf[0]), int(buf[1])
        n = total // count
        words = buf[2 : 2 + min(n, _INLINE)]
        if n > _INLINE:
            more = np.zeros(n - _INLINE, np.int64)
            rc.allreduce(more, op=rc.Sum, name=CONTROL_MORE, out=more)
            words = np.concatenate((words, more))
        if total % count or np.any(words % count):
            self._fail(
                f"join(): the {count} training ranks announced different collectives "
                f"(each rank must issue the same collectives in the same order)"
            )
        return (words // count).tolist()

    def _serve(self, words):
        kind = words[0]
        if kind == ALLREDUCE:
            op, dtype, lo, hi, key = words[1:6]
            name, _ = _read_name(words, 6)
            z = _zeros(dtype, lo | hi << 32)
            rc.allreduce(z, op=op, name=name, out=z, shape=key)
        elif kind == GROUPED:
            op, groups = words[1:3]
            parts = [words[3 + 4 * g : 7 + 4 * g] for g in range(groups)]
            name, _ = _read_name(words, 3 + 4 * groups)
            zs = [_zeros(dtype, lo | hi << 32) for dtype, lo, hi, _ in parts]
            rc.grouped_allreduce(zs, op=op, name=name, out=zs, shapes=[key for *_, key in parts])
        elif kind != REFUSED:
            self._fail(f"join(): unknown announcement {words[:4]} (ranks run different rdmacoll versions?)")

    @staticmethod
    def _fail(message):
        """Raise here, after making the training ranks fail too: their next collective meets
        one named FAILED, and the core's mismatch check stops every rank (never a hang)."""
        try:
            rc.allreduce(np.zeros(1), op=rc.Sum, name=FAILED)
        except RdmacollError as e:
            raise RdmacollError(f"{message}: {e}") from e
        raise RdmacollError(message)


STATE = JoinState()


# --------------------------------------------------------------------------- the adapters'
# The adapters' collectives: rdmacoll's (same arguments and results), with what a joined
# rank cannot learn from the call itself announced first on the global set: Adasum (its
# steps), and the refusals.


def allreduce_async(x, op=rc.Average, name=None, out=None, process_set=None):
    if op == rc.Adasum and _is_global(process_set):
        a = x if isinstance(x, (np.ndarray, rc.DeviceArray)) else rc._core._view(x)
        key = (ALLREDUCE, a.dtype.num, a.shape, op, name)  # (dtype.name costs microseconds: only when new)
        words = None
        if key not in STATE.templates:
            words = [ALLREDUCE, op, _DTYPE_CODE[a.dtype.name]] + _elements(a.size) + [rc.shape_key(a.shape)]
            words += _name_words(name)
        STATE.announce(key, words)
    return rc.allreduce_async(x, op, name, out, process_set)


def allreduce(x, op=rc.Average, name=None, out=None, process_set=None):
    return allreduce_async(x, op, name, out, process_set).wait()


def grouped_allreduce_async(xs, op=rc.Average, name=None, out=None, process_set=None):
    if op == rc.Adasum and _is_global(process_set):
        groups = {}  # the dtype groups rdmacoll.grouped_allreduce_async makes, in its order
        for x in xs:
            a = x if isinstance(x, (np.ndarray, rc.DeviceArray)) else rc._core._view(x)
            groups.setdefault(a.dtype, []).append(a.shape)
        key = (GROUPED, tuple((dtype, tuple(shapes)) for dtype, shapes in groups.items()), op, name)
        words = None
        if key not in STATE.templates:
            words = [GROUPED, op, len(groups)]
            for dtype, shapes in groups.items():
                n = sum(int(np.prod(s, dtype=np.int64)) for s in shapes)
                words += [_DTYPE_CODE[dtype.name]] + _elements(n) + [rc.shape_key(*shapes)]
            words += _name_words(name)
        STATE.announce(key, words)
    return rc.grouped_allreduce_async(xs, op, name, out, process_set)


def grouped_allreduce(xs, op=rc.Average, name=None, out=None, process_set=None):
    return grouped_allreduce_async(xs, op, name, out, process_set).wait()


def barrier(process_set=None):
    rc.barrier(process_set)


def _refused(which, call, process_set):
    """call() when no rank is joined (or off the global set); else Horovod's error."""
    if _is_global(process_set):
        STATE.refuse_if_joined(which)
    return call()


def _refused_async(which, call, process_set):
    """The asynchronous form: the error comes from synchronize(), as Horovod's. Allgather
    and alltoall wait for nothing: their CONTROL round is queued, then the collective (a
    joined rank takes part in it with no rows, as in any call it learns of:
    csrc/comm/join.cc; its result is a new array), and the handle raises when the round
    counted a joined rank. Broadcast (in place: a joined root would overwrite the caller's
    tensor with zeros) and reducescatter (whose parts a joined rank cannot know) wait for
    their round first and are not sent when refused."""
    if not _is_global(process_set):
        return call()
    if which in (ALLGATHER, ALLTOALL):
        control = STATE.announce((REFUSED, which), [REFUSED, which], result=True)
        handle = call()

        def checked(results):
            STATE.refuse_if_training_fewer(which, results[0])
            return results[1]

        return Handle([control, handle], checked)
    try:
        STATE.refuse_if_joined(which)
    except RdmacollError as e:
        error = e

        def raise_it(_):
            raise error

        return Handle(None, raise_it)
    return call()


def allgather(x, name=None, process_set=None):
    return _refused(ALLGATHER, lambda: rc.allgather(x, name, process_set), process_set)


def allgather_async(x, name=None, process_set=None):
    return _refused_async(ALLGATHER, lambda: rc.allgather_async(x, name, process_set), process_set)


def grouped_allgather_async(xs, name=None, process_set=None):
    return _refused_async(ALLGATHER, lambda: rc.grouped_allgather_async(xs, name, process_set), process_set)


def broadcast(x, root_rank, name=None, out=None, process_set=None, shape=None):
    return _refused(BROADCAST, lambda: rc.broadcast(x, root_rank, name, out, process_set, shape=shape), process_set)


def broadcast_async(x, root_rank, name=None, out=None, process_set=None, shape=None):
    return _refused_async(
        BROADCAST, lambda: rc.broadcast_async(x, root_rank, name, out, process_set, shape=shape), process_set
    )


def reducescatter(x, op=rc.Average, name=None, process_set=None):
    return _refused(REDUCESCATTER, lambda: rc.reducescatter(x, op, name, process_set), process_set)


def reducescatter_async(x, op=rc.Average, name=None, process_set=None):
    return _refused_async(REDUCESCATTER, lambda: rc.reducescatter_async(x, op, name, process_set), process_set)


def grouped_reducescatter_async(xs, op=rc.Average, name=None, process_set=None):
    return _refused_async(REDUCESCATTER, lambda: rc.grouped_reducescatter_async(xs, op, name, process_set), process_set)


def alltoall(x, splits=None, name=None, return_received_splits=False, process_set=None):
    return _refused(ALLTOALL, lambda: rc.alltoall(x, splits, name, return_received_splits, process_set), process_set)


def alltoall_async(x, splits=None, name=None, return_received_splits=False, process_set=None):
    return _refused_async(
        ALLTOALL, lambda: rc.alltoall_async(x, splits, name, return_received_splits, process_set), process_set
    )


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """rdmacoll.broadcast_object (two broadcasts: Horovod's refuses the first)."""
    return _refused(BROADCAST, lambda: rc.broadcast_object(obj, root_rank, name, process_set), process_set)


def allgather_object(obj, name=None, process_set=None):
    """rdmacoll.allgather_object (two allgathers: Horovod's refuses the first)."""
    return _refused(ALLGATHER, lambda: rc.allgather_object(obj, name, process_set), process_set)


def join():
    """Take part with zeros in the training ranks' collectives until every rank has
    joined; returns the rank that joined last (see the module docstring)."""
    return STATE.join()
