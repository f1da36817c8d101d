"""Bootstrap: who the peers are, and nothing else.

A launcher started this process: mpiexec, mpirun or srun (then MPI tells the ranks:
bootstrap/mpi.py, the only importer of mpi4py), or torchrun (then torch's store does:
bootstrap/store.py; no MPI library needed), or rdmacoll-run --elastic (its driver's
store: bootstrap/elastic.py), or nobody (a world of one). Through it, once,
at init(): rank 0's job-wide settings and tuning file reach every rank, the ranks learn
which of them share a host, what each could use between hosts, and every rank's address
blob. Then it steps aside: no collective of rdmacoll goes through it. What the
exchanged facts mean is decided in the core (the transport per peer in
csrc/transport/job.cc, the cost model's scale from the layout), never here.

The exchange interface (MpiExchange, StoreExchange, LocalExchange): rank, size, name,
bcast(obj) from rank 0, allgather(obj), barrier().
"""

from __future__ import annotations

import logging
import os
import secrets
import socket

from .. import _core, _log, _settings
from . import elastic, launcher, mpi, store


class LocalExchange:
    """A process alone (no launcher, no MPI): a world of one."""

    name = "none"
    rank, size = 0, 1

    def bcast(self, obj):
        return obj

    def allgather(self, obj):
        return [obj]

    def barrier(self):
        pass


def choose(config=None, env=None, comm=None):
    """The exchange of the launcher that started this process (the bootstrap setting:
    auto, mpi or torch), checked against the size the launcher announced; with comm
    (Horovod's init(comm=...): an mpi4py communicator or a list of ranks of
    MPI_COMM_WORLD, see bootstrap/mpi.py), MPI over that job, whatever its size."""
    env = os.environ if env is None else env
    chosen = _parsed(env, config, "rank", "bootstrap")
    kind = chosen if chosen != "auto" else launcher.detect(env)
    if comm is not None:
        if kind == "torch":
            raise _core.RdmacollValueError(
                "rdmacoll.init(comm=...) names an MPI job, but this process was "
                "started by torchrun (or RDMACOLL_BOOTSTRAP=torch): leave comm out"
            )
        return mpi.exchange(comm)
    if kind in ("torch", "elastic"):
        try:
            if kind == "elastic":
                # the driver may take a hung worker's timeout, then elastic_timeout without
                # enough hosts, before it forms a world or ends the job; a minute more: the
                # driver itself is gone
                timeout = _parsed(env, config, "job", "timeout")
                ex = elastic.member(env, timeout).next_world(
                    timeout + _parsed(env, config, "job", "elastic_timeout") + 60
                )
            else:
                ex = store.torchrun_exchange(timeout_s=_parsed(env, config, "job", "timeout"))
        except ModuleNotFoundError as e:  # (before: that bare error)
            if (e.name or "").split(".")[0] != "torch":
                raise
            how = {
                "torch": "RDMACOLL_BOOTSTRAP=torch" if chosen == "torch" else "torchrun's variables (TORCHELASTIC_*)",
                "elastic": "rdmacoll-run --elastic (RDMACOLL_ELASTIC_STORE)",
            }[kind]
            raise _core.RdmacollError(
                f"rdmacoll.init(): {how} asks for torch's store, and torch does not import here ({e}): "
                "pip install torch, or launch with mpiexec (RDMACOLL_BOOTSTRAP=mpi)"
            ) from None
    elif kind == "mpi" or (kind is None and _mpi_available()):
        ex = mpi.exchange()
    else:
        ex = LocalExchange()
    launcher.check_size(ex.size, ex.name, env)
    return ex


def _parsed(env, config, scope, name):
    """This process's setting `name` (of `scope`), as choosing the exchange needs it, even
    where another setting does not parse: bootstrap() reads them all again once the
    exchange exists and raises on every rank (before: only this rank raised, and its peers
    waited in the exchange until the launcher ended the job). Its own variables alone
    where the whole does not parse; its default where it does not parse itself."""
    try:
        return _settings.resolve(env, config, scope=scope)[0][name]
    except _core.RdmacollError:
        pass
    row = _settings.TABLE[name]
    own = {var: env[var] for var in (row["env"], row["alias"]) if var and var in env}
    given = (
        {k: v for k, v in config.items() if k in (name, row["env"], row["alias"])} if isinstance(config, dict) else None
    )
    try:
        return _settings.resolve(own, given, scope=scope)[0][name]
    except _core.RdmacollError:
        return row["default"]


def mpi_library() -> str:
    """The MPI library mpi4py would load (rdmacoll doctor)."""
    return mpi.mpi_library()


def _mpi_available() -> bool:
    return mpi.available()


def _host_identity() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}|{boot}"


