"""The worker's side of an elastic job (`rdmacoll-run --elastic`, rdmacoll/elastic_run.py):
the driver's store tells each world who is in it.

The driver hosts a torch TCPStore and starts every worker with four variables:
RDMACOLL_ELASTIC_STORE (host:port), RDMACOLL_ELASTIC_SECRET (the job's secret, hex),
RDMACOLL_ELASTIC_HOST and RDMACOLL_ELASTIC_SLOT (the worker's host as the driver names it,
and its slot there). A worker the driver started itself (its parent: the driver's pid,
RDMACOLL_ELASTIC_DRIVER) ends with it: SIGTERM when the driver dies, even by SIGKILL
(prctl's PR_SET_PDEATHSIG), as horovodrun's workers end with it. Every key lives under a
prefix derived from the secret: a process that
does not hold it does not know where the job's keys are (torch's store has no listing and
no authentication of its own), and the transport's secret, which every connection proves,
travels under that prefix only.

Keys (under the prefix), the driver's unless said:
    round                 the newest world's number (1, 2, ...; an integer counter)
    r/<n>/assign/<h>/<s>  "rank size" of slot s of host h in world n; absent: not in it
    r/<n>/hosts_stamp     the stamp of the last change of hosts world n was formed with
    r/<n>/newcomers       "1" when world n has workers the last world that formed (every
                          worker counted in formed/) had not, else "0"
    r/<n>/from            without newcomers: "m q0 q1 ...", world n's members came from world
                          m (the last that formed) where rank r of n was rank q_r
    r/<n>/world/...       that world's bootstrap (a StoreExchange among its members)
    r/<n>/in_place/<r>    rank r's part of forming world n in place (the worker's; see Place)
    ready/<h>/<s>         the worker's: the last world it left (started for world n: n - 1): it
                          waits for the next
    formed/<n>            how many workers have finished bootstrapping world n (each adds 1):
                          a worker lost before all did leaves the others waiting in the
                          bootstrap, so the driver forms the next world at once, and the
                          waiting ones give this one up when they see it (store.Cancelled)
    left/<n>              how many workers have left world n (each adds 1)
    hosts_updated         "timestamp flags" of the driver's last change of hosts (rank 0 polls it:
                          State.check_host_updates; flags 1 removed, 2 added, as Horovod's)
    abort                 why the job ends (fewer hosts than --min-np for too long, a reset
                          limit): every waiting worker raises it

A worker's init() (Member.next_world) says which world it left, waits for a newer
one that includes it, and bootstraps that world's communicator among its members; its
shutdown() and init() again move it to the next. Horovod's reset (rdmacoll/_in_place.py)
first tries to form the next world in place: Member.next_place, then one round of keys
among its members (Place.gather) to agree that every one of them still holds the world
it came from, then a communicator split off that world's. Which world a process was in
last outlives its sessions: it is kept here, per driver store and slot (the process's
place in the job, not a session's state).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import pickle
import signal
import time

from .. import _core
from .store import FAST_S, FIRST_PAUSE_S, StoreExchange, next_pause, poll_until, prefixed, tcp_store

VARS = ("RDMACOLL_ELASTIC_STORE", "RDMACOLL_ELASTIC_SECRET", "RDMACOLL_ELASTIC_HOST", "RDMACOLL_ELASTIC_SLOT")
REMOVED, ADDED = 1, 2  # Horovod's HostUpdateResult flags (horovod/runner/elastic/worker.py)


def prefix_of(secret_hex: str) -> str:
    """The job's key prefix, from its secret (the driver's and the workers' the same)."""
    return "rdmacoll-elastic/" + hashlib.sha256(bytes.fromhex(secret_hex)).hexdigest()[:32] + "/"


