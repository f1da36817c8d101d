"""Launch test workers under the real mpiexec and collect what they report.

Workers (tests/workers/*.py) print result records as lines ``@@rc {json}`` (see
workers/common.py: emit); everything else they print is kept as plain output and shown
when a test fails. A launch:

- finds ``mpiexec`` next to sys.executable first (the venv's MPI), then on PATH, and skips
  the test when there is none;
- adapts to MPICH (hydra) or Open MPI (``--oversubscribe``, run-as-root variables);
- runs from a fresh temporary directory, so the source tree never shadows the installed
  package, with the caller's RDMACOLL_* variables removed (tests set their own);
- starts the launcher in a new session and tracks every descendant (MPI launchers put
  ranks into sessions of their own, so the process group alone does not reach them);
  on timeout it kills exactly those processes and fails with the ranks' output.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
WORKERS_DIR = TESTS_DIR / "workers"
RECORD_PREFIX = "@@rc "
# how long a rank may take to finish exiting after its launcher ended before it counts as
# left running (under emulation a rank closing an RDMA device takes a while)
LEFTOVER_GRACE_S = 10.0
# Every limit here is a guard against hangs, never a speed check. Where a test's CPU is not
# its own it stretches them: the Soft-RoCE guest's QEMU runs under SCHED_IDLE beside the
# host's suite and gets only what that leaves idle (its launches ran 4x slower than alone
# in a CI run, and a 120 s wait for a loop to start ran out); tests/test_rdma_guest.py
# sets this there.
TIME_SCALE = float(os.environ.get("TESTS_TIME_SCALE", "1"))


def parse_record(line) -> dict | None:
    """The record on a stdout line, or None. A record is one write() of one whole line,
    but mpiexec merges the ranks' streams by chunks, not by lines: another rank's partial
    line (block-buffered print output) may come first, so the prefix is searched for."""
    if line.stream != "out":
        return None
    i = line.text.find(RECORD_PREFIX)
    return None if i < 0 else json.loads(line.text[i + len(RECORD_PREFIX) :])


# --------------------------------------------------------------------------- launcher


@functools.cache
def find_mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpiexec")


@functools.cache
def launcher_kind() -> str:
    """'mpich' (hydra, also Intel MPI), 'openmpi', or 'unknown'."""
    exe = require_mpiexec()
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        text = out.stdout + out.stderr
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "Open MPI" in text or "OpenRTE" in text or "PRRTE" in text or "prterun" in text:
        return "openmpi"
    if "HYDRA" in text or "MPICH" in text or "Intel(R) MPI" in text:
        return "mpich"
    return "unknown"


def require_mpiexec() -> str:
    exe = find_mpiexec()
    if exe is None:
        pytest.skip("no mpiexec found (next to sys.executable or on PATH); install an MPI, e.g. pip install mpich")
    return exe


def keep_siblings_flags() -> list[str]:
    """Launcher flags so that a rank that dies does not take its siblings down."""
    kind = launcher_kind()
    if kind == "mpich":
        return ["-disable-auto-cleanup"]
    if kind == "openmpi":
        return ["--enable-recovery"]
    pytest.skip("unknown MPI launcher: cannot ask it to keep ranks alive after one dies")


def _launcher_command(nranks, script: Path, args, extra) -> list[str]:
    """nranks: a number, or a list of (ranks, wrapper argv) groups, which become an MPMD
    launch whose i-th group runs `wrapper python script args` (netns_util.py uses this to
    put each group of ranks on its own network-namespace "host")."""
    groups = [(nranks, [])] if isinstance(nranks, int) else list(nranks)
    cmd = [require_mpiexec()]
    if launcher_kind() == "openmpi":
        cmd.append("--oversubscribe")
    cmd += list(extra)
    for i, (n, wrapper) in enumerate(groups):
        cmd += ([":"] if i else []) + ["-n", str(n)] + list(wrapper)
        cmd += [sys.executable, str(script)] + [str(a) for a in args]
    return cmd


def _launch_env(env) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RDMACOLL_")}
    base["PYTHONUNBUFFERED"] = "1"
    # A tuning file in the user's cache would change which algorithms the tests see;
    # tests that want one set RDMACOLL_TUNING_FILE themselves.
    base["RDMACOLL_TUNING_FILE"] = "none"
    # One process per core: NumPy's OpenBLAS pool of one thread per core in every rank only
    # costs start-up (0.7 s per process in the emulated RDMA guest) and nothing here uses BLAS.
    base.setdefault("OPENBLAS_NUM_THREADS", "1")
    if find_mpiexec() is not None and launcher_kind() == "openmpi":
        base["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        base["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    base.update({k: str(v) for k, v in (env or {}).items()})
    return base


# --------------------------------------------------------------------------- processes


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state, ppid, pgid, session, ...) of
    a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # zombie: already dead, waiting to be reaped
        return None
    return fields


def _stat(pid: int):
    """(ppid, pgid, starttime) of a live process, or None."""
    fields = _stat_fields(pid)
    return None if fields is None else (int(fields[1]), int(fields[2]), int(fields[19]))


def _all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _descendants(root: int) -> dict[int, int]:
    """{pid: starttime} of root's live descendants and of its process group."""
    stats = {}
    for pid in _all_pids():
        s = _stat(pid)
        if s is not None:
            stats[pid] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found[c] = stats[c][2]
                todo.append(c)
    for pid, (_, pgid, start) in stats.items():
        if pgid == root:
            found[pid] = start
    return found


