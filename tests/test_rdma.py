"""The ibverbs transport's data path on a real kernel RDMA stack: every allreduce algorithm
that can run over verbs and the other collectives at 2-4 ranks, asynchronous operations,
sub-communicators, a rank killed mid-transfer, and what `rdmacoll doctor` says about the
device, against NumPy references. (Two hosts over RDMA: tests/test_rdma_guest.py.)

These need a usable RDMA device. In CI they run inside the Soft-RoCE guest
(scripts/rdma_guest.py; tests/test_rdma_guest.py boots it and runs this file there);
elsewhere they skip, saying why.

RDMACOLL_RDMA_MATRIX=ci runs a smaller matrix (what CI's time allows under emulation, where
4 ranks on the guest's 2 vCPUs cost twice 3: every algorithm at 3 ranks under one rule
set, the collectives at 2 (with and without 4 KiB work requests), sub-communicators at 4, up
to 100003 elements, one dtype per element width; both rule sets at 2-4 ranks run over tcp
on the host, tests/test_tcp.py, where verbs' part, writes and reads of those sizes, is the
same); the default is the full one.
3-rank collectives, SIGTERM and the transport conformance with 4 KiB work requests are in
the full one only (3 ranks run the whole allreduce matrix and sub-communicators 4, so
several peers per rank are covered; SIGTERM kills as SIGKILL does for the verbs path: the
kernel destroys the queue pairs either way; work requests split at 4 KiB are covered by
the collectives at 2 ranks)."""

import os
import re
import signal
import subprocess
import sys

import pytest
from rdmacoll import _core

from mpi_util import (
    async_part,
    check_async,
    check_default_selection,
    check_forced_algorithms,
    check_killed_peer,
    default_selection_part,
    forced_algorithms_part,
    rank_records,
    run_chain,
    run_mpi,
    run_part,
)
from reference import ONE_PER_WIDTH


def _why_not():
    if "ibverbs" not in _core.TRANSPORTS:
        return "ibverbs is not compiled into this build (no verbs headers)"
    usable, lines = _core.probe_transport("ibverbs")
    return None if usable else "no usable RDMA device here: " + "; ".join(lines)[:300]


WHY_NOT = _why_not()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))

IB = {"RDMACOLL_TRANSPORT": "ibverbs"}
SMALL = {"RDMACOLL_SEGMENT_BYTES": 4096, "RDMACOLL_SLOT_BYTES": 4096, "RDMACOLL_SLOTS": 2, "RDMACOLL_EAGER_BYTES": 256}
FULL = os.environ.get("RDMACOLL_RDMA_MATRIX", "full") != "ci"
# Elements: empty, one, p-1 and p+1 for 2-4 ranks, 1023, and (full matrix) one message
# above 1 MiB; 100003 elements already span ~100 of the 4 KiB slots.
SIZES = "0,1,2,3,4,5,1023,4097,100003" + (",300007" if FULL else "")
# ci: one dtype per element width and two ops (one arithmetic, one exact): what verbs
# carries differs only by byte count; every dtype and op runs over shm and tcp on the host
SUBSET = [] if FULL else ["--dtypes", ",".join(ONE_PER_WIDTH)]


# ci: the parts below run as two chained launches (mpi_util.run_chain: each rank starts
# once per launch; under emulation a rank's start, Python, NumPy and the core, is ~5 s):
# at 2 ranks the collectives (both work request sizes), the selector's choice, the
# transport's conformance, a fork after init() and a corrupted region's write, at 3
# every forced algorithm, the asynchronous operations and the sub-communicators. Each test
# reads its part. The full matrix launches each on its own.


# several queue pairs per peer (endpoint.cc): every write of 64 KiB or more split across
# them, the immediate on each; three over two rails where the host has a second device (the
# guest's rxe1, scripts/rdma_guest.py --rails 2: lanes 0 and 2 on rxe0, lane 1 on rxe1,
# each with its own keys), else over the one
TWO_RAILS = os.path.exists("/sys/class/infiniband/rxe1")
# the guest made with --rails 2 (tests/test_rdma_guest.py) must have it: fail, not run on one
RAILS_MISSING = os.environ.get("GUEST_RAILS") == "2" and not TWO_RAILS
LANES = {"RDMACOLL_IB_QPS_PER_CONNECTION": 3} | ({"RDMACOLL_IB_HCA": "rxe"} if TWO_RAILS else {})


