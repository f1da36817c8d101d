"""Bad input gets a clear RdmacollError: never a crash, a hang or a wrong result."""

import os
import re
import time

import numpy as np
import pytest

import rdmacoll as rc
from rdmacoll import _core
from mpi_util import chained_part, memory_cgroup, rank_records, run_chain, run_mpi, run_python, run_torchrun

MISMATCH_BOUND_S = 30  # catches hangs only; the measured time is printed


# --------------------------------------------------------------------------- before init


@pytest.mark.parametrize(
    "call",
    [
        lambda: rc.allreduce(np.ones(4, np.float32)),
        lambda: rc.allreduce(np.ones(4, np.float32), op=rc.Sum, out=np.empty(4, np.float32)),
        lambda: rc.empty(4, "float32"),
        rc.rank,
        rc.size,
        rc.local_rank,
        rc.local_size,
    ],
    ids=["allreduce", "allreduce-out", "empty", "rank", "size", "local_rank", "local_size"],
)
def test_before_init_raises(call):
    assert not rc.is_initialized()
    with pytest.raises(rc.RdmacollError, match="init"):
        call()


def test_error_type():
    assert issubclass(rc.RdmacollError, RuntimeError)


# --------------------------------------------------------------------------- bad input


def _check_bad_input(res, nranks):
    checks = res.select(kind="check")
    res.check(len(checks) > 0, "no checks ran")
    for c in checks:
        res.check(c["error"] is not None, f"rank {c['rank']}: {c['name']}: no RdmacollError raised")
        res.check(c["value_error"], f"rank {c['rank']}: {c['name']}: {c['error']!r} is not a ValueError")
        missing = [w for w in c["words"] if w not in c["error"]]
        res.check(not missing, f"rank {c['rank']}: {c['name']}: message {c['error']!r} lacks {missing}")
    for a in rank_records(res, nranks, "after").values():
        res.check(not a["problems"], f"rank {a['rank']} after the bad calls: {a['problems']}")
    for s in rank_records(res, nranks, "shutdown").values():
        res.check(not s["initialized"], "is_initialized() after shutdown()")
        for what in ("allreduce", "empty", "rank_call"):
            res.check(
                s[what] is not None and "init" in s[what],
                f"{what} after shutdown() gave {s[what]!r}, expected a not-initialised error",
            )
        res.check(s["kept_array_readable"], "an rc.empty array kept past shutdown() lost its data")
    for r, m in rank_records(res, nranks, "memory").items():
        res.check(
            m["types"] is not None and {"MemoryError", "RdmacollError"} <= set(m["types"]) and "4.0 TiB" in m["error"],
            f"rank {r}: a 4 TiB rc.empty raised {m['types']}: {m['error']}",
        )
        res.check(m["after"] == nranks, f"rank {r}: the allreduce after it gave {m['after']}")
    res.check(res.returncode == 0, "the launch failed")


@pytest.mark.parametrize("nranks", [1, 2])
def test_bad_input(nranks):
    res = run_mpi(nranks, "bad_input.py", timeout=60)
    _check_bad_input(res, nranks)


def test_bad_input_singleton():
    """rc.init() without mpiexec: a world of one (MPI singleton)."""
    res = run_python("bad_input.py", timeout=60)
    _check_bad_input(res, 1)


@pytest.mark.parametrize("nranks", [1, 2])
def test_non_native_byte_order(nranks):
    """A big-endian array must be refused or reduced correctly, never summed as native bytes."""
    res = run_mpi(nranks, "bad_input.py", timeout=60)
    for b in rank_records(res, nranks, "byteorder").values():
        if b["error"] is None:
            res.check(
                b["correct"],
                f"rank {b['rank']}: a '>f4' array was accepted and reduced to a "
                "wrong result (its bytes were read as native float32)",
            )


# --------------------------------------------------------------------------- mismatches


MISMATCH_ALGOS = ["default"] + [name for name, _ in _core.algorithms() if name != "hierarchical"]


@pytest.fixture(scope="module")
def mismatch_launches():
    """{nranks: Result}: one launch per world runs workers/mismatch.py once per algorithm
    (workers/chain.py: a part each, RDMACOLL_ALGO set per part); each test checks its part.
    (A launch per algorithm: 18 launches, most of their time starting Python.)"""
    return {}


