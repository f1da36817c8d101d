"""Every dtype x op x size x mode of rc.allreduce against a NumPy reference.

    mpiexec -n N python allreduce_matrix.py [--sizes 0,1,7] [--big-mib 64] [--rotate-above 65536]
                                            [--dtypes ...] [--ops ...] [--no-mixed]
                                            [--algos default,ring,...] [--big-algos default]
                                            [--subset-above N --subset-dtypes ... --subset-ops ...
                                             --full-algos default] [--mixed-algos default,direct]

--algos runs the matrix once per algorithm, each in its own init() ... shutdown() with
{"algo": name} ("default": the selector's choice, or RDMACOLL_ALGO's); one launch then
serves every algorithm (a launch costs ~2 s of Python start-up per rank, the matrix less).
Records, each with its "algo": one "fail" per wrong case, then "done" with the number of
cases, the algorithms used (by message size) and whether every rank got bit-identical
results. Above --subset-above elements, the algorithms not in --full-algos run only the
--subset-dtypes and --subset-ops (an algorithm moves bytes; the reduction of each dtype and
op is the same kernel under every algorithm, run in full by --full-algos); the mixed-memory
cases run under --mixed-algos only (the algorithms that take a path by memory kind). The
ranks take turns computing the NumPy reference (one checker per count, dtype
and op): the others' results are right when their bytes equal the checker's, which every
rank compares.
"""

import argparse

import numpy as np
from mpi4py import MPI

from common import digest, emit, init, main
from reference import DTYPES, OPS, SIZES, Inputs, compare, np_dtype, reference

MODES = ["new", "inplace", "out", "empty_inplace"]
SHAPES = {1023: (3, 341)}  # one size as a 2-D array


def run_mode(rc, x, op, mode):
    """(result, problem): problem describes a broken contract other than the values."""
    before = x.tobytes() if mode in ("new", "out") else None  # (a copy compares faster than a hash)
    if mode == "new":
        res = rc.allreduce(x, op=op)
        if not isinstance(res, np.ndarray) or res.shape != x.shape or res.dtype != x.dtype:
            return res, f"returned {type(res).__name__} {getattr(res, 'shape', '')} {getattr(res, 'dtype', '')}"
    elif mode == "inplace":
        y = x.copy()
        res = rc.allreduce(y, op=op, out=y)
        if res is not y:
            return res, "out=x did not return x"
        return res, None
    elif mode == "out":
        o = np.empty_like(x)
        res = rc.allreduce(x, op=op, out=o)
        if res is not o:
            return res, "out=o did not return o"
    elif mode == "empty_inplace":
        e = rc.empty(x.shape, x.dtype)
        e[...] = x
        res = rc.allreduce(e, op=op, out=e)
        if res is not e:
            return res, "out=x did not return x (rc.empty input)"
        return res, None
    if x.tobytes() != before:
        return res, "the input was modified"
    return res, None


def body():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--big-mib", type=int, default=0)
    ap.add_argument(
        "--rotate-above",
        type=int,
        default=None,
        help="sizes above this many elements run one mode per (dtype, op), in turn (default: every mode)",
    )
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="a subset of reference.DTYPES")
    ap.add_argument("--ops", default=",".join(OPS), help="a subset of reference.OPS")
    ap.add_argument("--algos", default="default", help="algorithms to force in turn")
    ap.add_argument("--no-mixed", action="store_true", help="skip the ranks-differ-in-memory-kind cases")
    ap.add_argument("--big-algos", default=None, help="those of --algos that run --big-mib (default: all)")
    ap.add_argument("--subset-above", type=int, default=None, help="see --full-algos")
    ap.add_argument("--subset-dtypes", default=None, help="see --full-algos (default: --dtypes)")
    ap.add_argument("--subset-ops", default=None, help="see --full-algos (default: --ops)")
    ap.add_argument(
        "--full-algos",
        default=None,
        help="those of --algos that run every --dtypes and --ops above --subset-above elements; "
        "the others run --subset-dtypes and --subset-ops there (default: all run every one)",
    )
    ap.add_argument(
        "--mixed-bytes",
        default=f"{1 << 20},{(4 << 20) + 12},{16 << 20}",
        help="the mixed-memory cases' sizes in bytes (multiples of 4)",
    )
    ap.add_argument(
        "--mixed-algos", default=None, help="those of --algos that run the mixed-memory cases (default: all)"
    )
    a = ap.parse_args()
    big_algos = a.algos.split(",") if a.big_algos is None else a.big_algos.split(",")
    drawn = {}  # (count, dtype, op) -> (input, reference, tolerance): the same for every algorithm
    full_algos = a.algos.split(",") if a.full_algos is None else a.full_algos.split(",")
    mixed_algos = a.algos.split(",") if a.mixed_algos is None else a.mixed_algos.split(",")
    for algo in a.algos.split(","):
        rc = init(None if algo == "default" else {"algo": algo})
        matrix(rc, a, algo, a.big_mib if algo in big_algos else 0, drawn, algo in full_algos, algo in mixed_algos)
        rc.shutdown()


