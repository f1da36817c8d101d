"""Algorithm selection: RDMACOLL_ALGO rules, the alpha-beta-gamma cost model, the tuning
file (rank 0's constants reach every rank) and what a malformed setting says."""

import math

import pytest

from rdmacoll import _core, _settings
import _rdmacoll_testing as _testing
from mpi_util import rank_records, run_mpi

K, M, G = 1 << 10, 1 << 20, 1 << 30
ALLREDUCE = [name for name, _ in _core.algorithms()]

needs_hooks = pytest.mark.skipif(
    not hasattr(_testing, "parse_algo_rules"), reason="module.cc does not call bindTestingTuning (testing/tuning.cc)"
)


# --------------------------------------------------------------------------- rule syntax


@needs_hooks
@pytest.mark.parametrize(
    "text, want",
    [
        ("", []),
        ("ring", [("allreduce", 0, None, "ring")]),
        (" ring ", [("allreduce", 0, None, "ring")]),
        ("allreduce:ring", [("allreduce", 0, None, "ring")]),
        (
            "allreduce:0-64K:eager,64K-inf:ring",
            [("allreduce", 0, 64 * K, "eager"), ("allreduce", 64 * K, None, "ring")],
        ),
        (
            "0-1k:eager,1KiB-2MB:direct,2M-1G:ring,1g-inf:ring_slots",
            [
                ("allreduce", 0, K, "eager"),
                ("allreduce", K, 2 * M, "direct"),
                ("allreduce", 2 * M, G, "ring"),
                ("allreduce", G, None, "ring_slots"),
            ],
        ),
        (
            "allreduce:0-100:eager;allgather:0-4K:direct,4K-inf:direct;broadcast:0-inf:direct;reducescatter:direct;"
            "alltoall:direct",
            [
                ("allreduce", 0, 100, "eager"),
                ("allgather", 0, 4 * K, "direct"),
                ("allgather", 4 * K, None, "direct"),
                ("broadcast", 0, None, "direct"),
                ("reducescatter", 0, None, "direct"),
                ("alltoall", 0, None, "direct"),
            ],
        ),
        ("ALLREDUCE:0-8:direct", [("allreduce", 0, 8, "direct")]),
    ],
)
def test_rules_parse(text, want):
    assert _testing.parse_algo_rules(text) == want


@needs_hooks
@pytest.mark.parametrize(
    "text, quoted",
    [
        ("bogus", "'bogus'"),
        ("allreduce:0-64K:bogus", "'bogus'"),
        ("0-64K:ring,64K-inf:nope", "'nope'"),
        ("allreduce:0-6xK:ring", "'0-6xK'"),
        ("allreduce:64K:ring", "'64K'"),
        ("allreduce:64K-0:ring", "'64K-0'"),
        ("allreduce:inf-inf:ring", "'inf-inf'"),
        ("allreduce:1-2-3:ring", "'1-2-3'"),
        ("allreduce:-5:ring", "'-5'"),
        ("allgathr:0-1K:ring", "'allgathr'"),
        ("ring:ring", "'ring'"),
        ("allreduce:0-1K:", "'allreduce:0-1K:'"),
        ("allreduce:a:b:c", "'allreduce:a:b:c'"),
        ("ring,,direct", "empty item"),
        ("ring,", "empty item"),
        ("0-99999999999999999999K:ring", "'0-99999999999999999999K'"),
    ],
)
def test_rules_malformed_quote_the_bad_part(text, quoted):
    with pytest.raises(_core.RdmacollError) as e:
        _testing.parse_algo_rules(text)
    assert quoted in str(e.value)
    assert "RDMACOLL_ALGO" in str(e.value)


@needs_hooks
def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(_core.RdmacollError) as e:
        _testing.parse_algo_rules("allreduce:0-1K:bogus")
    for name in ALLREDUCE:
        assert name in str(e.value)


@needs_hooks
@pytest.mark.parametrize("collective", ["allgather", "broadcast", "reducescatter", "alltoall"])
def test_unknown_algorithm_of_other_collectives_is_refused(collective):
    with pytest.raises(_core.RdmacollError) as e:
        _testing.parse_algo_rules(f"{collective}:bogus")
    assert "'bogus'" in str(e.value) and f"no {collective} algorithm" in str(e.value) and "direct" in str(e.value)


