#!/usr/bin/env python3
"""A one-node Slurm cluster on this machine, for tests: Debian's slurm-wlm and munge,
slurmctld and slurmd on localhost with their state, spool and logs in a temporary
directory, on ports of their own. Needs root; nothing outside the directory is changed
except that munged is started when it is not running (and stopped again if we started it).

    sudo python scripts/slurm_localhost.py -- srun -n 2 python -c 'import rdmacoll as rc; rc.init()'

From Python (tests/test_launchers.py):

    with SlurmCluster() as sc:
        subprocess.run(["srun", "-n", "2", ...], env=sc.env())
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


class SlurmError(RuntimeError):
    """The cluster could not be started here (not root, no slurm-wlm or munge, ...)."""


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)


class SlurmCluster:
    def __init__(self, cpus: int | None = None, port: int = 16817):
        self.cpus = cpus or os.cpu_count() or 1
        self.port = port
        self.dir = None
        self._procs: list[subprocess.Popen] = []
        self._munged_pid = None

    def env(self) -> dict:
        return dict(os.environ, SLURM_CONF=os.path.join(self.dir, "slurm.conf"))

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout_s: float = 30) -> None:
        if os.geteuid() != 0:
            raise SlurmError("needs root (slurmctld and slurmd run as root here)")
        for tool in ("slurmctld", "slurmd", "srun", "sinfo", "munged", "munge"):
            if not shutil.which(tool):
                raise SlurmError(f"{tool} not found (Debian: apt-get install slurm-wlm munge)")
        self._start_munge()
        self.dir = tempfile.mkdtemp(prefix="rdmacoll-slurm-")
        host = socket.gethostname().split(".")[0]
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(self.dir, sub))
        conf = os.path.join(self.dir, "slurm.conf")
        with open(conf, "w") as f:
            f.write(f"""ClusterName=rdmacolltest
SlurmctldHost={host}
SlurmctldPort={self.port}
SlurmdPort={self.port + 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={self.dir}/state
SlurmdSpoolDir={self.dir}/spool
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd.pid
SlurmctldLogFile={self.dir}/slurmctld.log
SlurmdLogFile={self.dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmi2
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName={host} CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        env = self.env()
        for daemon in ("slurmctld", "slurmd"):
            self._procs.append(
                subprocess.Popen(
                    [daemon, "-D", "-f", conf],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            r = _run(["sinfo", "-h", "-o", "%t"], env=env)
            if r.returncode == 0 and r.stdout.strip() in ("idle", "mix"):
                return
            if any(p.poll() is not None for p in self._procs):
                break
            time.sleep(0.3)
        logs = "".join(self._tail(n) for n in ("slurmctld.log", "slurmd.log"))
        self.stop()
        raise SlurmError(f"slurm did not come up within {timeout_s:.0f} s: {logs}")

    def _tail(self, name: str) -> str:
        try:
            with open(os.path.join(self.dir, name)) as f:
                return f"[{name}] " + " | ".join(f.read().splitlines()[-5:]) + " "
        except OSError:
            return ""

    def _start_munge(self) -> None:
        if _run(["munge", "-n"]).returncode == 0:
            return  # a munged runs already: not ours to stop
        os.makedirs("/run/munge", exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        r = _run(["su", "-s", "/bin/sh", "munge", "-c", "munged"])
        if r.returncode != 0:
            raise SlurmError(f"munged did not start: {(r.stderr or r.stdout).strip()}")
        try:
            with open("/run/munge/munged.pid") as f:
                self._munged_pid = int(f.read().strip())
        except (OSError, ValueError):
            pass

    def stop(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self._procs = []
        if self._munged_pid:
            try:
                os.kill(self._munged_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self._munged_pid = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    with SlurmCluster() as sc:
        return subprocess.run(argv, env=sc.env()).returncode


if __name__ == "__main__":
    sys.exit(main())
