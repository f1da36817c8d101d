"""Selection under mpiexec: RDMACOLL_ALGO rules and the tuning file of rank 0.

argv[1]: sizes in bytes, comma-separated. With RANK0_TUNING_FILE set, rank 0 alone points
RDMACOLL_TUNING_FILE at it (the other ranks ignore tuning files): the choices must still be
the same everywhere, since rank 0's constants are broadcast.

Records: "sel" per size: the algorithm that ran, the one selected_algorithm() reports, and
whether the result matched the reference.
"""
import os
import sys

import numpy as np

from common import emit, launcher_rank, main


def body():
    if "RANK0_TUNING_FILE" in os.environ:
        os.environ["RDMACOLL_TUNING_FILE"] = os.environ["RANK0_TUNING_FILE"] if launcher_rank() == 0 else "none"
    from common import init

    rc = init()
    p, r = rc.size(), rc.rank()
    for nbytes in (int(s) for s in sys.argv[1].split(",")):
        count = nbytes // 4
        x = (np.arange(count, dtype=np.float32) % 7) + r
        want = sum((np.arange(count, dtype=np.float32) % 7) + q for q in range(p))
        selected = rc._comm.selected_algorithm(nbytes)
        out = rc.allreduce(x, op=rc.Sum)
        emit("sel", bytes=nbytes, ran=rc._comm.last_algorithm, selected=selected,
             ok=bool(np.array_equal(np.asarray(out), want)))
    rc.shutdown()
    emit("done")


main(body)
