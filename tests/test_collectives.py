"""allgather, broadcast, reducescatter, alltoall, barrier, grouped_allreduce under the
real mpiexec, 1-5 ranks, against NumPy; mismatched calls raise on every rank."""

import pytest

from mpi_util import chained_part, rank_records, run_mpi

SMALL = {"RDMACOLL_SEGMENT_BYTES": 4096}  # multi-piece reducescatter from small inputs


# The transport-generic algorithms, forced, with small and few slots so that parts span
# several slot messages and senders wait for credits.
SLOTS = SMALL | {
    "RDMACOLL_ALGO": "allgather:ring;broadcast:chain;reducescatter:ring;alltoall:pairwise",
    "RDMACOLL_SLOT_BYTES": 4096,
    "RDMACOLL_SLOTS": 2,
}


# The same over the tcp transport (sockets even between ranks of one host).
TCP = {"RDMACOLL_TRANSPORT": "tcp"}


# (ranks, settings) of each check; the ones of a world run in one launch (workers/chain.py:
# a part each, the settings its environment): a launch per check spent most of its time
# starting Python, 8 processes at 8 ranks.
CHECKS = (
    [(n, "default", SMALL) for n in (1, 2, 3, 4, 5, 8)]
    + [(n, "slots", SLOTS) for n in (2, 3, 4, 5, 8)]
    + [(4, "tcp", SMALL | TCP), (3, "slots-tcp", SLOTS | TCP)]
)


@pytest.fixture(scope="module")
def launches():
    return {}


@pytest.mark.parametrize(
    "nranks,setting", [pytest.param(n, s, id=str(n) if s == "default" else f"{n}-{s}") for n, s, _ in CHECKS]
)
def test_collectives_match_numpy(launches, nranks, setting):
    parts = [(s, {"script": "collectives.py", "args": ["check"], "env": e}) for n, s, e in CHECKS if n == nranks]
    res = chained_part(launches, ("check", nranks), nranks, parts, setting)
    done = rank_records(res, nranks, "done")
    fails = res.select(kind="fail")
    res.check(
        not fails,
        f"{len(fails)} wrong, first: "
        + "; ".join(
            f"rank {f['rank']} {f['case']}: got {f['got']} {f['got_shape']} want {f['want']} {f['want_shape']}"
            for f in fails[:5]
        ),
    )
    res.check(len({d["cases"] for d in done.values()}) == 1, "ranks ran different numbers of cases")
    res.check(res.returncode == 0, "the launch failed")


MISMATCHES = ["root", "dtype", "row shape", "signedness", "collective"]


@pytest.mark.parametrize("case", MISMATCHES)
@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("env", ["default", "slots"])
def test_collective_mismatch_raises_everywhere(launches, nranks, case, env):
    parts = [
        ((c, s), {"script": "collectives.py", "args": ["mismatch", c], "env": e})
        for s, e in (("default", {}), ("slots", SLOTS))
        for c in MISMATCHES
    ]
    res = chained_part(launches, ("mismatch", nranks), nranks, parts, (case, env))
    for r, rec in rank_records(res, nranks, "mismatch").items():
        res.check(
            rec["error"] is not None and "mismatch" in rec["error"], f"rank {r}: {case} mismatch gave {rec['error']!r}"
        )
        res.check(rec["seconds"] < 30, f"rank {r} took {rec['seconds']:.1f} s")


@pytest.mark.parametrize(
    "env, want",
    [
        pytest.param(
            {},
            {"allgather": "direct", "broadcast": "direct", "reducescatter": "direct", "alltoall": "direct"},
            id="model",
        ),
        pytest.param(
            SLOTS,
            {"allgather": "ring", "broadcast": "chain", "reducescatter": "ring", "alltoall": "pairwise"},
            id="forced",
        ),
        # allgather/alltoall choose by row size (the same everywhere), never by the rows a rank
        # sends: with rows that differ per rank, ranks still agree.
        pytest.param(
            {"RDMACOLL_ALGO": "allgather:0-32:direct,32-inf:ring;alltoall:0-16:direct,16-inf:pairwise"},
            {"allgather": "ring", "broadcast": "direct", "reducescatter": "direct", "alltoall": "pairwise"},
            id="ranges",
        ),
    ],
)
def test_each_collective_runs_the_algorithm_selection_chose(env, want):
    res = run_mpi(3, "collectives.py", ["chosen"], env=env, timeout=120)
    recs = res.select(kind="chosen")
    res.check(len(recs) == 3 * len(want), f"expected {3 * len(want)} records, got {len(recs)}")
    for rec in recs:
        res.check(rec["error"] is None and rec["ok"], f"rank {rec['rank']} {rec['collective']}: {rec}")
        res.check(
            rec["algo"] == want[rec["collective"]],
            f"rank {rec['rank']} {rec['collective']} ran {rec['algo']}, expected {want[rec['collective']]}",
        )


# Every dtype of issue 14 (int16 and bool new) through every collective that takes it, at
# 2 and 3 ranks and two sizes (small: the eager/direct paths; 300k elements: the
# segmented ones), against NumPy. Integer Average is Horovod's: the wrapped sum times 1/size
# in float64, truncated toward zero. bool moves (allgather, broadcast, alltoall) and is
# refused by reductions on every rank, before communicating.
@pytest.mark.parametrize("nranks", [2, 3])
def test_every_dtype_matches_numpy(nranks):
    res = run_mpi(nranks, "dtypes.py", timeout=240)
    for r, rec in rank_records(res, nranks, "dtypes").items():
        bad = [case for case, ok in rec["results"].items() if not ok]
        # (9 reducible dtypes: 9 cases each, 5 more for integers' Product; 4 moved-only: 4 each)
        res.check(len(rec["results"]) == 2 * (9 * 9 + 5 + 4 * 4), f"rank {r}: {len(rec['results'])} cases")
        res.check(not bad, f"rank {r}: {len(bad)} differ from NumPy, first: {bad[:6]}")
    res.check(res.returncode == 0, "the launch failed")
