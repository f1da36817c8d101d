"""Allreduce a large array in a loop until a peer dies (the test kills one rank).

Records: "looping" once the loop runs (with the pid the test may kill), then on the ranks
that survive "error" with the message and the time it was raised, and "later" with what
the next call raises (the communicator stays broken). Survivors exit without
MPI_Finalize: the launcher's world has a dead member.
"""

import argparse
import os
import sys
import time

import numpy as np

from common import emit, ignore_launcher_notifications, init, main, outlive_launcher_cleanup


def body():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--max-seconds", type=float, default=120)
    a = ap.parse_args()
    outlive_launcher_cleanup()
    rc = init()
    ignore_launcher_notifications()
    x = np.ones(a.mib * (1 << 20) // 4, np.float32)
    out = np.empty_like(x)
    end = time.monotonic() + a.max_seconds
    iterations = 0
    try:
        while time.monotonic() < end:
            rc.allreduce(x, op=rc.Sum, out=out)
            iterations += 1
            if iterations == 2:
                emit("looping")
        emit("no error", iterations=iterations)
    except rc.RdmacollError as e:
        emit("error", message=str(e), iterations=iterations, time=time.time())
        try:
            rc.allreduce(x, op=rc.Sum, out=out)
            later = None
        except rc.RdmacollError as e2:
            later = str(e2)
        emit("later", message=later)
    rc.shutdown()
    sys.stdout.flush()
    os._exit(0)


main(body)
