"""Several hosts on one machine (network namespaces + veth, scripts/netns_testbed.py):
shm to same-host peers, tcp to the others, the hierarchical allreduce, and every
algorithm that can cross hosts, against NumPy. Skips where namespaces cannot be made."""

import contextlib
import os
import shlex
import sys
from pathlib import Path

import pytest

from mpi_util import WORKERS_DIR, Launch, check_across_hosts, find_torchrun, rank_records, run_mpi

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
    with net_hosts(nhosts) as hosts:
        res = run_mpi(groups(hosts, per_host), "hosts.py", [",".join(ALGOS)], timeout=240)
    check_across_hosts(res, nhosts, per_host, "tcp", ALGOS)
    # the last rank in join() while the others reduce under hierarchical (tests/test_join.py
    # runs every other algorithm so; hierarchical needs several hosts)
    joins = rank_records(res, nhosts * per_host, "join")
    res.check(all(j["ok"] for j in joins.values()), f"join under hierarchical: {joins}")
    ran = {a for j in joins.values() for a in j["ran"]}
    res.check(ran == {"hierarchical"}, f"under join, {ran} ran")


def test_torchrun_multi_node_across_hosts():
    """torchrun's multi-node launch (--nnodes 2, rendezvous on host 0's address), one agent
    per host, 2 ranks each: rdmacoll bootstraps through torch's store across the hosts, shm
    inside a host, tcp across. (Over RDMA: tests/test_rdma_guest.py, under MPICH's hydra.)"""
    torchrun = find_torchrun()
    with net_hosts(2) as hosts:

        def node(h):
            return shlex.join(
                [
                    *hosts.prefix(h),
                    torchrun,
                    "--nnodes",
                    "2",
                    "--node-rank",
                    str(h),
                    "--nproc-per-node",
                    "2",
                    "--master-addr",
                    hosts.addresses[0],
                    "--master-port",
                    "29519",
                    "--no-python",
                    sys.executable,
                    str(WORKERS_DIR / "hosts.py"),
                    "",
                ]
            )

        line = f"{node(0)} & a=$!; {node(1)} & b=$!; wait $a; s=$?; wait $b; exit $((s | $?))"
        with Launch(
            4, "hosts.py", env={"RDMACOLL_TRANSPORT": "auto"}, timeout=180, command=lambda script: ["sh", "-c", line]
        ) as launch:
            res = launch.finish()
    check_across_hosts(res, 2, 2, "tcp", [""])


def test_shm_forced_across_hosts_is_an_error_everywhere():
    with net_hosts(2) as hosts:
        res = run_mpi(groups(hosts, 1), "hosts.py", [""], env={"RDMACOLL_TRANSPORT": "shm"}, timeout=120)
    crashes = res.select(kind="crash")
    res.check(
        len(crashes) == 2 and all("RDMACOLL_TRANSPORT=shm" in c["error"] and "2 hosts" in c["error"] for c in crashes),
        f"expected the error on both ranks: {crashes}",
    )