class World:
    """What bootstrap learned: ranks, hosts, the settings in effect (and where each came
    from), and the connected core communicator."""

    def __init__(self, rank, size, local_rank, local_size, core, settings, sources, tuning_file, exchange, host_of):
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.core = core
        self.settings = settings
        self.sources = sources
        self.tuning_file = tuning_file
        self.exchange = exchange  # what bootstrapped it (mpi, torch's store, or none)
        self.host_of = host_of  # each rank's host, numbered in order of the hosts' first ranks


def _everywhere(world, err, what):
    """Raise on every rank when any rank reports an error (the ones that succeeded would
    otherwise wait for the others forever)."""
    errors = [e for e in world.allgather(err) if e]
    if errors:
        raise _core.RdmacollError(f"{what}: " + "; ".join(errors))


def _describe(rank, host_of, core, settings, sources):
    """init()'s report at info level, on every rank: which transport reaches which peers
    and through which interface, the settings that differ from their defaults and where
    each came from (the tuning file's verdict: _settings.log_tuning)."""
    say = lambda msg: _log.say(logging.INFO, rank, msg)  # noqa: E731
    kinds = {}
    for r, d in enumerate(core.peer_transports()):
        if d:
            kinds.setdefault(d.split()[0], []).append(r)
    where = getattr(core, "listen_address", "")
    say(
        f"host {host_of[rank]} of {len(set(host_of))}, transport {core.transport}: "
        + ("; ".join(f"{k} to ranks {v}" for k, v in kinds.items()) or "no peers")
        + (f"; listening on {where}" if where else "")
    )
    changed = [(name, sources[name]) for name in settings if sources.get(name, "default") != "default"]
    job_wide = {name for name, row in _settings.TABLE.items() if row["scope"] == "job"}
    say(
        "settings changed from their defaults: "
        + (
            ", ".join(
                f"{name}={settings[name]!r} ({'rank 0' if name in job_wide and rank else 'this rank'}'s {source})"
                if source != "init(config=)"
                else f"{name}={settings[name]!r} (init(config=))"
                for name, source in changed
            )
            or "none"
        )
    )


def bootstrap(config=None, exchange=None, comm=None) -> World:
    """Join the job: settings, hosts, addresses through `exchange` (default: the
    launcher's, or comm's, see choose()), then a connected core communicator. An elastic
    driver's world that is given up while it forms (a member lost: store.Cancelled) is
    left for the driver's next one."""
    if exchange is not None:
        return _join(config, exchange)
    while True:
        try:  # (choose() too: an elastic exchange's first step, its generation, may be cancelled)
            return _join(config, choose(config, comm=comm))
        except store.Cancelled as e:
            _log.logger.info(f"{e}; joining the next")


def _join(config, world) -> World:
    rank, size = world.rank, world.size

    # Rank 0's job-wide settings, or its reason for refusing them, reach every rank; and
    # the job's secret, which every transport connection proves (csrc/transport/tcp/
    # handshake.h): this channel is the only one it travels by.
    if rank == 0:
        try:
            job = (_settings.job(os.environ, config), None, secrets.token_bytes(32))
        except _core.RdmacollError as e:
            job = (None, str(e), None)
    job, bad, secret = world.bcast(job if rank == 0 else None)
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
        raise _core.RdmacollError(
            f"rdmacoll.init(): init(config=...) differs between ranks: rank 0 passed "
            f"{passed[0]}, rank {first} passed {passed[first]} (job-wide settings must agree)"
        )
    settings = dict(job["settings"], **mine)
    sources = dict(job["sources"], **mine_sources)
    # The logger's level (the setting where it is set) is the level the core logs at.
    settings["log_level"] = _log.configure(settings["log_level"] if sources["log_level"] != "default" else None)

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
        core = _core.Communicator(
            rank, size, local_size, settings, layout, _settings.tuning_for(job, max(ranks.values())), log=_log.emit
        )
        addr = core.address()
    except Exception as e:  # noqa: BLE001 - re-raised below on every rank
        err, addr = f"rank {rank}: {e}", b""
    try:
        _everywhere(world, err, "rdmacoll.init() failed")
        addresses = world.allgather(addr)
        try:
            core.connect(addresses, secret)
        except Exception as e:  # noqa: BLE001
            err = f"rank {rank}: {e}"
        _everywhere(world, err, "rdmacoll.init() failed to connect")
        world.barrier()
        formed = getattr(world, "formed", None)
        if formed is not None:  # (an elastic world: its driver counts the members that got here)
            formed()
    except BaseException:
        if core is not None:  # (its segments and sockets now, not when collected)
            core.close()
        raise
    if _log.logger.isEnabledFor(logging.INFO):
        _describe(rank, host_of, core, settings, sources)
    for var in _settings.horovod_ignored():
        _log.say(logging.DEBUG, rank, f"{var}={os.environ[var]!r} has no meaning in rdmacoll: ignored")
    if size > 1:  # (one rank: no algorithm to choose)
        _settings.log_tuning(job, max(ranks.values()), core.transport, rank)
    return World(rank, size, local_rank, local_size, core, settings, sources, job["tuning_file"], world, host_of)
