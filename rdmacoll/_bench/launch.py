"""rdmacoll-bench --np N: the same command, launched through mpiexec with N local ranks."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys


def relaunch(np_: int, argv: list[str]) -> int:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if not mpiexec:
        print("rdmacoll-bench: --np needs mpiexec (pip install 'rdmacoll[mpich]' or your MPI)", file=sys.stderr)
        return 2
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    extra = ["--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version else []
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [mpiexec, "-n", str(np_), *extra, sys.executable, "-m", "rdmacoll.bench", *argv]
    return subprocess.call(cmd, env=env)
