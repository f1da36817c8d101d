"""Per-call cost of the Python/C++ boundary, without any peer.

    python benchmarks/binding_overhead.py          (a 1-rank world: no mpiexec needed)

With one rank an allreduce is validation + dispatch + an 8-byte local copy, so its time
is the binding's own cost (argument conversion, dtype/shape checks, the communicator
lock) plus the Python wrapper. Printed next to the cheapest possible pybind11 call
(a property read) for scale. Median of several runs of 200k calls each.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import rdmacoll as rc


def per_call(fn, n=200_000, reps=7) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return statistics.median(out) * 1e9


def main() -> None:
    rc.init()
    core = rc._session.current().comm
    x = np.ones(2, np.float32)
    y = np.empty_like(x)
    rows = [
        ("pybind11 property read (floor)", lambda: core.rank),
        ("core.allreduce(x, x, Sum, None)   in place", lambda: core.allreduce(x, x, rc.Sum, None)),
        ("rc.allreduce(x, op=Sum, out=x)   public API", lambda: rc.allreduce(x, op=rc.Sum, out=x)),
        ("rc.allreduce(x, op=Sum, out=y)   separate out", lambda: rc.allreduce(x, op=rc.Sum, out=y)),
        ("rc.allreduce(x, op=Sum)          pool result", lambda: rc.allreduce(x, op=rc.Sum)),
    ]
    print(f"{'call':48s} {'ns/call':>8}")
    for label, fn in rows:
        print(f"{label:48s} {per_call(fn):8.0f}")
    rc.shutdown()


if __name__ == "__main__":
    main()
