"""Conformance of the shared-memory transport to the one-sided contract
(csrc/transport/transport.h), through _rdmacoll_testing.TransportProbe on 2 ranks (tcp:
tests/test_tcp.py; ibverbs: tests/test_rdma.py, where a host has a usable RDMA port)."""

import pytest

from mpi_util import dev_shm_entries, keep_siblings_flags, run_mpi


def _results(res):
    results = res.select(kind="result")
    res.check(results, "no checks reported")
    failed = [f"rank {r['rank']}: {r['name']}: {r['detail']}" for r in results if not r["ok"]]
    res.check(not failed, "transport checks failed:\n" + "\n".join(failed))
    return {(r["rank"], r["name"]): r for r in results}


EXPECTED = ["capabilities", "zero_length_writes", "deferred_completion", "many_outstanding", "malformed_region"] + [
    f"{check}[{kind}]"
    for kind in ("allocated", "registered")
    for check in ("immediate_after_payload", "unaligned_writes", "put64_visible", "read_and_map")
]


def test_conformance():
    res = run_mpi(2, "transport.py", ["conformance"], timeout=120)
    got = _results(res)
    for rank in (0, 1):
        missing = [n for n in EXPECTED if (rank, n) not in got]
        res.check(not missing, f"rank {rank} did not run {missing}")
    res.check(res.returncode == 0, "the launch failed")
    print(got[(0, "many_outstanding")]["detail"])


@pytest.mark.parametrize("who", ["writer-exits", "reader-exits"])
def test_teardown_with_writes_pending(who):
    res = run_mpi(2, "transport.py", [who], timeout=90, extra_launcher_args=keep_siblings_flags())
    got = _results(res)
    expected = {
        "writer-exits": [
            (0, "writer tore down"),
            (1, "reader sees the writer dead"),
            (1, "pending writes drained after the writer died"),
            (1, "operations on a dead peer raise or complete, never crash"),
        ],
        "reader-exits": [(1, "reader leaving"), (0, "writer blocked on a dead reader raises")],
    }[who]
    missing = [e for e in expected if e not in got]
    res.check(not missing, f"checks that did not report: {missing}")
    res.check(not res.leftovers, f"processes still running after the launch: {res.leftovers}")
    res.check(not dev_shm_entries(), f"rdmacoll files in /dev/shm: {dev_shm_entries()}")
    for e in expected:
        if got[e]["detail"]:
            print(f"{who}: {e[1]}: {got[e]['detail']}")
