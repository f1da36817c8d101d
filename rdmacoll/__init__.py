"""rdmacoll: collective communication for data-parallel deep learning.

import rdmacoll as rc
rc.init()                      # under mpiexec; MPI only bootstraps
y = rc.allreduce(x)            # Average by default, like Horovod
rc.allreduce(x, op=rc.Sum, out=x)   # in place
g = rc.empty((1 << 20,), "float32") # zero-copy: memory peers reach directly
"""

from __future__ import annotations

import atexit as _atexit
import pickle as _pickle

import numpy as _np

from . import _core, _device, _in_place, _objects, _session, _settings, _version
from . import process_sets as _process_sets
from ._core import Average, Handle, Max, Min, Product, RdmacollError, RdmacollMemoryError, RdmacollValueError, Sum
from . import adasum as _adasum
from .adasum import ADASUM as Adasum
from .bootstrap import bootstrap as _bootstrap
from .grouped import grouped_allgather, grouped_allgather_async, grouped_reducescatter, grouped_reducescatter_async
from .process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from .process_sets import broadcast_comm as _broadcast_comm
from .process_sets import comm_for as _comm_for
from .process_sets import comm_of as _comm_of
from ._device import DeviceArray

__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "rank",
    "size",
    "local_rank",
    "local_size",
    "cross_rank",
    "cross_size",
    "is_homogeneous",
    "allreduce",
    "shape_key",
    "grouped_allreduce",
    "grouped_allgather",
    "grouped_reducescatter",
    "allgather",
    "broadcast",
    "reducescatter",
    "alltoall",
    "barrier",
    "empty",
    "algorithms",
    "broadcast_object",
    "allgather_object",
    "allreduce_async",
    "grouped_allreduce_async",
    "grouped_allgather_async",
    "grouped_reducescatter_async",
    "allgather_async",
    "broadcast_async",
    "reducescatter_async",
    "alltoall_async",
    "barrier_async",
    "poll",
    "synchronize",
    "Handle",
    "DeviceArray",
    "Sum",
    "Average",
    "Min",
    "Max",
    "Product",
    "Adasum",
    "RdmacollError",
    "RdmacollMemoryError",
    "RdmacollValueError",
    "ProcessSet",
    "global_process_set",
    "add_process_set",
    "remove_process_set",
]


def _gpu(x):
    """x as a DeviceArray when it is CUDA memory (_device.py), else None. NumPy arrays
    are told apart by their type alone (the fast path)."""
    return None if type(x) is _np.ndarray else _device.from_object(x)


def __getattr__(name):
    if name == "__version__":  # the installed distribution's (pyproject.toml: the one place it is written)
        return _version.version()
    raise AttributeError(f"module 'rdmacoll' has no attribute {name!r}")


def init(config=None, process_sets=None, comm=None) -> None:
    """Join the job: bootstrap over MPI, connect to every peer. Idempotent.

    config: settings that override the environment, keyed by setting name or variable,
    e.g. {"algo": "ring", "eager_bytes": "64K"} (rdmacoll._settings.TABLE lists them;
    values in the variables' grammar). Job-wide ones must be the same on every rank.
    process_sets: ProcessSet objects to register (every rank the same list, in the same
    order), or "dynamic" to allow add_process_set / remove_process_set later (as the
    dynamic_process_sets setting does), as Horovod's init takes them.
    comm: the job, as Horovod's init(comm=...) takes it: an mpi4py communicator (the job
    is its ranks), or a list of ranks of MPI_COMM_WORLD (the job is those ranks, in the
    list's order; every listed rank calls init with the same list; a rank not in it gets
    ValueError). None or [] : the whole launch.

    The job is held by a session (rdmacoll._session): after shutdown(), init() builds a
    new one, whose membership epoch is one more. Called again while initialised it does
    nothing, as Horovod's, unless the job's world ended in a collective mismatch: then it
    builds the world again (_rebuild), as Horovod's job goes on after one; with a config whose settings the running session does not have,
    RdmacollValueError (they would be silently ignored: shutdown() first)."""
    running = _session.current()
    if not running.closed and running.comm.failure == "mismatch":
        _rebuild(running)
        return
    if not running.closed:
        if config:
            wanted = _settings.given(config)
            differ = {k: v for k, v in wanted.items() if running.settings.get(k, object()) != v}
            if differ:
                have = ", ".join(f"{k}={running.settings.get(k, '(per rank)')!r}" for k in differ)
                raise RdmacollValueError(
                    f"init(config={config!r}) while initialised with {have}: the running session keeps its "
                    "settings; call shutdown() first"
                )
        return
    dynamic = isinstance(process_sets, str) and process_sets.lower() == "dynamic"
    if isinstance(process_sets, str) and not dynamic:
        raise ValueError(
            f'init(process_sets=...) takes a list of ProcessSet objects or "dynamic", got {process_sets!r}'
        )
    _start(
        _bootstrap(config, comm=comm), (config, comm, dynamic), [] if process_sets is None or dynamic else process_sets
    )


