"""rdmacoll vs MPI allreduce, in the same processes, interleaved.

    mpiexec -n 2 python benchmarks/allreduce_vs_mpi.py [--sizes 8,64K,1M,16M,64M,256M] [--reps 5]

For every size: float32 Sum through mpi4py `Allreduce(MPI.IN_PLACE, x)`, rdmacoll on a
plain NumPy array (user memory, in place), and rdmacoll on an `rc.empty` array
(library-allocated memory that peers read in place). The three run in turn, round after
round, so machine noise hits them alike; each round times a batch of iterations
(barrier-aligned, the slowest rank's time counts) and the table reports the median
round. busbw = algbw * 2(n-1)/n, as nccl-tests prints it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

import rdmacoll as rc


def parse_size(text: str) -> int:
    """32768, 32K, 32KB, 32KiB, 1.5M: the grammar of every size setting."""
    return rc._core.parse_size(text)


def human(n: int) -> str:
    for suffix, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {suffix}"
    return f"{n} B"


def time_batch(fn, iters: int, comm) -> float:
    """Seconds per iteration of fn, the slowest rank's."""
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = (time.perf_counter() - t0) / iters
    return comm.allreduce(dt, op=MPI.MAX)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,64K,1M,16M,64M,256M")
    ap.add_argument("--reps", type=int, default=5, help="rounds per size (median reported)")
    ap.add_argument("--target-seconds", type=float, default=0.2, help="per batch")
    args = ap.parse_args()

    rc.init()
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    rows = []
    for nbytes in [parse_size(s) for s in args.sizes.split(",")]:
        count = max(1, nbytes // 4)
        user = np.ones(count, np.float32)
        mpi_buf = np.ones(count, np.float32)
        pooled = rc.empty(count, np.float32)
        pooled[:] = 1
        impls = {
            "mpi": lambda: comm.Allreduce(MPI.IN_PLACE, mpi_buf, op=MPI.SUM),
            "rc": lambda: rc.allreduce(user, op=rc.Sum, out=user),
            "rc.empty": lambda: rc.allreduce(pooled, op=rc.Sum, out=pooled),
        }
        # Warm up and size the batches so each takes ~target seconds.
        iters = {}
        for name, fn in impls.items():
            for _ in range(3):
                fn()
            probe = time_batch(fn, 3, comm)
            iters[name] = int(max(3, min(100000, args.target_seconds / max(probe, 1e-7))))
        samples = {name: [] for name in impls}
        for _ in range(args.reps):
            for name, fn in impls.items():
                samples[name].append(time_batch(fn, iters[name], comm))
        med = {name: statistics.median(v) for name, v in samples.items()}
        # Values grow (Sum in place): only the pattern matters for timing; check one call.
        check = np.full(count, 1, np.float32)
        rc.allreduce(check, op=rc.Sum, out=check)
        wrong = int(np.count_nonzero(check != n))
        rows.append((count * 4, med, wrong))
        if comm.Get_rank() == 0:
            print(f"# {human(count * 4)} done", flush=True)

    if comm.Get_rank() == 0:
        algo = rc._session.current().comm.selected_algorithm
        print(
            f"\nallreduce float32 Sum, {n} ranks, median of {args.reps} rounds "
            f"(MPI: {MPI.Get_library_version().splitlines()[0].strip()})"
        )
        hdr = (
            f"{'size':>10} {'algo':>6} | {'mpi us':>9} {'busbw':>6} | {'rc us':>9} {'busbw':>6} {'x mpi':>6} |"
            f" {'empty us':>9} {'busbw':>6} {'x mpi':>6} | #wrong"
        )
        print(hdr)
        for nbytes, med, wrong in rows:
            bw = {k: nbytes / v / 1e9 * factor for k, v in med.items()}
            print(
                f"{human(nbytes):>10} {algo(nbytes):>6} | {med['mpi'] * 1e6:9.2f} {bw['mpi']:6.2f} |"
                f" {med['rc'] * 1e6:9.2f} {bw['rc']:6.2f} {med['mpi'] / med['rc']:6.2f} |"
                f" {med['rc.empty'] * 1e6:9.2f} {bw['rc.empty']:6.2f} {med['mpi'] / med['rc.empty']:6.2f} | {wrong}"
            )
        print("busbw in GB/s; 'x mpi' = MPI time / rdmacoll time (higher is better)")
    rc.shutdown()


if __name__ == "__main__":
    main()
