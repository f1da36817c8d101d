"""rdmacoll-bench: nccl-tests style sweeps of rdmacoll's collectives, optionally side by
side with MPI, torch.distributed (gloo) and Horovod in the same processes.

    mpiexec -n 2 rdmacoll-bench                      # allreduce, 8 B .. 64 MiB, float32 Sum
    mpiexec -n 4 rdmacoll-bench allgather -b 1K -e 256M -f 4 -d float16
    mpiexec -n 2 rdmacoll-bench all -e 1M            # every collective
    mpiexec -n 2 rdmacoll-bench --compare mpi,gloo --json rows.json --plot bw.png
    rdmacoll-bench --np 2 ...                        # launches itself through mpiexec
    mpiexec -n 4 rdmacoll-bench --tune               # fit the cost model, write the tuning file

Collectives: allreduce (default), allgather, broadcast (root 0), reducescatter, alltoall,
or all. Columns as nccl-tests prints them: size (bytes of the largest buffer), count
(elements; allgather, reducescatter, alltoall: one rank's part), type, redop, then the
algorithm and transport that ran (without --algo the `algo` column shows the selector's
choice per size), time (median over iterations) with min and max, algbw, busbw, #wrong.
With --compare each size gets one row per implementation, and rdmacoll's row a column
per peer: the peer's time divided by rdmacoll's (above 1: rdmacoll is faster). A peer
that is not installed is reported and skipped.

Timing: warm-up, then per iteration a barrier-aligned call whose time is the slowest
rank's; median (and min/max) over iterations. algbw = size / time; busbw = algbw times
2(n-1)/n for allreduce, (n-1)/n for allgather, reducescatter and alltoall, 1 for
broadcast: the bandwidth each rank's link must sustain, which compares across rank
counts. #wrong counts elements that differ from the NumPy reference (-c 1, the default).

--json FILE writes every row (keys impl collective bytes count dtype op algo transport
time_us algbw busbw wrong); --plot FILE.png draws busbw and time against size.

--tune times every registered allreduce algorithm (forced, one after the other) at a few
sizes on plain NumPy arrays, and fits the alpha-beta-gamma constants of the cost model
(seconds per step, per byte moved, per byte reduced) to those times by least squares on
relative error, using each algorithm's own cost formula from the core. Rank 0 writes them
to --tune-file (default: $RDMACOLL_TUNING_FILE, else ~/.cache/rdmacoll/tuning.json), which
init() reads on rank 0 and broadcasts, so every rank selects with the same constants.
"""
from __future__ import annotations

import sys

from ._bench.collectives import bus_factor, count_wrong  # noqa: F401 - the bench's public helpers
from ._bench.launch import relaunch
from ._bench.options import human, launcher_rank, parse, parse_size, positive_int, without_np  # noqa: F401
from ._bench.timing import slowest  # noqa: F401
from ._bench.tune import fit_cost_model, measure_gamma, tune  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv, __doc__)
    if args.list:
        import rdmacoll as rc

        if launcher_rank() == 0:
            for name, desc in rc.algorithms():
                print(f"{name:18s} {desc}")
        return 0
    if args.np is not None:
        return relaunch(args.np, without_np(argv))
    if args.tune:
        return tune(args)
    from ._bench.sweep import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
