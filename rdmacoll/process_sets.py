"""Process sets, as Horovod 0.28.1 has them: collectives over a subset of the ranks.

    ps = rc.ProcessSet([0, 2])
    rc.init(process_sets=[ps])          # static: every rank passes the same sets
    if ps.included():
        y = rc.allreduce(x, process_set=ps)      # averaged over ranks 0 and 2
    rc.init(process_sets="dynamic")     # or RDMACOLL_DYNAMIC_PROCESS_SETS=1 (HOROVOD_ alias)
    ps = rc.add_process_set([1, 3])     # collective over every rank
    rc.remove_process_set(ps)           # collective over every rank

A set's collectives run on a sub-communicator of the core (Communicator.split) over the
world's open connections: its own sequence numbers, mismatch checks and algorithm
selection (a set of 2 ranks runs the 2-rank algorithms). Only its members hold one; a
call on a set this rank is not in raises ValueError, as Horovod does. Ranks are global
ones everywhere (broadcast's root_rank included); ProcessSet.rank() is the rank within.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from . import _objects
from ._core import RdmacollError


class ProcessSet:
    """A set of ranks that runs collectives together (Horovod's ProcessSet).

    ranks are sorted; process_set_id is None until init(process_sets=...) or
    add_process_set registers the set (0 is the global set). Compared by identity, as
    Horovod's."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        if isinstance(ranks_or_comm, Iterable) and not isinstance(ranks_or_comm, (str, bytes)):
            ranks = sorted(ranks_or_comm)
            if any(not isinstance(r, int) for r in ranks):
                raise ValueError(
                    "ProcessSet should be initialized with a list of process ranks or an mpi4py Comm object"
                )
            self.ranks = ranks
        elif type(ranks_or_comm).__module__.startswith("mpi4py"):
            raise ValueError(
                "ProcessSet from an mpi4py communicator is not supported by rdmacoll: "
                "pass the list of its ranks in the world communicator"
            )
        else:
            raise ValueError("ProcessSet should be initialized with a list of process ranks or an mpi4py Comm object")
        self._comm = None  # the core's sub-communicator, on member ranks of a registered set

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Ranks in the set, or None when it is not registered."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This rank's position in the set (0 .. size()-1), or None when it is not
        registered; ValueError on a rank outside it. Collectives still take global ranks."""
        if self.process_set_id is None:
            return None
        if self._comm is None:
            raise ValueError("Process is not part of provided process set.")
        return self._comm.rank

    def included(self):
        """Whether this rank is in the set (None when the set has no ranks yet)."""
        if self.ranks is None:
            return None
        if TABLE.world is None:
            raise RdmacollError("rdmacoll is not initialised: call rdmacoll.init() first")
        return TABLE.rank in self.ranks

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_DYNAMIC_HINT = (
    "Set RDMACOLL_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1, or "
    'init(process_sets="dynamic")) to allow {} process sets after initialization.'
)


class _Table:
    """The registered sets of this process (Horovod's table is process-wide too): ids to
    sets, the world communicator they split from, and whether sets may change after init."""

    def __init__(self):
        self.sets = {}
        self.world = None
        self.rank = -1
        self.size = 0
        self.dynamic = False

    def start(self, world, rank, size, dynamic, process_sets):
        """At init(): the global set, then the static sets (collective, in list order)."""
        self.world, self.rank, self.size, self.dynamic = world, rank, size, bool(dynamic)
        global_process_set.ranks = list(range(size))
        global_process_set._comm = world
        self.sets = {0: global_process_set}
        duplicate = None
        for i, ps in enumerate(process_sets):
            if not isinstance(ps, ProcessSet):
                raise ValueError(
                    f"init(process_sets=...) takes a list of ProcessSet objects or "
                    f'"dynamic"; entry number {i} is a {type(ps).__name__}'
                )
            if self._known(ps.ranks) is not None or ps.process_set_id is not None:
                ps._invalidate()
                duplicate = duplicate or (i, ps)
                continue
            self._register(ps)
        if duplicate is not None:
            raise ValueError(
                f"rdmacoll could not be initialized because process_sets entry number "
                f"{duplicate[0]} is a duplicate: {duplicate[1]}"
            )

    def stop(self):
        """At shutdown(): close every set's communicator; every set becomes unregistered."""
        for ps in self.sets.values():
            if ps is not global_process_set:
                ps._invalidate()
                if ps._comm is not None:
                    ps._comm.close()
            ps._comm = None
        self.sets, self.world = {}, None

    def _known(self, ranks):
        for ps in self.sets.values():
            if ps.ranks == ranks:
                return ps
        return None

    def _register(self, ps):
        """Split the world on the member ranks and connect; collective over every rank."""
        bad = [r for r in ps.ranks if not 0 <= r < self.size]
        if not ps.ranks or bad or len(set(ps.ranks)) != len(ps.ranks):
            raise ValueError(f"a process set needs distinct ranks in 0..{self.size - 1}, got {ps.ranks}")
        sub = self.world.split(ps.ranks) if self.rank in ps.ranks else None
        try:
            seen = _objects.allgather(
                self.world, (ps.ranks, sub.address() if sub is not None else None), name="process_set.add"
            )
            others = [r for r, (ranks, _) in enumerate(seen) if ranks != ps.ranks]
            if others:
                raise ValueError(
                    f"add_process_set: every rank must add the same set; rank {self.rank} "
                    f"added {ps.ranks}, rank {others[0]} {seen[others[0]][0]}"
                )
            if sub is not None:
                sub.connect([seen[r][1] for r in ps.ranks])
        except BaseException:
            if sub is not None:
                sub.close()
            raise
        ps.process_set_id = min(set(range(1, len(self.sets) + 1)) - set(self.sets))
        ps._comm = sub
        self.sets[ps.process_set_id] = ps
        return ps

    def add(self, process_set):
        if self.world is None:
            raise ValueError("rdmacoll has not been initialized; use init().")
        if not isinstance(process_set, ProcessSet):
            process_set = ProcessSet(process_set)
        if not self.dynamic:
            raise ValueError(_DYNAMIC_HINT.format("adding"))
        if self._known(process_set.ranks) is not None:
            raise ValueError(f"Attempted to add a duplicate process set: {process_set}")
        return self._register(process_set)

    def remove(self, process_set):
        if self.world is None:
            raise ValueError("rdmacoll has not been initialized; use init().")
        ps_id = process_set.process_set_id
        if ps_id is None or ps_id == 0:
            return False
        process_set._invalidate()
        if not self.dynamic:
            raise ValueError(_DYNAMIC_HINT.format("removing"))
        ids = self.world.allgather(np.array([ps_id], np.int64), "process_set.remove")
        if len(set(ids.tolist())) != 1:
            raise ValueError(f"remove_process_set: every rank must remove the same set; ids per rank: {ids.tolist()}")
        if self.sets.get(ps_id) is not process_set:
            return False
        del self.sets[ps_id]
        if process_set._comm is not None:
            comm, process_set._comm = process_set._comm, None
            comm.barrier()  # the set's collectives before this have finished on every member
            comm.close()
        return True


TABLE = _Table()


def add_process_set(process_set):
    """Register a new set (a ProcessSet or a list of ranks) and return it; collective over
    every rank, which must pass the same ranks. Needs dynamic process sets; a set with the
    same ranks as a registered one raises ValueError."""
    return TABLE.add(process_set)


def remove_process_set(process_set) -> bool:
    """Unregister a set added before (collective over every rank); its communicator is
    closed. False for the global set or a set that is not registered."""
    return TABLE.remove(process_set)


def _check_registered(process_set):
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
    if TABLE.world is None:
        raise RdmacollError("rdmacoll is not initialised: call rdmacoll.init() first")
    if process_set.process_set_id is None or TABLE.sets.get(process_set.process_set_id) is not process_set:
        raise ValueError("Process set does not exist or has not been registered.")


def comm_of(process_set, op):
    """The communicator of process_set on this rank for a call of `op` ('Allreduce'...);
    ValueError, as Horovod words it, where this rank has none."""
    comm = getattr(process_set, "_comm", None)
    if comm is not None:
        return comm
    _check_registered(process_set)
    if op == "Reducescatter":
        raise ValueError(f"Invalid process set id for this rank: {process_set.process_set_id}")
    raise ValueError(f"{op}: Rank {TABLE.rank} is not a member of the provided process set.")


def broadcast_comm(process_set, root_rank):
    """(communicator, root's position in the set) for a broadcast from global root_rank."""
    comm = getattr(process_set, "_comm", None)
    if comm is None:
        _check_registered(process_set)
    if comm is None or root_rank not in process_set.ranks:
        raise ValueError(f"broadcast received invalid root rank {root_rank} for provided process set")
    return comm, process_set.ranks.index(root_rank)
