"""Asynchronous collectives: many in flight, waited in reverse order, mixed with
synchronous calls; poll never blocks; errors surface at synchronize."""

import sys

import numpy as np
from common import emit, init, main


def check() -> None:
    rc = init()
    r, p = rc.rank(), rc.size()
    bad = []

    def expect(name, ok):
        if not ok:
            bad.append(name)

    inflight = []
    for i in range(12):
        n = [0, 1, 7, 1023, (1 << 20) + 3][i % 5]
        x = (np.arange(n, dtype=np.int64) % 13 + r + i).astype(np.int32)
        want = sum((np.arange(n, dtype=np.int64) % 13 + q + i) for q in range(p)).astype(np.int32)
        h = rc.allreduce_async(x, op=rc.Sum, out=x)
        inflight.append((f"allreduce {i}", h, lambda res, x=x, want=want: res is x and np.array_equal(x, want)))
        if i % 4 == 1:
            g = rc.allgather_async(np.full(r + 1, r, np.int64))
            inflight.append(
                (
                    f"allgather {i}",
                    g,
                    lambda res: np.array_equal(res, np.concatenate([np.full(q + 1, q, np.int64) for q in range(p)])),
                )
            )
        if i % 4 == 2:
            b = rc.broadcast_async(np.full(5, r, np.float64), p - 1)
            inflight.append((f"broadcast {i}", b, lambda res: (res == p - 1).all()))
            s = rc.reducescatter_async(np.ones((2 * p + 1, 2), np.float32), op=rc.Sum)
            rows = (2 * p + 1) // p + (1 if r < (2 * p + 1) % p else 0)
            inflight.append(
                (f"reducescatter {i}", s, lambda res, rows=rows: res.shape == (rows, 2) and (res == p).all())
            )
        if i % 4 == 3:
            t = rc.alltoall_async(np.arange(2 * p, dtype=np.float32) + 100 * r)
            want_t = np.concatenate([np.arange(2 * p, dtype=np.float32)[2 * r : 2 * r + 2] + 100 * q for q in range(p)])
            inflight.append((f"alltoall {i}", t, lambda res, w=want_t: np.array_equal(res, w)))
            xs = [np.full(3, r, np.float32), np.full(2, r, np.int64)]
            ga = rc.grouped_allreduce_async(xs, op=rc.Sum)
            s_ = sum(range(p))
            inflight.append((f"grouped {i}", ga, lambda res, s_=s_: all((v == s_).all() for v in res)))
        # a synchronous call between asynchronous ones keeps its place in the order
        y = rc.allreduce(np.full(4, 1.0, np.float32), op=rc.Sum)
        expect(f"sync {i}", (y == p).all())
    polled = [rc.poll(h) for _, h, _ in inflight]  # never blocks; values vary
    for name, h, check_ in reversed(inflight):
        expect(name, bool(check_(rc.synchronize(h))))
        expect(f"{name} poll after", rc.poll(h))
    rc.barrier()
    emit(
        "done", bad=bad, ops=len(inflight), polled_done=sum(polled), outstanding=rc._session.current().comm.outstanding
    )


def error() -> None:
    rc = init()
    r = rc.rank()
    # a count mismatch inside an async op surfaces at synchronize on every rank
    h = rc.allreduce_async(np.ones(10 + r, np.float32))
    try:
        rc.synchronize(h)
        emit("result", error=None)
    except rc.RdmacollError as e:
        emit("result", error=str(e))


if __name__ == "__main__":
    main({"check": check, "error": error}[sys.argv[1]])