class Member:
    """This process's place in an elastic job: its driver's store, host and slot, and the
    last world it was in."""

    def __init__(self, env, timeout_s: float):
        self.address = env["RDMACOLL_ELASTIC_STORE"]
        self.prefix = prefix_of(env["RDMACOLL_ELASTIC_SECRET"])
        self.host, self.slot = env["RDMACOLL_ELASTIC_HOST"], env["RDMACOLL_ELASTIC_SLOT"]
        _end_with_driver(env.get("RDMACOLL_ELASTIC_DRIVER"))
        try:
            self.store = tcp_store(self.address, timeout_s)
        except RuntimeError as e:  # (torch's DistNetworkError)
            raise _core.RdmacollError(f"rdmacoll.init(): the elastic driver's store at {self.address}: {e}") from None
        # the last world this process was in; a worker the driver starts waits for the world
        # it was started for (RDMACOLL_ELASTIC_WORLD), not an earlier one it could read first
        self.world = int(env.get("RDMACOLL_ELASTIC_WORLD", "1")) - 1
        self.joined = False  # whether it has been in one (it counts itself out when it leaves)

    def _get(self, key: str) -> str | None:
        k = self.prefix + key
        return bytes(self.store.get(k)).decode() if self.store.check([k]) else None

    def next_world(self, timeout_s: float) -> StoreExchange:
        """Wait for a world newer than the last one this process was in, and the exchange
        among its members; RdmacollError when the driver ends the job or leaves this
        worker out (its host was removed or blacklisted)."""
        place = self.next_place(timeout_s)
        if place.origin is not None:
            # the others may be forming it in place (rdmacoll/_in_place.py): this process holds
            # no world to form it from, and says so, so that every member bootstraps it
            place.gather(None)
        return place.exchange()

    def next_place(self, timeout_s: float) -> Place:
        """Wait for a world newer than the last one this process was in: this worker's
        place in it (next_world's errors)."""
        p, me = self.prefix, f"{self.host}/{self.slot}"
        self.store.set(f"{p}ready/{me}", str(self.world))
        if self.joined:
            self.store.add(f"{p}left/{self.world}", 1)
        start = time.monotonic()
        deadline = start + timeout_s
        pause = FIRST_PAUSE_S
        while True:
            why = self._get("abort")
            if why is not None:
                raise _core.RdmacollError(f"rdmacoll.init(): the elastic job ended: {why}")
            n = int(self.store.add(f"{p}round", 0))
            if n > self.world:
                break
            if time.monotonic() > deadline:
                raise _core.RdmacollError(
                    f"rdmacoll.init(): the elastic driver at {self.address} formed no new world within "
                    f"{timeout_s:.0f} s (RDMACOLL_ELASTIC_TIMEOUT)"
                )
            time.sleep(pause)
            pause = next_pause(pause, time.monotonic() - start, FAST_S)
        place = self._get(f"r/{n}/assign/{me}")
        if place is None:
            raise _core.RdmacollError(
                f"rdmacoll.init(): this worker ({me}) is not in the elastic job's world {n}: its host "
                "was removed or blacklisted"
            )
        self.world, self.joined = n, True
        rank, size = (int(x) for x in place.split())
        origin = self._get(f"r/{n}/from")
        return Place(self, n, rank, size, [int(x) for x in origin.split()] if origin else None, timeout_s)

    def _given_up(self, n: int) -> str | None:
        """Why world n, bootstrapping, will never form: the driver formed a newer one (a
        member was lost meanwhile) or ended the job; None while it may."""
        try:
            newest = int(self.store.add(f"{self.prefix}round", 0))
            ending = self._get("abort") is not None
        except RuntimeError as e:  # (torch's DistNetworkError)
            raise _core.RdmacollError(
                f"rdmacoll.init(): the elastic driver's store at {self.address} is gone: {e}"
            ) from None
        if newest > n:
            return f"world {n} was given up while it formed (a worker was lost): the driver formed world {newest}"
        if ending:
            return f"world {n} was given up while it formed: the job is ending"
        return None

    def world_stamp(self) -> int:
        """The stamp of the last change of hosts that this worker's world was formed with
        (a later one is news to it, even when it came before the worker looked); 0 before
        any world."""
        text = self._get(f"r/{self.world}/hosts_stamp") if self.joined else None
        return int(text) if text else 0

    def world_has_newcomers(self) -> bool:
        """Whether this worker's world has workers the last world that formed had not
        (they need rank 0's state)."""
        return self.joined and self._get(f"r/{self.world}/newcomers") == "1"

    def host_update(self) -> tuple[int, int]:
        """(timestamp, flags) of the driver's last change of hosts; (0, 0) when none."""
        text = self._get("hosts_updated")
        if not text:
            return 0, 0
        stamp, flags = text.split()
        return int(stamp), int(flags)


