"""rdmacoll-bench: allreduce sweep with nccl-tests columns.

    mpiexec -n 2 rdmacoll-bench                      # 8 B .. 64 MiB, float32 Sum
    mpiexec -n 4 rdmacoll-bench -b 1K -e 256M -f 4 -d float16 -o Average --algo ring
    rdmacoll-bench --np 2 ...                        # launches itself through mpiexec
    mpiexec -n 4 rdmacoll-bench --tune               # fit the cost model, write the tuning file

Without --algo the `algo` column shows the algorithm the selector chose for each size
(the cost model, or an RDMACOLL_ALGO rule).

--tune times every registered allreduce algorithm (forced, one after the other) at a few
sizes on plain NumPy arrays, and fits the alpha-beta-gamma constants of the cost model
(seconds per step, per byte moved, per byte reduced) to those times by least squares on
relative error, using each algorithm's own cost formula from the core. Rank 0 writes them
to --tune-file (default: $RDMACOLL_TUNING_FILE, else ~/.cache/rdmacoll/tuning.json), which
init() reads on rank 0 and broadcasts, so every rank selects with the same constants.

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
    ap.add_argument("--tune", action="store_true",
                    help="measure the cost model constants and write the tuning file")
    ap.add_argument("--tune-file", default=None,
                    help="where --tune writes (default: $RDMACOLL_TUNING_FILE, else ~/.cache/rdmacoll/tuning.json)")
    ap.add_argument("--tune-sizes", default="8,1K,4K,16K,32K,64K,256K,1M,4M",
                    help="message sizes --tune times (comma-separated)")
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


def slowest(seconds):
    """The largest of every rank's value(s): a float, or an array element-wise."""
    v = np.atleast_1d(np.asarray(seconds, np.float64))
    out = rc.allreduce(v, op=rc.Max)
    return out if np.ndim(seconds) else float(out[0])


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
    if args.tune:
        return tune(args)
    if args.algo:
        os.environ["RDMACOLL_ALGO"] = args.algo
    if args.op == "Average" and args.dtype not in ("float16", "bfloat16", "float32", "float64"):
        ap.error("-o Average needs a floating dtype (use -o Sum for integers)")

    rc.init()
    rank, size = rc.rank(), rc.size()
    dtype = numpy_dtype(args.dtype)
    op = getattr(rc, args.op)
    factor = 2 * (size - 1) / size if size > 1 else 1.0
    if rank == 0:
        print(f"# rdmacoll-bench allreduce: {size} ranks, dtype {args.dtype}, op {args.op}, "
              f"memory {args.memory}, {'in place' if args.inplace else 'out of place'}, "
              f"{args.iters} iters, {args.warmup} warm-up")
        print(f"# {'size':>10} {'count':>12} {'type':>9} {'redop':>7} {'algo':>18} {'transport':>9}"
              f" {'time(us)':>10} {'min(us)':>9} {'max(us)':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}")
        print("# " + " " * 90 + "(GB/s)  (GB/s)")
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
            rc.barrier()
            t0 = time.perf_counter()
            rc.allreduce(x, op=op, out=out)
            times.append(time.perf_counter() - t0)
        algo = rc._comm.last_algorithm  # before the reductions below run algorithms of their own
        times = slowest(times)  # the slowest rank per iteration
        wrong = 0
        if args.check:
            mine = count_wrong(np.asarray(out), reference(size, count, dtype, args.op))
            wrong = int(rc.allreduce(np.array([mine], np.int64), op=rc.Sum)[0])
        t = statistics.median(times)
        algbw = nbytes / t / 1e9 if t > 0 else 0.0
        busbw = algbw * factor
        busbws.append(busbw)
        if rank == 0:
            print(f"  {nbytes:>10} {count:>12} {args.dtype:>9} {args.op:>7} {algo:>18} {rc._comm.transport:>9}"
                  f" {t * 1e6:10.2f} {times.min() * 1e6:9.2f} {times.max() * 1e6:9.2f} {algbw:7.2f} {busbw:7.2f} {wrong:>6}",
                  flush=True)
    if rank == 0:
        print(f"# Avg bus bandwidth    : {statistics.mean(busbws):.3f} GB/s")
    rc.shutdown()
    return 0


