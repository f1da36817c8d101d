"""Bootstrap: the only module that imports mpi4py.

MPI is used once, at init(): to agree on settings (rank 0's RDMACOLL_* environment is
broadcast so that every rank runs the same protocol), to learn which ranks share a host
(local_rank/local_size), and to allgather each rank's address blob. Then it steps aside:
no collective of rdmacoll goes through MPI.
"""
from __future__ import annotations

import logging
import os
import socket
import sys

from . import _core
from ._config import config_from_env

_log = logging.getLogger("rdmacoll")


def _host_identity() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}|{boot}"


def mpi_library() -> str:
    """The MPI library mpi4py loads (first line of its version string), without
    initialising MPI when nothing did yet (for rdmacoll doctor)."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False
    from mpi4py import MPI

    return f"{MPI.Get_library_version().splitlines()[0].strip()} (mpi4py {mpi4py.__version__})"


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
    # Hosts numbered in order of their first rank; every rank computes the same list.
    index = {}
    host_of = [index.setdefault(h, len(index)) for h, _ in hosts]
    # CPUs this host's ranks share: oversubscribed when there are more ranks than these.
    cpus = {h: set() for h in index}
    ranks = dict.fromkeys(index, 0)
    for h, mask in hosts:
        cpus[h].update(mask)
        ranks[h] += 1
    # The cost model's scale, the same on every rank: the most ranks per CPU of any host.
    per_cpu = max(1.0, max(ranks[h] / max(1, len(cpus[h])) for h in index))
    config = dict(config, local_cpus=len(cpus[mine]), hosts=host_of, ranks_per_cpu=per_cpu)
    if len(index) > 1 and config.get("transport") == "auto":
        # The network backend between hosts: ibverbs only where every rank can use it.
        usable = world.allgather("ibverbs" in _core.TRANSPORTS and _core.probe_transport("ibverbs")[0])
        config["net_transport"] = "ibverbs" if all(usable) else "tcp"

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
    if _log.isEnabledFor(logging.INFO):
        kinds = {}
        for r, d in enumerate(core.peer_transports()):
            if d:
                kinds.setdefault(d.split()[0], []).append(r)
        _log.info("rank %d (host %d of %d, %s): %s", rank, host_of[rank], len(index), core.transport,
                  "; ".join(f"{k} to ranks {v}" for k, v in kinds.items()) or "no peers")
    return World(rank, size, local_rank, local_size, core, world)
