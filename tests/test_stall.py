"""Stall inspector: when some ranks started a collective and others have not, the lowest
rank that started it logs which ranks are missing (RDMACOLL_STALL_WARNING_SECONDS), and
with RDMACOLL_STALL_SHUTDOWN_SECONDS every rank raises instead of waiting on; a rank stopped
inside a call (started it, no longer waiting in it) is named by its silent heartbeat."""

import pytest

from mpi_util import rank_records, run_mpi

NRANKS = 3


def _warnings(res):
    return [ln.text for ln in res.lines if ln.stream == "err" and "stall warning" in ln.text]


@pytest.mark.parametrize("late,count", [(2, 1000), (0, 1 << 20)], ids=["rank2-late-eager", "rank0-late-ring"])
def test_stall_warning_names_missing_ranks(late, count):
    res = run_mpi(
        NRANKS,
        "stall.py",
        ["--late", late, "--sleep", 3, "--count", count],
        env={"RDMACOLL_STALL_WARNING_SECONDS": 1},
        timeout=90,
    )
    for rec in rank_records(res, NRANKS, "result").values():
        res.check(rec["error"] is None and rec["ok"], f"rank {rec['rank']}: {rec}")
    speaker = 0 if late != 0 else 1  # the lowest rank that started the call
    warnings = _warnings(res)
    res.check(warnings, "no stall warning was logged")
    for w in warnings:
        res.check(
            w.startswith(f"rdmacoll WARNING [rank {speaker}] stall warning:"), f"warning from the wrong rank: {w!r}"
        )
        res.check(f"ranks [{late}] have not started it" in w, f"warning does not name rank {late}: {w!r}")
        res.check("allreduce(#" in w and "name='grad.w'" in w, f"warning does not name the call: {w!r}")
    res.check(res.returncode == 0, "the launch failed")
    print(f"late rank {late}: {len(warnings)} warning(s), first: {warnings[0]}")


def test_stall_shutdown_raises_everywhere():
    res = run_mpi(
        NRANKS,
        "stall.py",
        ["--late", 2, "--sleep", 4, "--count", 1000],
        env={"RDMACOLL_STALL_WARNING_SECONDS": 1, "RDMACOLL_STALL_SHUTDOWN_SECONDS": 2},
        timeout=90,
    )
    recs = rank_records(res, NRANKS, "result")
    for r, rec in recs.items():
        e = rec["error"]
        res.check(
            e is not None and "RDMACOLL_STALL_SHUTDOWN_SECONDS" in e and "ranks [2] have not started" in e,
            f"rank {r}: expected a stall shutdown naming rank 2, got {e!r}",
        )
    for r in (0, 1):
        res.check(
            recs[r]["seconds"] < 4, f"rank {r} raised only after {recs[r]['seconds']:.1f} s: not by the inspector"
        )
    for rec in rank_records(res, NRANKS, "later").values():
        res.check(rec["error"] is not None, f"rank {rec['rank']}: a call after the shutdown succeeded")
    res.check(res.returncode == 0, "the launch failed")
    print(
        "stall shutdown after 2 s: "
        + ", ".join(f"rank {r} raised after {recs[r]['seconds']:.2f} s" for r in sorted(recs))
    )


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_rank_stopped_inside_a_call_is_named_and_shut_down(transport):
    """Issue 36's weak case: rank 1 stops (SIGSTOP) inside an allreduce every rank started.
    Before, every message said rank 0 waited for rank 2 (healthy) and the stall shutdown
    never fired (no rank was missing): the job waited for RDMACOLL_TIMEOUT. Now the
    heartbeat names rank 1, the lowest rank still waiting warns, and the shutdown fires on
    every rank (rank 1 when it is continued)."""
    env = {
        "RDMACOLL_TRANSPORT": transport,
        "RDMACOLL_STALL_WARNING_SECONDS": 1,
        "RDMACOLL_STALL_SHUTDOWN_SECONDS": 3,
        "RDMACOLL_TIMEOUT": 30,
    }
    res = run_mpi(NRANKS, "stall_frozen.py", ["--frozen", 1, "--stopped", 4], env=env, timeout=90)
    for r, rec in rank_records(res, NRANKS, "result").items():
        err = rec["error"] or ""
        res.check(
            "rdmacoll stall" in err and "ranks [1] started it but have not waited in it" in err, f"rank {r}: {err!r}"
        )
    named = [w for w in _warnings(res) if "ranks [1] started it" in w]
    res.check(named, f"no stall warning named rank 1: {_warnings(res)}")
    res.check(all(w.startswith("rdmacoll WARNING [rank 0]") for w in named), f"warnings from the wrong rank: {named}")