# --------------------------------------------------------------------------- --tune


def _time_allreduce(x: np.ndarray, target_s: float, rounds: int) -> tuple[float, str]:
    """Seconds per call and the algorithm that ran: the fastest of `rounds` batches, each
    timed as its slowest rank (the minimum: on a shared machine noise only ever adds time)."""
    for _ in range(3):
        rc.allreduce(x, op=rc.Sum, out=x)
    rc.barrier()
    t0 = time.perf_counter()
    for _ in range(3):
        rc.allreduce(x, op=rc.Sum, out=x)
    probe = slowest((time.perf_counter() - t0) / 3)
    iters = int(max(3, min(20000, target_s / max(probe, 1e-7))))
    samples = []
    for _ in range(rounds):
        rc.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            rc.allreduce(x, op=rc.Sum, out=x)
        elapsed = time.perf_counter() - t0
        algo = rc._comm.last_algorithm
        samples.append(slowest(elapsed / iters))
    return min(samples), algo


def _coefficients(nbytes: int, p: int) -> dict[str, np.ndarray]:
    """Each algorithm's cost as (steps, bytes moved, bytes reduced): its cost function
    evaluated at the unit models (costs are linear in the constants)."""
    units = [dict(alpha=1.0, beta=0.0, gamma=0.0), dict(alpha=0.0, beta=1.0, gamma=0.0),
             dict(alpha=0.0, beta=0.0, gamma=1.0)]
    per_unit = [rc._core._allreduce_costs(u, nbytes, p) for u in units]
    return {name: np.array([c[name] for c in per_unit]) for name in per_unit[0]}


def _nnls_relative(rows) -> np.ndarray:
    A = np.array([r[0] / r[1] for r in rows])
    b = np.ones(len(rows))
    free = [0, 1, 2]
    x = np.zeros(3)
    while free:
        sol, *_ = np.linalg.lstsq(A[:, free], b, rcond=None)
        if (sol > 0).all():
            x[free] = sol
            break
        free = [f for f, v in zip(free, sol) if v > 0]
    return x


def fit_cost_model(rows: list[tuple[np.ndarray, float]]) -> tuple[np.ndarray, list[int]]:
    """Non-negative least squares on relative error: minimise sum(((A.x - t) / t)^2) with
    x = (alpha, beta, gamma) >= 0 (a constant the data cannot support is set to 0).
    Times the model misses by more than 3x either way (noise from other processes, or an
    algorithm far from its formula) are left out and the rest refitted. Returns x and the
    indices of the rows left out."""
    keep = list(range(len(rows)))
    x = _nnls_relative(rows)
    for _ in range(5):
        ratio = [float(rows[i][0] @ x) / rows[i][1] for i in range(len(rows))]
        new = [i for i in range(len(rows)) if 1 / 3 <= ratio[i] <= 3]
        if new == keep or len(new) < 3:
            break
        keep = new
        x = _nnls_relative([rows[i] for i in keep])
    return x, [i for i in range(len(rows)) if i not in keep]


def measure_gamma(count: int = 1 << 20) -> float:
    """Seconds per byte of reduction input of the local kernel (float32 Sum, 2 inputs)."""
    a = np.ones(count, np.float32)
    b = np.ones(count, np.float32)
    out = np.empty(count, np.float32)
    best = float("inf")
    for _ in range(15):
        t0 = time.perf_counter()
        rc._core._reduce_local(rc._core.DTYPES["float32"], rc.Sum, out, [a, b], 1.0)
        best = min(best, time.perf_counter() - t0)
    return best / (2 * a.nbytes)