def periodic(np, step, offset, period):
    """One period of (step * i + offset) % period - period / 2, as float32 (small integers:
    sums of them are exact)."""
    return ((np.arange(period) * step + offset) % period - period // 2).astype(np.float32)


def matrix(rc, a, algo: str, big_mib: int, drawn: dict, full: bool, mixed: bool) -> None:
    p, r = rc.size(), rc.rank()
    core = rc._session.current().world.core
    hashes, failures, algos, cases = [], 0, {}, 0

    def fail(case, detail):
        nonlocal failures
        failures += 1
        if failures <= 40:
            emit("fail", algo=algo, case=case, detail=detail)

    for count in [int(s) for s in a.sizes.split(",") if s]:
        inputs = Inputs(p, count)
        shape = SHAPES.get(count, (count,))
        rotation = 0
        dtypes, ops = a.dtypes.split(","), a.ops.split(",")
        if not full and a.subset_above is not None and count > a.subset_above:
            dtypes = [d for d in dtypes if a.subset_dtypes is None or d in a.subset_dtypes.split(",")]
            ops = [o for o in ops if a.subset_ops is None or o in a.subset_ops.split(",")]
        for dtype in dtypes:
            dt = np_dtype(dtype)
            for op in ops:
                opv = getattr(rc, op)
                # One rank per (count, dtype, op) computes the reference (they take turns, in
                # the order the cases are first drawn): the others' results are checked by
                # their bytes matching the checker's.
                if (count, dtype, op) not in drawn:
                    checker = len(drawn) % p
                    expected = tol = None
                    if r == checker:
                        expected, tol = reference(inputs.all(dtype, op), dtype, op)
                        expected = expected.reshape(shape)
                        tol = None if tol is None else tol.reshape(shape)
                    drawn[count, dtype, op] = inputs.get(r, dtype, op).reshape(shape), expected, tol, checker
                x, expected, tol, checker = drawn[count, dtype, op]
                modes = MODES
                if a.rotate_above is not None and count > a.rotate_above:
                    modes = [MODES[rotation % len(MODES)]]
                    rotation += 1
                for mode in modes:
                    case = f"count={count} {dtype} {op} {mode}"
                    cases += 1
                    res, problem = run_mode(rc, x, opv, mode)
                    algos.setdefault(core.last_algorithm, set()).add(count * dt.itemsize)
                    if r == checker:
                        problem = problem or compare(np.asarray(res), expected, tol)
                    if problem:
                        fail(case, problem)
                    hashes.append((case, digest(res)))

    if big_mib:
        # One large float32 Sum, exact (small integers): the many-segment, pooled path.
        # Element i of rank q: (7 i + 13 q) % 64 - 32, whose period is 64 elements: one period
        # computed, then repeated (computing it at every index took gigabytes of int64
        # temporaries per rank, most of a 4-rank launch's time, in page faults)
        n = big_mib * (1 << 20) // 4
        mine = np.resize(periodic(np, 7, 13 * r, 64), n)
        expected = np.resize(sum(periodic(np, 7, 13 * q, 64) for q in range(p)), n)
        for mode in ("new", "empty_inplace"):
            case = f"big {big_mib} MiB float32 Sum {mode}"
            cases += 1
            res, problem = run_mode(rc, mine, rc.Sum, mode)
            algos.setdefault(core.last_algorithm, set()).add(n * 4)
            if problem or not np.array_equal(res, expected):
                fail(case, problem or compare(res, expected, None))
            hashes.append((case, digest(res)))
            del res

    # Ranks that differ in memory kind (odd ranks rc.empty, even ranks NumPy): algorithms
    # that choose a path by memory kind must still agree (direct at 12 ranks and more, 4-16
    # MiB: the slot ring as soon as any rank's buffers are user memory; below, each rank
    # stages or reads by cross-memory calls on its own).
    for nbytes in () if a.no_mixed or not mixed else [int(b) for b in a.mixed_bytes.split(",")]:
        if ("mixed", nbytes) not in drawn:
            n = nbytes // 4  # element i of rank q: (5 i + 3 q) % 32 - 16
            expected = np.resize(sum(periodic(np, 5, 3 * q, 32) for q in range(p)), n)
            drawn["mixed", nbytes] = np.resize(periodic(np, 5, 3 * r, 32), n), expected
        mine, expected = drawn["mixed", nbytes]
        mode = "empty_inplace" if r % 2 else "inplace"
        case = f"mixed memory {nbytes} B float32 Sum"
        cases += 1
        res, problem = run_mode(rc, mine, rc.Sum, mode)
        algos.setdefault(core.last_algorithm, set()).add(nbytes)
        if problem or not np.array_equal(res, expected):
            fail(case, problem or compare(res, expected, None))
        hashes.append((case, digest(res)))

    everyone = MPI.COMM_WORLD.allgather(hashes)
    differing = [case for i, (case, h) in enumerate(hashes) if any(o[i][1] != h for o in everyone)]
    emit(
        "done",
        algo=algo,
        cases=cases,
        failures=failures,
        differing=differing[:20],
        algorithms={k: sorted(v) for k, v in algos.items()},
    )


main(body)