def _collectives_part(max_wr):
    """max_wr: None, a work request cap ("4K"), or "lanes" (three queue pairs per peer, LANES)."""
    env = IB | {"RDMACOLL_SEGMENT_BYTES": 4096, "RDMACOLL_SLOT_BYTES": 4096, "RDMACOLL_SLOTS": 2}
    if max_wr:
        env |= {"RDMACOLL_SEGMENT_BYTES": 65536, "RDMACOLL_SLOT_BYTES": 65536}
        env |= LANES if max_wr == "lanes" else {"RDMACOLL_IB_MAX_MESSAGE": max_wr}
    return {"script": "collectives.py", "args": ["check", *SUBSET], "env": env}


# ci: two ops (one arithmetic, one exact); no mixed-memory cases (they test direct's choice
# by memory kind, and direct maps peer memory, which verbs cannot; the selector's run keeps
# them)
FORCED_EXTRA = SUBSET and [*SUBSET, "--ops", "Sum,Max", "--no-mixed"]
# ci: up to 4 MiB (several of the default 1 MiB segments per chunk already; 16 MiB through
# rxe under emulation took a third of the test)
SELECTION_EXTRA = SUBSET and [*SUBSET, "--ops", "Sum,Average,Max", "--mixed-bytes", f"{1 << 20},{(4 << 20) + 12}"]
BIG_MIB = 16 if FULL else 4


def _forced_part(rules):
    return forced_algorithms_part(IB | SMALL, rules, SIZES, FORCED_EXTRA)


def _selection_part():
    return default_selection_part(IB, SELECTION_EXTRA, BIG_MIB)


SPLIT = {"script": "split.py", "env": IB}
FORK = {"script": "ibverbs_init.py", "env": IB | {"RC_TEST_FORK": 1}}
CORRUPTED = {"script": "transport.py", "args": ["corrupted-region", "--transport", "ibverbs"]}
# ci (under emulation, where rxe checksums every packet in software): 4 rounds of a 2 MiB
# pattern in 4 writes for the immediate's ordering, not 16 of 8 MiB (256 MiB through rxe:
# 42 s of the guest suite's 400)
CONFORMANCE = {
    "script": "transport.py",
    "args": ["conformance", "--transport", "ibverbs"]
    + ([] if FULL else ["--payload-rounds", 4, "--payload-mib", 2])
    # (the probe's device reads its settings from here, not from the environment)
    + (["--setting", f"ib_hca={os.environ['RDMACOLL_IB_HCA']}"] if os.environ.get("RDMACOLL_IB_HCA") else []),
}
# (UCX_TLS: MPI's own transport pins nothing; a launch of its own: it drops CAP_IPC_LOCK for
# good, and after other parts its ranks reported nothing in the guest)
MEMLOCK = {"script": "ibverbs_init.py", "env": IB | {"RC_TEST_MEMLOCK": 65536, "UCX_TLS": "tcp,self,sm"}}
# a rank in join() over verbs: its peers' joined words come by put64 (no completion at the
# target), the calls' first messages by writes with immediates
JOIN = {
    "script": "join_algos.py",
    "env": IB
    | {
        "RDMACOLL_ALGO": "allreduce:ring_slots;allgather:ring;broadcast:chain",
        "RC_TEST_JOINER": 1,
        "RC_TEST_SIZES": "0,1,7,1000,100003",
    },
}
# the conformance with three queue pairs per peer (over two rails: LANES): its writes of
# 64 KiB and more from registered memory with an immediate (deferred_completion's,
# split_lengths') are split across them, each lane's part with the immediate
CONFORMANCE_LANES = {
    **CONFORMANCE,
    "args": [*CONFORMANCE["args"], "--setting", "ib_qps_per_connection=3"]
    + (["--setting", "ib_hca=rxe"] if TWO_RAILS else []),
}
# ranks with different rails (rank 0 on rxe0 and rxe1, rank 1 on rxe0): a connection uses
# the lanes both have, one here (rank 0's second queue pair to rank 1 stays unconnected)
CONFORMANCE_MIXED = {
    **CONFORMANCE,
    "args": [*CONFORMANCE["args"], "--setting", "ib_hca@0=rxe", "--setting", "ib_hca@1=rxe0"],
}
CHAINS = {
    2: {
        "collectives-None": _collectives_part(None),
        "collectives-4K": _collectives_part("4K"),
        "collectives-lanes": _collectives_part("lanes"),
        "conformance-lanes": CONFORMANCE_LANES,
        **({"conformance-mixed": CONFORMANCE_MIXED} if TWO_RAILS else {}),
        "selection": _selection_part(),
        "conformance": CONFORMANCE,
        "fork": FORK,
        "corrupted": CORRUPTED,
    },
    3: {"forced-a": _forced_part("a"), "async": async_part(IB), "split": SPLIT, "join": JOIN},
}
_launched: dict = {}