def tune(args) -> int:
    from . import _config

    if not hasattr(rc._core, "_allreduce_costs"):
        print("rdmacoll-bench --tune: this build lacks _core._allreduce_costs (tuning bindings)", file=sys.stderr)
        return 2
    rc.init()
    rank, p = rc.rank(), rc.size()
    rc.shutdown()
    if p < 2:
        if rank == 0:
            print("rdmacoll-bench --tune needs at least 2 ranks (mpiexec -n 4 rdmacoll-bench --tune, or --np 4)",
                  file=sys.stderr)
        return 2
    path = args.tune_file or os.environ.get(_config.TUNING_FILE_VAR) or _config.default_tuning_path()
    sizes = [parse_size(s) for s in args.tune_sizes.split(",") if s.strip()]
    names = [name for name, _ in rc.algorithms()]
    gamma_kernel = measure_gamma()
    times: dict[tuple[str, int], float] = {}
    os.environ[_config.TUNING_FILE_VAR] = "none"  # the constants being measured must not steer anything
    for name in names:
        os.environ["RDMACOLL_ALGO"] = name
        rc.init()
        for nbytes in sizes:
            x = np.ones(max(1, nbytes // 4), np.float32)
            t, ran = _time_allreduce(x, target_s=0.05, rounds=3)
            if ran == name:  # not usable at this size (eager): skipped
                times[(name, x.nbytes)] = t
        rc.shutdown()
    del os.environ["RDMACOLL_ALGO"]
    rows = []
    for (name, nbytes), t in times.items():
        rows.append((_coefficients(nbytes, p)[name], t))
    x, left_out = fit_cost_model(rows)
    alpha, beta, gamma = (float(v) for v in x)
    model = dict(alpha=alpha, beta=beta, gamma=gamma)
    keys = list(times)
    if rank == 0:
        print(f"# rdmacoll-bench --tune: {p} ranks, transport shm, float32 Sum on NumPy arrays")
        default = rc._core._default_cost_model()
        print(f"# {'size':>8} " + " ".join(f"{n[:12]:>12}" for n in names)
              + f" {'fastest':>18} {'tuned picks':>18} {'shipped picks':>18}")
        ok = ok_default = 0
        used_sizes = sorted({n for _, n in times})
        for nbytes in used_sizes:
            measured = {n: times.get((n, nbytes)) for n in names}
            usable = [n for n in names if measured[n] is not None]
            pick = rc._core._select_allreduce(model, nbytes, p, usable)
            shipped = rc._core._select_allreduce(default, nbytes, p, usable)
            fastest = min(usable, key=lambda n: measured[n])
            ok += measured[pick] <= 1.15 * measured[fastest]
            ok_default += measured[shipped] <= 1.15 * measured[fastest]
            cells = " ".join(f"{measured[n] * 1e6:12.2f}" if measured[n] is not None else f"{'-':>12}" for n in names)
            print(f"  {human(nbytes):>8} {cells} {fastest:>18} {pick:>18}{'' if measured[pick] <= 1.15 * measured[fastest] else '*'}"
                  f" {shipped:>18}{'' if measured[shipped] <= 1.15 * measured[fastest] else '*'}")
        print(f"# times in us (fastest of 5 batches); a pick within 15% of the fastest: tuned {ok}, shipped "
              f"{ok_default} of {len(used_sizes)} sizes (* marks the others)")
        if left_out:
            print("# left out of the fit (model off by more than 3x): "
                  + ", ".join(f"{keys[i][0]}@{human(keys[i][1])}" for i in left_out))
        print(f"# measured: alpha = {alpha:.3e} s/step, beta = {beta:.3e} s/B ({1 / beta / 1e9 if beta else float('inf'):.2f} GB/s), "
              f"gamma = {gamma:.3e} s/B ({1 / gamma / 1e9 if gamma else float('inf'):.2f} GB/s)")
        print(f"# shipped:  alpha = {default['alpha']:.3e}, beta = {default['beta']:.3e}, gamma = {default['gamma']:.3e}")
        print(f"# local reduction kernel alone: gamma = {gamma_kernel:.3e} s/B ({1 / gamma_kernel / 1e9:.2f} GB/s)")
        _config.write_tuning_file(path, {"shm": model}, measured={
            "ranks": p, "sizes": used_sizes, "gamma_kernel": gamma_kernel,
            "times": {f"{n}@{b}": t for (n, b), t in sorted(times.items())},
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        })
        print(f"# wrote {path} (read by init() on rank 0; {_config.TUNING_FILE_VAR} chooses another file, "
              f"{_config.TUNING_FILE_VAR}=none ignores it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
