"""rdmacoll-run --elastic: Horovod's elastic driver (horovodrun --min-np/--max-np/
--host-discovery-script), for rdmacoll's workers.

    rdmacoll-run -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python train.py
    rdmacoll-run -np 4 --min-np 3 -H a:1,b:1,c:1,d:1 python train.py

The driver starts one worker per slot, tells each world who is in it through a torch
TCPStore it hosts (bootstrap/elastic.py: the keys and the secret), and watches:
  - a worker that exits with an error: its host is blacklisted (as Horovod does) and its
    other workers stopped; the survivors, whose collectives raised HorovodInternalError,
    restore their last commit and come back (hvd.elastic.run): the next world is formed of
    them;
  - a worker lost while a world bootstraps (before every worker counted itself in): the
    others wait for it there, so that world is given up and the next formed at once
    (they see it from their waits: bootstrap/elastic.py);
  - hosts that the discovery script (run every second by the shell, on a thread of its
    own: a slow one delays no recovery; lines "host:slots", or "host" with
    --slots-per-host) adds or removes: rank 0 hears of it at its next commit
    (state.check_host_updates), every rank raises HostsUpdatedInterrupt there, and the
    next world has the new hosts' workers (started now, given rank 0's state by
    broadcast: state.sync) and not the removed ones' (stopped);
  - fewer slots than --min-np: it waits up to --elastic-timeout (RDMACOLL_ELASTIC_TIMEOUT,
    HOROVOD_ELASTIC_TIMEOUT; 600 s) for hosts, then ends the job with an error that every
    waiting worker raises; --reset-limit ends it after that many new worlds;
  - the first worker that exits successfully: the job is finishing; the driver waits for
    the others and exits 0 when all of them did.
Ranks follow the hosts' order of appearance (the surviving hosts first), so rank 0, whose
state every new world starts from, is always a worker of the last world.

Workers on this machine (a host that resolves to a loopback address or to one of this
machine's) are started directly; others through ssh (not tested here: no second machine). The store listens on every
interface; workers elsewhere reach it at this host's name.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from . import _core, _settings
from .bootstrap import elastic as _elastic
from .bootstrap.store import tcp_store

DISCOVER_EVERY_S = 1.0
DISCOVERY_TIMEOUT_S = 60.0
POLL_S = 0.01


def _say(msg: str) -> None:
    print(f"rdmacoll-run: {msg}", file=sys.stderr, flush=True)


def is_local(host: str) -> bool:
    """Whether host is this machine: a name or address that resolves to a loopback address
    or to one this machine can bind (as Horovod, which compares with its interfaces')."""
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        return False
    if ipaddress.ip_address(addr).is_loopback:
        return True
    with socket.socket() as s:
        try:
            s.bind((addr, 0))
        except OSError:
            return False
    return True


def parse_discovered(text: str, default_slots: int | None) -> dict[str, int]:
    """The discovery script's output ("host:slots" or "host" per line) -> {host: slots}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        host, _, slots = line.partition(":")
        if slots:
            if not slots.isdigit():
                raise ValueError(f"host discovery: {line!r} is not host or host:slots")
            out[host] = int(slots)
        elif default_slots:
            out[host] = default_slots
        else:
            raise ValueError(f"host discovery: {line!r} has no slots, and --slots-per-host is not given")
    return out


def run_discovery(script: str, default_slots: int | None, started=None) -> dict[str, int]:
    """The discovery script's hosts; started(proc) is told of its process (its group: the
    script and what it started) so that another thread can stop it."""
    proc = subprocess.Popen(
        script, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        if started is not None:
            started(proc)
        out, err = proc.communicate(timeout=DISCOVERY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise RuntimeError(f"host discovery script {script} ran past {DISCOVERY_TIMEOUT_S:.0f} s: stopped") from None
    except BaseException:  # (a signal to the driver meanwhile: the script ends with it)
        _kill_group(proc)
        raise
    finally:
        if started is not None:
            started(None)
    if proc.returncode != 0:
        raise RuntimeError(f"host discovery script {script} failed ({proc.returncode}): {err[-500:]}")
    return parse_discovered(out, default_slots)


def _signal_group(proc: subprocess.Popen) -> None:
    """SIGKILL for proc's process group (start_new_session: the script and its children)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    """_signal_group, then reap proc (not waiting for output pipes that a process which
    left the group may still hold)."""
    _signal_group(proc)
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.wait()


class Hosts:
    """The hosts the job may use: fixed (-H) or the discovery script's, less the
    blacklisted; `order` is their order of first appearance (ranks follow it)."""

    def __init__(self, fixed: list[tuple[str, int]] | None, script: str | None, default_slots: int | None):
        self.fixed, self.script, self.default_slots = fixed, script, default_slots
        self.found: dict[str, int] = {}
        self.order: list[str] = []
        self.blacklisted: set[str] = set()

    def find(self) -> dict[str, int]:
        """The hosts now: fixed, or the discovery script's (run by the shell, as Horovod
        runs it: a command line with arguments)."""
        if self.fixed is not None:
            return dict(self.fixed)
        return run_discovery(self.script, self.default_slots)

    def discover(self) -> int:
        """Run discovery now; see update()."""
        return self.update(self.find())

    def update(self, found: dict[str, int]) -> int:
        """Take found as the hosts now; Horovod's flags of what changed (ADDED | REMOVED,
        0: nothing)."""
        before = self.available()
        self.found = found
        # as Horovod's: the hosts still there in their order, then the new ones (a host that
        # left and came back is new: its worker has no state to give rank 0)
        self.order = [h for h in self.order if h in found] + [h for h in found if h not in self.order]
        after = self.available()
        flags = 0
        if any(after.get(h, 0) > n for h, n in before.items()) or any(h not in before for h in after):
            flags |= _elastic.ADDED
        if any(after.get(h, 0) < n for h, n in before.items()):
            flags |= _elastic.REMOVED
        return flags

    def available(self) -> dict[str, int]:
        return {h: self.found[h] for h in self.order if h in self.found and h not in self.blacklisted}

    def slots(self, max_np: int | None) -> list[tuple[str, int]]:
        """(host, slot) of every rank of the next world, in rank order."""
        out = [(h, s) for h, n in self.available().items() for s in range(n)]
        return out[:max_np] if max_np else out


class Discovery:
    """The discovery script run every DISCOVER_EVERY_S on a thread of its own (as
    Horovod's driver runs it), so that a slow or stuck script delays no recovery: the
    driver takes its newest result when there is one."""

    def __init__(self, hosts: Hosts):
        self.hosts = hosts
        self._latest = None  # found hosts, or the exception that finding them raised
        self._proc = None  # the script's process while it runs
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rdmacoll-discovery", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(DISCOVER_EVERY_S):
            try:
                found = run_discovery(self.hosts.script, self.hosts.default_slots, self._started)
            except Exception as e:  # noqa: BLE001 - the driver's loop says it (a warning)
                found = e
            with self._lock:
                self._latest = found

    def _started(self, proc) -> None:
        with self._lock:
            self._proc = proc
            stopped = self._stop.is_set()
        if stopped and proc is not None:  # (stop() came first; run_discovery reaps it)
            _signal_group(proc)

    def take(self):
        """The newest result not taken yet (hosts, or an exception), or None."""
        with self._lock:
            latest, self._latest = self._latest, None
        return latest

    def stop(self) -> None:
        """No more runs; a running script (and what it started) is stopped."""
        self._stop.set()
        with self._lock:
            if self._proc is not None and self._proc.returncode is None:  # (not reaped yet)
                _signal_group(self._proc)
        self._thread.join(timeout=5)


class _Ended(Exception):
    """The job cannot go on (the driver's reason)."""


class Worker:
    def __init__(self, host: str, slot: int, proc: subprocess.Popen, world: int):
        self.host, self.slot, self.proc = host, slot, proc
        self.world = world  # the world it was started for


class Driver:
    def __init__(self, program, np_, min_np, max_np, hosts: Hosts, timeout_s, hang_s, reset_limit, env_names):
        self.program, self.np, self.min_np, self.max_np = program, np_, min_np, max_np
        self.hosts, self.timeout_s, self.hang_s, self.reset_limit = hosts, timeout_s, hang_s, reset_limit
        self.env_names = env_names
        self.secret = secrets.token_hex(32)
        self.prefix = _elastic.prefix_of(self.secret)
        self.store = tcp_store("0.0.0.0:0", timeout_s=60, is_master=True)
        self.workers: dict[tuple[str, int], Worker] = {}
        self.world: list[tuple[str, int]] = []  # the current world's slots, in rank order
        self.formed_world: list[tuple[str, int]] = []  # the last world every worker of which bootstrapped
        self.formed_round = 0  # its number
        self.round = 0
        self.resets = 0
        self.flags = 0  # what changed in the hosts since the current world formed
        self.stamp = 0

    # ---------------------------------------------------------------- workers
    def _env(self, host: str, slot: int) -> dict[str, str]:
        everywhere_local = all(is_local(h) for h in self.hosts.order)
        return {
            "RDMACOLL_ELASTIC_STORE": f"{'127.0.0.1' if everywhere_local else socket.gethostname()}:{self.store.port}",
            "RDMACOLL_ELASTIC_SECRET": self.secret,
            "RDMACOLL_ELASTIC_HOST": host,
            "RDMACOLL_ELASTIC_SLOT": str(slot),
            "RDMACOLL_ELASTIC_DRIVER": str(os.getpid()),  # (a worker started here ends with it)
            # the driver's limits, whatever the workers' environment says: a worker waits
            # for a world as long as the driver may take to form one
            "RDMACOLL_ELASTIC_TIMEOUT": str(self.timeout_s),
            "RDMACOLL_TIMEOUT": str(self.hang_s),
        }

    def _start(self, host: str, slot: int, world: int) -> None:
        mine = dict(self._env(host, slot), RDMACOLL_ELASTIC_WORLD=str(world))
        if is_local(host):
            proc = subprocess.Popen(self.program, env=dict(os.environ, **mine), start_new_session=True)
        else:
            passed = {name: os.environ[name] for name in self.env_names if name in os.environ}
            line = f"cd {shlex.quote(os.getcwd())} && env " + " ".join(
                f"{k}={shlex.quote(v)}" for k, v in {**passed, **mine}.items()
            )
            line += " " + " ".join(shlex.quote(a) for a in self.program)
            proc = subprocess.Popen(["ssh", "-o", "BatchMode=yes", host, line], start_new_session=True)
        self.workers[(host, slot)] = Worker(host, slot, proc, world)

    def _stop(self, key) -> None:
        w = self.workers.pop(key)
        if w.proc.poll() is None:
            _signal_group(w.proc)
            w.proc.wait()

    def _all_formed(self) -> bool:
        """Whether every worker of the current world has bootstrapped it (formed/<n>)."""
        return int(self.store.add(f"{self.prefix}formed/{self.round}", 0)) >= len(self.world)

    def _ready(self, key) -> int:
        k = f"{self.prefix}ready/{key[0]}/{key[1]}"
        return int(bytes(self.store.get(k)).decode()) if self.store.check([k]) else 0

    # ---------------------------------------------------------------- worlds
    def _form(self, wanted: int) -> bool:
        """Form the next world once `wanted` slots are available; False while fewer are."""
        slots = self.hosts.slots(self.max_np)
        if len(slots) < wanted:
            return False
        # the last world all of whose workers bootstrapped: theirs is the job's state (one
        # given up while it formed had newcomers that never received it)
        if self.world and self._all_formed():
            self.formed_world, self.formed_round = self.world, self.round
        base = self.formed_world
        if base and (slots[0] not in base or slots[0] not in self.workers):
            raise _Ended("no worker of the last world is first in the next one: no state to start it from")
        for key in [k for k in self.workers if k not in slots and k[0] not in self.hosts.blacklisted]:
            self._stop(key)  # (removed hosts' workers; a hung one, blacklisted, is left to end on its own)
        n = self.round + 1
        for key in slots:
            if key not in self.workers:
                self._start(*key, world=n)  # (it waits for world n, not an earlier one it may read first)
        for r, (h, s) in enumerate(slots):
            self.store.set(f"{self.prefix}r/{n}/assign/{h}/{s}", f"{r} {len(slots)}")
        # the changes of hosts this world has seen: a notice after it is news to its workers
        # (however soon after, before their reset has run)
        self.store.set(f"{self.prefix}r/{n}/hosts_stamp", str(self.stamp))
        # whether it has workers the last formed world had not: they need rank 0's state,
        # even where the change the others were told of removed hosts only (--max-np let a
        # waiting host in): every worker syncs then (hvd.elastic.run)
        # (a slot of that world whose worker was started since, its host removed and back: new)
        newcomers = any(k not in base or self.workers[k].world > self.formed_round for k in slots)
        self.store.set(f"{self.prefix}r/{n}/newcomers", "1" if newcomers else "0")
        # without newcomers, the world it comes from and each rank's rank there: its workers
        # may form it in place, over that world's connections (bootstrap/elastic.py)
        if base and not newcomers:
            origin = " ".join(str(x) for x in [self.formed_round, *(base.index(k) for k in slots)])
            self.store.set(f"{self.prefix}r/{n}/from", origin)
        self.round = int(self.store.add(f"{self.prefix}round", 1))
        self.world, self.flags = slots, 0
        _say(f"world {self.round}: {len(slots)} workers on {', '.join(sorted({h for h, _ in slots}))}")
        return True

    def _abort(self, why: str) -> int:
        self.store.set(f"{self.prefix}abort", why)
        _say(f"error: {why}")
        deadline = time.monotonic() + 30  # the waiting workers read it within 20 ms
        while any(w.proc.poll() is None for w in self.workers.values()) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        for key in list(self.workers):
            self._stop(key)
        return 1

    def run(self) -> int:
        try:
            return self._run()
        except _Ended as e:
            return self._abort(str(e))
        finally:
            for key in list(self.workers):
                self._stop(key)

    def _run(self) -> int:
        self.hosts.discover()
        waited_since = time.monotonic()
        while not self._form(self.np):
            if time.monotonic() - waited_since > self.timeout_s:
                return self._abort(f"fewer than -np {self.np} slots for {self.timeout_s:.0f} s")
            time.sleep(DISCOVER_EVERY_S)
            self.hosts.discover()
        discovery = Discovery(self.hosts) if self.hosts.script else None
        try:
            return self._watch(discovery)
        finally:
            if discovery is not None:
                discovery.stop()

    def _watch(self, discovery) -> int:
        changed, finished, left_since, waited_since, unformed = False, {}, None, None, False
        while True:
            now = time.monotonic()
            for key, w in list(self.workers.items()):
                if key not in self.workers:  # (stopped with its host, earlier in this loop)
                    continue
                rc = w.proc.poll()
                if rc is None:
                    continue
                del self.workers[key]
                if key not in self.world:  # (a worker left out of this world, ending)
                    continue
                if rc == 0 or finished:
                    finished[key] = rc
                else:
                    _say(f"worker {key[0]}[{key[1]}] exited with {rc}: host {key[0]} blacklisted")
                    self._blacklist(key[0])
                    changed = True
                    # lost before every worker had bootstrapped this world: the others wait
                    # for it there, and never leave; the next world gives this one up
                    if not self._all_formed():
                        _say(f"world {self.round} lost a worker while it formed: forming the next")
                        unformed = True
            if finished:  # the job is ending: the others of this world end too
                if any(k in self.workers for k in self.world):
                    time.sleep(POLL_S)
                    continue
                failed = {f"{h}[{s}]": rc for (h, s), rc in finished.items() if rc != 0}
                if failed:
                    _say(f"error: workers of the last world failed: {failed}")
                return 1 if failed else 0
            found = discovery.take() if discovery is not None else None
            if found is not None:
                if isinstance(found, Exception):
                    _say(f"warning: {found}")
                    flags = 0
                else:
                    flags = self.hosts.update(found)
                if flags and self.hosts.slots(self.max_np) != self.world:
                    self.flags |= flags
                    self.stamp += 1
                    self.store.set(f"{self.prefix}hosts_updated", f"{self.stamp} {self.flags}")
                    changed = True
            # Workers leave this world (back in init(): a collective failed, or the hosts
            # changed). Once every one of them has left or is gone, the next world forms; one
            # that has not left RDMACOLL_TIMEOUT after the first did is hung (SIGSTOP, a
            # lost machine): its host is blacklisted and the world forms without it (it
            # raises when it runs again: it is in no world any more).
            left = int(self.store.add(f"{self.prefix}left/{self.round}", 0))
            if left and left_since is None:
                left_since = now
            if not (changed or left):
                time.sleep(POLL_S)
                continue
            # (a world given up while it formed: nobody will leave it, nobody needs to)
            staying = [] if unformed else [k for k in self.world if k in self.workers and self._ready(k) < self.round]
            if staying and left_since is not None and now - left_since > self.hang_s:
                names = ", ".join(f"{h}[{s}]" for h, s in staying)
                _say(f"workers {names} did not leave world {self.round} within {self.hang_s:.0f} s: hosts blacklisted")
                for h, _ in staying:
                    self._blacklist(h, stop=False)
                staying = []
            if not staying:
                if self.reset_limit is not None and self.resets >= self.reset_limit:
                    return self._abort(f"the job reset {self.resets} times (--reset-limit {self.reset_limit})")
                waited_since = waited_since or now
                if self._form(self.min_np):
                    self.resets += 1
                    changed, left_since, waited_since, unformed = False, None, None, False
                elif now - waited_since > self.timeout_s:
                    return self._abort(
                        f"fewer than --min-np {self.min_np} slots ({len(self.hosts.slots(self.max_np))}) "
                        f"for {self.timeout_s:.0f} s (--elastic-timeout)"
                    )
            time.sleep(POLL_S)

    def _blacklist(self, host: str, stop: bool = True) -> None:
        """As Horovod: a host whose worker failed takes no more workers; its other workers
        are stopped (stop=False: left to end on their own, outside every world)."""
        self.hosts.blacklisted.add(host)
        if stop:
            for key in [k for k in self.workers if k[0] == host]:
                self._stop(key)


def main(args, fixed, env_names) -> int:
    """rdmacoll-run's elastic mode: rdmacoll/run.py parsed the arguments (args.program) and
    the fixed hosts (-H, --hostfile; None: the discovery script's)."""
    if fixed is None and args.host_discovery_script is None:
        fixed = [("localhost", args.np)]
    hosts = Hosts(fixed, args.host_discovery_script, args.slots)
    settings = _settings.resolve(os.environ, None, scope="job")[0]
    timeout = settings["elastic_timeout"] if args.elastic_timeout is None else args.elastic_timeout
    min_np = args.min_np or args.np
    if args.max_np is not None and args.max_np < min_np:
        raise SystemExit("rdmacoll-run: --max-np is below --min-np")
    try:
        driver = Driver(
            args.program, args.np, min_np, args.max_np, hosts, timeout, settings["timeout"], args.reset_limit, env_names
        )
    except ModuleNotFoundError as e:
        raise SystemExit(f"rdmacoll-run --elastic hosts torch's TCPStore: pip install torch ({e})") from None
    except _core.RdmacollError as e:
        raise SystemExit(f"rdmacoll-run: {e}") from None
    # a driver stopped by a signal (a scheduler's SIGTERM, Ctrl-C) stops its workers first
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    return driver.run()