@needs_hooks
def test_forced_algorithm_ranges_are_half_open_and_first_match_wins():
    cfg = "allreduce:0-64K:eager,64K-inf:ring,0-inf:direct;allgather:1K-2K:direct"
    f = _testing.forced_algorithm
    assert f(cfg, "allreduce", 0) == "eager"
    assert f(cfg, "allreduce", 64 * K - 1) == "eager"
    assert f(cfg, "allreduce", 64 * K) == "ring"
    assert f(cfg, "allreduce", 1 << 62) == "ring"
    assert f(cfg, "allgather", 1023) is None
    assert f(cfg, "allgather", 1024) == "direct"
    assert f(cfg, "allgather", 2048) is None
    assert f(cfg, "broadcast", 10) is None
    assert f("", "allreduce", 10) is None
    assert f("direct", "allreduce", 10) == "direct"


# --------------------------------------------------------------------------- cost model


@needs_hooks
@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 64])
@pytest.mark.parametrize("nbytes", [0, 8, 4 * K, 32 * K, 64 * K, M, 64 * M])
def test_selection_is_the_cheapest_usable(p, nbytes):
    model = _core.DEFAULT_COST_MODELS["local"]
    costs = _core.costs(model, "allreduce", nbytes, p)
    assert set(costs) == set(ALLREDUCE)
    for usable in (ALLREDUCE, [a for a in ALLREDUCE if a != "eager"], ["ring", "ring_slots"], ["ring_slots"]):
        usable = [a for a in usable if a in costs]
        pick = _core.select(model, "allreduce", nbytes, p, usable)
        assert costs[pick] == min(costs[a] for a in usable)
        # ties go to the algorithm registered first
        assert pick == next(a for a in ALLREDUCE if a in usable and costs[a] == costs[pick])
    assert _core.select(model, "allreduce", nbytes, p, []) is None


PAIRWISE = ("recursive_doubling", "halving_doubling")  # link and reduction overlap: not linear


@needs_hooks
def test_costs_are_linear_in_the_constants():
    """Every cost but the pairwise exchanges' (below); rdmacoll-bench --tune fits the
    constants by least squares on the costs at the unit models."""
    for p in (2, 4, 7):
        for n in (8, 4 * K, 16 * M):
            a, b, c = (
                {"alpha": 1.0, "beta": 0.0, "gamma": 0.0},
                {"alpha": 0.0, "beta": 1.0, "gamma": 0.0},
                {"alpha": 0.0, "beta": 0.0, "gamma": 1.0},
            )
            m = {"alpha": 2e-6, "beta": 3e-10, "gamma": 7e-11}
            ca, cb, cc, cm = (_core.costs(x, "allreduce", n, p) for x in (a, b, c, m))
            for name in cm:
                assert min(ca[name], cb[name], cc[name]) >= 0
                if name not in PAIRWISE:
                    assert cm[name] == pytest.approx(2e-6 * ca[name] + 3e-10 * cb[name] + 7e-11 * cc[name], rel=1e-9)


@needs_hooks
def test_pairwise_exchanges_overlap_the_link_with_the_reduction():
    """comm/pairwise.cc sends half the slots ahead of what it receives, so an exchange of b
    bytes in pieces of s costs alpha + max(link, reduction) b + min(link, reduction) s, not
    their sum (the simulator agrees to 0.1%: tests/test_scale.py); with one piece (s >= b)
    and at the unit models, the sum, which the tuning fit uses. Computed here for
    recursive doubling and halving-doubling at 4 ranks; at 3 ranks the folded pair adds
    its n in and its n back out."""
    a, b, g, s = 2e-6, 3e-10, 7e-11, 256 * K
    m = {"alpha": a, "beta": b, "gamma": g}

    def exchange(nbytes, inputs):
        return a + max(b, g * inputs) * nbytes + min(b, g * inputs) * min(nbytes, s)

    n = 16 * M
    rd = a + 2 * exchange(n, 2)
    hd = a + sum(exchange(n * d / 4, 2) + exchange(n * d / 4, 0) for d in (2, 1))
    got = _core.costs(m, "allreduce", n, 4, segment_bytes=s)
    assert got["recursive_doubling"] == pytest.approx(rd, rel=1e-12)
    assert got["halving_doubling"] == pytest.approx(hd, rel=1e-12)
    assert got["halving_doubling"] < 5 * a + (b + g) * 1.5 * n  # less than the sum
    fold = exchange(n, 2) + exchange(n, 0)
    got3 = _core.costs(m, "allreduce", n, 3, segment_bytes=s)
    assert got3["recursive_doubling"] == pytest.approx(a + fold + exchange(n, 2), rel=1e-12)
    # one piece: the sum
    one = _core.costs(m, "allreduce", n, 4, segment_bytes=n)
    assert one["recursive_doubling"] == pytest.approx(3 * a + 2 * (b + 2 * g) * n, rel=1e-12)
    # the unit models give the sum's coefficients (steps, bytes moved, bytes reduced)
    units = [
        _core.costs(u, "allreduce", n, 4, segment_bytes=s)
        for u in (
            {"alpha": 1.0, "beta": 0.0, "gamma": 0.0},
            {"alpha": 0.0, "beta": 1.0, "gamma": 0.0},
            {"alpha": 0.0, "beta": 0.0, "gamma": 1.0},
        )
    ]
    assert [u["recursive_doubling"] for u in units] == [3, 2 * n, 4 * n]
    assert [u["halving_doubling"] for u in units] == [5, 1.5 * n, 1.5 * n]


