"""Asynchronous collectives under mpiexec: many in flight, waited in any order."""

import pytest

from mpi_util import rank_records, run_mpi


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_many_in_flight_waited_in_reverse_order(nranks):
    res = run_mpi(nranks, "async_ops.py", ["check"], env={"RDMACOLL_SEGMENT_BYTES": 65536}, timeout=240)
    for r, rec in rank_records(res, nranks, "done").items():
        res.check(not rec["bad"], f"rank {r}: wrong results for {rec['bad']}")
        res.check(rec["outstanding"] == 0, f"rank {r}: {rec['outstanding']} operations still queued")


def test_async_error_surfaces_at_synchronize():
    res = run_mpi(2, "async_ops.py", ["error"], timeout=60)
    for r, rec in rank_records(res, 2, "result").items():
        res.check(rec["error"] is not None and "mismatch" in rec["error"], f"rank {r}: {rec['error']!r}")
