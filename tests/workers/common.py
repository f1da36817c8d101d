"""Shared by the worker scripts that tests run under mpiexec.

Workers report through emit(): one line "@@rc {json}" per record, read by
tests/mpi_util.py. Everything else a worker prints is shown when a test fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import traceback

# tests/ holds reference.py (the NumPy references); the repository root is deliberately
# not put on the path, so the installed rdmacoll is the one imported.
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

import gc_tuning  # noqa: E402

gc_tuning.tune()

_rank = None
_part = None  # workers/chain.py: the index of the part running, tagged on every record


def set_part(part) -> None:
    global _part
    _part = part


def launcher_rank() -> int:
    """This process's rank as the launcher announced it (before rc.init())."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def launcher_size() -> int | None:
    """The number of ranks the launcher announced (None where it says nothing)."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "WORLD_SIZE", "SLURM_NTASKS"):
        if var in os.environ:
            return int(os.environ[var])
    return None


def set_rank(rank: int) -> None:
    global _rank
    _rank = rank


def emit(kind: str, **fields) -> None:
    rec = {"kind": kind, "rank": launcher_rank() if _rank is None else _rank, "pid": os.getpid(), "t": time.time()}
    if _part is not None:
        rec["part"] = _part
    rec.update(fields)
    sys.stdout.write("@@rc " + json.dumps(rec, default=str) + "\n")
    sys.stdout.flush()


def digest(a) -> str:
    """Hash of an array's bytes (any dtype, ml_dtypes included). SHA-1: twice blake2b's
    speed here, and the matrices hash every input and result."""
    import numpy as np

    return hashlib.sha1(np.ascontiguousarray(a).view(np.uint8).data).hexdigest()


def init(config=None):
    """rc.init(config), and remember the rank for emit()."""
    import rdmacoll as rc

    rc.init(config)
    set_rank(rc.rank())
    return rc


def raises(fn, *args, **kwargs):
    """The RdmacollError fn raises (as text), or None if it returns."""
    import rdmacoll as rc

    try:
        fn(*args, **kwargs)
    except rc.RdmacollError as e:
        return str(e)
    return None


def outlive_launcher_cleanup() -> None:
    """Fork before MPI starts: the child goes on as the rank, the parent waits for it and
    exits with its status as a plain exit code.

    For tests that kill a rank: MPICH's hydra proxy SIGKILLs all its children as soon as
    one of them is reaped "killed by a signal", even with -disable-auto-cleanup, so the
    survivors could be gone before they report. A rank that is a grandchild of the proxy
    dies without the proxy seeing a signal death. Call first thing, before rc.init().
    """
    child = os.fork()
    if child == 0:
        return
    # Launchers notify ranks of a failure with SIGUSR1 (hydra) and stop jobs with SIGTERM.
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def ignore_launcher_notifications() -> None:
    """MPICH's hydra tells surviving ranks that one failed with SIGUSR1, for which MPI_Init
    installed a handler that ends the process. Call after rc.init(): rdmacoll must notice
    the failure on its own."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def main(body):
    """Run body(); report an unexpected exception as a record (and exit 1)."""
    try:
        body()
    except BaseException as e:  # noqa: BLE001 - reported, then re-raised as an exit status
        emit("crash", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        sys.stdout.flush()
        raise
