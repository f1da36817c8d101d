"""Is the selector's choice as fast as the best algorithm? Every allreduce algorithm,
forced, against the default selection and MPI, in the same processes.

    mpiexec -n 4 python benchmarks/selector_vs_forced.py [--sizes 8,4K,...,256M] [--reps 3]

A round runs, for every configuration in turn (the selector, then each registered
algorithm forced through RDMACOLL_ALGO, each with its own init()/shutdown()), every size
as a barrier-aligned batch of iterations whose time is the slowest rank's; MPI's
`Allreduce(MPI.IN_PLACE)` runs in the same round. Configurations interleave round after
round so machine noise hits them alike; the table reports each cell's median round.
float32 Sum in place on plain NumPy arrays (user memory, the common case).

Columns: time per algorithm (us), the best forced one, the selector's choice and its
time, "sel/best" (selector time / best forced time: 1.00 is perfect, the target is at
most 1.15), and "x mpi" (MPI time / selector time: at least 1.00 is the target).
"""
from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
from mpi4py import MPI

import rdmacoll as rc
from allreduce_vs_mpi import human, parse_size, time_batch

DEFAULT_SIZES = "8,4K,16K,64K,256K,1M,4M,16M,64M,256M"


def run_config(algo: str | None, sizes, iters, comm, buffers, memory="user"):
    """{nbytes: seconds} for one configuration (None: the selector), and its choices.
    memory="empty": the arrays come from rc.empty (library memory peers map) instead."""
    if algo is None:
        os.environ.pop("RDMACOLL_ALGO", None)
    else:
        os.environ["RDMACOLL_ALGO"] = algo
    rc.init()
    times, chosen = {}, {}
    for nbytes in sizes:
        x = buffers[nbytes]
        if memory == "empty":
            x = rc.empty(x.shape, x.dtype)
            x[...] = 1
        fn = lambda: rc.allreduce(x, op=rc.Sum, out=x)  # noqa: E731
        for _ in range(2):
            fn()
        chosen[nbytes] = rc._comm.last_algorithm
        times[nbytes] = time_batch(fn, iters[nbytes], comm)
    rc.shutdown()
    return times, chosen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--reps", type=int, default=3, help="rounds (median reported)")
    ap.add_argument("--target-seconds", type=float, default=0.1, help="per batch")
    ap.add_argument("--algos", default="", help="comma-separated subset of the forced algorithms")
    ap.add_argument("--memory", choices=("user", "empty"), default="user",
                    help="plain NumPy arrays (user memory) or rc.empty arrays (library memory)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    sizes = [max(4, parse_size(s)) // 4 * 4 for s in args.sizes.split(",")]
    rc.init()
    # Only what can run here (hierarchical needs several hosts).
    algos = [a for a, _ in rc.algorithms() if rc._comm.usable(a, 1 << 20)]
    rc.shutdown()
    if args.algos:
        algos = [a for a in algos if a in args.algos.split(",")]
    configs = [None] + algos
    buffers = {nb: np.ones(nb // 4, np.float32) for nb in sizes}
    mpi_buffers = {nb: np.ones(nb // 4, np.float32) for nb in sizes}

    # Batch sizes from one probe of MPI (every configuration uses the same counts).
    iters = {}
    for nb in sizes:
        fn = lambda: comm.Allreduce(MPI.IN_PLACE, mpi_buffers[nb], op=MPI.SUM)  # noqa: E731
        fn()
        probe = time_batch(fn, 2, comm)
        iters[nb] = int(max(2, min(20000, args.target_seconds / max(probe, 1e-7))))

    samples = {c: {nb: [] for nb in sizes} for c in configs + ["mpi"]}
    chosen = {}
    for rep in range(args.reps):
        for c in configs:
            times, picks = run_config(c, sizes, iters, comm, buffers, args.memory)
            for nb, t in times.items():
                samples[c][nb].append(t)
            if c is None:
                chosen = picks
        for nb in sizes:
            fn = lambda: comm.Allreduce(MPI.IN_PLACE, mpi_buffers[nb], op=MPI.SUM)  # noqa: E731
            fn()
            samples["mpi"][nb].append(time_batch(fn, iters[nb], comm))
        if comm.Get_rank() == 0:
            print(f"# round {rep + 1}/{args.reps} done", flush=True)

    if comm.Get_rank() != 0:
        return
    med = {c: {nb: statistics.median(v) for nb, v in per.items()} for c, per in samples.items()}
    short = {"recursive_doubling": "rd", "halving_doubling": "hd", "ring_slots": "ring_sl"}
    print(f"\nallreduce float32 Sum in place ({args.memory} memory), {n} ranks, median of {args.reps} rounds, time in us "
          f"(MPI: {MPI.Get_library_version().splitlines()[0].strip()})")
    head = f"{'size':>8} " + " ".join(f"{short.get(a, a):>8}" for a in algos)
    print(head + f" | {'best':>8} {'selector':>17} {'sel/best':>8} | {'mpi':>8} {'x mpi':>6}")
    worst = 0.0
    for nb in sizes:
        forced = {a: med[a][nb] for a in algos}
        best = min(forced, key=forced.get)
        sel = med[None][nb]
        ratio = sel / forced[best]
        worst = max(worst, ratio)
        cells = " ".join(f"{forced[a] * 1e6:8.1f}" for a in algos)
        pick = f"{short.get(chosen[nb], chosen[nb])} {sel * 1e6:.1f}"
        print(f"{human(nb):>8} {cells} | {short.get(best, best):>8} {pick:>17} {ratio:8.2f} |"
              f" {med['mpi'][nb] * 1e6:8.1f} {med['mpi'][nb] / sel:6.2f}")
    print(f"worst sel/best: {worst:.2f} (target <= 1.15)")


if __name__ == "__main__":
    main()
