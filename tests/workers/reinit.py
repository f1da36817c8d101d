"""shutdown() then init() again in the same processes, several times; results stay right
and every round gets a fresh communicator. Records: one "round" per round."""

import numpy as np

from common import emit, init, main


def body():
    for round_ in range(3):
        rc = init()
        p, r = rc.size(), rc.rank()
        x = np.arange(100_000, dtype=np.float64) * (r + 1)
        small = rc.allreduce(np.full(5, r + 1, np.int32), op=rc.Sum)
        large = rc.allreduce(x, op=rc.Sum)
        e = rc.empty(100_000, "float64")
        e[:] = x
        rc.allreduce(e, op=rc.Sum, out=e)
        want = np.arange(100_000, dtype=np.float64) * (p * (p + 1) // 2)
        ok = (
            np.array_equal(small, np.full(5, p * (p + 1) // 2, np.int32))
            and np.array_equal(large, want)
            and np.array_equal(e, want)
        )
        rc.shutdown()
        emit("round", round=round_, ok=ok, initialized_after=rc.is_initialized())


main(body)