class Place:
    """A worker's place in world n of the job: its rank and size there, and where the world
    comes from: origin (m, [rank in world m of each rank of n]) when every member was in
    world m, the last that formed; None when it has newcomers. `name` is the exchange's
    (Session.elastic), `round` the world's number."""

    name = "elastic"

    def __init__(self, member: Member, n: int, rank: int, size: int, origin: list | None, timeout_s: float):
        self.member, self.round, self.rank, self.size, self.timeout_s = member, n, rank, size, timeout_s
        self.origin = (origin[0], origin[1:]) if origin and len(origin) == size + 1 else None

    def cancelled(self) -> str | None:
        """Why this world will never form (Member._given_up), None while it may."""
        return self.member._given_up(self.round)

    def formed(self) -> None:
        """Count this worker in: it has finished forming the world (the driver's formed/<n>)."""
        self.member.store.add(f"{self.member.prefix}formed/{self.round}", 1)

    def exchange(self) -> StoreExchange:
        """The bootstrap's exchange among the world's members (a new world's connections)."""
        p = f"{self.member.prefix}r/{self.round}/"
        ex = StoreExchange(
            prefixed(p + "world/", self.member.store),
            self.rank,
            self.size,
            timeout_s=self.timeout_s,
            cancelled=self.cancelled,
        )
        ex.name, ex.round, ex.formed = self.name, self.round, self.formed
        return ex

    def gather(self, obj) -> list:
        """Every member's obj (picklable), in rank order: the one round of forming the world
        in place (keys r/<n>/in_place/<rank>, written once: a world's number is never used
        twice). store.Cancelled when the world will never form (a member lost meanwhile)."""
        store, p = self.member.store, f"{self.member.prefix}r/{self.round}/in_place/"
        store.set(f"{p}{self.rank}", pickle.dumps(obj))
        keys = [f"{p}{q}" for q in range(self.size)]
        poll_until(
            lambda: store.check(keys),
            lambda: f"rdmacoll.init(): world {self.round}'s members did not all reach it within {self.timeout_s:.0f} s",
            self.timeout_s,
            self.cancelled,
            fast_s=FAST_S,
        )
        return [pickle.loads(bytes(v)) for v in store.multi_get(keys)]


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _end_with_driver(driver_pid: str | None) -> None:
    """SIGTERM for this process when its parent, the driver, dies (not through a shell or
    ssh between them: their own end is theirs); an error at once when it is already gone."""
    if not driver_pid or os.getppid() != int(driver_pid):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return  # (not Linux, or refused: the driver's store says when it is gone)
    if os.getppid() != int(driver_pid):  # (it died before the call)
        raise _core.RdmacollError(f"rdmacoll.init(): the elastic driver (pid {driver_pid}) is gone")


_members: dict = {}  # (store address, secret, host, slot) -> Member: see the module docstring


def member(env=None, timeout_s: float = 600.0) -> Member | None:
    """This process's Member when an elastic driver started it, else None."""
    env = os.environ if env is None else env
    if not env.get("RDMACOLL_ELASTIC_STORE"):
        return None
    missing = [v for v in VARS if not env.get(v)]
    if missing:
        raise _core.RdmacollError(
            f"rdmacoll.init(): an elastic worker needs {', '.join(missing)} (set by rdmacoll-run)"
        )
    key = tuple(env[v] for v in VARS)
    if key not in _members:
        _members[key] = Member(env, timeout_s)
    return _members[key]
