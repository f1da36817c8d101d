"""Soak: 3 ranks run thousands of collectives of random kind, size, dtype and op, each
checked exactly against a NumPy reference, across several launches that force different
allreduce algorithms (RDMACOLL_ALGO is per job) besides the cost model's own choices.
Nothing is wrong and nothing leaks: each launch runs its random sequence twice, and the
second, identical pass must need no new file descriptor, rdmacoll mapping or pool
memory, and hardly any RSS. The pool at its limits: open descriptors, memory given back.

CI runs 2,000 distinct operations (each twice); RDMACOLL_SOAK_OPS=10000 the full soak."""

import os

import pytest

from mpi_util import rank_records, run_mpi

NRANKS = 3
TOTAL_OPS = int(os.environ.get("RDMACOLL_SOAK_OPS", "2000"))
FULL = TOTAL_OPS >= 10000
# The cost model's choice (every algorithm it picks by size), then forced ones.
ALGOS = (
    ["default", "ring_slots", "tree", "halving_doubling", "recursive_doubling", "ring", "direct"]
    if FULL
    else ["default", "tree"]
)
MAPS_SLACK = 4
RSS_SLACK = 48 << 20  # allocator noise; a leak per operation grows far beyond it


@pytest.mark.parametrize("algo", ALGOS)
def test_soak(algo):
    ops = TOTAL_OPS // len(ALGOS)
    env = {"RDMACOLL_TIMEOUT": 120}
    if algo != "default":
        env["RDMACOLL_ALGO"] = algo
    seed = 1 + ALGOS.index(algo)
    res = run_mpi(NRANKS, "soak.py", ["--ops", ops, "--seed", seed], env=env, timeout=120 + ops // 5)
    recs = rank_records(res, NRANKS, "soak")
    for r, rec in recs.items():
        res.check(rec["wrong"] == 0, f"rank {r}: {rec['wrong']} wrong results, first: {rec['first_wrong']}")
        warm, end = rec["samples"]["warm"], rec["samples"]["end"]
        res.check(end["fds"] <= warm["fds"], f"rank {r}: file descriptors grew {warm['fds']} -> {end['fds']}")
        # (a peer's result may land in another of its pool blocks in the second pass, which
        # this rank then maps once: a few mappings, where a leak would add hundreds)
        res.check(
            end["maps"] <= warm["maps"] + MAPS_SLACK,
            f"rank {r}: rdmacoll mappings grew {warm['maps']} -> {end['maps']}",
        )
        res.check(end["pool"] <= warm["pool"], f"rank {r}: pool memory grew {warm['pool']} -> {end['pool']}")
        res.check(
            end["rss"] <= warm["rss"] + RSS_SLACK, f"rank {r}: RSS grew {warm['rss'] >> 20} -> {end['rss'] >> 20} MiB"
        )
    res.check(res.returncode == 0, "the launch failed")
    r0 = recs[0]
    w, e = r0["samples"]["warm"], r0["samples"]["end"]
    print(
        f"soak {algo}: {ops} ops (x2 passes) x {NRANKS} ranks in {r0['seconds']:.1f} s, 0 wrong; rank 0 "
        f"fds {w['fds']}->{e['fds']}, maps {w['maps']}->{e['maps']}, pool {w['pool'] >> 20}->{e['pool'] >> 20} MiB, "
        f"RSS {w['rss'] >> 20}->{e['rss'] >> 20} MiB; kinds {r0['kinds']}"
    )


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_pool_keeps_few_descriptors_and_gives_memory_back(transport):
    """Issue 36's weak cases: 1,500 out-of-place results kept at once under a 1,024-file
    limit (before: one memfd per result, "Too many open files" near 1,100; now slabs of
    results share one), and a 256 MiB result dropped with RDMACOLL_POOL_FREE_BYTES=64M
    gives its pages back (before: RSS stayed), its block exact when used again."""
    env = {"RDMACOLL_TRANSPORT": transport, "RDMACOLL_POOL_FREE_BYTES": "64M"}
    res = run_mpi(2, "pool_limits.py", env=env, timeout=120)
    for r, rec in rank_records(res, 2, "fds").items():
        res.check(rec["ok"], f"rank {r}: a kept result was wrong")
        res.check(rec["grew"] <= 64, f"rank {r}: 1,500 results opened {rec['grew']} descriptors")
    for r, rec in rank_records(res, 2, "memory").items():
        before, held, after = rec["rss_mib"]
        res.check(rec["exact"], f"rank {r}: a result from memory given back was wrong")
        res.check(held - before >= 200, f"rank {r}: the 256 MiB result is not resident: {rec['rss_mib']} MiB")
        res.check(after - before <= 64, f"rank {r}: dropping it gave nothing back: RSS {rec['rss_mib']} MiB")
    res.check(len(res.select(kind="done")) == 2, "not every rank finished")
