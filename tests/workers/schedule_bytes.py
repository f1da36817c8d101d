"""The payload bytes a real allreduce moves with each peer, per forced algorithm, for
tests/test_scale.py to hold against the traced schedule (rdmacoll._core.schedule).

    schedule_bytes.py ALGO[,ALGO...] COUNT[,COUNT...]

Inputs and outputs are library memory (rc.empty), as the traced call assumes. Records:
"bytes" per (algorithm, count): the algorithm that ran, the bytes put into and read out of
each peer during that one call (the core's Peer counters), whether the sum was right.
"""

import sys

import numpy as np
from common import emit, init, main, set_rank


def body():
    algos = sys.argv[1].split(",")
    counts = [int(c) for c in sys.argv[2].split(",")]
    for algo in algos:
        rc = init({"algo": algo})
        r, p = rc.rank(), rc.size()
        set_rank(r)
        core = rc._session.current().comm
        for count in counts:
            x = rc.empty((count,), "float32")
            x[:] = (np.arange(count) % 7 + r).astype(np.float32)
            y = rc.empty((count,), "float32")
            before = core.traffic()
            rc.allreduce(x, op=rc.Sum, out=y)
            after = core.traffic()
            want = (np.arange(count) % 7 * p + p * (p - 1) / 2).astype(np.float32)
            emit(
                "bytes",
                algo=algo,
                count=count,
                ran=core.last_algorithm,
                put=[a[0] - b[0] for a, b in zip(after, before)],
                got=[a[1] - b[1] for a, b in zip(after, before)],
                right=bool(np.array_equal(y, want)),
            )
        rc.shutdown()


main(body)
