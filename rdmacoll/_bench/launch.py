"""rdmacoll-bench --np N: the same command, launched through mpiexec with N local ranks;
and what to say when no launcher started it."""

from __future__ import annotations

import os
import shutil
import subprocess
import shlex
import sys

from rdmacoll.bootstrap.launcher import detect


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


def launched(env=None) -> bool:
    """Whether a launcher (mpiexec, srun, torchrun) started this process."""
    return detect(os.environ if env is None else env) is not None


def how_to_launch(argv: list[str]) -> str:
    """The message for a run without a launcher: the same command, launched."""
    rest = " ".join(shlex.quote(a) for a in argv)
    rest = f" {rest}" if rest else ""
    return (
        f"rdmacoll-bench: no launcher started this process, so there is nobody to communicate with. Run it as\n"
        f"  mpiexec -n 2 rdmacoll-bench{rest}\n"
        f"  rdmacoll-bench --np 2{rest}          (launches itself through mpiexec)\n"
        f"  torchrun --nproc-per-node 2 -m rdmacoll.bench{rest}   (with PyTorch)\n"
        f"(one rank on purpose: --np 1)"
    )
