"""allgather, broadcast, reducescatter, alltoall, barrier and grouped_allreduce against
NumPy references computed from every rank's deterministic input.

    collectives.py check [--dtypes a,b]
                              the matrix (every dtype, or these); one record per failure,
                              one 'done' per rank
    collectives.py mismatch   ranks disagree (root, dtype, row shape, collective): every
                              rank must raise RdmacollError naming the difference
"""

import sys
import time

import numpy as np
from common import digest, emit, init, main
from reference import np_dtype

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None


def data(rank: int, rows: int, row_shape, dtype) -> np.ndarray:
    n = rows * int(np.prod(row_shape, dtype=np.int64))
    v = (np.arange(n, dtype=np.int64) * 7 + rank * 13) % 11  # small: exact in every dtype
    return v.astype(np.float32).astype(dtype).reshape((rows, *row_shape))


def check() -> None:
    rc = init()
    r, p = rc.rank(), rc.size()
    failures = []
    cases = 0

    def expect(name, got, want, exact=True):
        nonlocal cases
        cases += 1
        got = np.asarray(got)
        ok = got.shape == want.shape and (
            np.array_equal(got.astype(np.float64), want.astype(np.float64))
            if exact
            else np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2, atol=1e-2)
        )
        if not ok:
            failures.append(name)
            emit(
                "fail",
                case=name,
                got=str(got.ravel()[:8]),
                want=str(want.ravel()[:8]),
                got_shape=got.shape,
                want_shape=want.shape,
            )

    dtypes = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.float16] + ([BF16] if BF16 else [])
    if "--dtypes" in sys.argv:
        dtypes = [np_dtype(name) for name in sys.argv[sys.argv.index("--dtypes") + 1].split(",")]
    row_shapes = [(), (3,), (2, 5)]
    for dt in dtypes:
        for row_shape in row_shapes:
            for base in (0, 1, p - 1, p + 1, 1037):
                tag = f"{np.dtype(dt).name} rows~{base} row{row_shape}"
                # allgather: rank q contributes base + q rows (some ranks none when base == 0)
                mine = data(r, base + r, row_shape, dt)
                want = np.concatenate([data(q, base + q, row_shape, dt) for q in range(p)])
                expect(f"allgather {tag}", rc.allgather(mine), want)
                pooled = rc.empty(mine.shape, dt)
                pooled[...] = mine
                expect(f"allgather rc.empty {tag}", rc.allgather(pooled), want)
                # broadcast from every root, out of place and in place
                for root in range(p):
                    x = data(r, base, row_shape, dt)
                    expect(f"broadcast root {root} {tag}", rc.broadcast(x, root), data(root, base, row_shape, dt))
                    rc.broadcast(x, root, out=x)
                    expect(f"broadcast in place root {root} {tag}", x, data(root, base, row_shape, dt))
                # alltoall: rank r sends (r + q + base) % 3 rows to rank q
                splits = [(r + q + base) % 3 for q in range(p)]
                x = data(r, sum(splits), row_shape, dt)
                got, received = rc.alltoall(x, splits=splits, return_received_splits=True)
                parts = []
                for q in range(p):
                    sq = [(q + j + base) % 3 for j in range(p)]
                    xq = data(q, sum(sq), row_shape, dt)
                    parts.append(xq[sum(sq[:r]) : sum(sq[:r]) + sq[r]])
                expect(f"alltoall {tag}", got, np.concatenate(parts))
                expect(f"alltoall received {tag}", received, np.array([(q + r + base) % 3 for q in range(p)]))
        # reducescatter: every op, rows not divisible by p
        for op_name in ("Sum", "Min", "Max", "Product", "Average"):
            if op_name == "Average" and np.dtype(dt).kind in "iu":
                continue
            for rows in (0, 1, p + 1, 2 * p + 3, 4099):
                xs = [data(q, rows, (3,), dt) for q in range(p)]
                if op_name == "Product":  # factors 1..2: 8 ranks' products stay inside float16
                    xs = [(x.astype(np.float32) % 2 + 1).astype(dt) for x in xs]
                acc = xs[0].astype(np.float64)
                for q in range(1, p):
                    acc = {
                        "Sum": np.add,
                        "Average": np.add,
                        "Min": np.minimum,
                        "Max": np.maximum,
                        "Product": np.multiply,
                    }[op_name](acc, xs[q].astype(np.float64))
                if op_name == "Average":
                    acc = acc / p
                if np.dtype(dt).kind in "iu":
                    acc = np.asarray(acc, np.int64).astype(dt)  # wraps like the library
                first = [rows // p * q + min(q, rows % p) for q in range(p + 1)]
                want = acc[first[r] : first[r + 1]]
                exact = np.dtype(dt).kind in "iu" or op_name in ("Min", "Max")
                got = rc.reducescatter(xs[r], op=getattr(rc, op_name))
                expect(f"reducescatter {op_name} {np.dtype(dt).name} rows {rows}", got, want, exact)
    # reducescatter rows longer than a segment (the tests run with 4 KiB segments; a row of
    # 8 KiB of NumPy memory is read from peers a segment at a time, never a row at once)
    for row in ((2048,), (3, 1000)):
        xs = [data(q, p + 1, row, np.float32) for q in range(p)]
        first = [(p + 1) // p * q + min(q, (p + 1) % p) for q in range(p + 1)]
        expect(
            f"reducescatter long rows {row}",
            rc.reducescatter(xs[r], op=rc.Sum),
            sum(x.astype(np.float64) for x in xs)[first[r] : first[r + 1]].astype(np.float32),
        )
    # the default alltoall splits evenly; a first dimension not divisible by size is an error
    x = data(r, 2 * p, (2,), np.float32)
    expect(
        "alltoall even",
        rc.alltoall(x),
        np.concatenate([data(q, 2 * p, (2,), np.float32)[2 * r : 2 * r + 2] for q in range(p)]),
    )
    if p > 1:
        try:
            rc.alltoall(data(r, 2 * p + 1, (), np.float32))
            failures.append("alltoall indivisible accepted")
        except rc.RdmacollError:
            pass
    # 0-d arrays are one row of one element: allgather gives a vector (the core once
    # read a shape entry they do not have and crashed), broadcast keeps the 0-d shape
    scalar = np.array(r + 0.5, np.float32)
    expect("allgather 0-d", rc.allgather(scalar), np.arange(p, dtype=np.float32) + 0.5)
    expect("allgather_async 0-d", rc.synchronize(rc.allgather_async(scalar)), np.arange(p, dtype=np.float32) + 0.5)
    expect("broadcast 0-d", rc.broadcast(scalar, p - 1), np.array(p - 0.5, np.float32))
    expect(
        "reducescatter 0-d",
        rc.reducescatter(scalar, op=rc.Sum),
        np.array([p * p / 2], np.float32)[: 1 if r == 0 else 0],
    )
    # grouped_allreduce: mixed dtypes, out of place and in place
    xs = [data(r, 5, (), np.float32), data(r, 3, (2,), np.int64), data(r, 1, (), np.float32)]
    want = [sum(data(q, *a) for q in range(p)) for a in ((5, (), np.float32), (3, (2,), np.int64), (1, (), np.float32))]
    got = rc.grouped_allreduce(xs, op=rc.Sum)
    for i in range(3):
        expect(f"grouped_allreduce {i}", got[i], want[i])
    rc.grouped_allreduce(xs, op=rc.Sum, out=xs)
    for i in range(3):
        expect(f"grouped_allreduce in place {i}", xs[i], want[i])
    # Python objects: pickled, sized, then moved (lengths differ per rank)
    obj = {"root": p - 1, "blob": "x" * (1000 * (p - 1) + 3), "list": list(range(p))}
    got_obj = rc.broadcast_object(obj if r == p - 1 else None, root_rank=p - 1)
    expect("broadcast_object", np.array([got_obj == obj]), np.array([True]))
    gathered = rc.allgather_object(("rank", r, "y" * (r * 517)))
    expect(
        "allgather_object", np.array([gathered == [("rank", q, "y" * (q * 517)) for q in range(p)]]), np.array([True])
    )
    for _ in range(3):
        rc.barrier()
    emit("done", cases=cases, failures=len(failures), result=digest(np.array([cases])))


def mismatch() -> None:
    rc = init()
    r, p = rc.rank(), rc.size()
    deviant = p - 1
    cases = {
        "root": lambda: rc.broadcast(np.ones(8, np.float32), root_rank=1 if r == deviant else 0),
        "dtype": lambda: rc.allgather(np.ones(4, np.float64 if r == deviant else np.float32)),
        "row shape": lambda: rc.allgather(np.ones((2, 3 if r == deviant else 4), np.float32)),
        # (uint16 is the core's own dtype, not int16's bits: the ranks' widths agree)
        "signedness": lambda: rc.alltoall(np.ones(4 * p, np.uint16 if r == deviant else np.int16)),
        "collective": lambda: rc.barrier() if r == deviant else rc.reducescatter(np.ones(6, np.float32)),
    }
    which = sys.argv[2]
    t0 = time.monotonic()
    try:
        cases[which]()
        emit("mismatch", case=which, error=None, seconds=time.monotonic() - t0)
    except rc.RdmacollError as e:
        emit("mismatch", case=which, error=str(e), seconds=time.monotonic() - t0)


def chosen() -> None:
    """Which algorithm each collective ran (rc._session.current().comm.last_algorithm) on every rank, and
    whether its result was right. allgather/alltoall get different row counts per rank:
    selection must not depend on them, or ranks would disagree."""
    rc = init()
    r, p = rc.rank(), rc.size()
    calls = {
        "allgather": lambda: (
            rc.allgather(data(r, 3 + 40 * r, (4,), np.float32)),
            np.concatenate([data(q, 3 + 40 * q, (4,), np.float32) for q in range(p)]),
        ),
        "broadcast": lambda: (
            rc.broadcast(data(r, 1000, (), np.float32), root_rank=p - 1),
            data(p - 1, 1000, (), np.float32),
        ),
        "reducescatter": lambda: (
            rc.reducescatter(data(r, 4 * p, (8,), np.float32), op=rc.Sum),
            sum(data(q, 4 * p, (8,), np.float32) for q in range(p))[4 * r : 4 * r + 4],
        ),
        "alltoall": lambda: (
            rc.alltoall(data(r, (5 + r) * p, (2,), np.float32)),
            np.concatenate([data(q, (5 + q) * p, (2,), np.float32)[(5 + q) * r : (5 + q) * (r + 1)] for q in range(p)]),
        ),
    }
    for name, call in calls.items():
        try:
            got, want = call()
            emit(
                "chosen",
                collective=name,
                algo=rc._session.current().comm.last_algorithm,
                error=None,
                ok=bool(np.array_equal(np.asarray(got), want)),
            )
        except rc.RdmacollError as e:
            emit("chosen", collective=name, algo=None, error=str(e), ok=False)


if __name__ == "__main__":
    main({"check": check, "mismatch": mismatch, "chosen": chosen}[sys.argv[1]])
