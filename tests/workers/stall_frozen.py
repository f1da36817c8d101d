"""A rank stopped inside a collective (issue 36, weak case: the messages blamed a healthy
rank, and the stall shutdown never fired, since every rank had started the call).

Rank --frozen enters allreduce(name='grad.w') first and stops itself (SIGSTOP, from a
thread, 0.3 s in: it has announced the call and waits in it); a child process it started
continues it (SIGCONT) after --stopped seconds. The others enter the call 0.6 s after it.
Records: "result" per rank (error text or None, seconds in the call). The launch sets
RDMACOLL_STALL_WARNING_SECONDS and RDMACOLL_STALL_SHUTDOWN_SECONDS.
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

from common import emit, ignore_launcher_notifications, init, main


def body():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frozen", type=int, default=1)
    ap.add_argument("--stopped", type=float, default=6)
    a = ap.parse_args()
    rc = init()
    ignore_launcher_notifications()
    r = rc.rank()
    x = np.full(1 << 20, r + 1, np.int64)  # (not eager: rank --frozen takes part after the others arrive)
    MPI.COMM_WORLD.Barrier()
    if r == a.frozen:
        # The child outlives nothing: it sends SIGCONT once and exits.
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os, time, signal; time.sleep({a.stopped}); os.kill({os.getpid()}, signal.SIGCONT)",
            ]
        )
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGSTOP)).start()
    else:
        time.sleep(0.6)
    t0 = time.perf_counter()
    error = None
    try:
        rc.allreduce(x, op=rc.Sum, name="grad.w")
    except rc.RdmacollError as e:
        error = str(e)
    emit("result", error=error, seconds=time.perf_counter() - t0)


main(body)
