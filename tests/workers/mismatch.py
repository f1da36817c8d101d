"""Ranks that disagree about a call: every rank must raise, naming the difference.

The last rank deviates in one way per case; the others agree. Per case, after a barrier
every rank times its call until the RdmacollError, checks that a later call raises too
(the communicator stays broken), then shutdown() and init() start the next case afresh.
Records: one "mismatch" per case and rank, then "done".
"""

import time

import numpy as np
from mpi4py import MPI

from common import emit, init, main

EAGER, RING = 1000, 100_000  # elements: below and above the default eager limit (32 KiB)

# case: (what the agreeing ranks pass, what the last rank passes), each as
# (count, dtype, op name, name), and the words every rank's message must contain.
CASES = {
    "count": ((EAGER, "float32", "Sum", None), (EAGER + 1, "float32", "Sum", None), "different counts"),
    "count large": ((RING, "float32", "Sum", None), (RING + 7, "float32", "Sum", None), "different counts"),
    "count small vs large": ((10, "float32", "Sum", None), (RING, "float32", "Sum", None), "different counts"),
    "dtype": ((EAGER, "float32", "Sum", None), (EAGER, "float64", "Sum", None), "different dtypes"),
    "dtype same bytes": ((RING, "float32", "Sum", None), (RING, "int32", "Sum", None), "different dtypes"),
    "op": ((EAGER, "float32", "Sum", None), (EAGER, "float32", "Max", None), "different ops"),
    "op large": ((RING, "float64", "Min", None), (RING, "float64", "Max", None), "different ops"),
    "name": ((EAGER, "float32", "Sum", "grad.a"), (EAGER, "float32", "Sum", "grad.b"), "different names"),
    "name missing": ((RING, "float32", "Sum", "grad.a"), (RING, "float32", "Sum", None), "different names"),
}


def call(rc, spec):
    count, dtype, op, name = spec
    return rc.allreduce(np.ones(count, dtype), op=getattr(rc, op), name=name)


def body():
    rc = init()
    world = MPI.COMM_WORLD
    p, r = rc.size(), rc.rank()
    for case, (agreed, deviant, words) in CASES.items():
        mine = deviant if r == p - 1 else agreed
        call(rc, agreed)  # a correct call first: the mismatch is not the first message
        world.Barrier()
        t0 = time.perf_counter()
        error = later = None
        try:
            call(rc, mine)
        except rc.RdmacollError as e:
            error = str(e)
        seconds = time.perf_counter() - t0
        try:
            call(rc, agreed)
        except rc.RdmacollError as e:
            later = str(e)
        emit("mismatch", case=case, error=error, seconds=seconds, later=later, words=words)
        rc.shutdown()
        rc.init()
    emit("done")


main(body)