OTHER = {
    "allgather": ("direct", "ring"),
    "broadcast": ("direct", "chain"),
    "reducescatter": ("direct", "ring"),
    "alltoall": ("direct", "pairwise"),
}


@needs_hooks
@pytest.mark.parametrize("collective", sorted(OTHER))
def test_other_collectives_have_costs(collective):
    """Every registered algorithm of every collective has a cost, linear in the constants.
    Where peer memory is readable (same host), the one-pass direct form wins from 3 ranks
    at every size, and at 2 ranks for large messages; small ones at 2 ranks take one slot
    step against direct's two rounds (headers, then done), as allreduce's eager does."""
    assert tuple(name for name, _ in _core.algorithms(collective)) == OTHER[collective]
    units = [
        {"alpha": 1.0, "beta": 0.0, "gamma": 0.0},
        {"alpha": 0.0, "beta": 1.0, "gamma": 0.0},
        {"alpha": 0.0, "beta": 0.0, "gamma": 1.0},
    ]
    m = {"alpha": 2e-6, "beta": 3e-10, "gamma": 7e-11}
    default = _core.DEFAULT_COST_MODELS["local"]
    direct, slots = OTHER[collective]
    for p in (2, 3, 4, 8, 64):
        for n in (0, 8, 4 * K, M, 256 * M):
            parts = [_core.costs(u, collective, n, p) for u in units]
            cm = _core.costs(m, collective, n, p)
            assert set(cm) == set(OTHER[collective])
            for name in cm:
                assert cm[name] == pytest.approx(
                    sum(k * c[name] for k, c in zip((2e-6, 3e-10, 7e-11), parts)), rel=1e-9, abs=1e-15
                )
            d = _core.costs(default, collective, n, p)
            if p >= 3 or n >= M:
                assert d[direct] <= d[slots], (p, n, d)
            else:
                assert d[slots] < d[direct], (p, n, d)
    with pytest.raises(_core.RdmacollError, match="unknown collective"):
        _core.algorithms("gather")


@needs_hooks
def test_shipped_defaults_choose_like_the_measurements():
    """eager for small messages, direct (same host) for large ones, at 2 ranks with a core
    each and 4 ranks on 2 cores (see cost_model.h for how the defaults were chosen); at 2
    ranks direct from 64 KiB, where recursive_doubling took 2x its time on rc.empty arrays."""
    model = _core.DEFAULT_COST_MODELS["local"]
    one_host = [a for a in ALLREDUCE if a != "hierarchical"]
    for p, per_cpu in ((2, 1.0), (4, 2.0)):
        m = _core.cost_model_for(model, per_cpu)
        assert _core.select(m, "allreduce", 8, p, one_host) == "eager"
        assert _core.select(m, "allreduce", 16 * K, p, one_host) == "eager"
        for n in (64 * K, M, 64 * M):
            assert _core.select(m, "allreduce", n, p, [a for a in one_host if a != "eager"]) == "direct"


# --------------------------------------------------------------------------- shipped constants (tuning file: test_tuning.py)


def test_default_cost_models_are_exported():
    for links in ("local", "network"):
        model = _core.DEFAULT_COST_MODELS[links]
        assert set(model) == {"alpha", "beta", "gamma"}
        assert all(v > 0 for v in model.values())


