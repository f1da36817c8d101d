"""Bootstrap: the only module that imports mpi4py.

MPI is used once, at init(): to agree on settings (rank 0's job-wide settings and tuning
file are broadcast so that every rank runs the same protocol and selection), to learn
which ranks share a host (local_rank/local_size), to exchange what each rank could use
between hosts, and to allgather each rank's address blob. Then it steps aside: no
collective of rdmacoll goes through MPI. What the exchanged facts mean is decided in the
core (the transport per peer in csrc/transport/job.cc, the cost model's scale from the
layout), never here.
"""
from __future__ import annotations

import logging
import os
import socket
import sys

from . import _core, _settings

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
    """What bootstrap learned: ranks, hosts, the settings in effect (and where each came
    from), and the connected core communicator."""

    def __init__(self, rank, size, local_rank, local_size, core, settings, sources, tuning_file, mpi_comm):
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.core = core
        self.settings = settings
        self.sources = sources
        self.tuning_file = tuning_file
        self._mpi_comm = mpi_comm


def _everywhere(world, err, what):
    """Raise on every rank when any rank reports an error (the ones that succeeded would
    otherwise wait for the others forever)."""
    errors = [e for e in world.allgather(err) if e]
    if errors:
        raise _core.RdmacollError(f"{what}: " + "; ".join(errors))


def bootstrap(config=None) -> World:
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

    # Rank 0's job-wide settings, or its reason for refusing them, reach every rank.
    if rank == 0:
        try:
            job = (_settings.job(os.environ, config), None)
        except _core.RdmacollError as e:
            job = (None, str(e))
    job, bad = world.bcast(job if rank == 0 else None, root=0)
    if bad:
        raise _core.RdmacollError(f"rdmacoll.init(): {bad} (rank 0's environment)")
    # This rank's own settings; and init(config=) must say the same on every rank.
    err = None
    try:
        mine, mine_sources = _settings.resolve(os.environ, config, scope="rank")
        given = _settings.given(config, scope="job")
    except _core.RdmacollError as e:
        err, mine, mine_sources, given = f"rank {rank}: {e}", {}, {}, {}
    _everywhere(world, err, "rdmacoll.init() failed")
    passed = world.allgather(given)
    if any(p != passed[0] for p in passed):
        first = next(r for r, p in enumerate(passed) if p != passed[0])
        raise _core.RdmacollError(f"rdmacoll.init(): init(config=...) differs between ranks: rank 0 passed "
                                  f"{passed[0]}, rank {first} passed {passed[first]} (job-wide settings must agree)")
    settings = dict(job["settings"], **mine)
    sources = dict(job["sources"], **mine_sources)

    hosts = world.allgather((_host_identity(), sorted(os.sched_getaffinity(0))))
    mine_host = hosts[rank][0]
    local = [r for r in range(size) if hosts[r][0] == mine_host]
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
    layout = {"hosts": host_of, "local_cpus": len(cpus[mine_host]), "ranks_per_cpu": per_cpu}
    if len(index) > 1:
        # What each rank could use between hosts; the transport layer chooses.
        layout["network_offers"] = world.allgather(_core.network_offer(settings))

    # Every rank creates its endpoint first; a failure anywhere is reported everywhere.
    core, err = None, None
    try:
        core = _core.Communicator(rank, size, local_size, settings, layout, job["cost_models"])
        addr = core.address()
    except Exception as e:  # noqa: BLE001 - re-raised below on every rank
        err, addr = f"rank {rank}: {e}", b""
    _everywhere(world, err, "rdmacoll.init() failed")
    addresses = world.allgather(addr)
    try:
        core.connect(addresses)
    except Exception as e:  # noqa: BLE001
        err = f"rank {rank}: {e}"
    _everywhere(world, err, "rdmacoll.init() failed to connect")
    world.Barrier()
    if _log.isEnabledFor(logging.INFO):
        kinds = {}
        for r, d in enumerate(core.peer_transports()):
            if d:
                kinds.setdefault(d.split()[0], []).append(r)
        _log.info("rank %d (host %d of %d, %s): %s", rank, host_of[rank], len(index), core.transport,
                  "; ".join(f"{k} to ranks {v}" for k, v in kinds.items()) or "no peers")
    return World(rank, size, local_rank, local_size, core, settings, sources, job["tuning_file"], world)
