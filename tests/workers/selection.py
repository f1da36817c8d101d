"""Selection under mpiexec: RDMACOLL_ALGO rules and the tuning file of rank 0.

argv[1]: sizes in bytes, comma-separated. Launched with a tuning file in rank 0's
environment only (the others ignore tuning files), the choices must still be the same
everywhere, since rank 0's constants are broadcast.

Records: "sel" per size: the algorithm that ran, the one selected_algorithm() reports, and
whether the result matched the reference.
"""

import sys

import numpy as np

from common import emit, main


def body():
    from common import init

    rc = init()
    p, r = rc.size(), rc.rank()
    for nbytes in (int(s) for s in sys.argv[1].split(",")):
        count = nbytes // 4
        x = (np.arange(count, dtype=np.float32) % 7) + r
        want = sum((np.arange(count, dtype=np.float32) % 7) + q for q in range(p))
        selected = rc._session.current().comm.selected_algorithm(nbytes)
        out = rc.allreduce(x, op=rc.Sum)
        emit(
            "sel",
            bytes=nbytes,
            ran=rc._session.current().comm.last_algorithm,
            selected=selected,
            ok=bool(np.array_equal(np.asarray(out), want)),
        )
    rc.shutdown()
    emit("done")


main(body)