def session_members(sid: int) -> list[int]:
    """Live processes of the session sid leads (a process started with start_new_session):
    all it started, orphans included, but those that made sessions of their own."""
    found = []
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields is not None and int(fields[3]) == sid:
            found.append(pid)
    return found


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Wait until a process we killed has finished exiting (SIGKILL is asynchronous: a
    process unmapping a large address space is still running for a while); True if gone."""
    end = time.monotonic() + timeout
    while _stat(pid) is not None:
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def _still_running(tracked: dict[int, int]) -> list[int]:
    alive = []
    for pid, start in tracked.items():
        s = _stat(pid)
        if s is not None and s[2] == start:
            alive.append(pid)
    return alive


def kill_exactly(pids):
    """SIGKILL exactly these processes (and the groups they lead: ranks are session leaders)."""
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def dev_shm_entries(substring: str = "rdmacoll") -> list[str]:
    try:
        return sorted(n for n in os.listdir("/dev/shm") if substring in n)
    except FileNotFoundError:
        return []


# --------------------------------------------------------------------------- results


@dataclass
class Line:
    t: float  # time.time() when the harness read it
    stream: str  # "out" or "err"
    text: str


@dataclass
class Result:
    command: list
    returncode: int | None
    lines: list
    leftovers: list = field(default_factory=list)  # pids of the launch alive after it ended

    @property
    def records(self) -> list[dict]:
        out = []
        for ln in self.lines:
            rec = parse_record(ln)
            if rec is not None:
                rec.setdefault("_t", ln.t)
                out.append(rec)
        return out

    def select(self, **match) -> list[dict]:
        return [r for r in self.records if all(r.get(k) == v for k, v in match.items())]

    def output(self, max_lines: int = 400) -> str:
        body = [f"[{ln.stream}] {ln.text}" for ln in self.lines]
        if len(body) > max_lines:
            body = (
                body[: max_lines // 4]
                + [f"... {len(body) - max_lines} lines left out ..."]
                + body[-3 * max_lines // 4 :]
            )
        return f"command: {' '.join(self.command)}\nexit status: {self.returncode}\n" + "\n".join(body)

    def part(self, index: int) -> Result:
        """One part of a chained launch (run_chain, workers/chain.py) as if it had been a
        launch of its own: its records, every other line of output, and as exit status 0
        where every rank ended it (its "part_end" records) and a later part started, else
        the launch's (at least 1 when a later part started: a rank did not end this one)."""
        lines, later, ended, size = [], False, set(), None
        for ln in self.lines:
            rec = parse_record(ln)
            if rec is None or rec.get("part") == index:
                lines.append(ln)
            later = later or (rec is not None and rec.get("part", -1) > index)
            if rec is not None and rec.get("kind") == "part_end" and rec.get("part") == index:
                ended.add(rec["rank"])
                size = rec.get("size")
        if later:
            status = 0 if size is not None and len(ended) == size else (self.returncode or 1)
        else:
            status = self.returncode
        return Result(self.command, status, lines, self.leftovers)

    def fail(self, why: str):
        pytest.fail(f"{why}\n--- ranks' output ---\n{self.output()}", pytrace=False)

    def check(self, condition, why: str):
        if not condition:
            self.fail(why)