@pytest.mark.parametrize("algo", MISMATCH_ALGOS)
@pytest.mark.parametrize("nranks", [2, 3])
def test_mismatch(mismatch_launches, nranks, algo):
    parts = [
        (a, {"script": "mismatch.py", "env": {"RDMACOLL_ALGO": a} if a != "default" else {}}) for a in MISMATCH_ALGOS
    ]
    res = chained_part(mismatch_launches, nranks, nranks, parts, algo, timeout=240)
    _check_mismatches(res, nranks, f"{nranks} ranks, {algo}")


@pytest.mark.parametrize(
    "code, ahead, call_completes",
    [
        ("mismatch", 1, True),  # found by ranks that finished call n: n completes everywhere
        ("mismatch", 7, True),
        ("mismatch", 0, False),  # in call n itself
        ("mismatch", -1, False),  # in an earlier call (this rank finished it first)
        ("timeout", 1, False),  # any other abort ends the call it lands in
        ("peer died", 1, False),
        ("error", 1, False),
    ],
)
def test_abort_found_in_a_later_call_does_not_end_this_one(code, ahead, call_completes):
    """A rank still finishing call n (waiting for the data of a third rank, which lands
    after the abort: another connection) while two peers that finished n found a mismatch
    in n+1: n completes on that rank as it did on the others, and n+1 raises (was: n
    raised on that rank only, seen in CI at 3 ranks). The abort word carries the call it
    was raised in (csrc/comm/communicator.h, AbortWord). Two ranks of one process (shm)."""
    import _rdmacoll_testing as testing

    this_call, next_call = testing.peer_abort(code, ahead)
    assert (this_call == "ok") == call_completes, this_call
    assert next_call == "error: rank 0 gave up (reported by rank 0)", next_call


@pytest.mark.parametrize("code", ["error", "timeout", "mismatch"])
def test_abort_overwritten_by_a_later_mismatch_still_ends_the_call(code):
    """The abort word is one per communicator, last write wins: rank 0 gave up in call n
    (before sending what rank 1 waits for), then another rank's mismatch of call n+1
    overwrote the word at rank 1. Rank 1 raises rank 0's abort at its wait's next periodic
    check, from rank 0's message slot (which holds its word), not after RDMACOLL_TIMEOUT
    (5 s here) as a timeout."""
    import _rdmacoll_testing as testing

    t0 = time.monotonic()
    this_call, next_call = testing.peer_abort(code, 0, overwritten=True)
    assert this_call == "error: rank 0 gave up (reported by rank 0)", this_call
    assert time.monotonic() - t0 < 2, f"raised after {time.monotonic() - t0:.1f} s"


def test_mismatched_shapes_through_the_torch_adapter():
    """Horovod's "Mismatched ... tensor shapes": rank 0 hvd.allreduce(torch.ones(3, 4)), rank 1
    torch.ones(4, 3) (and each collective's own shape rule) raise HorovodInternalError."""
    pytest.importorskip("torch", reason="the torch adapter's check needs torch")
    res = run_mpi(2, "mismatch.py", ["torch"], timeout=120)
    _check_mismatches(res, 2, "torch adapter, 2 ranks")
    wrong = [m for m in res.select(kind="mismatch") if m["error_type"] != "HorovodInternalError"]
    res.check(not wrong, "; ".join(f"rank {m['rank']} {m['case']}: raised {m['error_type']}" for m in wrong[:4]))