def _chained(nranks, name):
    """ci: the result of the part `name` of the chain at nranks ranks (launched once, by the
    first test that needs it); full matrix: None (the test launches its own)."""
    if FULL:
        return None
    if nranks not in _launched:
        parts = CHAINS[nranks]
        _launched[nranks] = (list(parts), run_chain(nranks, list(parts.values()), timeout=600))
    names, res = _launched[nranks]
    return res.part(names.index(name))


# Verbs write and read but do not map: the algorithms tcp runs (mpi_util.UNMAPPED_RULES).
# Either rule set forces every such algorithm; the full matrix runs both at every size.
@pytest.mark.parametrize(
    "nranks, rules", [(2, "a"), (2, "b"), (3, "a"), (3, "b"), (4, "a"), (4, "b")] if FULL else [(3, "a")]
)  # (ci: tests/test_tcp.py runs every rank count's schedules under both rule sets)
def test_allreduce_algorithms(nranks, rules):
    res = None if FULL else _chained(3, f"forced-{rules}")
    check_forced_algorithms(nranks, IB | SMALL, rules, SIZES, "ibverbs", timeout=400, extra=FORCED_EXTRA, res=res)


@pytest.mark.parametrize("nranks", [2, 4] if FULL else [2])
def test_default_selection_and_big_message(nranks):
    """The selector's own choice over verbs with the default thresholds, up to 16 MiB (ci: 4)."""
    res = None if FULL else _chained(2, "selection")
    check_default_selection(nranks, IB, "ibverbs", timeout=400, extra=SELECTION_EXTRA, big_mib=BIG_MIB, res=res)


@pytest.mark.parametrize(
    "nranks, max_wr",
    [(2, None), (3, None), (4, None), (2, "4K"), (2, "lanes")] if FULL else [(2, None), (2, "4K"), (2, "lanes")],
)
def test_collectives_match_numpy(nranks, max_wr):
    """allgather, broadcast, reducescatter, alltoall, barrier, grouped_allreduce over verbs,
    with small slots so that parts span several messages and senders wait for credits; with
    work requests capped at 4 KiB (RDMACOLL_IB_MAX_MESSAGE), so that every longer write goes
    as several requests, the immediate with the last; and over three queue pairs per peer
    (RDMACOLL_IB_QPS_PER_CONNECTION=3) on two rails (LANES), 64 KiB slots split across them."""
    res = None if FULL else _chained(2, f"collectives-{max_wr}")
    if res is None:
        res = run_part(nranks, _collectives_part(max_wr), timeout=400)
    done = rank_records(res, nranks, "done")
    fails = res.select(kind="fail")
    res.check(
        not fails,
        f"{len(fails)} wrong, first: "
        + "; ".join(f"rank {f['rank']} {f['case']}: got {f['got']} want {f['want']}" for f in fails[:5]),
    )
    res.check(len({d["cases"] for d in done.values()}) == 1, "ranks ran different numbers of cases")
    res.check(res.returncode == 0, "the launch failed")


def test_async_many_in_flight():
    check_async(IB, "ibverbs", timeout=400, res=None if FULL else _chained(3, "async"))


