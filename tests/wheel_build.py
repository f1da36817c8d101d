"""The release wheel for tests/test_wheel.py, built while the other tests run.

scripts/build_wheels.sh for the running Python takes minutes of CPU on the 2-core CI machine
(Zig builds its libc++ once, then the core's sources). The tests before test_wheel.py leave
the CPUs idle for much of their time (processes starting, ranks waiting on each other and on
the timeouts they test), so conftest.py starts the build when test_wheel.py is collected,
at the lowest CPU priority (nice 19: it runs on what the tests leave), and test_wheel.py
waits for it. Its processes are a session of their own, killed whole if it is still running
when pytest ends."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class WheelBuild:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="rdmacoll-wheel-"))
        self.dist = self.dir / "dist"
        self.log = self.dir / "build.log"
        self.proc: subprocess.Popen | None = None
        self.started = self.waited = self.ended = 0.0

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "RDMACOLL_"))}
        cmd = ["nice", "-n", "19", "bash", str(REPO / "scripts" / "build_wheels.sh"), "--allow-dirty"]
        cmd += ["--work", str(self.dir / "work"), "--out", str(self.dist), sys.executable]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.started = time.monotonic()

    def wait(self, timeout: float) -> tuple[int | None, str]:
        """(exit status, or None past the timeout; the log)."""
        assert self.proc is not None
        self.waited = time.monotonic()
        try:
            # what is left of it runs at full priority now: nothing else waits
            subprocess.run(["renice", "-n", "0", "-g", str(self.proc.pid)], capture_output=True)
            rc: int | None = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
            self.stop()
        self.ended = time.monotonic()
        return rc, self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
