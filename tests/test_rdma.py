"""The ibverbs transport's data path on a real kernel RDMA stack: every allreduce algorithm
that can run over verbs and the other collectives at 2-4 ranks, asynchronous operations,
a rank killed mid-transfer, and two "hosts" (network namespaces, one Soft-RoCE device
each) with shm inside a host and ibverbs across, against NumPy references.

These need a usable RDMA device. In CI they run inside the Soft-RoCE guest
(scripts/rdma_guest.py; tests/test_rdma_guest.py boots it and runs this file there);
elsewhere they skip, saying why."""
import os
import signal
import sys
from pathlib import Path

import pytest
from rdmacoll import _core

from mpi_util import (check_default_selection, check_forced_algorithms, check_killed_peer, rank_records,
                      run_mpi)

REPO = Path(__file__).resolve().parent.parent


def _why_not():
    if "ibverbs" not in _core.TRANSPORTS:
        return "ibverbs is not compiled into this build (no verbs headers)"
    usable, lines = _core.probe_transport("ibverbs")
    return None if usable else "no usable RDMA device here: " + "; ".join(lines)[:300]


WHY_NOT = _why_not()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))

IB = {"RDMACOLL_TRANSPORT": "ibverbs"}
SMALL = {"RDMACOLL_SEGMENT_BYTES": 4096, "RDMACOLL_SLOT_BYTES": 4096, "RDMACOLL_SLOTS": 2,
         "RDMACOLL_EAGER_BYTES": 256}
# Elements: empty, one, p-1 and p+1 for 2-4 ranks, 1023, and one message above 1 MiB.
SIZES = "0,1,2,3,4,5,1023,4097,100003,300007"
# Verbs write and read but do not map: the algorithms tcp runs (mpi_util.UNMAPPED_RULES).
@pytest.mark.parametrize("nranks, rules", [(2, "a"), (2, "b"), (3, "a"), (3, "b"), (4, "a"), (4, "b")])
def test_allreduce_algorithms(nranks, rules):
    check_forced_algorithms(nranks, IB | SMALL, rules, SIZES, "ibverbs", timeout=400)


@pytest.mark.parametrize("nranks", [2, 4])
def test_default_selection_and_big_message(nranks):
    """The selector's own choice over verbs with the default thresholds, up to 16 MiB."""
    check_default_selection(nranks, IB, "ibverbs", timeout=400)


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_collectives_match_numpy(nranks):
    """allgather, broadcast, reducescatter, alltoall, barrier, grouped_allreduce over verbs,
    with small slots so that parts span several messages and senders wait for credits."""
    env = IB | {"RDMACOLL_SEGMENT_BYTES": 4096, "RDMACOLL_SLOT_BYTES": 4096, "RDMACOLL_SLOTS": 2}
    res = run_mpi(nranks, "collectives.py", ["check"], env=env, timeout=400)
    done = rank_records(res, nranks, "done")
    fails = res.select(kind="fail")
    res.check(not fails, f"{len(fails)} wrong, first: " + "; ".join(
        f"rank {f['rank']} {f['case']}: got {f['got']} want {f['want']}" for f in fails[:5]))
    res.check(len({d["cases"] for d in done.values()}) == 1, "ranks ran different numbers of cases")
    res.check(res.returncode == 0, "the launch failed")


def test_async_many_in_flight():
    res = run_mpi(3, "async_ops.py", ["check"], env=IB | {"RDMACOLL_SEGMENT_BYTES": 65536}, timeout=400)
    for r, rec in rank_records(res, 3, "done").items():
        res.check(not rec["bad"], f"rank {r}: wrong results for {rec['bad']}")
        res.check(rec["outstanding"] == 0, f"rank {r}: {rec['outstanding']} operations still queued")


def test_subcommunicators_over_verbs():
    res = run_mpi(4, "split.py", env=IB, timeout=400)
    rank_records(res, 4, "done")
    bad = [c for c in res.select(kind="check") if not c["ok"]]
    res.check(not bad, "; ".join(f"rank {c['rank']} {c['name']}: {c['detail']}" for c in bad[:6]))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_peer_is_detected(sig):
    """A rank killed in a 16 MiB allreduce loop: its queue pairs go to the error state and
    the others raise RdmacollError naming it (flushed completions are not taken for
    data), and so does their next call; nothing is left running."""
    check_killed_peer(IB, sig, 16, "ibverbs", timeout=300)


def _testbed():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import netns_testbed
    except ImportError:
        pytest.skip("scripts/netns_testbed.py is not next to the tests")
    finally:
        sys.path.pop(0)
    return netns_testbed


def test_two_hosts_shm_inside_verbs_across():
    """2 hosts x 2 ranks, RDMACOLL_TRANSPORT=auto: shm to the host peer, ibverbs (each host's
    own Soft-RoCE device) across; hierarchical and every cross-host algorithm against NumPy."""
    nb = _testbed()
    tb = nb.Testbed(hosts=2, tag=f"{os.getpid() % 100000}r", rdma=True)
    try:
        tb.create()
    except (nb.TestbedError, OSError) as e:
        tb.destroy()
        pytest.skip(f"cannot make RDMA hosts here: {e}")
    algos = ["", "hierarchical", "ring_slots", "recursive_doubling", "halving_doubling", "tree", "eager"]
    try:
        res = run_mpi([(2, tb.prefix(0)), (2, tb.prefix(1))], "hosts.py", [",".join(algos)], timeout=400)
    finally:
        tb.destroy()
    where = rank_records(res, 4, "where")
    for r, w in where.items():
        host = r // 2
        res.check(w["host"] == f"rchost{host}" and w["local_size"] == 2, f"rank {r}: {w}")
        res.check(w["transport"] == "shm+ibverbs", f"rank {r} runs on {w['transport']}")
        for q, how in enumerate(w["peers"]):
            want = "" if q == r else ("shm" if q // 2 == host else "ibverbs")
            res.check(how.split(" ")[0] == want, f"rank {r} reaches rank {q} by {how!r}, expected {want!r}")
    cases = res.select(kind="case")
    bad = [c for c in cases if not c["ok"]]
    res.check(cases and not bad, f"{len(bad)} of {len(cases)} wrong, first: {bad[:3]}")
    big = {c["ran"] for c in cases if c["algo"] == "" and c["n"] == (1 << 20) + 3}
    res.check(big == {"hierarchical"}, f"the selector ran {big} for 4 MiB across hosts")
    ran = {c["ran"] for c in cases if c["algo"] == "hierarchical"}
    res.check("hierarchical" in ran, f"forced hierarchical ran {ran}")
    rank_records(res, 4, "done")
    res.check(res.returncode == 0, "the launch failed")