def _start(world, made_by, process_sets=()) -> None:
    """A session of `world` (a bootstrap World) made current, as init() makes it: made_by
    is init()'s (config, comm, dynamic), process_sets the static sets to register."""
    session = _session.start(world)
    session.made_by = (made_by[0], made_by[1], made_by[2] or session.settings.get("dynamic_process_sets", 0))
    _process_sets.attach(session, session.made_by[2], list(process_sets))


def _elastic_reset() -> None:
    """Horovod's elastic reset (hvd.elastic.run): leave this world for the job's next, in
    place over this world's connections where every member of the next was in it
    (rdmacoll/_in_place.py), else shutdown() and init()."""
    _in_place.reset(init, _start)


def _rebuild(failed) -> None:
    """init() on a session whose world ended in a collective mismatch: build it again.

    Horovod's job goes on after ranks disagree (it negotiates each collective before any
    data moves; the op fails with PRECONDITION_ERROR, the next one runs). rdmacoll's
    descriptor travels with the data (design.md), so by the time a rank sees the mismatch
    some data may have moved and the world's state is not the same on every rank: every
    rank raises, and the world is unusable. Every rank is alive, though, so init() on every
    rank (as Horovod's scripts and tests call hvd.init() again) makes a new world of the
    same ranks, with the settings, comm and process sets of the first init() (this call's
    arguments are not looked at; the sets are registered again in their order, so their
    ids are 1, 2... again: a set removed before leaves no gap), its epoch one more (the
    session's reset hooks drop what was built on the old one). Collective, as init().
    Limits (design.md, "Semantics"): every rank must have seen the mismatch first (a rank
    whose world ended otherwise, e.g. a timeout that raced the mismatch, does nothing
    here, and the others wait for it in the bootstrap); a mismatch inside a process set
    breaks that set's communicator only, which init() leaves as it is."""
    config, comm, dynamic = failed.made_by
    sets = sorted(failed.sets.sets.items(), key=lambda item: item[0]) if failed.sets is not None else []
    failed.close(wait=False)
    _start(_bootstrap(config, comm=comm), failed.made_by, [ps for pid, ps in sets if pid])


def shutdown() -> None:
    """Leave the job and release every resource; init() may be called again.

    Collective, like MPI_Finalize: it first waits (at most RDMACOLL_TIMEOUT) until every
    rank has finished the collectives before it, so that no rank goes away while a peer
    still receives what it sent (a root may finish a broadcast long before the last rank
    of the chain). A job that already failed skips the wait. Then the process sets and
    the communicator close, and the session's reset hooks run (Session.close)."""
    _session.stop()


_atexit.register(shutdown)


def is_initialized() -> bool:
    return not _session.current().closed


def rank() -> int:
    return _session.require().rank


def size() -> int:
    return _session.require().size


def local_rank() -> int:
    return _session.require().local_rank


def local_size() -> int:
    return _session.require().local_size


def cross_rank() -> int:
    """This rank's index among the ranks with its local rank (its host's index when every
    host has as many ranks), as Horovod's cross_rank()."""
    return _session.require().cross_rank


def cross_size() -> int:
    """How many ranks share this rank's local rank (the number of hosts when every host
    has as many ranks), as Horovod's cross_size()."""
    return _session.require().cross_size


def is_homogeneous() -> bool:
    """True when every host runs the same number of ranks."""
    return _session.require().is_homogeneous


