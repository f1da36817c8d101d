"""MPI as a bootstrap (the only module that imports mpi4py, and only when MPI bootstraps):
MPI_COMM_WORLD tells the ranks; its bcast and allgather move bootstrap's few objects.
No collective of rdmacoll goes through MPI afterwards."""

from __future__ import annotations

import importlib.util
import numbers
import sys

from .. import _core


class MpiExchange:
    name = "mpi"

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def bcast(self, obj):
        return self.comm.bcast(obj, root=0)

    def allgather(self, obj):
        return self.comm.allgather(obj)

    def barrier(self):
        self.comm.Barrier()


def exchange(comm=None) -> MpiExchange:
    """The exchange over MPI_COMM_WORLD, or over the job Horovod's init(comm=...) names:
    an mpi4py intracommunicator (duplicated, as Horovod does, so rdmacoll's few messages
    never meet the caller's own), or a list of ranks of MPI_COMM_WORLD (the job is those
    ranks, numbered in the list's order). A rank of MPI_COMM_WORLD outside the list gets
    ValueError (Horovod falls back to MPI_COMM_WORLD there and waits forever)."""
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - depends on the install
        raise _core.RdmacollError(
            "rdmacoll needs mpi4py to start under an MPI launcher (pip install mpi4py, plus an MPI such as "
            "'pip install rdmacoll[mpich]' on machines without one): " + str(e)
        ) from e
    if comm is not None and not isinstance(comm, MPI.Comm):
        ranks = _ranks(comm)
        comm = None if not ranks else ranks  # an empty list is MPI_COMM_WORLD, as in Horovod
    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    if comm is None:
        return MpiExchange(MPI.COMM_WORLD)
    if isinstance(comm, MPI.Comm):
        if comm == MPI.COMM_NULL or comm.Is_inter():
            raise _core.RdmacollValueError(
                "rdmacoll.init(comm=...): expected an intracommunicator this process "
                "belongs to (got MPI.COMM_NULL or an intercommunicator)"
            )
        return MpiExchange(comm.Dup())
    world = MPI.COMM_WORLD
    bad = sorted({r for r in comm if not 0 <= r < world.Get_size()} | {r for r in comm if comm.count(r) > 1})
    if bad:
        raise _core.RdmacollValueError(
            f"rdmacoll.init(comm={comm}): ranks {bad} are out of range (MPI_COMM_WORLD "
            f"has {world.Get_size()}) or listed twice"
        )
    if world.Get_rank() not in comm:
        raise _core.RdmacollValueError(
            f"rdmacoll.init(comm={comm}): this process, rank {world.Get_rank()} of MPI_COMM_WORLD, is not in "
            "the list of ranks, so it is not part of the job: call init() with the list only on its ranks"
        )
    group = world.Get_group().Incl(comm)
    try:
        return MpiExchange(world.Create_group(group))  # collective over the listed ranks only
    finally:
        group.Free()


def _ranks(comm):
    """The list of ranks of init(comm=[...]); TypeError for anything else, as Horovod."""
    try:
        ranks = list(comm)
    except TypeError:
        raise _core.RdmacollValueError(
            "Invalid type of argument comm. Expected list of rank integers or mpi4py.MPI.Comm object."
        ) from None
    if any(not isinstance(r, numbers.Integral) or isinstance(r, bool) for r in ranks):
        raise TypeError(f"init(comm=...): ranks must be integers, got {ranks!r}")
    return [int(r) for r in ranks]


def available() -> bool:
    return importlib.util.find_spec("mpi4py") is not None


def mpi_library() -> str:
    """The MPI library mpi4py loads (first line of its version string), without
    initialising MPI when nothing did yet (for rdmacoll doctor)."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False
    from mpi4py import MPI

    return f"{MPI.Get_library_version().splitlines()[0].strip()} (mpi4py {mpi4py.__version__})"
