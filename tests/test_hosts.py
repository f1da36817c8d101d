"""Several hosts on one machine (network namespaces + veth, scripts/netns_testbed.py):
shm to same-host peers, tcp to the others, the hierarchical allreduce, and every
algorithm that can cross hosts, against NumPy. Skips where namespaces cannot be made."""
import contextlib
import os
import sys
from pathlib import Path

import pytest

from mpi_util import rank_records, run_mpi

ALGOS = ["", "hierarchical", "ring_slots", "recursive_doubling", "halving_doubling", "tree", "eager"]


@contextlib.contextmanager
def net_hosts(count: int, setup=None):
    """`count` hosts (a netns_testbed.Testbed), deleted at exit; setup(testbed), when
    given, changes them first (tests/test_ifname.py: IPv6 only). Skips when they cannot be
    made (setup raising RuntimeError or OSError included)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    try:
        import netns_testbed
    except ImportError:
        pytest.skip("scripts/netns_testbed.py is not next to the tests")
    finally:
        sys.path.pop(0)
    tb = netns_testbed.Testbed(hosts=count, tag=f"{os.getpid() % 100000}h{count}")
    try:
        tb.create()
        if setup is not None:
            setup(tb)
    except (netns_testbed.TestbedError, OSError, RuntimeError) as e:
        tb.destroy()
        pytest.skip(f"cannot create network namespaces here: {e}")
    try:
        yield tb
    finally:
        tb.destroy()


def groups(tb, per_host: int):
    """MPMD groups for run_mpi: per_host ranks inside each host, in host order."""
    return [(per_host, tb.prefix(h)) for h in range(tb.hosts)]


@pytest.mark.parametrize("nhosts, per_host", [(2, 2), (3, 1)], ids=["2hostsx2", "3hostsx1"])
def test_ranks_on_several_hosts(nhosts, per_host):
    p = nhosts * per_host
    with net_hosts(nhosts) as hosts:
        res = run_mpi(groups(hosts, per_host), "hosts.py", [",".join(ALGOS)], timeout=240)
    where = rank_records(res, p, "where")
    for r, w in where.items():
        host = r // per_host
        res.check(w["host"] == f"rchost{host}" and w["local_size"] == per_host and w["local_rank"] == r % per_host,
                  f"rank {r}: {w}")
        res.check(w["transport"] == "shm+tcp", f"rank {r} runs on {w['transport']}")
        res.check(w["cross"] == [host, nhosts, True], f"rank {r}: cross_rank, cross_size, is_homogeneous {w['cross']}")
        for q, how in enumerate(w["peers"]):
            want = "" if q == r else ("shm" if q // per_host == host else "tcp")
            res.check(how.split(" ")[0] == want, f"rank {r} reaches rank {q} by {how!r}, expected {want!r}")
    cases = res.select(kind="case")
    res.check(len(cases) == p * len(ALGOS) * 20, f"{len(cases)} case records")
    bad = [c for c in cases if not c["ok"]]
    res.check(not bad, f"{len(bad)} wrong, first: {bad[:3]}")
    for c in cases:
        if c["algo"] and c["ran"] not in ("allgather", "broadcast") and c["algo"] != "eager":
            res.check(c["ran"] == c["algo"], f"forced {c['algo']} but {c['ran']} ran: {c}")
    # Across hosts with several ranks per host, large messages go hierarchical by default.
    if per_host > 1:
        big = {c["ran"] for c in cases if c["algo"] == "" and c["n"] == (1 << 20) + 3}
        res.check(big == {"hierarchical"}, f"the selector ran {big} for 4 MiB across hosts")
    rank_records(res, p, "done")
    res.check(res.returncode == 0, "the launch failed")


def test_shm_forced_across_hosts_is_an_error_everywhere():
    with net_hosts(2) as hosts:
        res = run_mpi(groups(hosts, 1), "hosts.py", [""], env={"RDMACOLL_TRANSPORT": "shm"}, timeout=120)
    crashes = res.select(kind="crash")
    res.check(len(crashes) == 2 and all("RDMACOLL_TRANSPORT=shm" in c["error"] and "2 hosts" in c["error"]
                                        for c in crashes), f"expected the error on both ranks: {crashes}")
