"""The schedules as data (csrc/trace/, rdmacoll._core.schedule) and their simulation
(benchmarks/scale/: SimGrid). The traced schedule of every algorithm must move exactly the
payload bytes a real run moves with each peer (counted by the core, Peer::bytesPut and
bytesGot, under mpiexec: shared memory at 4 ranks, tcp at 3); the simulator, replaying those
schedules on uniform links, must agree with the selector's closed-form costs (docs/scale.md).
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from mpi_util import rank_records, share, shared_part
from rdmacoll import _core

import _rdmacoll_testing as _testing

SCALE_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "scale"
COUNTS = [1, 1000, 300001]  # float32: one element, under the eager limit, several segments
# (world, transport): the algorithms forced there (direct and ring read peers in place, so
# shared memory only; hierarchical needs several hosts: tests/test_hosts.py runs it).
WORLDS = {
    (4, "shm"): ["direct", "ring", "ring_slots", "recursive_doubling", "halving_doubling", "tree", "eager"],
    (3, "tcp"): ["ring_slots", "recursive_doubling", "halving_doubling", "tree", "eager"],
}
PAYLOAD = {"slot", "eager", "store"}  # flows that carry data (headers and counters do not count)

for (_n, _transport), _algos in WORLDS.items():
    share(
        _n,
        f"schedule bytes {_transport}",
        {
            "script": "schedule_bytes.py",
            "args": [",".join(_algos), ",".join(map(str, COUNTS))],
            "env": {"RDMACOLL_TRANSPORT": _transport},
        },
    )


def traced_bytes(algo, p, count, readable):
    """Per rank: (bytes put into each peer, bytes read out of each) by the traced schedule."""
    steps = _core.schedule(algo, p, count, _core.DTYPES["float32"], readable=readable, mappable=readable)
    ops, flows = _core.SCHEDULE_OPS, _core.SCHEDULE_FLOWS
    out = []
    for rows in steps:
        put, got = [0] * p, [0] * p
        for op, flow, peer, value in rows.tolist():
            if ops[op] == "put" and flows[flow] in PAYLOAD:
                put[peer] += value
            elif ops[op] == "get":
                got[peer] += value
        out.append((put, got))
    return out


@pytest.mark.timeout(900)
@pytest.mark.parametrize("world", list(WORLDS), ids=[f"{n}-{t}" for n, t in WORLDS])
def test_traced_schedule_moves_the_bytes_a_real_run_moves(world):
    n, transport = world
    res = shared_part(n, f"schedule bytes {transport}")
    seen = 0
    for algo in WORLDS[world]:
        for count in COUNTS:
            if algo == "eager" and count * 4 > 32 * 1024:
                continue  # above the eager limit the selector's choice runs instead
            recs = rank_records(res, n, "bytes", algo=algo, count=count)
            want = traced_bytes(algo, n, count, readable=transport == "shm")
            for r, rec in recs.items():
                res.check(rec["right"], f"{algo} {count}: rank {r}'s sum is wrong")
                res.check(rec["ran"] == algo, f"{algo} {count}: rank {r} ran {rec['ran']}")
                res.check(
                    (rec["put"], rec["got"]) == (list(want[r][0]), list(want[r][1])),
                    f"{algo} {count}: rank {r} put {rec['put']} and read {rec['got']}, the schedule says "
                    f"{want[r][0]} and {want[r][1]}",
                )
                seen += 1
    assert seen >= n * len(COUNTS) * (len(WORLDS[world]) - 1)


def test_schedule_export_refuses_what_cannot_run():
    with pytest.raises(_core.RdmacollError, match="no allreduce algorithm 'bogus'"):
        _core.schedule("bogus", 4, 10, _core.DTYPES["float32"])
    with pytest.raises(_core.RdmacollError, match="cannot run"):
        _core.schedule("direct", 4, 10, _core.DTYPES["float32"])  # peers not readable in place
    with pytest.raises(_core.RdmacollError, match="host of every rank"):
        _core.schedule("hierarchical", 4, 10, _core.DTYPES["float32"], hosts=[0, 1])


def test_schedules_pair_every_put_with_an_await():
    """Across ranks, the k-th slot message from q to r is awaited as r's k-th from q: every
    put of a flow the receiver counts has its await, and no await waits for a put that
    never comes (what lets the simulator replay them), for every network algorithm at 1-9
    ranks, on several hosts for hierarchical."""
    ops, flows = _core.SCHEDULE_OPS, _core.SCHEDULE_FLOWS
    for p in range(1, 10):
        for algo in ["ring_slots", "recursive_doubling", "halving_doubling", "tree", "eager", "hierarchical"]:
            hosts = [r // 2 for r in range(p)] if algo == "hierarchical" else []
            if algo == "hierarchical" and (p < 4 or p % 2):
                continue
            for count in (0, 3, 5000, 300001):
                if algo == "eager" and count * 4 > 32 * 1024:
                    continue
                steps = _core.schedule(algo, p, count, _core.DTYPES["float32"], hosts=hosts)
                sent, awaited = {}, {}
                for r, rows in enumerate(steps):
                    for op, flow, peer, value in rows.tolist():
                        if ops[op] == "put" and flows[flow] in ("slot", "header", "eager"):
                            k = (flows[flow], r, peer)  # (flow, sender, receiver)
                            sent[k] = sent.get(k, 0) + 1
                        elif ops[op] == "await" and flows[flow] != "credit":
                            k = (flows[flow], peer, r)
                            awaited[k] = max(awaited.get(k, 0), value)
                assert sent == awaited, (algo, p, count)


@pytest.fixture(scope="module")
def simulator(tmp_path_factory):
    sys.path.insert(0, str(SCALE_DIR))
    try:
        import sweep
    finally:
        sys.path.pop(0)
    try:
        binary = sweep.build(tmp_path_factory.mktemp("sim"))
    except sweep.SimulatorUnavailable as e:
        pytest.skip(f"the simulator cannot be built here: {e}")
    return sweep, sweep.Simulator(binary)


@pytest.mark.timeout(600)
def test_simulation_agrees_with_the_closed_forms_on_uniform_links(simulator):
    """64 ranks on one switch (hierarchical: hosts of 8), one segment per message: every
    algorithm within 2% of its closed form. The tree's at uneven rank counts too (its
    fill: schedule::treeCriticalPath; the form before was 8% over at 64 ranks), and
    hierarchical's reduction counts the two inputs a ring reads per byte (it counted one:
    9% short at 16 MiB)."""
    sweep, sim = simulator
    rows = sweep.agreement(sim, ranks=64)
    assert {r["algorithm"] for r in rows} == set(sweep.NETWORK_ALGOS)
    for r in rows:
        assert abs(r["ratio"] - 1) <= 0.02, r
    for p in (17, 100):
        n = 1 << 20
        res = sim.run("star", "tree", p, n, segment_bytes=n, slot_bytes=n, slots=64)
        net, hosts, local = sweep.platform_models(sim.links, "star", p)
        want = sweep.closed_forms(n, p, net, hosts=hosts, segment_bytes=n)["tree"]
        assert res["seconds"] == pytest.approx(want, rel=0.02), p


def test_exchanges_send_half_the_slots_ahead():
    """comm/pairwise.cc: before a pairwise exchange receives its first piece it has sent
    half the peer's slots (the rest cover the credits that come back behind the peer's
    own pieces) where a NIC moves the bytes, as the traced schedule models it
    (prim::writesOffloaded; over shm and tcp one piece); in place as well, each piece stored
    to once its own write left. Halving-doubling and recursive doubling of 16 MiB at 2
    ranks, 256 KiB pieces."""
    ops, flows = _core.SCHEDULE_OPS, _core.SCHEDULE_FLOWS

    def ahead(algo, slots, in_place=False):
        """Slot pieces rank 0 puts before each of its first two slot awaits."""
        count = (16 << 20) // 4
        rows = _core.schedule(algo, 2, count, _core.DTYPES["float32"], in_place=in_place, settings={"slots": slots})[0]
        out, puts = [], 0
        for op, flow, _peer, _value in rows.tolist():
            if ops[op] == "put" and flows[flow] == "slot":
                puts += 1
            elif ops[op] == "await" and flows[flow] == "slot":
                out.append(puts)
                if len(out) == 2:
                    return out
        return out

    for slots in (2, 4, 8, 16):
        w = slots // 2
        assert ahead("halving_doubling", slots) == [w, w + 1], slots
        assert ahead("recursive_doubling", slots) == [w, w + 1], slots
        assert ahead("recursive_doubling", slots, in_place=True) == [w, w + 1], slots
    assert ahead("halving_doubling", 1) == [1, 2]  # one slot: one piece at a time


@pytest.mark.timeout(300)
def test_exchanges_keep_the_link_busy_over_its_round_trip(simulator):
    """Halving-doubling and recursive doubling of 16 MiB at 64 ranks in 256 KiB pieces (the
    default slots): their time is the closed form's (link and reduction overlapped but for
    a piece per exchange) within 2%, and links 10x slower to cross (10 us instead of 1),
    with the slots the job gets for them, add no more than the exchanges' own latency
    (13 and 7 dependent steps, 2 links each). Sending a piece and then receiving the peer's paid a round trip per piece:
    halving-doubling took 1.55x its closed form with 1 us links, and 10 us links added
    59 routes' latency at 2 ranks, where it has 3 steps."""
    sweep, sim = simulator
    slow = sweep.Simulator(sim.binary, sweep.Links(latency=10e-6))
    n, p = 16 << 20, 64
    # the slots a job on the slower links gets (comm/protocol.h: twice the 1 MB in flight)
    slots = _testing.protocol_slots({}, {"ibverbs": {"alpha": 20e-6, "beta": 1 / 25e9}}, p)
    assert slots == 10
    net, hosts, local = sweep.platform_models(sim.links, "star", p)
    forms = sweep.closed_forms(n, p, net, hosts=hosts, local=local, segment_bytes=256 << 10)
    for algo, steps in (("halving_doubling", 13), ("recursive_doubling", 7)):
        fast = sim.run("star", algo, p, n)["seconds"]
        assert fast == pytest.approx(forms[algo], rel=0.02), algo
        added = slow.run("star", algo, p, n, slots=slots)["seconds"] - fast
        assert 0 < added <= steps * 2 * 9e-6 * 1.05, (algo, added)


