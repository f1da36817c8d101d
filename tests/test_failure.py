"""A rank that dies or stalls makes the others raise instead of hanging; nothing is left
behind (no rdmacoll file in /dev/shm, no process of the launch)."""

import signal

import pytest

from mpi_util import check_killed_peer, dev_shm_entries, rank_records, run_mpi

DETECTION_BOUND_S = 60  # catches hangs only; the measured time is printed


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_peer_death_is_detected(nranks, sig):
    check_killed_peer({}, sig, 64, "the default transport", bound_s=DETECTION_BOUND_S, nranks=nranks)


@pytest.mark.parametrize("count", [1024, 1 << 20], ids=["eager-size", "ring-size"])
def test_timeout_when_a_rank_stalls(count):
    timeout_s, sleep_s = 2, 20
    res = run_mpi(
        2, "late_rank.py", ["--sleep", sleep_s, "--count", count], env={"RDMACOLL_TIMEOUT": timeout_s}, timeout=90
    )
    recs = rank_records(res, 2, "result")
    waiting, late = recs[0], recs[1]
    res.check(
        waiting["error"] is not None and "RDMACOLL_TIMEOUT" in waiting["error"],
        f"rank 0 gave {waiting['error']!r}, expected a timeout naming RDMACOLL_TIMEOUT",
    )
    res.check(
        timeout_s <= waiting["seconds"] < sleep_s / 2,
        f"rank 0 raised after {waiting['seconds']:.1f} s with RDMACOLL_TIMEOUT={timeout_s}",
    )
    res.check(late["error"] is not None, "the late rank's call succeeded after rank 0 gave up")
    res.check(res.returncode == 0, "the launch failed")
    print(
        f"RDMACOLL_TIMEOUT={timeout_s}, {count} floats: rank 0 raised after {waiting['seconds']:.2f} s; "
        f"the late rank (joined after {late['slept']:.1f} s) raised after {late['seconds'] * 1e3:.1f} ms"
    )


def test_no_shm_files_after_normal_run():
    res = run_mpi(2, "reinit.py", timeout=60)
    res.check(res.returncode == 0, "the launch failed")
    res.check(not res.leftovers, f"processes still running after the launch: {res.leftovers}")
    res.check(not dev_shm_entries(), f"rdmacoll files in /dev/shm: {dev_shm_entries()}")
