"""The session: everything rdmacoll holds between init() and shutdown(), in one object.

    s = rdmacoll._session.current()   # the one module-level reference (never None)
    s.comm                            # the world's core communicator (also the async engine:
                                      # its *_async calls queue on the core's executor)
    s.rank, s.size, s.local_rank, s.local_size, s.cross_rank, s.cross_size, s.is_homogeneous
    s.settings                        # the resolved settings (the job's, from bootstrap)
    s.sets                            # the process sets and their sub-communicators
    s.epoch                           # 1, 2, ...: one more on every (re)build of the world
    s.made_by                         # init()'s arguments, for a rebuild (rdmacoll.init)
    s.elastic                         # made by an elastic driver (bootstrap/elastic.py)
    s.on_reset(fn)                    # fn() runs once when this session is torn down

Every way into the core goes through the current session: the module functions
(rdmacoll.allreduce ...), the process sets (process_sets.py), the join wrappers and the
adapters (rdmacoll/frameworks/). Nothing else keeps a communicator at module level, so a
session can be torn down and another built in the same process (shutdown() then init(),
and later elastic training's reset), and two Session objects may exist at once (the
torch.distributed backend's world is one that is not current).

The membership epoch and the reset hooks are the seam for elastic training: a cache built
from one session's communicator (join's descriptor templates, optimizer buckets in
library memory) registers fn with on_reset and drops itself when that session closes;
the hooks of a session run once, in registration order, after its communicator is
closed, and a cache built again on the next session registers again there.

Before the first init() and after shutdown() the current session is a closed one: its
epoch stays readable (the next session's is one more), and its communicator raises
"not initialised" on any use, so the hot path needs no test of its own.
"""

from __future__ import annotations

from typing import Any, Callable

from . import _core


# Horovod raises ValueError ("Horovod has not been initialized; use hvd.init()."): a
# RdmacollValueError is both that and an RdmacollError; the text names both ways in.
NOT_INITIALISED = "rdmacoll is not initialised: call rdmacoll.init() first (hvd.init() with Horovod's API)"


class _Uninitialized:
    """Stands in for the communicator of a closed session."""

    def __getattr__(self, name):
        raise _core.RdmacollValueError(NOT_INITIALISED)


_CLOSED_COMM = _Uninitialized()


def layout(host_of, rank):
    """(local_rank, local_size, cross_rank, cross_size, is_homogeneous) of `rank`, given each
    rank's host (host_of[r]): Horovod's definitions, right on uneven hosts too. The cross
    communicator is the ranks with this rank's local rank (one per host that has that
    many), in rank order."""
    local: list[int] = []
    seen: dict = {}
    for h in host_of:
        local.append(seen.get(h, 0))
        seen[h] = local[-1] + 1
    cross = [r for r in range(len(host_of)) if local[r] == local[rank]]
    homogeneous = len(set(seen.values())) == 1
    return local[rank], seen[host_of[rank]], cross.index(rank), len(cross), homogeneous


