"""Is the selector's choice as fast as the best algorithm? Every allreduce algorithm,
forced, against the default selection and MPI, in the same processes.

    mpiexec -n 4 python benchmarks/selector_vs_forced.py [--sizes 8,4K,...,256M] [--reps 3] [--json run1.json]
    python benchmarks/selector_vs_forced.py --combine run1.json run2.json run3.json

Every configuration (the selector, and each registered algorithm forced through the
algo setting) is its own communicator, all connected at once (rdmacoll keeps no global
state in the core: bootstrap() may run several times). For each size, a round runs every
configuration's batch back to back, in an order that rotates from round to round, plus
MPI's `Allreduce(MPI.IN_PLACE)`; a batch's time is the slowest rank's, and the table
reports each cell's median round. Running the configurations back to back matters on a
shared machine whose speed drifts by tens of percent over seconds (4 ranks on 2 cores):
a comparison is only fair between batches that ran under the same conditions.
float32 Sum in place, on plain NumPy arrays (user memory, the common case) or, with
--memory empty, on each communicator's own rc.empty arrays.

--combine prints, per size, each launch's sel/best and their median: the issue's "median
of 3 runs". One launch's ratio can be far off in either direction even where the
selector and the best forced column ran the same algorithm (a disturbance that hit one
of them in most rounds); across launches such outliers do not line up.

Columns: time per algorithm (us), the best forced one, the selector's choice and its
time, "sel/best" (selector time / best forced time: 1.00 is perfect, the target is at
most 1.15), and "x mpi" (MPI time / selector time: at least 1.00 is the target).
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np
from mpi4py import MPI

import rdmacoll as rc
from rdmacoll.bootstrap import bootstrap
from allreduce_vs_mpi import human, parse_size, time_batch

DEFAULT_SIZES = "8,4K,16K,64K,256K,1M,4M,16M,64M,256M"


def connect(algo: str | None):
    """A communicator for one configuration (None: the selector)."""
    return bootstrap(None if algo is None else {"algo": algo}).core


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--reps", type=int, default=3, help="rounds (median reported)")
    ap.add_argument("--target-seconds", type=float, default=0.1, help="per batch")
    ap.add_argument("--algos", default="", help="comma-separated subset of the forced algorithms")
    ap.add_argument(
        "--memory",
        choices=("user", "empty"),
        default="user",
        help="plain NumPy arrays (user memory) or rc.empty arrays (library memory)",
    )
    ap.add_argument("--json", help="also write the table's numbers to this file (rank 0)")
    ap.add_argument("--combine", nargs="+", metavar="JSON", help="summarise launches written with --json; runs nothing")
    args = ap.parse_args()
    if args.combine:
        return combine(args.combine)
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    sizes = [max(4, parse_size(s)) // 4 * 4 for s in args.sizes.split(",")]
    rc.init()
    # Only what can run here (hierarchical needs several hosts).
    algos = [a for a, _ in rc.algorithms() if rc._session.current().comm.usable(a, 1 << 20)]
    rc.shutdown()
    if args.algos:
        algos = [a for a in algos if a in args.algos.split(",")]
    configs = [None] + algos
    comms = {c: connect(c) for c in configs}
    mpi_fn = lambda x: comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)  # noqa: E731

    samples = {c: {nb: [] for nb in sizes} for c in configs + ["mpi"]}
    chosen = {}
    for nb in sizes:
        mpi_buf = np.ones(nb // 4, np.float32)
        calls = {"mpi": lambda: mpi_fn(mpi_buf)}
        for c, core in comms.items():
            if args.memory == "empty":
                x = core.empty((nb // 4,), "float32")
                x[...] = 1
            else:
                x = np.ones(nb // 4, np.float32)
            calls[c] = lambda core=core, x=x: core.allreduce(x, x, rc.Sum, None)
        # Batch size from one probe of MPI (every configuration uses the same count).
        calls["mpi"]()
        probe = time_batch(calls["mpi"], 2, comm)
        iters = int(max(2, min(20000, args.target_seconds / max(probe, 1e-7))))
        for fn in calls.values():
            fn()
            fn()
        chosen[nb] = comms[None].last_algorithm
        order = list(calls)
        for rep in range(args.reps):
            k = rep % len(order)
            for c in order[k:] + order[:k]:
                samples[c][nb].append(time_batch(calls[c], iters, comm))
        del calls
        if comm.Get_rank() == 0:
            print(f"# {human(nb)} done", flush=True)
    for core in comms.values():
        core.barrier()
        core.close()

    if comm.Get_rank() != 0:
        return
    med = {c: {nb: statistics.median(v) for nb, v in per.items()} for c, per in samples.items()}
    short = {
        "recursive_doubling": "rd",
        "halving_doubling": "hd",
        "ring_slots": "ring_sl",
        "direct>ring_slots": "d>ring_sl",
    }
    print(
        f"\nallreduce float32 Sum in place ({args.memory} memory), {n} ranks, median of {args.reps} rounds, time in us "
        f"(MPI: {MPI.Get_library_version().splitlines()[0].strip()})"
    )
    head = f"{'size':>8} " + " ".join(f"{short.get(a, a):>8}" for a in algos)
    print(head + f" | {'best':>8} {'selector':>17} {'sel/best':>8} | {'mpi':>8} {'x mpi':>6}")
    worst = 0.0
    rows = []
    for nb in sizes:
        forced = {a: med[a][nb] for a in algos}
        best = min(forced, key=forced.get)
        sel = med[None][nb]
        ratio = sel / forced[best]
        worst = max(worst, ratio)
        rows.append(
            {
                "bytes": nb,
                "forced": forced,
                "best": best,
                "selector": chosen[nb],
                "selector_s": sel,
                "sel_best": ratio,
                "mpi_s": med["mpi"][nb],
            }
        )
        cells = " ".join(f"{forced[a] * 1e6:8.1f}" for a in algos)
        pick = f"{short.get(chosen[nb], chosen[nb])} {sel * 1e6:.1f}"
        print(
            f"{human(nb):>8} {cells} | {short.get(best, best):>8} {pick:>17} {ratio:8.2f} |"
            f" {med['mpi'][nb] * 1e6:8.1f} {med['mpi'][nb] / sel:6.2f}"
        )
    print(f"worst sel/best: {worst:.2f} (target <= 1.15)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": n, "memory": args.memory, "reps": args.reps, "rows": rows}, f, indent=1)


def combine(paths) -> None:
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    kinds = {(r["ranks"], r["memory"]) for r in runs}
    print(
        f"selector / best forced, {len(runs)} launches ({', '.join(f'{n} ranks, {m} memory' for n, m in sorted(kinds))})"
    )
    print(
        f"{'size':>8} "
        + " ".join(f"{'run ' + str(i + 1):>6}" for i in range(len(runs)))
        + f" {'median':>7}   {'x mpi (median)':>14}"
    )
    worst = 0.0
    by_size = {}
    for r in runs:
        for row in r["rows"]:
            by_size.setdefault(row["bytes"], []).append(row)
    for nb, rows in sorted(by_size.items()):
        ratios = [row["sel_best"] for row in rows]
        med = statistics.median(ratios)
        worst = max(worst, med)
        x_mpi = statistics.median(row["mpi_s"] / row["selector_s"] for row in rows)
        print(f"{human(nb):>8} " + " ".join(f"{v:6.2f}" for v in ratios) + f" {med:7.2f}   {x_mpi:14.2f}")
    print(f"worst median sel/best: {worst:.2f} (target <= 1.15)")


if __name__ == "__main__":
    main()
