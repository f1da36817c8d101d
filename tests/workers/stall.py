"""One rank starts a collective late: the stall inspector must name it.

Every rank but --late calls allreduce(name='grad.w') at once; --late sleeps --sleep
seconds first. Records: "result" per rank (error text or None, seconds in the call),
then a second call's outcome ("later"), showing whether the communicator still works.
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

from common import emit, init, main, raises


def body():
    ap = argparse.ArgumentParser()
    ap.add_argument("--late", type=int, default=2)
    ap.add_argument("--sleep", type=float, default=3)
    ap.add_argument("--count", type=int, default=1000)
    a = ap.parse_args()
    rc = init()
    r, p = rc.rank(), rc.size()
    x = np.full(a.count, r + 1, np.int64)
    MPI.COMM_WORLD.Barrier()
    if r == a.late:
        time.sleep(a.sleep)
    t0 = time.perf_counter()
    error = None
    try:
        y = rc.allreduce(x, op=rc.Sum, name="grad.w")
        ok = bool(np.all(y == p * (p + 1) // 2))
    except rc.RdmacollError as e:
        error, ok = str(e), None
    emit("result", error=error, ok=ok, seconds=time.perf_counter() - t0)
    emit("later", error=raises(rc.allreduce, x, op=rc.Sum))
    rc.shutdown()


main(body)
