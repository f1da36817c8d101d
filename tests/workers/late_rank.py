"""RDMACOLL_TIMEOUT: rank 1 joins an allreduce late (it sleeps up to --sleep seconds);
rank 0 must give up after RDMACOLL_TIMEOUT seconds with an RdmacollError.

Rank 0 tells rank 1 (over MPI, outside rdmacoll) once it has raised, so the test need not
sit out the whole sleep; rank 1 then joins and must raise too: the job is aborted.
Records: "result" per rank with the error text and the seconds the call took.
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

from common import emit, init, main


def body():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sleep", type=float, default=20)
    ap.add_argument("--count", type=int, default=1 << 20)
    a = ap.parse_args()
    rc = init()
    world = MPI.COMM_WORLD
    r = rc.rank()
    x = np.ones(a.count, np.float32)
    rc.allreduce(x, op=rc.Sum)  # everyone is connected and in step
    world.Barrier()
    slept = 0.0
    if r == 1:
        t = time.monotonic()
        note = world.irecv(source=0, tag=7)
        while time.monotonic() - t < a.sleep and not note.test()[0]:
            time.sleep(0.05)
        slept = time.monotonic() - t
    t0 = time.monotonic()
    error = None
    try:
        rc.allreduce(x, op=rc.Sum)
    except rc.RdmacollError as e:
        error = str(e)
    seconds = time.monotonic() - t0
    if r == 0:
        world.send("raised", dest=1, tag=7)
    emit("result", error=error, seconds=seconds, slept=slept)
    world.Barrier()


main(body)