def test_subcommunicators_over_verbs():
    """Overlapping subsets on the world's queue pairs, at 4 ranks (ci: 3, in the chain; 4
    ranks' subsets run over shm and tcp on the host, tests/test_split.py)."""
    nranks = 4 if FULL else 3
    res = run_part(4, SPLIT, timeout=400) if FULL else _chained(3, "split")
    rank_records(res, nranks, "done")
    bad = [c for c in res.select(kind="check") if not c["ok"]]
    res.check(not bad, "; ".join(f"rank {c['rank']} {c['name']}: {c['detail']}" for c in bad[:6]))


def test_join_over_verbs():
    """A rank in join() takes part in allreduces, allgathers, a broadcast and a barrier it
    learns of from their first messages, and join() ends on its peers' joined words
    (workers/join_algos.py; every algorithm with a rank joined: tests/test_join.py)."""
    res = run_part(3, JOIN, timeout=400) if FULL else _chained(3, "join")
    for r, rec in rank_records(res, 3, "case").items():
        res.check(not rec["bad"], f"rank {r}: {rec['bad']}")
        res.check(r == 1 or "ring_slots" in rec["algorithms"], f"rank {r} ran {rec['algorithms']}")
    res.check(res.returncode == 0, "the launch failed")


def _transport_checks(args, timeout=400, res=None):
    res = res or run_mpi(2, "transport.py", [*args, "--transport", "ibverbs"], timeout=timeout)
    got = res.select(kind="result")
    bad = [f"rank {r['rank']} {r['name']}: {r['detail']}" for r in got if not r["ok"]]
    res.check(got and not bad, "; ".join(bad[:6]) or "no checks ran")
    res.check(res.returncode == 0, "the launch failed")
    return got


def test_conformance():
    """tests/test_transport.py's conformance to the one-sided contract over RDMA verbs
    (which read peer memory but cannot map it): immediates after payloads, unaligned
    writes, put64, reads, zero-length writes, writes left in flight (deferred completion:
    real tickets from registered memory), 5000 outstanding writes against the completion
    queue, malformed regions."""
    res = _chained(2, "conformance") or run_part(2, CONFORMANCE, timeout=120)
    got = {(r["rank"], r["name"]): r for r in _transport_checks([], res=res)}
    want = ("capabilities", "deferred_completion", "many_outstanding")
    res.check(all((0, n) in got for n in want), f"checks missing: {sorted(got)}")
    print("deferred completion:", got[(0, "deferred_completion")]["detail"])


def test_conformance_over_several_queue_pairs_and_rails():
    """The conformance with RDMACOLL_IB_QPS_PER_CONNECTION=3 over two rails (rxe0 and rxe1,
    where the guest has both): writes of 64 KiB and more from registered memory with an
    immediate split across the three queue pairs, each part with its rail's keys
    (split_lengths: one past a multiple of 64 KiB, the last bytes on the last lane;
    deferred_completion: 48 in flight), the immediate on each and still after every byte;
    every endpoint names its rails and its three queue pairs."""
    assert not RAILS_MISSING, "GUEST_RAILS=2 but the guest has no rxe1 (scripts/rdma_guest.py's RUN)"
    res = _chained(2, "conformance-lanes") or run_part(2, CONFORMANCE_LANES, timeout=120)
    got = {(r["rank"], r["name"]): r for r in _transport_checks([], res=res)}
    want = ("capabilities", "deferred_completion", "many_outstanding")
    res.check(all((0, n) in got for n in want), f"checks missing: {sorted(got)}")
    res.check((1, "split_lengths") in got, f"no split_lengths check: {sorted(got)}")
    described = got[(0, "capabilities")]["detail"]
    res.check(not TWO_RAILS or "rxe0:1+rxe1:1 (" in described, f"not over both rails: {described}")
    print("endpoint:", described)


