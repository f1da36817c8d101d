"""A rank that dies or stalls makes the others raise instead of hanging; nothing is left
behind (no rdmacoll file in /dev/shm, no process of the launch)."""
import os
import re
import signal
import time

import pytest

from mpi_util import Launch, dev_shm_entries, keep_siblings_flags, rank_records, run_mpi

DETECTION_BOUND_S = 60  # catches hangs only; the measured time is printed


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_peer_death_is_detected(nranks, sig):
    victim = 1
    launch = Launch(nranks, "kill_loop.py", ["--mib", 64, "--max-seconds", 120], timeout=180,
                    extra_launcher_args=keep_siblings_flags())
    with launch:
        rec = launch.wait_record(kind="looping", rank=victim, timeout=120)
        time.sleep(0.3)  # the others are inside a 64 MiB allreduce
        t_kill = time.time()
        os.kill(rec["pid"], sig)
        res = launch.finish()

    survivors = [r for r in range(nranks) if r != victim]
    errors = {r["rank"]: r for r in res.select(kind="error")}
    res.check(not res.select(kind="no error"), "a survivor's loop ran to its end without an error")
    res.check(set(errors) == set(survivors), f"ranks {sorted(set(survivors) - set(errors))} did not raise")
    detection = {}
    for r, e in errors.items():
        res.check(re.search(rf"\brank {victim}\b", e["message"]),
                  f"rank {r}: {e['message']!r} does not name the dead rank {victim}")
        detection[r] = e["time"] - t_kill
        res.check(detection[r] < DETECTION_BOUND_S, f"rank {r} took {detection[r]:.1f} s to notice")
    later = {r["rank"]: r["message"] for r in res.select(kind="later")}
    res.check(set(later) == set(survivors) and all(later.values()),
              f"a call after the failure did not raise on every survivor: {later}")
    res.check(not res.leftovers, f"processes of the launch still running after it ended: {res.leftovers}")
    res.check(not dev_shm_entries(), f"rdmacoll files left in /dev/shm: {dev_shm_entries()}")
    print(f"{signal.Signals(sig).name} of rank {victim} of {nranks}: detected after "
          + ", ".join(f"rank {r} {s * 1e3:.0f} ms" for r, s in sorted(detection.items())))


@pytest.mark.parametrize("count", [1024, 1 << 20], ids=["eager-size", "ring-size"])
def test_timeout_when_a_rank_stalls(count):
    timeout_s, sleep_s = 2, 20
    res = run_mpi(2, "late_rank.py", ["--sleep", sleep_s, "--count", count],
                  env={"RDMACOLL_TIMEOUT": timeout_s}, timeout=90)
    recs = rank_records(res, 2, "result")
    waiting, late = recs[0], recs[1]
    res.check(waiting["error"] is not None and "RDMACOLL_TIMEOUT" in waiting["error"],
              f"rank 0 gave {waiting['error']!r}, expected a timeout naming RDMACOLL_TIMEOUT")
    res.check(timeout_s <= waiting["seconds"] < sleep_s / 2,
              f"rank 0 raised after {waiting['seconds']:.1f} s with RDMACOLL_TIMEOUT={timeout_s}")
    res.check(late["error"] is not None, "the late rank's call succeeded after rank 0 gave up")
    res.check(res.returncode == 0, "the launch failed")
    print(f"RDMACOLL_TIMEOUT={timeout_s}, {count} floats: rank 0 raised after {waiting['seconds']:.2f} s; "
          f"the late rank (joined after {late['slept']:.1f} s) raised after {late['seconds'] * 1e3:.1f} ms")


def test_no_shm_files_after_normal_run():
    res = run_mpi(2, "reinit.py", timeout=60)
    res.check(res.returncode == 0, "the launch failed")
    res.check(not res.leftovers, f"processes still running after the launch: {res.leftovers}")
    res.check(not dev_shm_entries(), f"rdmacoll files in /dev/shm: {dev_shm_entries()}")