def allreduce(x, op=Average, name=None, out=None, process_set=None, *, shape=None):
    """Reduce x across ranks; returns the result.

    out=None returns a new array (from the library's memory pool); out=x reduces in
    place; any other array of the same shape and dtype receives the result. x may be a
    NumPy array, anything with the buffer protocol, or a DLPack producer (CPU tensors).
    Every rank must call it in the same order with the same shape, dtype, op and name
    (a rank whose shape differs gets "collective mismatch (different shapes)" on every
    rank). shape: what the ranks compare instead of x's shape, from shape_key(), for
    callers that flatten or fuse tensors before they reduce them.
    process_set: a registered ProcessSet: only its ranks take part (Average divides by
    its size); a rank outside it gets ValueError. None means every rank.
    op=Adasum: Horovod's Adasum (float16/32/64, a power-of-two number of ranks; adasum.py).
    """
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Allreduce")
    )
    if op == Adasum:
        return _adasum.allreduce_async(c, x, out, name).wait()
    d = _gpu(x)
    if d is not None:
        return _device.allreduce(c, d, out, op, name, shape)
    return c.allreduce(x, out, op, name, shape)


def shape_key(*shapes):
    """The int a collective's ranks compare for these shapes (allreduce's shape=): of one
    shape, what the core compares for an array of that shape; of several (a fused
    buffer), one key for all of them in order."""
    if len(shapes) == 1:
        return _core.shape_hash(list(shapes[0]))
    return _core.shape_hash([-1, len(shapes)] + [d for s in shapes for d in (len(s), *s)])


def grouped_allreduce(xs, op=Average, name=None, out=None, process_set=None, *, shapes=None):
    """Reduce a list of arrays as one fused operation per dtype; returns a list.

    Arrays of one dtype are packed into one buffer of library memory (one copy in),
    reduced by a single collective, and returned as views of that buffer (out=None) or
    copied into `out` (a list of arrays; out=xs reduces in place)."""
    return grouped_allreduce_async(xs, op, name, out, process_set, shapes=shapes).wait()


def allgather(x, name=None, process_set=None):
    """Concatenate every rank's x along the first dimension (which may differ per rank)."""
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Allgather")
    )
    d = _gpu(x)
    return c.allgather(x, name) if d is None else _device.allgather(c, d, name)


def broadcast(x, root_rank, name=None, out=None, process_set=None, *, shape=None):
    """root_rank's x on every rank; out=x writes it in place. root_rank is a global rank,
    also with a process_set (it must be in the set). shape: as allreduce's."""
    if process_set is None or process_set is global_process_set:
        c, root = _session._current.comm, root_rank
    else:
        c, root = _broadcast_comm(process_set, root_rank)
    d = _gpu(x)
    return c.broadcast(x, root, out, name, shape) if d is None else _device.broadcast(c, d, root, out, name, shape)


def reducescatter(x, op=Average, name=None, process_set=None):
    """Reduce x across ranks and give each rank its share of the first dimension (the
    first `rows % size` ranks get one row more)."""
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Reducescatter")
    )
    d = _gpu(x)
    return c.reducescatter(x, op, name) if d is None else _device.reducescatter(c, d, op, name)


def alltoall(x, splits=None, name=None, return_received_splits=False, process_set=None):
    """Send splits[j] rows of x (first dimension) to rank j; returns what every rank sent
    here, concatenated in rank order (and the rows received from each rank if asked).
    splits=None splits the first dimension evenly. With a process_set, j counts the set's
    ranks in order."""
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Alltoall")
    )
    d = _gpu(x)
    result, received = c.alltoall(x, splits, name) if d is None else _device.alltoall(c, d, splits, name)
    return (result, received) if return_received_splits else result


def barrier(process_set=None):
    """Return once every rank (of process_set) has called barrier()."""
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Barrier")
    )
    c.barrier()


def barrier_async(process_set=None):
    """barrier queued to run in the background; returns a Handle."""
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Barrier")
    )
    return c.barrier_async()


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's picklable obj on every rank (pickled there, unpickled everywhere)."""
    me = rank() == root_rank
    payload = _np.frombuffer(_pickle.dumps(obj), _np.uint8) if me else None
    length = _np.array([payload.size if payload is not None else 0], _np.int64)
    broadcast(length, root_rank, name=None if name is None else name + ".len", out=length, process_set=process_set)
    if not me:
        payload = _np.empty(int(length[0]), _np.uint8)
    data = broadcast(payload, root_rank, name=name, out=None if me else payload, process_set=process_set)
    return obj if me else _pickle.loads(memoryview(data))


def allgather_object(obj, name=None, process_set=None):
    """Every rank's picklable obj, as a list in rank order (of process_set's ranks)."""
    return _objects.allgather(_comm_for(process_set, "Allgather"), obj, name)


def poll(handle) -> bool:
    """True once the operation behind handle has finished (never blocks)."""
    return handle.poll()


def synchronize(handle):
    """Wait for an asynchronous operation; returns its result (or raises its error).
    Handles may be waited on in any order; operations run in submission order."""
    return handle.wait()