@pytest.mark.timeout(300)
def test_links_are_shared_flow_by_flow_whatever_the_route(simulator):
    """simulate.cc: SimGrid's CM02 weighs a flow's share of a link by the inverse of its
    route's latency (TCP's round-trip unfairness), so on a fat tree a flow across the spine
    (4 links) got half the share of one within a leaf (2), and the tree, whose busiest
    links carry both, took 1.33x its time on one switch. NICs and switches arbitrate flow
    by flow: the simulator takes the latencies out of the sharing and adds each message's
    route latency itself. The tree of 16 MiB over 64 ranks on the 1:1 fat tree: as on one
    switch within 3% (2 us more per route across the spine), and 1.25x or more with CM02's
    own weights."""
    sweep, sim = simulator
    n = 16 << 20
    star = sim.run("star", "tree", 64, n)["seconds"]
    fattree = sim.run("fattree", "tree", 64, n)["seconds"]
    weighted = sim.run("fattree", "tree", 64, n, latency_weighted=1)["seconds"]
    assert star <= fattree <= 1.03 * star
    assert weighted > 1.25 * star
    # the latency is still paid, once per message: a 32-rank ring of 8 B on the fat tree
    # takes its header round (4 us, the slowest neighbour) and 62 steps, pipelined around
    # the ring, whose hops are 2 us within a leaf (30 of 32) and 4 us across the spine
    t = sim.run("fattree", "ring_slots", 32, 8, gamma=0)["seconds"]
    assert t == pytest.approx(4e-6 + 62 * (30 * 2e-6 + 2 * 4e-6) / 32, rel=0.03)


