"""Throughput of the reduction kernels (csrc/reduce/reduce.cc), next to NumPy.

    python benchmarks/reduce_kernels.py                 (no mpiexec: no peers involved)
    python benchmarks/reduce_kernels.py --reps 11 --sizes 256K,4M,64M --nin 2,3,4

Calls the kernels through rdmacoll._core.reduce_local (op Sum, separate
output) for every dtype, and times the equivalent NumPy expression into a preallocated
output: np.add(a, b, out=out), then np.add(out, c, out=out) ... for more inputs.
GB/s is bytes of out per second (one array's size / time per call), the median of
--reps repetitions, each long enough (>= ~50 ms) to swamp timer and call overhead.
"ratio" is rdmacoll / NumPy (> 1: the kernel is faster). Note NumPy rounds float16 and
bfloat16 after every add, the kernels once at the end, so for nin > 2 the two do not
compute the same bits; the comparison is of speed only.

bfloat16 arrays come from ml_dtypes (pip install ml_dtypes); without it those rows are
skipped. The 64 MiB rows measure memory bandwidth, the 256 KiB rows the kernel itself
(inputs and output stay in L2/L3).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from rdmacoll import _core

try:
    import ml_dtypes
except ImportError:  # bfloat16 rows are skipped
    ml_dtypes = None

DTYPE_NAMES = ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8"]


def numpy_dtype(name: str):
    if name == "bfloat16":
        return ml_dtypes.bfloat16 if ml_dtypes is not None else None
    return np.dtype(name)


def parse_size(text: str) -> int:
    """32768, 32K, 32KB, 32KiB, 1.5M: the grammar of every size setting."""
    return _core.parse_size(text)


def fmt_size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def make_inputs(dt, count: int, nin: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Values that stay finite and normal under Sum (no denormal slow paths)."""
    arrays = []
    for _ in range(nin):
        if np.issubdtype(np.dtype(dt), np.integer):
            info = np.iinfo(dt)
            a = rng.integers(0, min(info.max, 100), count, dtype=dt, endpoint=True)
        else:
            a = rng.uniform(0.5, 1.5, count).astype(np.float32).astype(dt)
        arrays.append(a)
    return arrays


def seconds_per_call(fn, reps: int, min_rep_seconds: float = 0.05) -> float:
    """Median over reps of the time per call; each rep loops long enough to time well."""
    fn()  # warm-up: page faults, caches
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, int(min_rep_seconds / once))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions per row (median)")
    ap.add_argument("--sizes", default="256K,64M", help="bytes of out per row, e.g. 256K,64M")
    ap.add_argument("--nin", default="2,4", help="numbers of inputs, e.g. 2,4")
    ap.add_argument("--dtypes", default=",".join(DTYPE_NAMES), help="dtypes to run")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    nins = [int(n) for n in args.nin.split(",")]
    dtypes = [d.strip() for d in args.dtypes.split(",")]

    op_sum = _core.Sum
    rng = np.random.default_rng(0)
    notes = []
    header = f"{'dtype':9s} {'nin':>3s} {'size':>9s}   {'rdmacoll GB/s':>13s} {'numpy GB/s':>10s} {'ratio':>6s}"
    print(header)
    print("-" * len(header))
    for name in dtypes:
        dt = numpy_dtype(name)
        if dt is None:
            notes.append(f"{name}: skipped (ml_dtypes is not installed)")
            continue
        code = _core.DTYPES[name]
        itemsize = np.dtype(dt).itemsize
        for nbytes in sizes:
            count = nbytes // itemsize
            pool = make_inputs(dt, count, max(nins), rng)
            out = np.empty(count, dt)
            for nin in nins:
                inputs = pool[:nin]

                def ours():
                    _core.reduce_local(code, op_sum, out, inputs, 1.0)

                def numpy_expr():
                    np.add(inputs[0], inputs[1], out=out)
                    for c in inputs[2:]:
                        np.add(out, c, out=out)

                t_ours = seconds_per_call(ours, args.reps)
                if nin >= 2:
                    t_np = seconds_per_call(numpy_expr, args.reps)
                    np_col = f"{count * itemsize / t_np / 1e9:10.2f}"
                    ratio = f"{t_np / t_ours:6.2f}"
                else:
                    np_col, ratio = f"{'-':>10s}", f"{'-':>6s}"
                print(
                    f"{name:9s} {nin:3d} {fmt_size(count * itemsize):>9s}"
                    f"   {count * itemsize / t_ours / 1e9:13.2f} {np_col} {ratio}",
                    flush=True,
                )
            pool = out = None  # release before the next size
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