def allreduce_async(x, op=Average, name=None, out=None, process_set=None, *, shape=None):
    """allreduce queued to run in the background; returns a Handle. x (and out) must
    not be modified until synchronize(handle). op=Adasum runs in the call (its steps
    depend on each other) and returns a finished Handle."""
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Allreduce")
    )
    if op == Adasum:
        return _adasum.allreduce_async(c, x, out, name)
    d = _gpu(x)
    if d is not None:  # (GPU arrays run in the call: _device.py)
        return _device.done(_device.allreduce(c, d, out, op, name, shape))
    return c.allreduce_async(x, out, op, name, shape)


def grouped_allreduce_async(xs, op=Average, name=None, out=None, process_set=None, *, shapes=None):
    """grouped_allreduce queued to run in the background; returns a Handle. The ranks
    compare the arrays' shapes, one key per dtype group (shape_key of its arrays' shapes);
    shapes: those keys given instead (join's stand-ins, which reduce one zero array per
    group in place of arrays they never saw)."""
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Allreduce")
    )
    if op == Adasum:  # each array its own coefficients (adasum.py); a finished Handle
        return _adasum.grouped_allreduce_async(c, xs, out, name)
    views = [_core._view(x) for x in xs]
    if out is not None and len(out) != len(views):
        raise RdmacollError(f"grouped_allreduce: {len(views)} inputs but {len(out)} outputs")
    groups: dict[_np.dtype, list[int]] = {}
    for i, v in enumerate(views):
        groups.setdefault(v.dtype, []).append(i)
    plans, parts = [], []
    for g, (dtype, idx) in enumerate(groups.items()):
        fused = c.empty(sum(views[i].size for i in idx), dtype)
        offsets, o = [], 0
        for i in idx:
            fused[o : o + views[i].size] = views[i].reshape(-1)
            offsets.append(o)
            o += views[i].size
        key = shape_key(*(views[i].shape for i in idx)) if shapes is None else shapes[g]
        parts.append(c.allreduce_async(fused, fused, op, None if name is None else f"{name}.{g}", key))
        plans.append((fused, idx, offsets))

    def finish(_):
        results = [None] * len(views)
        for fused, idx, offsets in plans:
            for i, o in zip(idx, offsets):
                r = fused[o : o + views[i].size].reshape(views[i].shape)
                if out is None:
                    results[i] = r
                else:
                    _np.copyto(_core._view(out[i]), r)
                    results[i] = out[i]
        return results

    return Handle(parts, finish)


def allgather_async(x, name=None, process_set=None):
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Allgather")
    )
    d = _gpu(x)
    return c.allgather_async(x, name) if d is None else _device.done(_device.allgather(c, d, name))


def broadcast_async(x, root_rank, name=None, out=None, process_set=None, *, shape=None):
    if process_set is None or process_set is global_process_set:
        c, root = _session._current.comm, root_rank
    else:
        c, root = _broadcast_comm(process_set, root_rank)
    d = _gpu(x)
    if d is not None:
        return _device.done(_device.broadcast(c, d, root, out, name, shape))
    return c.broadcast_async(x, root, out, name, shape)


def reducescatter_async(x, op=Average, name=None, process_set=None):
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Reducescatter")
    )
    d = _gpu(x)
    return c.reducescatter_async(x, op, name) if d is None else _device.done(_device.reducescatter(c, d, op, name))


def alltoall_async(x, splits=None, name=None, return_received_splits=False, process_set=None):
    c = (
        _session._current.comm
        if process_set is None or process_set is global_process_set
        else _comm_of(process_set, "Alltoall")
    )
    d = _gpu(x)
    h = c.alltoall_async(x, splits, name) if d is None else _device.done(_device.alltoall(c, d, splits, name))
    return h if return_received_splits else Handle(h, lambda r: r[0])


def empty(shape, dtype="float32"):
    """A NumPy array in library-allocated memory, which peers on the same host read in
    place: allreduce on it skips the copies that user memory needs."""
    return _session._current.comm.empty(shape, dtype)


def algorithms(collective="allreduce", continuations=False):
    """The algorithms of a collective (allreduce, allgather, broadcast, reducescatter,
    alltoall, barrier): [(name, description)]; RDMACOLL_ALGO names them. continuations=True
    adds the steps an algorithm may continue as after its call headers ('direct>ring_slots'),
    which last_algorithm reports but nothing selects."""
    return _core.algorithms(collective, continuations)