def test_simulator_replays_a_schedule_and_reports_a_deadlock_free_finish(simulator):
    """Every platform builds and replays at its smallest size; a ring at 4 ranks takes the
    time its steps say (header + 6 hops of 2 us + bytes over 25 GB/s, no reduction cost)."""
    sweep, sim = simulator
    for platform, ranks in (("fattree", 32), ("fattree4", 32), ("dragonfly", 128), ("hosts8", 256), ("star8", 16)):
        res = sim.run(platform, "ring_slots", ranks, 1 << 20)
        assert res["seconds"] > 0 and res["steps"] > 0, (platform, res)
    res = sim.run("star", "ring_slots", 4, 4096, gamma=0)
    hop = 2e-6 + 1024 / 25e9
    headers = 2e-6 + 2 * _core.SCHEDULE_HEADER_BYTES / 25e9  # to both neighbours, one link
    assert res["seconds"] == pytest.approx(headers + 6 * hop, rel=1e-3)
    assert np.isfinite(res["seconds"])


def test_switches_that_sum_carry_n_over_every_link_whatever_the_core(simulator):
    """In-network aggregation (a what-if, not one of rdmacoll's algorithms): a rank's link
    carries n each way, where a ring's carries 2 (p-1)/p n; on the fat trees the leaf
    switches sum their ranks' segments and their uplinks carry n each way whatever the
    ranks under them, striped over the spines, so a 4:1 core costs it little, where
    halving-doubling's exchanges across it share a quarter of the links. At 16 MiB over 32
    ranks, every platform takes n over one link within 5% (the pipeline's fill besides)."""
    sweep, sim = simulator
    n = 16 << 20
    big = {
        platform: sim.run(platform, "innet", 32, n, gamma=0)["seconds"] for platform in ("star", "fattree", "fattree4")
    }
    for platform, t in big.items():
        assert t == pytest.approx(n / 25e9, rel=0.05), platform
    # 8 B: up and down through one switch (2 links of 1 us), or through a leaf and the
    # spines (4 links); 2 pairs per rank (up, down), on a fat tree 2 per leaf besides
    for platform, links, pairs in (("star", 2, 64), ("fattree", 4, 68), ("fattree4", 4, 68)):
        res = sim.run(platform, "innet", 32, 8, gamma=0)
        assert res["seconds"] == pytest.approx(links * 1e-6, rel=0.01) and res["pairs"] == pairs, (platform, res)
    # 64 KiB, one segment: its time over the leaf's uplinks (16 or 4 links' rate) shows
    small = {
        platform: sim.run(platform, "innet", 32, 64 << 10, gamma=0)["seconds"] for platform in ("fattree", "fattree4")
    }
    hop = (64 << 10) / 25e9
    assert small["fattree"] == pytest.approx(4e-6 + 2 * hop + 2 * hop / 16, rel=0.01)
    assert small["fattree4"] == pytest.approx(4e-6 + 2 * hop + 2 * hop / 4, rel=0.01)
    ring = sim.run("star", "ring_slots", 32, n, gamma=0)["seconds"]
    hd = sim.run("fattree4", "halving_doubling", 32, n, gamma=0)["seconds"]
    assert big["star"] < 0.55 * ring and big["fattree4"] < 0.4 * hd


