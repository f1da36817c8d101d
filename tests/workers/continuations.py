"""Continuations under mpiexec: with `direct` forced, what each call ran (last_algorithm)
for each kind of memory and size, and whether its result was right.

Records: "ran" per case {case, ran, ok}; then "done".
"""

import numpy as np

from common import emit, init, main

K, M = 1 << 10, 1 << 20


def body():
    rc = init({"algo": "direct"})
    p, r = rc.size(), rc.rank()

    def case(name, nbytes, memory):
        n = nbytes // 4
        x = ((np.arange(n) * 3 + r) % 17).astype(np.float32)
        want = sum(((np.arange(n) * 3 + q) % 17).astype(np.float32) for q in range(p))
        if memory == "empty" or (memory == "mixed" and r % 2):
            y = rc.empty(n, np.float32)
            y[:] = x
            x = y
        out = rc.allreduce(x, op=rc.Sum, out=x)
        emit("ran", case=name, ran=rc._session.current().comm.last_algorithm, ok=bool(np.array_equal(out, want)))

    case("numpy 64K", 64 * K, "numpy")
    case("empty 64K", 64 * K, "empty")
    case("numpy 2M", 2 * M, "numpy")
    case("numpy 4M", 4 * M, "numpy")
    case("empty 4M", 4 * M, "empty")
    case("mixed 4M", 4 * M, "mixed")
    case("numpy 32M", 32 * M, "numpy")
    rc.shutdown()
    emit("done")


main(body)
