"""rc.allreduce against NumPy, under the real mpiexec with 1-5 and 8 ranks.

One test per (ranks, algorithm, thresholds); one launch per (ranks, thresholds) runs the
whole matrix inside the worker (workers/allreduce_matrix.py) for each algorithm in turn:
every dtype x op x size x mode, compared with a reference NumPy computes from every rank's
deterministic input, and every rank's result bytes compared with every other rank's.
"""

import pytest
from rdmacoll import _core, _settings

from mpi_util import matrix_results, rank_records, run_mpi
from reference import ONE_PER_WIDTH

# Small thresholds: 4 KiB segments and slots, 4 slots per peer (the fewest with which the
# tree skews its iterations by depth) and a 256-byte eager limit, so that the 100003-element
# inputs run through tens of segments per chunk and wait on slot credits all the time, and
# the eager limit falls between the small sizes. (One and two slots: the test below.)
THRESHOLDS = {
    "default": {},
    "small": {
        "RDMACOLL_SEGMENT_BYTES": 4096,
        "RDMACOLL_SLOT_BYTES": 4096,
        "RDMACOLL_SLOTS": 4,
        "RDMACOLL_EAGER_BYTES": 256,
    },
}
# "default" lets the selector choose; every registered algorithm is also forced in turn.
# hierarchical needs several hosts: tests/test_hosts.py runs it (on one host it is unusable
# and the selector's choice runs instead).
MULTI_HOST = {"hierarchical"}
ALGORITHMS = ["default"] + [name for name, _ in _core.algorithms() if name not in MULTI_HOST]
# Forced algorithms that only run up to a size (above it the default rule applies).
SIZE_LIMITED = {"eager": "RDMACOLL_EAGER_BYTES"}
BIG_MIB = 64
# Larger worlds (non-power of two 5, and 8) run every algorithm with the default
# thresholds on the smaller sizes only (p-1, p+1, odd, and multi-slot at 5 ranks), to keep
# CI time small.
EXTRA_WORLDS = {5: "0,1,4,6,1023,100003", 8: "0,1,7,9,1023"}
# Those and the small thresholds (schedules and segmenting: what they change is where
# element boundaries fall) run one dtype per element width and one op of each kind (a
# fold, a scaled fold, an exact one); 1-4 ranks with the default thresholds run them all.
SUBSET = ["--dtypes", ",".join(ONE_PER_WIDTH), "--ops", "Sum,Average,Max"]
# Above 64 Ki elements, where each case costs milliseconds per rank, only the selector's
# choice runs every dtype and op (the reduction kernels are the same under every
# algorithm); the forced algorithms run the subset there: where their chunk and segment
# boundaries fall depends on the element width only. The mixed-memory cases run where an
# algorithm takes a path by memory kind: direct, ring (direct reads) and the selector's.
# (Every algorithm ran every case at every size until 0.1.x: 152 s of CI for the file.)
# At 3 and 4 ranks the selector's choice runs the subset there too: the kernels are the same
# at every number of ranks, which changes the partition and the schedule (per element width).
LARGE_SUBSET = ["--subset-above", 65536, "--subset-dtypes", ",".join(ONE_PER_WIDTH), "--subset-ops", "Sum,Average,Max"]
LARGE_SUBSET += ["--mixed-algos", "default,direct,ring"]


def configurations():
    for nranks in (1, 2, 3, 4):
        for algo in ALGORITHMS:
            for thresholds in THRESHOLDS:
                # One rank runs no algorithm (the result is the input): one launch suffices.
                if nranks == 1 and (algo, thresholds) != ("default", "default"):
                    continue
                yield pytest.param(nranks, algo, thresholds, id=f"{nranks}ranks-{algo}-{thresholds}")
    for nranks in EXTRA_WORLDS:
        for algo in ALGORITHMS:
            yield pytest.param(nranks, algo, "default", id=f"{nranks}ranks-{algo}-default")


@pytest.fixture(scope="module")
def launches():
    """{(ranks, thresholds): Result}: one launch per world and thresholds runs the matrix for
    every algorithm in turn (the worker's --algos), on first use; each test then checks its
    own algorithm's records. (A launch per algorithm spent most of its time starting
    Python: 69 launches, 215 s of CI, against 9.)"""
    return {}