@pytest.mark.skipif(not TWO_RAILS and not RAILS_MISSING, reason="needs a second device, rxe1 (rdma_guest.py --rails 2)")
def test_ranks_with_different_rails():
    """Rank 0 on two rails, rank 1 on one: the conformance over the one lane both have. Then
    each rank on a port the other's cannot reach (rxe1 and rxe0 of one guest, whose rxe
    loops back only within a device): every rank raises at connection, naming the lane,
    the ports and RDMACOLL_IB_HCA, instead of hanging."""
    assert not RAILS_MISSING, "GUEST_RAILS=2 but the guest has no rxe1"
    res = _chained(2, "conformance-mixed") or run_part(2, CONFORMANCE_MIXED, timeout=120)
    got = {(r["rank"], r["name"]): r for r in _transport_checks([], res=res)}
    res.check((0, "split_lengths") in got, f"checks missing: {sorted(got)}")
    # one queue pair each way: rank 0's endpoint names both its rails, rank 1's one
    ends = [got[(r, "capabilities")]["detail"] for r in (0, 1)]
    res.check(re.search(r"rxe0:1\+rxe1:1 \(rank 1, qpn \d+ -> \d+\)", ends[0]) is not None, ends[0])
    res.check(re.search(r"ibverbs rxe0:1 \(rank 0, qpn \d+ -> \d+\)", ends[1]) is not None, ends[1])
    apart = [*CONFORMANCE["args"], "--setting", "ib_hca@0=rxe1", "--setting", "ib_hca@1=rxe0"]
    res = run_mpi(2, "transport.py", apart, timeout=120)
    errors = {r["rank"]: r["error"] for r in res.select(kind="crash")}
    res.check(set(errors) == {0, 1}, f"ranks {sorted({0, 1} - set(errors))} did not raise: {res.records[:4]}")
    for r, e in errors.items():
        want = ("lane 0: rxe", "to its rail 0", "can this port reach that one?", "RDMACOLL_IB_HCA")
        res.check(all(w in e for w in want), f"rank {r}: {e}")
    print("apart:", errors[0])


if FULL:  # (defined only there: the guest's suite must not skip; module docstring)

    def test_conformance_with_small_work_requests():
        """Transport conformance with every work request capped at 4 KiB: writes and reads
        longer than the device's message limit go as several requests (Soft-RoCE's own
        limit, max_msg_sz 2 GiB, is beyond the guest's memory, hence the cap,
        RDMACOLL_IB_MAX_MESSAGE)."""
        got = _transport_checks(["conformance", "--setting", "ib_max_message=4K"])
        assert any(r["name"].startswith("immediate_after_payload") for r in got)


def test_write_outside_the_peers_region():
    """A region blob whose address was corrupted: the device refuses the write (remote
    access error), both sides raise RdmacollError, the target's memory is untouched."""
    got = _transport_checks(["corrupted-region"], timeout=120, res=_chained(2, "corrupted"))
    names = {(r["rank"], r["name"]) for r in got}
    assert names == {
        (0, "writer raises a remote access error"),
        (1, "target sees its queue pair fail and raises"),
        (1, "target memory untouched"),
    }, names
    print("; ".join(f"rank {r['rank']}: {r['detail']}" for r in got if r["detail"]))


def test_memlock_too_low_at_init():
    """64 KiB of lockable memory and no CAP_IPC_LOCK: init() raises on every rank, naming
    the registration's size, the limit, and `ulimit -l`."""
    res = run_part(2, MEMLOCK, timeout=120)
    for r, rec in rank_records(res, 2, "init").items():
        e = rec["error"] or ""
        res.check(
            re.search(r"ibv_reg_mr of \d+ bytes", e) and "64 KiB" in e and "ulimit -l" in e,
            f"rank {r}: {e!r} does not name the size, the limit and ulimit -l",
        )
        res.check(not rec["initialized"], f"rank {r}: is_initialized() after a failed init()")
    print(res.select(kind="init")[0]["error"])


def test_fork_after_init():
    """init() and allreduces over the device; then a child forked after init() scribbles over the registered arrays and exits while the
    parent keeps reducing from them: the parent's results stay right (the kernel copies
    pinned pages for the child; rdmacoll undoes the MADV_DONTFORK that MPICH's UCX makes
    libibverbs set), the child exits cleanly. The arrays then outlive shutdown()."""
    res = _chained(2, "fork") or run_part(2, FORK, timeout=200)
    # first, as test_ibverbs.py's test_init_fails_or_runs_everywhere checks where a device is
    # (the guest runs it here only): init() and allreduces of 0 to 4 Mi elements over ibverbs
    for r, rec in rank_records(res, 2, "init").items():
        res.check(rec["error"] is None and rec["initialized"], f"rank {r}: init() over ibverbs failed: {rec}")
    for r, rec in rank_records(res, 2, "allreduce").items():
        res.check(rec["transport"] == "ibverbs" and not rec["wrong"], f"rank {r}: {rec}")
    for r, rec in rank_records(res, 2, "fork").items():
        res.check(rec["wrong"] == 0 and rec["child_status"] == 0, f"rank {r}: {rec}")
    for r, rec in rank_records(res, 2, "after shutdown").items():
        res.check(rec["arrays"] == 2 and rec["sum"] == 2 * 2 * ((1 << 20) + 3), f"rank {r}: {rec}")
    res.check(res.returncode == 0, "the launch failed")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM] if FULL else [signal.SIGKILL])
