"""Process sets, as Horovod 0.28.1 has them: collectives over a subset of the ranks.

    ps = rc.ProcessSet([0, 2])
    rc.init(process_sets=[ps])          # static: every rank passes the same sets
    if ps.included():
        y = rc.allreduce(x, process_set=ps)      # averaged over ranks 0 and 2
    rc.init(process_sets="dynamic")     # or RDMACOLL_DYNAMIC_PROCESS_SETS=1 (HOROVOD_ alias)
    ps = rc.add_process_set([1, 3])     # collective over every rank
    rc.remove_process_set(ps)           # collective over every rank

A set's collectives run on a sub-communicator of the core (Session.split) over the
world's open connections: its own sequence numbers, mismatch checks and algorithm
selection (a set of 2 ranks runs the 2-rank algorithms). Only its members hold one; a
call on a set this rank is not in raises ValueError, as Horovod does. Ranks are global
ones everywhere (broadcast's root_rank included); ProcessSet.rank() is the rank within.

The registered sets and their sub-communicators are the session's (ProcessSets, at
rdmacoll._session.current().sets): shutdown() closes them with the session, and a
ProcessSet object holds only its ranks and its id (None once unregistered).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from . import _objects, _session
from ._core import RdmacollValueError


class ProcessSet:
    """A set of ranks that runs collectives together (Horovod's ProcessSet).

    ranks are sorted; process_set_id is None until init(process_sets=...) or
    add_process_set registers the set (0 is the global set). Compared by identity, as
    Horovod's."""

    process_set_id: int | None = None
    ranks: list[int] | None = None
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

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Ranks in the set, or None when it is not registered."""
        if self.process_set_id is None or self.ranks is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This rank's position in the set (0 .. size()-1), or None when it is not
        registered; ValueError on a rank outside it. Collectives still take global ranks."""
        if self.process_set_id is None:
            return None
        comm = _session.require().sets.comms.get(self.process_set_id)
        if comm is None:
            raise ValueError("Process is not part of provided process set.")
        return comm.rank

    def included(self):
        """Whether this rank is in the set (None when the set has no ranks yet)."""
        if self.ranks is None:
            return None
        return _session.require().rank in self.ranks

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_DYNAMIC_HINT = (
    "Set RDMACOLL_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1, or "
    'init(process_sets="dynamic")) to allow {} process sets after initialization.'
)


class ProcessSets:
    """The registered sets of one session (Horovod's table is process-wide: so is the
    current session's): ids to sets, their sub-communicators on this rank (the world's
    under id 0), and whether sets may change after init."""

    def __init__(self, session, dynamic):
        self.session = session
        self.dynamic = bool(dynamic)
        self.sets: dict[int | None, ProcessSet] = {0: global_process_set}
        self.comms: dict[int | None, Any] = {
            0: session.comm
        }  # id -> this rank's communicator of the set (members only)

    def start(self, process_sets):
        """At init(): the static sets, registered in list order (collective)."""
        global_process_set.ranks = list(range(self.session.size))
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
        """At the session's close: close every set's communicator (not the world's: the
        session closes it); every set becomes unregistered."""
        for pid, ps in self.sets.items():
            if pid != 0:
                ps._invalidate()
                if pid in self.comms:
                    self.comms[pid].close()
        self.sets, self.comms = {}, {}

    def _known(self, ranks):
        for ps in self.sets.values():
            if ps.ranks == ranks:
                return ps
        return None

    def _register(self, ps):
        """Split the world on the member ranks and connect; collective over every rank."""
        s = self.session
        bad = [r for r in ps.ranks if not 0 <= r < s.size]
        if not ps.ranks or bad or len(set(ps.ranks)) != len(ps.ranks):
            raise ValueError(f"a process set needs distinct ranks in 0..{s.size - 1}, got {ps.ranks}")

        def exchange(address):
            seen = _objects.allgather(s.comm, (ps.ranks, address), "process_set.add")
            others = [r for r, (ranks, _) in enumerate(seen) if ranks != ps.ranks]
            if others:
                raise ValueError(
                    f"add_process_set: every rank must add the same set; rank {s.rank} "
                    f"added {ps.ranks}, rank {others[0]} {seen[others[0]][0]}"
                )
            return [seen[r][1] for r in ps.ranks]

        sub = s.split(ps.ranks, exchange)
        ps.process_set_id = min(set(range(1, len(self.sets) + 1)) - set(self.sets))
        self.sets[ps.process_set_id] = ps
        if sub is not None:
            self.comms[ps.process_set_id] = sub
        return ps

    def add(self, process_set):
        if not isinstance(process_set, ProcessSet):
            process_set = ProcessSet(process_set)
        if not self.dynamic:
            raise ValueError(_DYNAMIC_HINT.format("adding"))
        if self._known(process_set.ranks) is not None:
            raise ValueError(f"Attempted to add a duplicate process set: {process_set}")
        return self._register(process_set)

    def remove(self, process_set):
        ps_id = process_set.process_set_id
        if ps_id is None or ps_id == 0:
            return False
        process_set._invalidate()
        if not self.dynamic:
            raise ValueError(_DYNAMIC_HINT.format("removing"))
        ids = self.session.comm.allgather(np.array([ps_id], np.int64), "process_set.remove")
        if len(set(ids.tolist())) != 1:
            raise ValueError(f"remove_process_set: every rank must remove the same set; ids per rank: {ids.tolist()}")
        if self.sets.get(ps_id) is not process_set:
            return False
        del self.sets[ps_id]
        comm = self.comms.pop(ps_id, None)
        if comm is not None:
            comm.barrier()  # the set's collectives before this have finished on every member
            comm.close()
        return True

    def _check_registered(self, process_set):
        if not isinstance(process_set, ProcessSet):
            raise ValueError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
        if process_set.process_set_id is None or self.sets.get(process_set.process_set_id) is not process_set:
            raise ValueError("Process set does not exist or has not been registered.")

    def comm_of(self, process_set, op):
        """The communicator of process_set on this rank for a call of `op` ('Allreduce'...);
        ValueError, as Horovod words it, where this rank has none."""
        pid = getattr(process_set, "process_set_id", None)
        comm = self.comms.get(pid)
        if comm is not None and self.sets.get(pid) is process_set:
            return comm
        self._check_registered(process_set)
        if op == "Reducescatter":
            raise ValueError(f"Invalid process set id for this rank: {pid}")
        raise ValueError(f"{op}: Rank {self.session.rank} is not a member of the provided process set.")

    def broadcast_comm(self, process_set, root_rank):
        """(communicator, root's position in the set) for a broadcast from global root_rank."""
        pid = getattr(process_set, "process_set_id", None)
        comm = self.comms.get(pid) if self.sets.get(pid) is process_set else None
        if comm is None:
            self._check_registered(process_set)
        if comm is None or root_rank not in process_set.ranks:
            raise ValueError(f"broadcast received invalid root rank {root_rank} for provided process set")
        return comm, process_set.ranks.index(root_rank)


def attach(session, dynamic, process_sets):
    """At init(): the session's table of sets, with the global set and then the static
    sets registered (collective, in list order)."""
    session.sets = ProcessSets(session, dynamic)
    session.sets.start(process_sets)


def _table():
    sets = _session.current().sets
    if sets is None:
        raise ValueError("rdmacoll has not been initialized; use init().")
    return sets


def add_process_set(process_set):
    """Register a new set (a ProcessSet or a list of ranks) and return it; collective over
    every rank, which must pass the same ranks. Needs dynamic process sets; a set with the
    same ranks as a registered one raises ValueError."""
    return _table().add(process_set)


def remove_process_set(process_set) -> bool:
    """Unregister a set added before (collective over every rank); its communicator is
    closed. False for the global set or a set that is not registered."""
    return _table().remove(process_set)


def registered(process_set_id):
    """The registered set with that id, or None; RdmacollError before init()."""
    return _session.require().sets.sets.get(process_set_id)


def _initialised_table(process_set):
    sets = _session.current().sets
    if sets is None:
        if not isinstance(process_set, ProcessSet):
            raise ValueError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
        raise RdmacollValueError(_session.NOT_INITIALISED)
    return sets


def comm_of(process_set, op):
    """The current session's communicator of process_set on this rank for a call of `op`
    ('Allreduce'...); ValueError, as Horovod words it, where this rank has none."""
    return _initialised_table(process_set).comm_of(process_set, op)


def ranks_of(process_set):
    """The global ranks of process_set (None or the global set: every rank; an unregistered
    set's own list): what a root rank is checked against."""
    if process_set is None or process_set is global_process_set:
        return range(_session.require().size)
    return process_set.ranks or ()


def comm_for(process_set, op):
    """The communicator a collective `op` on process_set (None: the global set) runs on."""
    if process_set is None or process_set is global_process_set:
        return _session.current().comm
    return comm_of(process_set, op)


def broadcast_comm(process_set, root_rank):
    """(communicator, root's position in the set) for a broadcast from global root_rank."""
    return _initialised_table(process_set).broadcast_comm(process_set, root_rank)
