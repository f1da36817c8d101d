"""rdmacoll-bench: nccl-tests style sweeps of rdmacoll's collectives, optionally side by
side with MPI, torch.distributed (gloo) and Horovod in the same processes.

    mpiexec -n 2 rdmacoll-bench                      # allreduce, 8 B .. 64 MiB, float sum
    mpiexec -n 2 rdmacoll-bench -b 8 -e 128M -f 2 -d float -o sum    # nccl-tests' spellings
    mpiexec -n 4 rdmacoll-bench allgather -b 1K -e 256M -f 4 -d half
    mpiexec -n 2 rdmacoll-bench all -e 1M            # every collective
    mpiexec -n 2 rdmacoll-bench --compare mpi,gloo --json rows.json --plot bw.png
    rdmacoll-bench --plot bw.png --from rows.json    # redraw a saved run (no launcher)
    rdmacoll-bench --np 2 ...                        # launches itself through mpiexec
    mpiexec -n 4 rdmacoll-bench --tune               # fit the cost model, write the tuning file

Collectives: allreduce (default), allgather, broadcast (root -r, default 0), reducescatter,
alltoall, or all. nccl-tests' options and spellings: -b -e (sizes: 8, 64K, 16M), -f (factor;
-f 1 or -i alone: add -i bytes per step), -n -w -c, -d half|float|double|bfloat16|int8|
uint8|int32|int64|all (also float16 float32 float64), -o sum|prod|min|max|avg|all (also
Sum Product Min Max Average; any case), -r root, -a, -z. Columns as nccl-tests prints
them: size (bytes of the largest buffer), count (elements; allgather, reducescatter,
alltoall: one rank's part), type, redop, root (-1: not rooted), then time algbw busbw
#wrong out of place and again in place (allgather, reducescatter and alltoall return new
arrays in rdmacoll: in place is N/A; --inplace 0/1 runs one placement only). After them,
rdmacoll's: the algorithm that ran (out-of-place/in-place where they differ; without
--algo, the selector's choice) and the transport. With --compare each size gets one line
per implementation (impl column), and rdmacoll's line a column per peer and placement:
the peer's time divided by rdmacoll's (above 1: rdmacoll is faster). A peer that is not
installed is reported and skipped. Each table ends with nccl-tests' lines `# Out of
bounds values : N OK` and `# Avg bus bandwidth    : X` (the mean busbw over sizes and
both placements, GB/s).

Timing differs from nccl-tests by default. Here: warm-up, then every timed call starts at
a barrier, and the call's time is the slowest rank's (-a 3); the table shows the median
over -n calls (JSON: also min and max). A barrier per call keeps one rank's late start out
of the next call's time, and the median keeps a noisy neighbour's burst out of the result.
nccl-tests instead runs -n calls back to back and reports each rank's elapsed time / n,
averaged over ranks (-a 1; -a 0 rank 0's, 2 the fastest rank's, 3 the slowest's);
--back-to-back times that way (with -z 1, a barrier after each call, as nccl-tests'
blocking mode), and -a chooses how ranks combine in either mode. algbw = size / time;
busbw = algbw times 2(n-1)/n for allreduce, (n-1)/n for allgather, reducescatter and
alltoall, 1 for broadcast. #wrong counts elements that differ from the NumPy reference
(-c 1, the default; checked once per size and placement). Rows whose calls spread widely,
or that are much slower than a larger size, are named in one warning at the end (with the
load average): another job on the cores, or more ranks than cores.

--json FILE writes every row (keys impl collective placement bytes count dtype op root algo
transport time_us min_us q1_us median_us q3_us max_us algbw busbw wrong ranks hosts version timing);
--plot FILE.png draws busbw and time against size, from this run or, with --from FILE.json,
from a saved one.

Without a launcher (mpiexec, srun, torchrun) and without --np, it says how to launch.

--tune times every registered allreduce algorithm (forced, one after the other) at a few
sizes on plain NumPy arrays, and fits the alpha-beta-gamma constants of the cost model
(seconds per step, per byte moved, per byte reduced) to those times by least squares on
relative error, using each algorithm's own cost formula from the core. Rank 0 writes them
to --tune-file (default: $RDMACOLL_TUNING_FILE, else ~/.cache/rdmacoll/tuning.json), which
init() reads on rank 0 and broadcasts, so every rank selects with the same constants.
"""

from __future__ import annotations

import sys

import rdmacoll as rc

from ._bench.collectives import bus_factor, count_wrong  # noqa: F401 - the bench's public helpers
from ._bench.launch import how_to_launch, launched, relaunch
from ._bench.options import human, launcher_rank, parse, parse_size, positive_int, without_np  # noqa: F401
from ._bench.plot import plot_saved
from ._bench.sweep import run
from ._bench.timing import slowest  # noqa: F401
from ._bench.tune import fit_cost_model, measure_gamma, tune  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv, __doc__)
    if args.list:
        if launcher_rank() == 0:
            for name, desc in rc.algorithms():
                print(f"{name:18s} {desc}")
        return 0
    if args.from_json is not None:
        try:
            n = plot_saved(args.plot, args.from_json)
        except (OSError, ValueError, KeyError) as e:
            print(f"rdmacoll-bench: error: --from {args.from_json}: {e}", file=sys.stderr)
            return 2
        print(f"rdmacoll-bench: drew {n} rows of {args.from_json} into {args.plot}", file=sys.stderr)
        return 0
    if args.np is not None:
        return relaunch(args.np, without_np(argv))
    if not launched():
        print(how_to_launch(argv), file=sys.stderr)
        return 2
    if args.tune:
        return tune(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
