"""Nothing is left behind however a job ends: normal exit, an exception, SIGINT, SIGTERM
or kill -9 of any rank: no rdmacoll file in /dev/shm, no rdmacoll socket file, no process
of the launch; shutdown() releases every descriptor and mapping; a forked child (a
DataLoader worker) holds none of the core's descriptors, so its parent's death is still
seen by the peers."""

import os
import re
import signal
import stat
import time

import pytest

from mpi_util import Launch, dev_shm_entries, keep_siblings_flags, rank_records, run_mpi, wait_gone

NRANKS = 3
DETECTION_BOUND_S = 60  # catches hangs only; measured times are printed


def socket_files() -> list[str]:
    """rdmacoll-named socket files where a transport could put them."""
    found = []
    for d in ("/tmp", "/dev/shm", os.environ.get("TMPDIR", "/tmp")):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            try:
                if "rdmacoll" in n and stat.S_ISSOCK(os.lstat(p).st_mode):
                    found.append(p)
            except OSError:
                pass
    return sorted(set(found))


def check_nothing_left(res):
    res.check(not res.leftovers, f"processes of the launch still running after it ended: {res.leftovers}")
    res.check(not dev_shm_entries(), f"rdmacoll files left in /dev/shm: {dev_shm_entries()}")
    res.check(not socket_files(), f"rdmacoll socket files left: {socket_files()}")


def test_normal_exit_releases_everything():
    res = run_mpi(NRANKS, "teardown.py", ["normal"], timeout=90)
    for r, rec in rank_records(res, NRANKS, "normal").items():
        res.check(rec["fds_up"] and rec["maps_up"] > 0, f"rank {r}: no core descriptors seen while up: {rec}")
        res.check(not rec["fds_down"], f"rank {r}: descriptors open after shutdown(): {rec['fds_down']}")
        res.check(not rec["maps_down"], f"rank {r}: rdmacoll mappings after shutdown(): {rec['maps_down']}")
        res.check(rec["reinit_ok"], f"rank {r}: init() after shutdown() did not work")
    res.check(res.returncode == 0, "the launch failed")
    check_nothing_left(res)


def test_uncaught_exception_leaves_nothing():
    res = run_mpi(NRANKS, "teardown.py", ["exception", 1], timeout=90)
    res.check(res.returncode != 0, "the launcher exited 0 although a rank raised")
    check_nothing_left(res)


@pytest.mark.parametrize(
    "sig,victim",
    [(signal.SIGINT, 0), (signal.SIGTERM, 2), (signal.SIGKILL, 0), (signal.SIGKILL, 2)],
    ids=["sigint-rank0", "sigterm-rank2", "kill9-rank0", "kill9-rank2"],
)
def test_signal_leaves_nothing(sig, victim):
    launch = Launch(NRANKS, "teardown.py", ["loop"], timeout=120, extra_launcher_args=keep_siblings_flags())
    with launch:
        rec = launch.wait_record(kind="looping", rank=victim, timeout=90)
        time.sleep(0.3)
        t0 = time.time()
        os.kill(rec["pid"], sig)
        res = launch.finish()
    survivors = [r for r in range(NRANKS) if r != victim]
    errors = {e["rank"]: e for e in res.select(kind="error")}
    res.check(set(errors) == set(survivors), f"survivors that raised: {sorted(errors)}, expected {survivors}")
    took = {r: e["time"] - t0 for r, e in errors.items()}
    for r, e in errors.items():
        res.check(
            re.search(rf"\brank {victim}\b", e["message"]), f"rank {r}: {e['message']!r} does not name rank {victim}"
        )
        res.check(took[r] < DETECTION_BOUND_S, f"rank {r} took {took[r]:.1f} s")
    if sig == signal.SIGINT:
        res.check(res.select(kind="interrupted", rank=victim), "the interrupted rank did not raise KeyboardInterrupt")
    check_nothing_left(res)
    print(
        f"{signal.Signals(sig).name} of rank {victim}: "
        + ", ".join(f"rank {r} raised after {s * 1e3:.0f} ms" for r, s in sorted(took.items()))
    )


def test_forked_child_keeps_no_descriptor_and_parent_death_is_seen():
    victim = 1
    launch = Launch(NRANKS, "teardown.py", ["fork", victim], timeout=120, extra_launcher_args=keep_siblings_flags())
    with launch:
        child = launch.wait_record(kind="child", timeout=90)
        rec = launch.wait_record(kind="looping", rank=victim, timeout=90)
        time.sleep(0.3)
        t0 = time.time()
        os.kill(rec["pid"], signal.SIGKILL)  # the parent dies; its child lives on
        errs = [launch.wait_record(kind="error", rank=r, timeout=90) for r in range(NRANKS) if r != victim]
        child_alive = os.path.exists(f"/proc/{child['pid']}")
        os.kill(child["pid"], signal.SIGKILL)
        wait_gone(child["pid"])  # not a leftover of the launch: this test killed it
        res = launch.finish()
    res.check(child["pid"] != rec["pid"], "the child record came from the parent")
    res.check(not child["fds"], f"the forked child kept the core's descriptors: {child['fds']}")
    res.check(
        child["error"] is not None and "forked child" in child["error"],
        f"touching rdmacoll in the child gave {child['error']!r}",
    )
    res.check(child_alive, "the child was gone before its parent's death was detected (the test proves nothing)")
    for e in errs:
        res.check(re.search(rf"\brank {victim}\b", e["message"]), f"rank {e['rank']}: {e['message']!r}")
    check_nothing_left(res)
    print(
        "fork, then kill -9 of the parent: "
        + ", ".join(f"rank {e['rank']} raised after {(e['time'] - t0) * 1e3:.0f} ms" for e in errs)
    )