def test_an_oversubscribed_core_steers_selection_off_exchanges_across_it():
    """RDMACOLL_NETWORK_OVERSUBSCRIPTION charges halving-doubling's and recursive doubling's
    exchanges across the core (ranks network_leaf_ranks or more apart) that many times their
    bytes (and the tree's edges leaving a leaf, where they outnumber its share of the
    uplinks: not at 4:1 with leaves of 16, checked below): on a 4:1 fat tree of 256 ranks
    the selector leaves halving-doubling, which the sweep simulated 2-3x slower than the
    ring there (docs/scale.md); on one host, or at 1:1, nothing changes."""
    net = {"alpha": 4e-6, "beta": 4e-11, "gamma": 1.2e-11}
    usable = ["ring_slots", "recursive_doubling", "halving_doubling", "tree"]

    def pick(nbytes, **core):
        return _core.select(net, "allreduce", nbytes, 256, usable, hosts=256, **core)

    assert pick(16 << 20) == "halving_doubling"
    assert pick(16 << 20, oversubscription=1, leaf_ranks=16) == "halving_doubling"
    assert pick(16 << 20, oversubscription=4, leaf_ranks=16) != "halving_doubling"
    costs = _core.costs(net, "allreduce", 16 << 20, 256, hosts=256, oversubscription=4, leaf_ranks=16)
    flat = _core.costs(net, "allreduce", 16 << 20, 256, hosts=256)
    assert costs["ring_slots"] == flat["ring_slots"] and costs["tree"] == flat["tree"]
    assert (
        costs["halving_doubling"] > flat["halving_doubling"]
        and costs["recursive_doubling"] > flat["recursive_doubling"]
    )
    # exchanges within a leaf are not charged: 8 ranks under leaves of 16
    few = _core.costs(net, "allreduce", 16 << 20, 8, hosts=8, oversubscription=4, leaf_ranks=16)
    assert few == _core.costs(net, "allreduce", 16 << 20, 8, hosts=8)
    # one host: no core
    one = _core.costs(net, "allreduce", 16 << 20, 8, oversubscription=4)
    assert one == _core.costs(net, "allreduce", 16 << 20, 8)


