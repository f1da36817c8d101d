"""Sub-communicators (the core's Communicator.split, which torch's dist.new_group uses):
overlapping subsets of 3 and 4 ranks on the world's connections, interleaved and in
flight together with the world's collectives, against NumPy references."""

import pytest

from mpi_util import rank_records, run_mpi


@pytest.mark.parametrize("n", [3, 4])
def test_overlapping_subsets_beside_the_world(n):
    res = run_mpi(n, "split.py", timeout=180)
    rank_records(res, n, "done")
    checks = res.select(kind="check")
    bad = [c for c in checks if not c["ok"]]
    res.check(not bad, "; ".join(f"rank {c['rank']} {c['name']}: {c['detail']}" for c in bad[:6]))
    for r in range(n):
        mine = [c for c in checks if c["rank"] == r]
        res.check(len(mine) > 30, f"rank {r} ran {len(mine)} checks")