def _check_mismatches(res, nranks, label):
    rank_records(res, nranks, "done")
    deviant = nranks - 1
    worst = {}
    for m in res.select(kind="mismatch"):
        where = f"case '{m['case']}', rank {m['rank']}"
        res.check(m["error"] is not None, f"{where}: the mismatched call returned normally")
        res.check(m["rebuilt"] and m["total_ok"], f"{where}: init() after the mismatch did not rebuild the world ({m})")
        res.check(m["words"] in m["error"], f"{where}: {m['error']!r} does not say {m['words']!r}")
        named = {int(x) for x in re.findall(r"\brank (\d+) called", m["error"])}
        res.check(
            deviant in named and len(named) == 2,
            f"{where}: {m['error']!r} should name rank {deviant} and a rank that disagrees with it",
        )
        if m["shapes"] and m["shapes"][0] and m["error"]:
            # the rank that found it names its own shape (the peer's is known by hash only)
            said = re.search(r"\brank (\d+) called [^)]*\) with shape (\[[^\]]*\]) but rank \d+ called", m["error"])
            res.check(
                said is not None
                and said.group(2) == m["shapes"][int(said.group(1)) == deviant]
                and "with another shape" in m["error"],
                f"{where}: {m['error']!r} should name the shape of the rank that found the mismatch, "
                f"{m['shapes'][0]} or (rank {deviant}) {m['shapes'][1]}",
            )
        res.check(m["seconds"] < MISMATCH_BOUND_S, f"{where}: detection took {m['seconds']:.1f} s")
        res.check(m["later"] is not None, f"{where}: a later call succeeded on a broken communicator")
        worst[m["case"]] = max(worst.get(m["case"], 0.0), m["seconds"])
    res.check(len(worst) * nranks == len(res.select(kind="mismatch")), "some ranks skipped cases")
    print(
        f"mismatch detection, {label}: slowest rank per case (ms): "
        + ", ".join(f"{c} {s * 1e3:.2f}" for c, s in worst.items())
    )


# --------------------------------------------------------------------------- settings


BAD_SETTINGS = {
    "algo": ({"RDMACOLL_ALGO": "bogus"}, "'bogus'"),
    "transport": ({"RDMACOLL_TRANSPORT": "bogus"}, "'bogus'"),
    "segment bytes": ({"RDMACOLL_SEGMENT_BYTES": "100"}, "RDMACOLL_SEGMENT_BYTES"),
    "slots": ({"RDMACOLL_SLOTS": "65"}, "RDMACOLL_SLOTS"),
    "negative timeout": ({"RDMACOLL_TIMEOUT": "-1"}, "RDMACOLL_TIMEOUT"),
    "unparsable timeout": ({"RDMACOLL_TIMEOUT": "abc"}, "RDMACOLL_TIMEOUT"),
    "unparsable size": ({"RDMACOLL_SLOT_BYTES": "lots"}, "RDMACOLL_SLOT_BYTES"),
    # each within its range, together more than the machine has: named before anything is
    # faulted in (before, pre-faulting them had the kernel kill every rank)
    "staging beyond memory": ({"RDMACOLL_SEGMENT_BYTES": "1T"}, "RDMACOLL_SEGMENT_BYTES (1099511627776)"),
    "slots beyond memory": ({"RDMACOLL_SLOT_BYTES": "1T"}, "RDMACOLL_SLOTS x RDMACOLL_SLOT_BYTES (4 x 1099511627776)"),
}


ONE_RANK_SETTINGS = ["RDMACOLL_LOG_LEVEL=loud", "RDMACOLL_BOOTSTRAP=carrier-pigeon"]


@pytest.fixture(scope="module")
def init_failures():
    """One 2-rank launch of workers/init_fails.py per bad setting, chained (workers/chain.py:
    the setting is the part's environment): BAD_SETTINGS on every rank, then ONE_RANK_SETTINGS
    on rank 1 only. Result.part(i) reads each."""
    parts = [{"script": "init_fails.py", "env": env} for env, _ in BAD_SETTINGS.values()]
    parts += [{"script": "init_fails.py", "env": {"RDMACOLL_TEST_RANK1_SETTING": s}} for s in ONE_RANK_SETTINGS]
    return run_chain(2, parts, timeout=120)  # init takes < 1 s


@pytest.mark.parametrize("setting", list(BAD_SETTINGS))
def test_bad_setting_fails_init_everywhere(init_failures, setting):
    env, quoted = BAD_SETTINGS[setting]
    res = init_failures.part(list(BAD_SETTINGS).index(setting))
    for rec in rank_records(res, 2, "init").values():
        res.check(
            rec["error"] is not None and quoted in rec["error"],
            f"rank {rec['rank']}: init() with {env} gave {rec['error']!r}, expected a message quoting {quoted}",
        )
        res.check(not rec["initialized"], "is_initialized() after a failed init()")
        res.check(rec["later"] is not None, "allreduce after a failed init() did not raise")


