"""Continuations under mpiexec: with `direct` forced, what each call ran (last_algorithm)
for each kind of memory and size, and whether its result was right.

argv: the cases to run (default: all of CASES).
Records: "ran" per case {case, ran, ok}; then "done".
"""

import sys

import numpy as np

from common import emit, init, main

K, M = 1 << 10, 1 << 20
# name: (bytes, memory)
CASES = {
    "numpy 64K": (64 * K, "numpy"),
    "empty 64K": (64 * K, "empty"),
    "mixed 64K": (64 * K, "mixed"),
    "numpy 2M": (2 * M, "numpy"),
    "numpy 4M": (4 * M, "numpy"),
    "empty 4M": (4 * M, "empty"),
    "mixed 4M": (4 * M, "mixed"),
    "numpy 32M": (32 * M, "numpy"),
}


def body():
    rc = init({"algo": "direct"})
    p, r = rc.size(), rc.rank()

    def case(name, nbytes, memory):
        n = nbytes // 4
        base = np.arange(n, dtype=np.int32) * 3
        x = ((base + r) % 17).astype(np.float32)
        want = np.zeros(n, np.float32)
        for q in range(p):
            want += (base + q) % 17
        if memory == "empty" or (memory == "mixed" and r % 2):
            y = rc.empty(n, np.float32)
            y[:] = x
            x = y
        out = rc.allreduce(x, op=rc.Sum, out=x)
        emit("ran", case=name, ran=rc._session.current().comm.last_algorithm, ok=bool(np.array_equal(out, want)))

    for name in sys.argv[1:] or CASES:
        case(name, *CASES[name])
    rc.shutdown()
    emit("done")


main(body)