class Session:
    """One world: a connected core communicator and what is known about it (see the module
    docstring). Built from a bootstrap World (rdmacoll.bootstrap.bootstrap); close() is the
    one place that tears it down."""

    __slots__ = (
        "comm",
        "world",
        "epoch",
        "rank",
        "size",
        "local_rank",
        "local_size",
        "cross_rank",
        "cross_size",
        "is_homogeneous",
        "host_of",
        "settings",
        "sets",
        "made_by",
        "closed",
        "_hooks",
    )
    # Typed as an open session has them: a closed one (no world) holds None, and only
    # require() / the module functions, which refuse a closed session, read them.
    comm: Any
    world: Any
    epoch: int
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    is_homogeneous: bool
    host_of: list
    settings: dict
    sets: Any  # process_sets.ProcessSets once attached
    made_by: tuple  # init()'s (config, comm, dynamic): what rebuilding this world takes again
    closed: bool
    _hooks: list[Callable[[], object]]

    def __init__(self, world, epoch):
        self.world = world  # the bootstrap World (exchange, sources, tuning file); None: closed
        self.epoch = epoch
        self.sets = None  # process_sets.ProcessSets, attached by init() (its registration is collective)
        self.made_by = (None, None, False)
        self._hooks = []
        if world is None:
            self.comm, self.closed = _CLOSED_COMM, True
            self.settings, self.host_of = None, None  # type: ignore[assignment]
            self.rank = self.size = self.local_rank = self.local_size = None  # type: ignore[assignment]
            self.cross_rank = self.cross_size = self.is_homogeneous = None  # type: ignore[assignment]
            return
        self.comm, self.closed = world.core, False
        self.rank, self.size = world.rank, world.size
        self.host_of = list(world.host_of)
        self.settings = world.settings
        self.local_rank, self.local_size, self.cross_rank, self.cross_size, self.is_homogeneous = layout(
            self.host_of, self.rank
        )

    @property
    def elastic(self) -> bool:
        """Whether an elastic driver's store made this world (bootstrap/elastic.py): the
        job's next world may have other ranks."""
        return self.world is not None and self.world.exchange.name == "elastic"

    def __repr__(self):
        state = "closed" if self.closed else f"rank {self.rank} of {self.size}"
        return f"<rdmacoll Session epoch {self.epoch}, {state}>"

    def on_reset(self, fn):
        """fn() runs once, after this session's communicator is closed (shutdown(), or a
        reset), in registration order. On a closed session it runs at once. Returns fn."""
        if self.closed:
            fn()
        else:
            self._hooks.append(fn)
        return fn

    def split(self, ranks, exchange):
        """A connected sub-communicator of this world over `ranks` (positions in it, in the
        sub-communicator's rank order), or None on a rank outside them. exchange(address)
        -> the members' addresses in that order: every rank passes its own (None outside
        the set; process sets run it on every rank to check the set, the torch.distributed
        backend's groups through the group's store). The one place sub-communicators are
        made (process sets and torch.distributed groups)."""
        sub = self.comm.split(list(ranks)) if self.rank in ranks else None
        try:
            addresses = exchange(sub.address() if sub is not None else None)
            if sub is not None:
                sub.connect(addresses)
                # Every member has reached every other's memory before any may close its own:
                # a member whose first call fails at once (a mismatch) would otherwise close
                # its region while a slower one still connects to it, which then fails with
                # "cannot reach peer memory" instead of the job's error.
                sub.barrier()
        except BaseException:
            if sub is not None:
                sub.close()
            raise
        return sub

    def close(self, wait=True):
        """Tear the session down: wait (at most the timeout setting) until every rank has
        finished the collectives before (a job that already failed skips it; wait=False:
        no waiting, as a torch process group's shutdown does not wait for its peers), close
        the process sets and the communicator, then run the reset hooks. Idempotent. The
        first exception of a hook is raised after every hook has run."""
        if self.closed:
            return
        try:
            if wait:
                self.comm.barrier()
        except (_core.RdmacollError, KeyboardInterrupt):
            pass
        error = None
        try:
            if self.sets is not None:
                self.sets.stop()
        except Exception as e:  # noqa: BLE001 - raised below, after the hooks ran
            error = e
        self.comm.close()
        self.comm, self.closed = _CLOSED_COMM, True
        hooks, self._hooks = self._hooks, []
        for fn in hooks:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - raised below, after every hook ran
                error = error or e
        if error is not None:
            raise error


_current = Session(None, 0)  # the only module-level state: the current session (closed: no job)


def current() -> Session:
    """The current session (a closed one before init() and after shutdown())."""
    return _current


def require() -> Session:
    """The current session; RdmacollValueError (a ValueError, as Horovod's) when rdmacoll
    is not initialised."""
    if _current.closed:
        raise _core.RdmacollValueError(NOT_INITIALISED)
    return _current


def start(world) -> Session:
    """Make a session of `world` (a bootstrap World) the current one, its epoch one more
    than the last one's. The current session must be closed."""
    global _current
    if not _current.closed:
        raise _core.RdmacollError("rdmacoll is initialised already: shutdown() first")
    _current = Session(world, _current.epoch + 1)
    return _current


def stop() -> None:
    """Close the current session (nothing when it is closed); it stays current, closed."""
    _current.close()