@pytest.mark.parametrize("setting", ONE_RANK_SETTINGS)
def test_bad_setting_on_one_rank_fails_init_everywhere(init_failures, setting):
    """A per-rank setting that only rank 1 gets wrong: every rank raises naming it (before:
    rank 1 raised while choosing its exchange, and rank 0 waited in the bootstrap until the
    launcher ended the job)."""
    res = init_failures.part(len(BAD_SETTINGS) + ONE_RANK_SETTINGS.index(setting))
    name = setting.split("=")[0]
    for rec in rank_records(res, 2, "init").values():
        res.check(
            rec["error"] is not None and name in rec["error"] and "rank 1" in rec["error"],
            f"rank {rec['rank']}: init() with {setting} on rank 1 gave {rec['error']!r}",
        )


def test_settings_beyond_a_memory_limit_fail_init_everywhere():
    """RDMACOLL_EAGER_BYTES=1G (its maximum) in a 2 GiB memory cgroup: 2 x 1 GiB per peer
    does not fit; every rank raises RdmacollValueError naming it (before: the cgroup's
    out-of-memory killer took both ranks, no message)."""
    with memory_cgroup(2 << 30) as cgroup:
        env = {"RDMACOLL_EAGER_BYTES": "1G", "RDMACOLL_TEST_CGROUP": cgroup}
        res = run_mpi(2, "init_fails.py", env=env, timeout=30)
    for rec in rank_records(res, 2, "init").values():
        res.check(
            rec["error"] is not None
            and "RDMACOLL_EAGER_BYTES (1073741824)" in rec["error"]
            and "cgroup memory limit" in rec["error"],
            f"rank {rec['rank']}: init() gave {rec['error']!r}",
        )


def test_init_again_with_other_settings_is_an_error():
    res = run_mpi(2, "reinit_config.py", timeout=30)
    for r, rec in rank_records(res, 2, "reinit").items():
        res.check(rec["same"] is None and rec["again"] is None, f"rank {r}: init() again raised: {rec}")
        res.check(
            rec["value_error"]
            and "while initialised with algo='ring'" in rec["other"]
            and "shutdown()" in rec["other"],
            f"rank {r}: init(config={{'algo': 'tree'}}) while initialised gave {rec['other']!r}",
        )
        res.check(rec["sum"] == 2.0, f"rank {r}: the session did not go on: {rec}")


def test_torch_bootstrap_without_torch_names_the_fix(tmp_path):
    """RDMACOLL_BOOTSTRAP=torch where torch does not import (a torch that raises what an
    absent one does, ahead on the path): RdmacollError saying what to do, not a bare
    ModuleNotFoundError."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    res = run_python("init_fails.py", env={"RDMACOLL_BOOTSTRAP": "torch", "PYTHONPATH": path}, timeout=60)
    rec = rank_records(res, 1, "init")[0]
    res.check(
        rec["error"] is not None and "RDMACOLL_BOOTSTRAP=torch" in rec["error"] and "pip install torch" in rec["error"],
        f"init() gave {rec['error']!r}",
    )


def test_bogus_algo_singleton():
    res = run_python("init_fails.py", env={"RDMACOLL_ALGO": "bogus"}, timeout=60)
    rec = rank_records(res, 1, "init")[0]
    res.check(rec["error"] is not None and "'bogus'" in rec["error"], f"init() gave {rec['error']!r}")


# --------------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("launcher", ["mpiexec", "torchrun"])
def test_shutdown_then_init_again(launcher):
    """Under torchrun every init() bootstraps over the same store again (fresh keys each
    time: a fast rank once read the previous bootstrap's last round)."""
    res = run_mpi(2, "reinit.py", timeout=60) if launcher == "mpiexec" else run_torchrun(2, "reinit.py", timeout=120)
    rounds = res.select(kind="round")
    res.check(len(rounds) == 6, f"expected 3 rounds on each of 2 ranks, got {len(rounds)}")
    res.check(all(r["ok"] for r in rounds), "a round after re-init gave a wrong result")
    res.check(not any(r["initialized_after"] for r in rounds), "is_initialized() after shutdown()")
    res.check(res.returncode == 0, "the launch failed")
