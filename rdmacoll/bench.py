"""rdmacoll-bench: allreduce sweep with nccl-tests columns.

    mpiexec -n 2 rdmacoll-bench                      # 8 B .. 64 MiB, float32 Sum
    mpiexec -n 4 rdmacoll-bench -b 1K -e 256M -f 4 -d float16 -o Average --algo ring
    rdmacoll-bench --np 2 ...                        # launches itself through mpiexec

Timing: warm-up, then per iteration a barrier-aligned run whose time is the slowest
rank's; the table shows the median (and min/max) over iterations. algbw = size / time;
busbw = algbw * 2(n-1)/n for allreduce (the bandwidth each link must sustain, which is
what compares across rank counts). #wrong counts elements that differ from the
NumPy reference (with -c, on by default).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

import rdmacoll as rc

_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8")
_OPS = ("Sum", "Average", "Min", "Max", "Product")


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    for suffix, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        value = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 8, 64K, 16M, 1G)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"size must be >= 0: {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rdmacoll-bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("8"))
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("64M"))
    ap.add_argument("-f", "--stepfactor", type=positive_int, default=4)
    ap.add_argument("-n", "--iters", type=positive_int, default=20)
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("-c", "--check", type=int, choices=(0, 1), default=1)
    ap.add_argument("-d", "--dtype", choices=_DTYPES, default="float32")
    ap.add_argument("-o", "--op", choices=_OPS, default="Sum")
    ap.add_argument("--algo", default=None, help="force an algorithm (see --list)")
    ap.add_argument("--inplace", type=int, choices=(0, 1), default=1)
    ap.add_argument("--memory", choices=("user", "empty"), default="user",
                    help="user: plain NumPy arrays; empty: arrays from rc.empty (zero-copy)")
    ap.add_argument("--list", action="store_true", help="list the algorithms and exit")
    ap.add_argument("--np", type=positive_int, default=None,
                    help="launch this many local ranks through mpiexec")
    return ap


def numpy_dtype(name: str):
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise SystemExit("rdmacoll-bench: -d bfloat16 needs ml_dtypes (pip install ml_dtypes)") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def human(n: int) -> str:
    for suffix, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


def relaunch(np_: int, argv: list[str]) -> int:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if not mpiexec:
        print("rdmacoll-bench: --np needs mpiexec (pip install 'rdmacoll[mpich]' or your MPI)", file=sys.stderr)
        return 2
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    extra = ["--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version else []
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [mpiexec, "-n", str(np_), *extra, sys.executable, "-m", "rdmacoll.bench", *argv]
    return subprocess.call(cmd, env=env)


def inputs_for(rank: int, count: int, dtype: np.dtype) -> np.ndarray:
    # Small integers: exact in every dtype, products and sums stay representable.
    base = (np.arange(count, dtype=np.int64) + rank) % 3 + 1
    return base.astype(dtype)


def reference(size: int, count: int, dtype: np.dtype, op: str) -> np.ndarray:
    acc = inputs_for(0, count, dtype).astype(np.float64)
    for r in range(1, size):
        x = inputs_for(r, count, dtype).astype(np.float64)
        acc = {"Sum": np.add, "Average": np.add, "Min": np.minimum, "Max": np.maximum,
               "Product": np.multiply}[op](acc, x)
    if op == "Average":
        acc = acc / size
    return acc.astype(dtype)


def count_wrong(got: np.ndarray, want: np.ndarray) -> int:
    """Elements that differ: exactly for integers, beyond a few ulps for floats (Average
    scales by 1/n in the element's precision)."""
    if want.dtype.kind in "iu":
        return int(np.count_nonzero(got != want))
    eps = float(np.finfo(want.dtype).eps) if want.dtype.kind == "f" else 2.0 ** -7  # bfloat16
    g, w = got.astype(np.float64), want.astype(np.float64)
    return int(np.count_nonzero(~np.isclose(g, w, rtol=4 * eps, atol=0)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.list:
        for name, desc in rc.algorithms():
            print(f"{name:12s} {desc}")
        return 0
    if args.np is not None:
        rest = []
        skip = False
        for a in argv:
            if skip:
                skip = False
                continue
            if a == "--np":
                skip = True
                continue
            if a.startswith("--np="):
                continue
            rest.append(a)
        return relaunch(args.np, rest)
    if args.maxbytes < args.minbytes:
        ap.error("--maxbytes must be >= --minbytes")
    if args.algo:
        os.environ["RDMACOLL_ALGO"] = args.algo
    if args.op == "Average" and args.dtype not in ("float16", "bfloat16", "float32", "float64"):
        ap.error("-o Average needs a floating dtype (use -o Sum for integers)")

    from mpi4py import MPI  # the benchmark itself uses MPI for barriers and timing

    rc.init()
    comm = MPI.COMM_WORLD
    rank, size = rc.rank(), rc.size()
    dtype = numpy_dtype(args.dtype)
    op = getattr(rc, args.op)
    factor = 2 * (size - 1) / size if size > 1 else 1.0
    if rank == 0:
        print(f"# rdmacoll-bench allreduce: {size} ranks, dtype {args.dtype}, op {args.op}, "
              f"memory {args.memory}, {'in place' if args.inplace else 'out of place'}, "
              f"{args.iters} iters, {args.warmup} warm-up")
        print(f"# {'size':>10} {'count':>12} {'type':>9} {'redop':>7} {'algo':>10} {'transport':>9}"
              f" {'time(us)':>10} {'min(us)':>9} {'max(us)':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}")
        print("# " + " " * 82 + "(GB/s)  (GB/s)")
    sizes = []
    n = max(args.minbytes, 0)
    while n <= args.maxbytes:
        sizes.append(n)
        if n == 0 or args.stepfactor == 1:
            n = n + 1 if n == 0 else n + args.minbytes
        else:
            n *= args.stepfactor
    busbws = []
    for nbytes in sizes:
        count = nbytes // dtype.itemsize
        make = (lambda: rc.empty(count, dtype)) if args.memory == "empty" else (lambda: np.empty(count, dtype))
        x = make()
        out = x if args.inplace else make()
        src = inputs_for(rank, count, dtype)
        for _ in range(args.warmup):
            x[...] = src
            rc.allreduce(x, op=op, out=out)
        times = []
        for _ in range(args.iters):
            x[...] = src  # reset (in place overwrites); not timed
            comm.Barrier()
            t0 = time.perf_counter()
            rc.allreduce(x, op=op, out=out)
            times.append(time.perf_counter() - t0)
        times = np.array(times)
        comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)  # the slowest rank per iteration
        wrong = comm.allreduce(count_wrong(np.asarray(out), reference(size, count, dtype, args.op))) if args.check else 0
        t = statistics.median(times)
        algbw = nbytes / t / 1e9 if t > 0 else 0.0
        busbw = algbw * factor
        busbws.append(busbw)
        if rank == 0:
            algo = rc._comm.last_algorithm
            print(f"  {nbytes:>10} {count:>12} {args.dtype:>9} {args.op:>7} {algo:>10} {rc._comm.transport:>9}"
                  f" {t * 1e6:10.2f} {times.min() * 1e6:9.2f} {times.max() * 1e6:9.2f} {algbw:7.2f} {busbw:7.2f} {wrong:>6}",
                  flush=True)
    if rank == 0:
        print(f"# Avg bus bandwidth    : {statistics.mean(busbws):.3f} GB/s")
    rc.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
