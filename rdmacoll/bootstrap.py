"""Bootstrap: the only module that imports mpi4py.

MPI is used once, at init(): to agree on settings (rank 0's RDMACOLL_* environment is
broadcast so that every rank runs the same protocol), to learn which ranks share a host
(local_rank/local_size), and to allgather each rank's address blob. Then it steps aside:
no collective of rdmacoll goes through MPI.
"""
from __future__ import annotations

import os
import socket

from . import _core
from ._config import config_from_env


def _host_identity() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}|{boot}"


class World:
    """What bootstrap learned: ranks, hosts, and the connected core communicator."""

    def __init__(self, rank, size, local_rank, local_size, core, mpi_comm):
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.core = core
        self._mpi_comm = mpi_comm


def bootstrap() -> World:
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - depends on the install
        raise _core.RdmacollError(
            "rdmacoll needs mpi4py to start (pip install mpi4py, plus an MPI such as "
            "'pip install rdmacoll[mpich]' on machines without one): " + str(e)
        ) from e
    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()

    # Rank 0's settings, or its reason for refusing them, reach every rank.
    if rank == 0:
        try:
            config = (config_from_env(os.environ), None)
        except _core.RdmacollError as e:
            config = (None, str(e))
    config, bad = world.bcast(config if rank == 0 else None, root=0)
    if bad:
        raise _core.RdmacollError(f"rdmacoll.init(): {bad} (rank 0's environment)")
    hosts = world.allgather((_host_identity(), sorted(os.sched_getaffinity(0))))
    mine = hosts[rank][0]
    local = [r for r in range(size) if hosts[r][0] == mine]
    local_rank, local_size = local.index(rank), len(local)
    # CPUs this host's ranks share: oversubscribed when there are more ranks than these.
    config = dict(config, local_cpus=len(set().union(*(hosts[r][1] for r in local))))
    nhosts = len({h for h, _ in hosts})
    if nhosts > 1 and config.get("transport", "shm") == "shm":
        raise _core.RdmacollError(
            f"ranks run on {nhosts} hosts, but only the shared-memory transport is "
            "available in this version; run all ranks on one host"
        )

    # Every rank creates its endpoint first; a failure anywhere is reported everywhere
    # (otherwise the ranks that succeeded would wait for the others forever).
    core, err = None, None
    try:
        core = _core.Communicator(rank, size, local_size, config)
        addr = core.address()
    except Exception as e:  # noqa: BLE001 - re-raised below on every rank
        err, addr = f"rank {rank}: {e}", b""
    errors = [e for e in world.allgather(err) if e]
    if errors:
        raise _core.RdmacollError("rdmacoll.init() failed: " + "; ".join(errors))
    addresses = world.allgather(addr)
    try:
        core.connect(addresses)
    except Exception as e:  # noqa: BLE001
        err = f"rank {rank}: {e}"
    errors = [e for e in world.allgather(err) if e]
    if errors:
        raise _core.RdmacollError("rdmacoll.init() failed to connect: " + "; ".join(errors))
    world.Barrier()
    return World(rank, size, local_rank, local_size, core, world)