def test_slots_follow_the_bandwidth_delay_product():
    """RDMACOLL_SLOTS=0 (the default): twice the messages in flight that the network's
    round trip (2 alpha) at its bandwidth (1/beta) takes, plus the one being reduced from
    (pairwise exchanges send half the slots ahead), computed here independently; at
    least 4, at most 64, and above 4 no more than 256 MiB of slots; a constant of 0 (a
    fit that could not support it) keeps 4."""
    slot = 256 * K

    def want(alpha, beta, ranks):
        if alpha <= 0 or beta <= 0:
            return 4
        need = 2 * (math.ceil(2 * alpha / beta / slot) + 1)
        return max(4, min(need, 64, (256 << 20) // (slot * ranks)))

    for alpha, beta, ranks in [
        (3e-6, 1 / 50e9, 2),  # a 400 Gb/s NIC, 3 us: 300 KB in flight, 2 (3 messages), 6 slots
        (2e-6, 1 / 25e9, 2),  # 200 Gb/s, 2 us: 100 KB, the minimum holds it
        (50e-6, 1 / 25e9, 2),  # 200 Gb/s across a long link: 2.5 MB, 11 messages, 22 slots
        (50e-6, 1 / 25e9, 8),  # ... 8 peers: 256 MiB / (256 KiB x 8) = 128, so still 22
        (50e-6, 1 / 25e9, 64),  # ... 64 peers: 256 MiB / (256 KiB x 64) = 16 slots
        (50e-6, 1 / 25e9, 128),  # ... 128 peers: 8 slots
        (50e-6, 1 / 25e9, 4096),  # ... 4,096 peers: back to the minimum
        (1e-3, 1 / 1e9, 2),  # 1 ms at 1 GB/s: 2 MB in flight, 18 slots
        (1e-2, 1 / 25e9, 2),  # 10 ms at 200 Gb/s: 500 MB in flight, capped at 64
        (1e-2, 0.0, 2),  # a beta of 0 says nothing of the link: the minimum
        (0.0, 1 / 25e9, 2),
    ]:
        got = _testing.protocol_slots({}, {"ibverbs": {"alpha": alpha, "beta": beta}}, ranks)
        assert got == want(alpha, beta, ranks), (alpha, beta, ranks, got)
    assert [want(50e-6, 1 / 25e9, r) for r in (2, 64, 128, 4096)] == [22, 16, 8, 4]  # the reference itself
    # the shipped network constants (loopback tcp) keep the slots measured so far
    assert _testing.protocol_slots({}, {}, 2) == 4
    # the network RDMACOLL_TRANSPORT may use: auto, ibverbs' entry before tcp's; tcp, tcp's
    # (a constant an entry lacks is the default's); shm, none
    long_ib = {"ibverbs": {"alpha": 50e-6, "beta": 1 / 25e9}}
    assert _testing.protocol_slots({}, long_ib | {"tcp": {"alpha": 30e-6}}, 2) == 22
    assert _testing.protocol_slots({"transport": "tcp"}, long_ib | {"tcp": {"alpha": 400e-6}}, 2) == 18
    assert _testing.protocol_slots({"transport": "tcp"}, long_ib, 2) == 4
    assert _testing.protocol_slots({"transport": "shm"}, long_ib, 2) == 4
    # a value set is used as it is
    assert _testing.protocol_slots({"slots": "2"}, long_ib, 2) == 2


# --------------------------------------------------------------------------- under mpiexec


SIZES = [8, 4 * K, 64 * K - 4, 64 * K, M]


def _sel(res, nranks):
    """{bytes: the algorithm selection chose}, checked alike on every rank. last_algorithm
    names what ran, a continuation after its algorithm ("direct>ring_slots")."""
    rank_records(res, nranks, "done")
    table = {}
    for rec in res.select(kind="sel"):
        chose = rec["ran"].split(">")[0]
        res.check(rec["ok"], f"rank {rec['rank']}, {rec['bytes']} B: wrong result with {rec['ran']}")
        res.check(
            chose == rec["selected"], f"rank {rec['rank']}: ran {rec['ran']}, selected_algorithm said {rec['selected']}"
        )
        table.setdefault(rec["bytes"], set()).add(chose)
    res.check(all(len(v) == 1 for v in table.values()), f"ranks chose differently: {table}")
    return {n: v.pop() for n, v in table.items()}


@pytest.mark.parametrize("nranks", [2, 3])
def test_ranges_force_per_size(nranks):
    env = {"RDMACOLL_ALGO": "allreduce:0-64K:ring,64K-inf:ring_slots", "RDMACOLL_TUNING_FILE": "none"}
    res = run_mpi(nranks, "selection.py", args=[",".join(map(str, SIZES))], env=env, timeout=120)
    got = _sel(res, nranks)
    assert got == {8: "ring", 4 * K: "ring", 64 * K - 4: "ring", 64 * K: "ring_slots", M: "ring_slots"}, got


def test_forced_where_usable_model_elsewhere():
    # eager only carries up to RDMACOLL_EAGER_BYTES (here 4 KiB): above, the model chooses
    env = {"RDMACOLL_ALGO": "0-inf:eager", "RDMACOLL_EAGER_BYTES": "4K", "RDMACOLL_TUNING_FILE": "none"}
    res = run_mpi(2, "selection.py", args=[",".join(map(str, SIZES))], env=env, timeout=120)
    got = _sel(res, 2)
    assert got[8] == got[4 * K] == "eager"
    assert "eager" not in (got[64 * K], got[M]) and got[M] == "direct", got


def test_rank0_tuning_file_reaches_every_rank(tmp_path):
    """Only rank 0 reads the file (alpha = beta = 0: reductions are all that cost, and
    direct reduces least, even at 8 B); every rank must choose by its constants."""
    path = tmp_path / "tuning.json"
    _settings.write_tuning_file(
        str(path), [_settings.tuning_entry("shm", 3, {"alpha": 0.0, "beta": 0.0, "gamma": 1e-9})]
    )
    res = run_mpi(
        [(1, ["env", f"RDMACOLL_TUNING_FILE={path}"]), (2, [])],
        "selection.py",
        args=[",".join(map(str, SIZES))],
        timeout=120,
    )
    got = _sel(res, 3)
    assert set(got.values()) == {"direct"}, got


def test_default_selection_without_tuning_file():
    res = run_mpi(
        2, "selection.py", args=[",".join(map(str, SIZES))], env={"RDMACOLL_TUNING_FILE": "none"}, timeout=120
    )
    got = _sel(res, 2)
    assert got[8] == "eager" and got[M] == "direct", got


@pytest.mark.parametrize(
    "value, quoted",
    [
        ("allreduce:0-64K:bogus,64K-inf:ring", "'bogus'"),
        ("allreduce:0-64Q:ring", "'0-64Q'"),
        ("allgathr:ring", "'allgathr'"),
    ],
)
def test_malformed_algo_fails_init_everywhere(value, quoted):
    res = run_mpi(2, "init_fails.py", env={"RDMACOLL_ALGO": value}, timeout=30)
    for rec in rank_records(res, 2, "init").values():
        res.check(
            rec["error"] is not None and quoted in rec["error"],
            f"rank {rec['rank']}: init() with RDMACOLL_ALGO={value!r} gave {rec['error']!r}, expected {quoted}",
        )
        res.check(not rec["initialized"], "is_initialized() after a failed init()")


# --------------------------------------------------------------------------- continuations


CONTINUATIONS = {"direct>ring_slots"}


def test_continuations_are_registered_entries():
    listed = {name for name, _ in _core.algorithms("allreduce", continuations=True)}
    assert CONTINUATIONS <= listed
    assert not CONTINUATIONS & {name for name, _ in _core.algorithms("allreduce")}, "continuations are not selectable"
    with pytest.raises(_core.RdmacollError, match="'direct>ring_slots'"):
        _testing.parse_algo_rules("direct>ring_slots")


# direct on user memory (allreduce_direct.cc): at 2 ranks cross-memory calls at every size,
# at 12 ranks and more staged below 4 MiB and the slot ring from 4 to 16 MiB (3-11 ranks:
# staged below 256 KiB, cross-memory calls above, as 2 ranks from there; run by
# tests/test_allreduce.py's matrix)
ALL_DIRECT = ["numpy 64K", "empty 64K", "mixed 64K", "numpy 2M", "numpy 4M", "empty 4M", "mixed 4M", "numpy 32M"]
# (12 ranks on CI's 2 cores: the sizes around the ring's range, not 2 or 32 MiB)
MANY = ["numpy 64K", "mixed 64K", "numpy 4M", "empty 4M", "mixed 4M"]


@pytest.mark.parametrize(
    "nranks, want",
    [
        (2, dict.fromkeys(ALL_DIRECT, "direct")),
        (12, dict.fromkeys(MANY, "direct") | {"numpy 4M": "direct>ring_slots", "mixed 4M": "direct>ring_slots"}),
    ],
)
def test_forced_direct_reports_each_continuation(nranks, want):
    """direct continues after its call headers as the slot ring where some rank passed user
    memory of 4-16 MiB at 12 ranks or more: last_algorithm names the continuation on every
    rank, also where only some ranks' memory is user memory (mixed: odd ranks pass rc.empty
    arrays), and the result is right; elsewhere it stays direct (staged or by cross-memory
    calls)."""
    res = run_mpi(nranks, "continuations.py", list(want), timeout=120)
    rank_records(res, nranks, "done")
    got = {}
    for rec in res.select(kind="ran"):
        res.check(rec["ok"], f"rank {rec['rank']}, {rec['case']}: wrong result with {rec['ran']}")
        got.setdefault(rec["case"], set()).add(rec["ran"])
    res.check(got == {case: {ran} for case, ran in want.items()}, f"ran {got}, expected {want}")
