"""A rank in join() takes part in calls of every algorithm from the calls' first messages
(csrc/comm/join.cc): RC_TEST_JOINER joins at once, the other ranks run allreduces (Sum
and Average, sizes from 0 to 1.2 MB: eager, single- and multi-segment), allgathers with
rows that differ per rank, a broadcast and a barrier of the plain API, under
RDMACOLL_ALGO as the launch sets it, then join (RC_TEST_SIZES: other sizes). Records "case": what differed from the
NumPy references, the algorithms the allreduces ran, and join()'s return value.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit, init, main  # noqa: E402

SIZES = [int(n) for n in os.environ.get("RC_TEST_SIZES", "0,1,7,1000,300000").split(",")]


def data(r, n):
    return (np.arange(n) % 7 + r + 1).astype(np.float32)


def body():
    rc = init()
    from rdmacoll.frameworks import _join

    r, p = rc.rank(), rc.size()
    joiner = int(os.environ["RC_TEST_JOINER"])
    training = [q for q in range(p) if q != joiner]
    bad, algorithms = [], set()
    if r != joiner:
        comm = rc._session.current().comm
        for n in SIZES:
            got = rc.allreduce(data(r, n), op=rc.Sum, name=f"sum{n}")
            algorithms.add(comm.last_algorithm)
            if not np.array_equal(got, sum((data(q, n) for q in training), np.zeros(n, np.float32))):
                bad.append(f"Sum of {n}: {got[:4]}")
            got = rc.allreduce(data(r, n), name=f"avg{n}")
            want = sum((data(q, n) for q in training), np.zeros(n, np.float32)) / np.float32(p)
            if not np.allclose(got, want, rtol=1e-6):
                bad.append(f"Average of {n}: {got[:4]}, expected {want[:4]}")
            got = rc.allgather(data(r, 3 * n).reshape(-1, 3)[: r + 1], name=f"rows{n}")
            want = np.concatenate([data(q, 3 * n).reshape(-1, 3)[: q + 1] for q in training])
            if not np.array_equal(got, want):
                bad.append(f"allgather of rows of {n}: {got.shape}, expected {want.shape}")
        root = training[-1]
        got = rc.broadcast(data(r, 1000), root, name="bcast")
        if not np.array_equal(got, data(root, 1000)):
            bad.append("broadcast")
        rc.barrier()
    last = _join.join()
    if last != max(training):
        bad.append(f"join() returned {last}, expected {max(training)}")
    if rc.allreduce(np.ones(2), op=rc.Sum).tolist() != [p, p]:
        bad.append("allreduce after join")
    emit("case", bad=bad, algorithms=sorted(algorithms))


if __name__ == "__main__":
    main(body)
