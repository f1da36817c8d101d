"""Ranks on several hosts (network namespaces, tests/netns_util.py): how each peer is
reached, and allreduce / the other collectives against NumPy under each algorithm.

    hosts.py ALGO[,ALGO...]     "" in the list = the selector's choice

Records: "where" once per rank (host, local rank/size, the device, how each peer is
reached); per algorithm and case "case" with the algorithm that ran and whether the
result was right; under hierarchical, "join": the last rank in hvd.join() while the others
reduce (it stands in: frameworks/_join.py), what ran and whether the sums were the
training ranks'; "done" at the end.
"""

import socket
import sys

import numpy as np
from common import emit, init, main, set_rank

from rdmacoll.frameworks import _join

SIZES = [0, 1, 7, 1023, 100003, (1 << 20) + 3]


def data(rank, n, dtype):
    return ((np.arange(n, dtype=np.int64) * 7 + rank * 13) % 11).astype(dtype)


def body():
    algos = sys.argv[1].split(",")
    first = True
    for algo in algos:
        rc = init({"algo": algo} if algo else None)
        r, p = rc.rank(), rc.size()
        set_rank(r)
        if first:
            emit(
                "where",
                host=socket.gethostname(),
                local_rank=rc.local_rank(),
                local_size=rc.local_size(),
                transport=rc._session.current().comm.transport,
                peers=rc._session.current().comm.peer_transports(),
                cross=[rc.cross_rank(), rc.cross_size(), rc.is_homogeneous()],
            )
            first = False
        for n in SIZES:
            for dtype, op in ((np.float32, rc.Sum), (np.int64, rc.Sum), (np.float64, rc.Average)):
                x = data(r, n, dtype)
                want = sum(data(q, n, np.float64) for q in range(p))
                if op is rc.Average:
                    want = want / p
                got = rc.allreduce(x, op=op)
                emit(
                    "case",
                    algo=algo,
                    ran=rc._session.current().comm.last_algorithm,
                    n=n,
                    dtype=np.dtype(dtype).name,
                    ok=bool(np.allclose(got.astype(np.float64), want, rtol=1e-6, atol=0)),
                )
        # in place on registered memory (rc.empty), 100 times with new data: over ibverbs its
        # writes stay in flight (deferred completion) while the result lands on them
        x = rc.empty(1024, np.float32)
        ok = True
        for i in range(100):
            x[:] = data(r + i, 1024, np.float32)
            rc.allreduce(x, op=rc.Sum, out=x)
            ok = ok and bool(np.array_equal(x, sum(data(q + i, 1024, np.float32) for q in range(p))))
        emit("case", algo=algo, ran="in place", n=1024, dtype="float32", ok=ok)
        # the other collectives once per algorithm setting (their slot forms cross hosts)
        g = rc.allgather(data(r, r + 2, np.float32))
        emit(
            "case",
            algo=algo,
            ran="allgather",
            n=0,
            dtype="float32",
            ok=bool(np.array_equal(g, np.concatenate([data(q, q + 2, np.float32) for q in range(p)]))),
        )
        b = rc.broadcast(data(r, 5000, np.float32), root_rank=p - 1)
        emit(
            "case",
            algo=algo,
            ran="broadcast",
            n=5000,
            dtype="float32",
            ok=bool(np.array_equal(b, data(p - 1, 5000, np.float32))),
        )
        if algo == "hierarchical":
            joined(rc, r, p)
        rc.shutdown()
    emit("done")


def joined(rc, r, p):
    """Rank p - 1 in join() while the others reduce under hierarchical (its headers go to
    every neighbour first, the rule join rests on: docs/design.md): it stands in with zeros,
    and each sum is the training ranks'. Then the others join, together: join() returns
    the highest of them, p - 2 (the rank that joined last; ties: the higher)."""
    ok, ran = True, set()
    if r != p - 1:
        for n in (100003, (1 << 20) + 3):
            got = rc.allreduce(data(r, n, np.float32), op=rc.Sum)
            ran.add(rc._session.current().comm.last_algorithm)
            ok = ok and bool(np.allclose(got, sum(data(q, n, np.float64) for q in range(p - 1)), rtol=1e-6, atol=0))
    last = _join.join()
    emit("join", ok=ok and last == p - 2, last=last, ran=sorted(ran))


if __name__ == "__main__":
    main(body)