class Launch:
    """One mpiexec run (or another launcher's: `command` replaces mpiexec's), readable
    while it runs (for tests that act on what ranks say)."""

    def __init__(self, nranks, script, args=(), env=None, timeout=120, extra_launcher_args=(), command=None):
        script = Path(script)
        if not script.is_absolute():
            script = WORKERS_DIR / script
        self.script = str(script)
        self.command = (
            command(script) if command is not None else _launcher_command(nranks, script, args, extra_launcher_args)
        )
        self.env = _launch_env(env)
        self.timeout = timeout * TIME_SCALE
        self.lines: list[Line] = []
        self.tracked: dict[int, int] = {}
        self._cond = threading.Condition()
        self._threads = []
        self.proc = None

    # -- running
    def start(self) -> Launch:
        self._cwd = tempfile.mkdtemp(prefix="rdmacoll-test-")
        self.deadline = time.monotonic() + self.timeout
        self.proc = subprocess.Popen(
            self.command,
            cwd=self._cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
            errors="replace",
            bufsize=1,
        )
        for stream, name in ((self.proc.stdout, "out"), (self.proc.stderr, "err")):
            t = threading.Thread(target=self._read, args=(stream, name), daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._watch, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _read(self, stream, name):
        for text in stream:
            with self._cond:
                self.lines.append(Line(time.time(), name, text.rstrip("\n")))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _watch(self):
        # Ranks live in sessions of their own; remember every descendant while the
        # launcher still links them, so that they can be found (and killed) later.
        while self.proc.poll() is None:
            found = _descendants(self.proc.pid)
            with self._cond:
                self.tracked.update(found)
            time.sleep(0.1)

    def _track_reported_pids(self):
        """Add the pids ranks reported (in case one escaped the watcher), as long as they
        still run this launch's worker script (a dead rank's pid may have been reused)."""
        for rec in self.result().records:
            pid = rec.get("pid")
            if isinstance(pid, int) and pid not in self.tracked:
                s = _stat(pid)
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        ours = self.script.encode() in f.read()
                except OSError:
                    ours = False
                if s is not None and ours:
                    self.tracked[pid] = s[2]

    def result(self) -> Result:
        with self._cond:
            lines = list(self.lines)
        return Result(self.command, self.proc.returncode if self.proc else None, lines)

    def wait_record(self, timeout=None, **match) -> dict:
        """Block until a record with these fields appears; kill and fail if none does."""
        limit = timeout * TIME_SCALE if timeout else self.timeout
        end = min(self.deadline, time.monotonic() + limit)
        seen = 0
        while True:
            with self._cond:
                new, seen = self.lines[seen:], len(self.lines)
                ended = all(not t.is_alive() for t in self._threads[:2])  # both pipes at EOF
            for ln in new:
                rec = parse_record(ln)
                if rec is not None:
                    if all(rec.get(k) == v for k, v in match.items()):
                        rec["_t"] = ln.t
                        return rec
            if ended:
                self._abort(f"ended before any rank reported {match}")
            if time.monotonic() > end:
                self._abort(f"had no rank report {match} within {limit:.0f} s")
            with self._cond:
                if seen == len(self.lines):
                    self._cond.wait(0.1)

    def finish(self) -> Result:
        """Wait for the launch to end (killing it at the deadline); return its result."""
        try:
            self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        if timed_out:
            self._abort(f"timed out after {self.timeout:.0f} s")
        # Anything of ours still running after the launcher exited is a leak: report it
        # to the test (leftovers), then kill it so it cannot disturb later tests (nor
        # keep the output pipes open).
        self._track_reported_pids()
        leftovers = _still_running(self.tracked)
        # A rank whose launcher ended the job while it was still closing down (a survivor
        # in shutdown() when hydra reaps the job) is exiting, not leaked: give it a moment.
        end = time.monotonic() + LEFTOVER_GRACE_S
        while leftovers and time.monotonic() < end:
            time.sleep(0.1)
            leftovers = _still_running(self.tracked)
        kill_exactly(leftovers)
        for t in self._threads:
            t.join(timeout=10)
        res = self.result()
        res.leftovers = leftovers
        shutil.rmtree(self._cwd, ignore_errors=True)
        return res

    def kill_all(self):
        with self._cond:
            self.tracked.update(_descendants(self.proc.pid))
        self._track_reported_pids()
        kill_exactly([self.proc.pid] + _still_running(self.tracked))
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _abort(self, why):
        self.kill_all()
        for t in self._threads[:2]:
            t.join(timeout=5)
        shutil.rmtree(self._cwd, ignore_errors=True)
        self.result().fail(f"launch {why}; killed it")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.kill_all()
        return False


def run_mpi(nranks, script_path, args=(), env=None, timeout=120, extra_launcher_args=()) -> Result:
    """Run a worker script under mpiexec with nranks ranks; return its Result."""
    with Launch(nranks, script_path, args, env, timeout, extra_launcher_args) as launch:
        return launch.finish()


def run_part(nranks, part: dict, timeout=120) -> Result:
    """One part ({"script", "args", "env"}, as run_chain takes them) as a launch of its own."""
    return run_mpi(nranks, part["script"], part.get("args", ()), env=part.get("env"), timeout=timeout)


def run_chain(nranks, parts: list[dict], env=None, timeout=120) -> Result:
    """The parts one after another in one launch (workers/chain.py): each rank starts once.
    Result.part(i) reads each."""
    return run_mpi(nranks, "chain.py", [json.dumps(parts)], env=env, timeout=timeout)


def chained_part(cache: dict, key, nranks: int, parts: list, label, timeout=600, run=None) -> Result:
    """The part `label` of the one chained launch kept in cache[key] (a module fixture's
    dict), launched on first use from parts: [(label, part)] at nranks ranks (by
    run(nranks, parts, timeout=), run_chain unless given). Tests of one world share the
    launch, each reading its own part."""
    run = run or run_chain
    if key not in cache:
        try:
            cache[key] = ([p[0] for p in parts], run(nranks, [p[1] for p in parts], timeout=timeout))
        except BaseException as e:  # (a launch that timed out or failed: its other tests say so at once)
            cache[key] = e
            raise
    if isinstance(cache[key], BaseException):
        pytest.fail(f"the chained launch this test reads ({nranks} ranks) failed: {cache[key]}"[:2000], pytrace=False)
    labels, res = cache[key]
    return res.part(labels.index(label))


# One launch per world size for tests of several files: each declares its parts when its
# module is imported (share), and the first test to read one (shared_part) launches every
# part declared for that world, chained (workers/chain.py). A rank of these imports torch,
# ~3 s of CPU, once per world instead of once per test: 33 fewer rank starts in CI. Parts
# that may leave the job aborted are declared with position=1 and run after the others, those
# that must see a process where rdmacoll never ran with position=-1, before them.
_SHARED_PARTS: dict[int, list] = {}
# the environment of TensorFlow's ranks (read at its import): shared parts import it too
TF_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
_SHARED_LAUNCHES: dict = {}
_SHARED_DIRS: list[str] = []


def shared_dir(name: str) -> str:
    """A directory of this test session for a shared part's files (removed at exit)."""
    if not _SHARED_DIRS:
        _SHARED_DIRS.append(tempfile.mkdtemp(prefix="rdmacoll-shared-"))
        atexit.register(shutil.rmtree, _SHARED_DIRS[0], True)
    path = os.path.join(_SHARED_DIRS[0], name.replace(" ", "_"))
    os.makedirs(path, exist_ok=True)
    return path


def share(nranks: int, label: str, part: dict, position: int = 0) -> None:
    """Declares a part ({"script", "args", "env"}) of the shared launch at nranks ranks."""
    _SHARED_PARTS.setdefault(nranks, []).append((position, label, part))


def shared_part(nranks: int, label: str, timeout=800) -> Result:
    """The part `label` of the shared launch at nranks ranks (launched on first use; the
    tests reading one are marked with a longer timeout than this)."""
    parts = [(lab, part) for _pos, lab, part in sorted(_SHARED_PARTS[nranks], key=lambda p: p[0])]
    return chained_part(_SHARED_LAUNCHES, nranks, nranks, parts, label, timeout=timeout)


def find_torchrun() -> str:
    beside = Path(sys.executable).parent / "torchrun"
    exe = str(beside) if beside.is_file() else shutil.which("torchrun")
    if exe is None:
        pytest.skip("no torchrun (pip install torch)")
    return exe


def run_torchrun(nproc, script_path, args=(), env=None, timeout=120) -> Result:
    """Run a worker under torchrun --standalone with nproc processes (no MPI involved)."""
    exe = find_torchrun()

    def command(script):
        return [exe, "--standalone", "--nproc_per_node", str(nproc), "--no-python", sys.executable, str(script)] + [
            str(a) for a in args
        ]

    with Launch(nproc, script_path, args, env, timeout, command=command) as launch:
        return launch.finish()


def run_launcher(launcher_argv, script_path, args=(), env=None, timeout=120) -> Result:
    """Run a worker under any launcher command (srun -n 2, rdmacoll-run -np 2, ...), which is
    given `python script args` to run."""

    def command(script):
        return list(launcher_argv) + [sys.executable, str(script)] + [str(a) for a in args]

    with Launch(0, script_path, args, env, timeout, command=command) as launch:
        return launch.finish()


def run_command(cmd, env, cwd, timeout) -> tuple[int, str, str, bool]:
    """cmd in a session of its own, killed with all it started (and only that) past the
    timeout (stretched by TIME_SCALE): (exit status, stdout, stderr, whether it timed out)."""
    timeout *= TIME_SCALE
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, False
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # past the timeout, or an exception (pytest-timeout's) while waiting
        if proc.returncode is None:
            _kill_all_it_started(proc.pid)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # a process it started escaped and holds the pipes
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
        proc.wait(timeout=30)
        out, err = "", "(output lost: a process it started still held its pipes)"
    return proc.returncode, out, err, timed_out


def _kill_all_it_started(root: int) -> None:
    """root, its descendants and its session's members (sessions of their own included, as
    torchrun's workers: found as descendants), again until none is left (one may fork while
    the others are found), at most 5 rounds."""
    for _ in range(5):
        pids = {root, *_descendants(root), *session_members(root)}
        alive = [p for p in pids if _stat(p) is not None]
        if not alive:
            return
        kill_exactly(alive)
        time.sleep(0.05)


def run_python(script_path, args=(), env=None, timeout=120) -> Result:
    """Run a worker as a plain process (a singleton MPI world), with the same protocol."""
    script = Path(script_path)
    if not script.is_absolute():
        script = WORKERS_DIR / script
    cwd = tempfile.mkdtemp(prefix="rdmacoll-test-")
    cmd = [sys.executable, str(script)] + [str(a) for a in args]
    returncode, out, err, timed_out = run_command(cmd, _launch_env(env), cwd, timeout)
    shutil.rmtree(cwd, ignore_errors=True)
    now = time.time()
    lines = [Line(now, "out", t) for t in out.splitlines()] + [Line(now, "err", t) for t in err.splitlines()]
    res = Result(cmd, returncode, lines)
    if timed_out:
        res.fail(f"process timed out after {timeout * TIME_SCALE:.0f} s; killed it")
    return res


def rank_records(res: Result, nranks: int, kind: str, **match) -> dict[int, dict]:
    """The one record of `kind` (and `match`) from every rank, or fail showing the output."""
    got = {r["rank"]: r for r in res.select(kind=kind, **match)}
    missing = sorted(set(range(nranks)) - set(got))
    res.check(not missing, f"ranks {missing} did not report '{kind}'" + (f" {match}" if match else ""))
    return got


def matrix_results(res: Result, nranks: int, algo: str = "default") -> dict[int, dict]:
    """The 'done' records of workers/allreduce_matrix.py for `algo` (one of its --algos),
    after checking that none of its cases was wrong and every rank got the same bytes."""
    done = rank_records(res, nranks, "done", algo=algo)
    fails = res.select(kind="fail", algo=algo)
    res.check(
        not fails and all(d["failures"] == 0 for d in done.values()),
        f"{sum(d['failures'] for d in done.values())} wrong cases, first ones:\n"
        + "\n".join(f"rank {f['rank']}: {f['case']}: {f['detail']}" for f in fails[:20]),
    )
    res.check(
        all(not d["differing"] for d in done.values()), f"ranks got different result bytes in: {done[0]['differing']}"
    )
    return done


def check_across_hosts(res: Result, nhosts: int, per_host: int, remote: str, algos) -> list[dict]:
    """workers/hosts.py run with `per_host` ranks on each of `nhosts` hosts, in host order:
    every rank on its host (rchost<i>), reaching its host's peers by shm and the others by
    `remote`; every case right; each forced algorithm (but eager, size-limited) the one that
    ran; with several ranks per host, the selector's 4 MiB allreduce hierarchical. The cases."""
    p = nhosts * per_host
    for r, w in rank_records(res, p, "where").items():
        host = r // per_host
        res.check(
            w["host"] == f"rchost{host}" and w["local_size"] == per_host and w["local_rank"] == r % per_host,
            f"rank {r}: {w}",
        )
        res.check(w["transport"] == f"shm+{remote}", f"rank {r} runs on {w['transport']}")
        res.check(w["cross"] == [host, nhosts, True], f"rank {r}: cross_rank, cross_size, is_homogeneous {w['cross']}")
        for q, how in enumerate(w["peers"]):
            want = "" if q == r else ("shm" if q // per_host == host else remote)
            res.check(how.split(" ")[0] == want, f"rank {r} reaches rank {q} by {how!r}, expected {want!r}")
    cases = res.select(kind="case")
    res.check(len(cases) == p * len(algos) * 21, f"{len(cases)} case records")
    bad = [c for c in cases if not c["ok"]]
    res.check(not bad, f"{len(bad)} wrong, first: {bad[:3]}")
    for c in cases:
        if c["algo"] and c["ran"] not in ("allgather", "broadcast", "in place") and c["algo"] != "eager":
            res.check(c["ran"] == c["algo"], f"forced {c['algo']} but {c['ran']} ran: {c}")
    if per_host > 1:
        big = {c["ran"] for c in cases if c["algo"] == "" and c["n"] == (1 << 20) + 3}
        res.check(big == {"hierarchical"}, f"the selector ran {big} for 4 MiB across hosts")
    rank_records(res, p, "done")
    res.check(res.returncode == 0, "the launch failed")
    return cases


# allreduce_matrix.py's arguments for the forced-algorithm runs: messages above 64 Ki
# elements run one mode per (dtype, op), in turn (the modes differ in how buffers are passed,
# not in what the algorithm does with large messages)
ROTATED_MATRIX = ["--rotate-above", 65536]

# Every allreduce algorithm that runs without mapping peer memory (tcp, ibverbs), forced by
# size range; two rule sets so that each algorithm sees small and large messages.
UNMAPPED_RULES = {
    "a": "0-512:eager,512-4K:recursive_doubling,4K-64K:tree,64K-256K:halving_doubling,256K-inf:ring_slots",
    "b": "0-4K:tree,4K-64K:ring_slots,64K-256K:recursive_doubling,256K-inf:halving_doubling",
}
UNMAPPED_ALGORITHMS = {"eager", "recursive_doubling", "tree", "halving_doubling", "ring_slots"}


def forced_algorithms_part(env: dict, rules: str, sizes: str, extra=()) -> dict:
    """The launch check_forced_algorithms checks (a part, as run_chain takes them)."""
    return {
        "script": "allreduce_matrix.py",
        "args": [*ROTATED_MATRIX, "--sizes", sizes, *extra],
        "env": dict(env, RDMACOLL_ALGO=UNMAPPED_RULES[rules]),
    }


def check_forced_algorithms(
    nranks: int, env: dict, rules: str, sizes: str, label: str, timeout=240, extra=(), res=None
) -> None:
    """workers/allreduce_matrix.py with UNMAPPED_RULES[rules] forced (`extra`: more of its
    arguments): every case right, only those algorithms ran, and each forced one (but
    eager, size-limited) did. res: that launch's result, when it ran already (a chain's part)."""
    import re

    if res is None:
        res = run_part(nranks, forced_algorithms_part(env, rules, sizes, extra), timeout)
    done = matrix_results(res, nranks)
    used = set(done[0]["algorithms"])
    forced = set(re.findall(r":([a-z_]+)", UNMAPPED_RULES[rules]))
    res.check(
        used <= UNMAPPED_ALGORITHMS, f"algorithms that need mapped memory ran on {label}: {used - UNMAPPED_ALGORITHMS}"
    )
    res.check(forced - {"eager"} <= used, f"forced algorithms that did not run: {forced - used}")
    res.check(res.returncode == 0, "the launch failed")
    print(f"{label}, {nranks} ranks, rules {rules}: {done[0]['cases']} cases, algorithms {sorted(used)}")


def default_selection_part(env: dict, extra=(), big_mib=16) -> dict:
    """The launch check_default_selection checks (a part, as run_chain takes them)."""
    return {
        "script": "allreduce_matrix.py",
        "args": [*ROTATED_MATRIX, "--sizes", "0,1,1023,100003", "--big-mib", big_mib, *extra],
        "env": env,
    }


def check_default_selection(nranks: int, env: dict, label: str, timeout=240, extra=(), big_mib=16, res=None) -> None:
    """The selector's own choice with the default thresholds, up to big_mib MiB: right
    results, and only algorithms that run without mapped memory. (`extra`: more worker
    arguments; res: that launch's result, when it ran already.)"""
    if res is None:
        res = run_part(nranks, default_selection_part(env, extra, big_mib), timeout)
    done = matrix_results(res, nranks)
    used = set(done[0]["algorithms"])
    allowed = UNMAPPED_ALGORITHMS | {"local"}
    res.check(used <= allowed, f"the selector chose {used - allowed} on {label}")
    res.check(res.returncode == 0, "the launch failed")


def async_part(env: dict) -> dict:
    """The launch check_async checks (3 ranks; a part, as run_chain takes them)."""
    return {"script": "async_ops.py", "args": ["check"], "env": dict(env, RDMACOLL_SEGMENT_BYTES=65536)}


def check_async(env: dict, label: str, timeout=240, res=None) -> None:
    """workers/async_ops.py at 3 ranks: many operations in flight, every result right,
    nothing left queued. (res: that launch's result, when it ran already.)"""
    if res is None:
        res = run_part(3, async_part(env), timeout)
    for r, rec in rank_records(res, 3, "done").items():
        res.check(not rec["bad"], f"rank {r}: wrong results for {rec['bad']} ({label})")
        res.check(rec["outstanding"] == 0, f"rank {r}: {rec['outstanding']} operations still queued ({label})")


def check_killed_peer(
    env: dict, sig: int, mib: int, label: str, bound_s: float | None = None, timeout=180, nranks: int = 3
) -> None:
    """Rank 1 of `nranks` killed by `sig` in an allreduce loop of `mib` MiB: the others
    raise RdmacollError naming it (within bound_s, when given), so does their next call,
    and nothing of the launch is left running or in /dev/shm."""
    import re

    victim = 1
    launch = Launch(
        nranks,
        "kill_loop.py",
        ["--mib", mib, "--max-seconds", 120],
        env=env,
        timeout=timeout,
        extra_launcher_args=keep_siblings_flags(),
    )
    with launch:
        rec = launch.wait_record(kind="looping", rank=victim, timeout=120)
        time.sleep(0.3)
        t_kill = time.time()
        os.kill(rec["pid"], sig)
        res = launch.finish()
    survivors = [r for r in range(nranks) if r != victim]
    errors = {r["rank"]: r for r in res.select(kind="error")}
    res.check(not res.select(kind="no error"), "a survivor's loop ran to its end without an error")
    res.check(set(errors) == set(survivors), f"ranks {sorted(set(survivors) - set(errors))} did not raise")
    for r, e in errors.items():
        res.check(
            re.search(rf"\brank {victim}\b", e["message"]), f"rank {r}: {e['message']!r} does not name rank {victim}"
        )
        if bound_s is not None:
            res.check(e["time"] - t_kill < bound_s, f"rank {r} took {e['time'] - t_kill:.1f} s to notice")
    later = {r["rank"]: r["message"] for r in res.select(kind="later")}
    res.check(set(later) == set(survivors) and all(later.values()), f"a later call did not raise: {later}")
    res.check(not res.leftovers, f"processes of the launch still running: {res.leftovers}")
    res.check(not dev_shm_entries(), f"rdmacoll files left in /dev/shm: {dev_shm_entries()}")
    print(
        f"{signal.Signals(sig).name} of rank {victim} of {nranks} under {label}: "
        + ", ".join(
            f"rank {r} raised after {(e['time'] - t_kill) * 1e3:.0f} ms: {e['message'][:160]}"
            for r, e in sorted(errors.items())
        )
    )


def require_real_horovod() -> None:
    """Skip, saying why, where real Horovod does not import (side-by-side tests)."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("horovod") is None:
        pytest.skip(
            "real Horovod is not installed in this interpreter (build it with "
            "build-horovod.sh and run pytest from its venv)"
        )


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int):
    """A memory cgroup of its own under this process's (v2, else v1), limited to
    limit_bytes; yields its directory, which a worker joins by writing its pid to
    cgroup.procs (workers/init_fails.py: RDMACOLL_TEST_CGROUP). Skips, saying why, where
    none can be made (not root, no memory controller)."""
    made = None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").is_file():
            parent, limit_file = Path("/sys/fs/cgroup" + path), "memory.max"
        elif "memory" in controllers.split(","):
            parent, limit_file = Path("/sys/fs/cgroup/memory" + path), "memory.limit_in_bytes"
        else:
            continue
        try:
            d = parent / f"rdmacoll-test-{os.getpid()}"
            d.mkdir()
            try:
                (d / limit_file).write_text(str(limit_bytes))
            except OSError:
                d.rmdir()
                raise
            made = d
            break
        except OSError as e:
            why = f"cannot make a memory cgroup under {parent}: {e}"
    if made is None:
        pytest.skip(locals().get("why", "this process has no memory cgroup to make one under"))
    try:
        yield str(made)
    finally:
        for _ in range(50):  # the ranks have exited; the kernel empties the group shortly after
            try:
                made.rmdir()
                break
            except OSError:
                time.sleep(0.1)