def launch_group(launches, nranks, thresholds):
    key = (nranks, thresholds)
    if key not in launches:
        algos = ALGORITHMS if nranks > 1 else ["default"]
        # one mode per (dtype, op) above 64 Ki elements; at 5 and 8 ranks at every size
        # (1-4 ranks run every mode)
        args = ["--algos", ",".join(algos), "--rotate-above", -1 if nranks in EXTRA_WORLDS else 65536]
        if nranks in EXTRA_WORLDS:
            args += ["--sizes", EXTRA_WORLDS[nranks]]
        elif thresholds == "small":
            # 100003 elements are already ~100 of the 4 KiB segments (25 per chunk at 4 ranks)
            # waiting on 2 slots' credits; 2**20+3 (the default matrix's) added only time
            args += ["--sizes", "0,1,7,1023,100003"]
        if nranks in EXTRA_WORLDS or thresholds != "default":
            args += SUBSET
        else:
            args += [*LARGE_SUBSET, "--full-algos", "default" if nranks <= 2 else ""]
        # The 64 MiB case costs seconds per run: run it where it says most.
        if thresholds == "default" and nranks in (2, 4):
            args += ["--big-mib", BIG_MIB, "--big-algos", "default"]
        launches[key] = run_mpi(nranks, "allreduce_matrix.py", args, env=THRESHOLDS[thresholds], timeout=500)
    return launches[key]


@pytest.mark.timeout(560)  # the first test of a group waits for the group's launch
@pytest.mark.parametrize("nranks, algo, thresholds", list(configurations()))
def test_allreduce_matrix(launches, nranks, algo, thresholds):
    res = launch_group(launches, nranks, thresholds)
    done = matrix_results(res, nranks, algo)
    res.check(res.returncode == 0, "the launch failed")
    cases = {d["cases"] for d in done.values()}
    res.check(len(cases) == 1, f"ranks ran different numbers of cases: {cases}")

    # The algorithm is honoured wherever it can run (eager only up to its limit).
    # last_algorithm names a continuation after its algorithm ("direct>ring_slots"): the
    # selection is the part before the '>'.
    used = {}  # {selected algorithm: [message bytes]}
    for ran, sizes in done[0]["algorithms"].items():
        used.setdefault(ran.split(">")[0], []).extend(sizes)
    if nranks == 1:
        res.check(set(used) == {"local"}, f"one rank should reduce locally, used {used}")
    elif algo in SIZE_LIMITED:
        var = SIZE_LIMITED[algo]
        limit = THRESHOLDS[thresholds].get(var, _settings.TABLE[var[len("RDMACOLL_") :].lower()]["default"])
        res.check(all(b <= limit for b in used.get(algo, [])), f"{algo} ran above {var}={limit}: {used}")
        below = {b for sizes in used.values() for b in sizes if b <= limit}
        res.check(below <= set(used.get(algo, [])), f"algo={algo} not used up to {var}: {used}")
    elif algo != "default":
        res.check(set(used) == {algo}, f"algo={algo} but the calls used {used}")
    print(f"{nranks} ranks, {algo}, {thresholds} thresholds: {cases.pop()} cases per rank, algorithms {sorted(used)}")


@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.parametrize("algo", ["ring_slots", "recursive_doubling", "halving_doubling", "tree"])
def test_one_or_two_slots_per_peer_do_not_deadlock(algo, slots):
    """With one receive slot per peer, a rank must give its predecessor's slot back before
    it waits for its successor's credit (ring_slots once held it and hung at 3 ranks); with
    one or two, the tree runs segment by segment (its skewed form needs four) and the ring
    reduces into the successor's mapped slot only from two."""
    env = {
        "RDMACOLL_ALGO": algo,
        "RDMACOLL_SLOTS": slots,
        "RDMACOLL_SLOT_BYTES": 4096,
        "RDMACOLL_SEGMENT_BYTES": 4096,
        "RDMACOLL_EAGER_BYTES": 256,
    }
    res = run_mpi(3, "allreduce_matrix.py", ["--sizes", "0,1,7,1023,5000"], env=env, timeout=120)
    done = rank_records(res, 3, "done")
    res.check(all(d["failures"] == 0 for d in done.values()), f"wrong results with {slots} slots per peer")