def test_ring_and_tree_costs_see_which_neighbours_share_a_host():
    """On hosts of l consecutive ranks the ring's 2 (p-1) steps pay the network's latency
    only on the hops between hosts (1 in l) and the host's on the others (its header round,
    one step, the network's), and the tree's steady step carries as many segments over a
    host's link as the tree has edges leaving the host: counted here from the bytes the
    traced schedule puts across the host's boundary (each tree's half, n/2, crosses an edge
    once each way), not from the tree's own arithmetic. Hosts of one rank and one host keep
    the flat forms."""
    net = {"alpha": 5e-6, "beta": 4e-11, "gamma": 1.2e-11}
    local = {"alpha": 1e-6, "beta": 2.5e-11, "gamma": 1.2e-11}
    n, seg = 16 << 20, 256 << 10
    slot = _core.SCHEDULE_FLOWS.index("slot")  # payload, not the header round's
    put = _core.SCHEDULE_OPS.index("put")
    for p, per_host in ((64, 8), (24, 3)):
        hosts = p // per_host
        got = _core.costs(net, "allreduce", n, p, hosts=hosts, local=local, segment_bytes=seg)
        flat = _core.costs(net, "allreduce", n, p, hosts=p, segment_bytes=seg)  # one rank per host
        alpha = ((per_host - 1) * local["alpha"] + net["alpha"]) / per_host
        moved = 2 * (p - 1) / p * n * (net["beta"] + net["gamma"])
        assert got["ring_slots"] == pytest.approx(net["alpha"] + 2 * (p - 1) * alpha + moved, rel=1e-12)
        assert flat["ring_slots"] == pytest.approx((2 * (p - 1) + 1) * net["alpha"] + moved, rel=1e-12)
        steps = _core.schedule("tree", p, n // 4, _core.DTYPES["float32"], hosts=[r // per_host for r in range(p)])
        out = [0] * hosts
        for r, rows in enumerate(steps):
            for op, flow, peer, value in rows.tolist():
                if op == put and flow == slot and r // per_host != peer // per_host:
                    out[r // per_host] += value
        edges = max(out) / (n / 2)
        assert edges == int(edges) and edges > 4, (p, per_host, out)  # more than one rank's own link carries
        steady_segments = (n // 2) // seg - 1
        extra = got["tree"] - flat["tree"]  # the same but for the host link's segments per step
        assert extra == pytest.approx(steady_segments * net["beta"] * seg * (edges - 4), rel=1e-9), (p, per_host)
    one_host = _core.costs(net, "allreduce", n, 64, segment_bytes=seg)
    assert one_host["ring_slots"] == pytest.approx(
        (2 * 63 + 1) * net["alpha"] + 2 * 63 / 64 * n * (net["beta"] + net["gamma"]), rel=1e-12
    )


def test_a_larger_ring_is_never_faster_so_a_smaller_one_bounds_it(simulator):
    """sweep.py's ring_bound: where the ring was not simulated (the largest rings are the
    slowest points to simulate), a smaller ring's time on the same platform and size bounds
    it below; that holds in the simulator (the fat trees' smallest rings at 64 KiB and
    1 MiB, the dragonfly's at 64 KiB; 8-rank hosts, 256-512 ranks, cost 20 s here and
    were checked by hand: docs/scale.md), and the
    selector check counts such a point only where the bound is above the best of the others
    and the selector did not choose the ring."""
    sweep, sim = simulator
    smallest = {"fattree": (32, 48, 64), "fattree4": (32, 48, 64), "dragonfly": (128, 192)}
    for platform, ranks in smallest.items():
        for nbytes in (64 * 1024, 1 << 20) if platform != "dragonfly" else (64 * 1024,):
            times = [sim.run(platform, "ring_slots", p, nbytes)["seconds"] for p in ranks]
            assert times == sorted(times), (platform, nbytes, times)

    def rec(algo, p, seconds, selected="tree"):
        return {
            "platform": "fattree",
            "algorithm": algo,
            "bytes": 1 << 20,
            "ranks": p,
            "seconds": seconds,
            "selected": selected,
        }

    others = [rec("recursive_doubling", 64, 3.0), rec("halving_doubling", 64, 2.0), rec("tree", 64, 2.05)]
    assert sweep.ring_bound([rec("ring_slots", 32, 5.0), *others], "fattree", 64, 1 << 20) == 5.0
    known = sweep.selector_misses([rec("ring_slots", 32, 5.0), *others])
    assert (known["points"], known["within"], known["bounded"]) == (1, 1, 1)
    # a smaller ring faster than the best: the ring might be the best here, no verdict
    assert sweep.selector_misses([rec("ring_slots", 32, 1.0), *others])["points"] == 0
    # no smaller ring at all: no verdict
    assert sweep.selector_misses(others)["points"] == 0
    # the selector chose the ring, whose time here is not known: no verdict
    chose_ring = [{**r, "selected": "ring_slots"} for r in others]
    assert sweep.selector_misses([rec("ring_slots", 32, 5.0, "ring_slots"), *chose_ring])["points"] == 0
    # the bound decides a miss too: the selector's tree 1.5x the best
    slow = [rec("recursive_doubling", 64, 3.0), rec("halving_doubling", 64, 2.0), rec("tree", 64, 3.0)]
    assert sweep.selector_misses([rec("ring_slots", 32, 5.0), *slow])["beyond"] == [
        ("fattree", 64, 1 << 20, "tree", "halving_doubling", 1.5)
    ]
