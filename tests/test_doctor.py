"""`rdmacoll doctor` runs on this host and reports every section, the shm transport
usable, and (no RDMA here) ibverbs not usable with the reason."""
import os
import subprocess
import sys
from pathlib import Path



def _doctor(*args):
    exe = Path(sys.executable).parent / "rdmacoll"
    cmd = [str(exe), *args] if exe.exists() else [sys.executable, "-m", "rdmacoll.doctor", *args[1:]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/",
                          env={k: v for k, v in os.environ.items() if not k.startswith("RDMACOLL_")})


def test_doctor_reports_every_section():
    r = _doctor("doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for section in ("transports compiled in:", "  shm: usable", "memlock limit:", "/dev/shm:",
                    "cross-memory attach", "MPI (mpi4py):"):
        assert section in out, f"{section!r} missing from:\n{out}"
    assert ("what to fix:" in out) != ("nothing to fix" in out)
    if "ibverbs: NOT usable" in out:  # this machine: no RDMA; the reason is printed under it
        after = out.split("ibverbs: NOT usable", 1)[1].splitlines()
        assert len(after) > 1 and after[1].startswith("    "), out


def test_doctor_usage():
    r = _doctor("nonsense")
    assert r.returncode == 2 and "usage: rdmacoll doctor" in r.stderr
