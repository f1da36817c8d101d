"""Anything exposing DLPack or the buffer protocol is reduced in place, without copies."""

import pytest

from mpi_util import rank_records, run_mpi


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_dlpack_and_buffer_protocol_inputs(nranks):
    res = run_mpi(nranks, "inputs.py", timeout=120)
    for r, rec in rank_records(res, nranks, "result").items():
        bad = [k for k, ok in rec["results"].items() if not ok]
        res.check(not bad, f"rank {r}: wrong for {bad}")