def test_killed_peer_is_detected(sig):
    """A rank killed in a 16 MiB allreduce loop: its queue pairs go to the error state and
    the others raise RdmacollError naming it (flushed completions are not taken for
    data), and so does their next call; nothing is left running."""
    check_killed_peer(IB, sig, 16, "ibverbs", timeout=300)


def test_doctor_shows_the_device():
    """`rdmacoll doctor` names the device, its port state, link layer, MTU and GIDs, and says
    ibverbs is usable."""
    out = subprocess.run([sys.executable, "-m", "rdmacoll", "doctor"], capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    print(text)
    dev = os.environ.get("RDMACOLL_IB_HCA", "").lstrip("^=").split(",")[0].split(":")[0] or "rxe0"
    assert re.search(r"ibverbs: usable", text), "doctor does not say ibverbs is usable"
    for want in (dev, "ACTIVE", "Ethernet", "MTU", "GID", "ACTIVE ports", "would use"):
        assert want in text, f"doctor does not show {want!r}"
    assert re.search(r"GID.*::ffff:\d+\.\d+\.\d+\.\d+|GID.*RoCE v2", text), "no RoCE v2 GID shown"


def _rdma(*args, timeout=60):
    return subprocess.run(["rdma", *args], capture_output=True, text=True, timeout=timeout)


def test_device_removed_mid_job():
    """`rdma link delete rxe0` during a 16 MiB allreduce loop: Soft-RoCE cannot take the
    device from running processes (the removal waits until they close it), so every rank
    must notice on its own and raise RdmacollError saying the device is being removed; the
    removal then completes. Last in this file: it re-adds rxe0 afterwards."""
    if not os.environ.get("RDMACOLL_IN_GUEST") or not os.path.exists("/sys/class/infiniband/rxe0"):
        pytest.skip("deletes rxe0: only in the throw-away guest of scripts/rdma_guest.py")
    import threading
    import time

    from mpi_util import Launch

    launch = Launch(
        2, "kill_loop.py", ["--mib", 16, "--max-seconds", 120], env=IB | {"UCX_TLS": "tcp,self,sm"}, timeout=300
    )
    deleted = {}
    try:
        with launch:
            launch.wait_record(kind="looping", rank=1, timeout=120)
            t0 = time.monotonic()
            worker = threading.Thread(target=lambda: deleted.update(r=_rdma("link", "delete", "rxe0", timeout=200)))
            worker.start()
            res = launch.finish()
            worker.join(timeout=220)
            took = time.monotonic() - t0
    finally:
        if not os.path.exists("/sys/class/infiniband/rxe0"):
            _rdma("link", "add", "rxe0", "type", "rxe", "netdev", "eth0")
            for _ in range(100):
                if "ACTIVE" in open("/sys/class/infiniband/rxe0/ports/1/state").read():
                    break
                time.sleep(0.1)
    errors = {r["rank"]: r["message"] for r in res.select(kind="error")}
    res.check(set(errors) == {0, 1}, f"ranks {sorted({0, 1} - set(errors))} did not raise")
    for r, msg in errors.items():
        res.check("being removed" in msg and "rxe0" in msg, f"rank {r}: {msg!r} does not say rxe0 is being removed")
    res.check("r" in deleted and deleted["r"].returncode == 0, f"rdma link delete did not complete: {deleted}")
    res.check(not res.leftovers, f"processes of the launch still running: {res.leftovers}")
    print(f"device removed after {took:.1f} s; rank 0: {errors[0][:200]}")
