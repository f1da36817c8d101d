"""MPI as a bootstrap (the only module that imports mpi4py, and only when MPI bootstraps):
MPI_COMM_WORLD tells the ranks; its bcast and allgather move bootstrap's few objects.
No collective of rdmacoll goes through MPI afterwards."""
from __future__ import annotations

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


def exchange() -> MpiExchange:
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - depends on the install
        raise _core.RdmacollError(
            "rdmacoll needs mpi4py to start under an MPI launcher (pip install mpi4py, plus an MPI such as "
            "'pip install rdmacoll[mpich]' on machines without one): " + str(e)) from e
    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    return MpiExchange(MPI.COMM_WORLD)


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("mpi4py") is not None


def mpi_library() -> str:
    """The MPI library mpi4py loads (first line of its version string), without
    initialising MPI when nothing did yet (for rdmacoll doctor)."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False
    from mpi4py import MPI

    return f"{MPI.Get_library_version().splitlines()[0].strip()} (mpi4py {mpi4py.__version__})"
