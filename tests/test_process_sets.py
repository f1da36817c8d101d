"""Process sets (Horovod's ProcessSet, add/remove_process_set, process_set= everywhere)
under mpiexec at 2, 3 and 4 ranks: every set shape (one rank, non-contiguous, overlapping;
static at init, added and removed while other sets run), results against NumPy references
through the torch adapter and the plain API, Horovod's ValueErrors for ranks outside a
set; and the same worker side by side under real Horovod 0.28.1 where it imports."""

from __future__ import annotations


import pytest

from mpi_util import require_real_horovod, run_mpi, share, shared_part
from rdmacoll import _settings

# (the workers run the torch adapter; without torch their parts would end the shared launches)
pytest.importorskip("torch")

MODES = ("static", "dynamic", "env")
ENV = {"env": {"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}}
# Where rdmacoll differs from Horovod 0.28.1 on purpose (docs/torch.md): none so far.
DIFFERS: set[str] = set()


def launch(nranks, mode, env=None, timeout=300):
    res = run_mpi(nranks, "process_sets.py", [mode], env=dict(ENV.get(mode, {}), **(env or {})), timeout=timeout)
    return finished(res, nranks, mode)


def finished(res, nranks, mode):
    res.check(res.returncode == 0, f"{mode} at {nranks} ranks failed")
    res.check(len(res.select(kind="done")) == nranks, f"{mode}: not every rank finished")
    return res


def outcomes(res):
    return {(rec["rank"], rec["name"]): rec["value"] for rec in res.select(kind="outcome")}


def texts(res):
    return {(rec["rank"], rec["name"]): rec.get("text", "") for rec in res.select(kind="outcome")}


def check_results(res, nranks, mode):
    checks = res.select(kind="check")
    bad = [c for c in checks if not c["ok"]]
    res.check(not bad, f"{len(bad)} of {len(checks)} checks failed, first: {bad[:3]}")
    res.check(len(checks) > 20 * nranks, f"only {len(checks)} checks ran")
    got, words = outcomes(res), texts(res)
    # ranks outside a set: ValueError for every collective, as Horovod raises it
    outside = {k: v for k, v in got.items() if " outside " in k[1]}
    res.check(outside and set(outside.values()) == {"ValueError"}, f"outside a set: {set(outside.values())}")
    members = [w for k, w in words.items() if " outside allreduce" in k[1]]
    res.check(all("is not a member of the provided process set" in w for w in members), f"{members[:2]}")
    for r in range(nranks):
        if mode == "static":
            res.check(got[(r, "static add refused")] == "ValueError", "add without dynamic sets")
            res.check("RDMACOLL_DYNAMIC_PROCESS_SETS=1" in words[(r, "static add refused")], "the hint")
            res.check(got[(r, "static remove refused")] == "ValueError", "remove without dynamic sets")
            res.check(got[(r, "static remove global")] is False, "removing the global set")
            res.check(got[(r, "static duplicate object unregistered")] is None, "a set object not passed")
            res.check(got[(r, "static global ranks")] == list(range(nranks)), "the global set's ranks")
        else:
            res.check(got[(r, "dynamic duplicate add")] == "ValueError", "a duplicate add")
            res.check(got[(r, "dynamic duplicate of global")] == "ValueError", "a duplicate of the global set")
            res.check(got[(r, "dynamic remove ends")] is True and got[(r, "dynamic removed id")] is None, "remove")
            res.check(got[(r, "dynamic remove again")] is False, "removing twice")
            res.check(got[(r, "dynamic remove global")] is False, "removing the global set")
            res.check(got[(r, "dynamic reused id")] == 1, "the freed id is used again")
        res.check(got[(r, "ProcessSet of non-integers")] == "ValueError", "ProcessSet([0, 1.5])")
        res.check(got[(r, "ProcessSet identity")] is False, "sets compare by identity")


# Each mode once and each world size once (the full product, 7 launches, was 54 s of CI):
# static at 4 ranks, where the worker's sets take every shape (one rank, non-contiguous,
# overlapping, the global set's equal); dynamic at 3, a world of no power of two, adding and
# removing sets while others run; "env", dynamic switched on by Horovod's variable instead of
# the call, at 2, where each set is one rank or the world's equal.
# (parts of the launch shared per world size: mpi_util.share)
OURS = [("static", 4), ("dynamic", 3), ("env", 2)]
for _mode, _n in OURS:
    share(_n, f"process sets {_mode}", {"script": "process_sets.py", "args": [_mode], "env": ENV.get(_mode, {})})


@pytest.mark.timeout(900)  # (the first of a world runs the shared launch)
@pytest.mark.parametrize("mode, nranks", OURS)
def test_process_sets(nranks, mode):
    check_results(finished(shared_part(nranks, f"process sets {mode}"), nranks, mode), nranks, mode)


def test_dynamic_setting_in_the_table():
    row = _settings.TABLE["dynamic_process_sets"]
    assert (row["env"], row["alias"], row["scope"], row["default"]) == (
        "RDMACOLL_DYNAMIC_PROCESS_SETS",
        "HOROVOD_DYNAMIC_PROCESS_SETS",
        "job",
        0,
    )


def test_single_process_plain_api():
    """Without a job: ProcessSet is usable before init, collectives on sets need init."""
    import rdmacoll as rc

    ps = rc.ProcessSet([2, 0])
    assert (ps.ranks, ps.process_set_id, ps.size(), ps.rank()) == ([0, 2], None, None, None)
    assert rc.global_process_set.process_set_id == 0
    assert str(ps) == "ProcessSet(process_set_id=None, ranks=[0, 2], mpi_comm=None)"
    with pytest.raises(ValueError):
        rc.ProcessSet("01")
    with pytest.raises(ValueError, match="not been initialized"):
        rc.add_process_set([0])


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_side_by_side_with_real_horovod(nranks, mode):
    """The same worker under horovod.torch: every outcome (result digest or exception
    type) equal to rdmacoll's, but for DIFFERS. Runs where horovod.torch imports (the
    Horovod venv, with this tree on PYTHONPATH)."""
    require_real_horovod()
    hv = launch(
        nranks,
        mode,
        env={"RC_TEST_HVD": "horovod.torch", "HOROVOD_DYNAMIC_PROCESS_SETS": "1" if mode != "static" else "0"},
    )
    rc = launch(nranks, mode)
    ours, theirs = outcomes(rc), outcomes(hv)
    common = set(ours) & set(theirs)
    hv.check(len(common) > 20 * nranks, f"only {len(common)} outcomes in common")
    diff = {k: (ours[k], theirs[k]) for k in sorted(common) if ours[k] != theirs[k] and k[1] not in DIFFERS}
    hv.check(not diff, f"{len(diff)} outcomes differ (rdmacoll, horovod): {list(diff.items())[:6]}")
    bad = [c for c in hv.select(kind="check") if not c["ok"]]
    hv.check(not bad, f"Horovod fails the references: {bad[:3]}")
