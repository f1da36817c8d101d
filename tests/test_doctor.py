"""`rdmacoll doctor`: on this host it reports every section (shm usable; no RDMA here:
ibverbs not usable with the reason; the settings in effect with their sources; the
tuning file; the framework adapters); under mpiexec -n 3 rank 0 prints one report for the
job naming every rank, the class of every pair with a measured check, or the rank that
could not connect."""

import os
import re
import subprocess
import sys
from pathlib import Path

from mpi_util import run_mpi, run_torchrun


def _doctor(*args, env=None):
    exe = Path(sys.executable).parent / "rdmacoll"
    cmd = [str(exe), *args] if exe.exists() else [sys.executable, "-m", "rdmacoll", *args]
    base = {k: v for k, v in os.environ.items() if not k.startswith("RDMACOLL_")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/", env=dict(base, **(env or {})))


def test_doctor_reports_every_section():
    r = _doctor("doctor", env={"RDMACOLL_EAGER_BYTES": "64K", "RDMACOLL_TUNING_FILE": "none"})
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for section in (
        "transports compiled in:",
        "  shm: usable",
        "memlock limit:",
        "/dev/shm:",
        "cross-memory attach",
        "MPI (mpi4py):",
        "settings in effect (2 set, ",
        "tuning file: none",
        "frameworks:",
    ):
        assert section in out, f"{section!r} missing from:\n{out}"
    assert re.search(r"\n  RDMACOLL_EAGER_BYTES +64\.0 KiB  \(RDMACOLL_EAGER_BYTES\)\n", out), out
    assert re.search(r"\n  RDMACOLL_SEGMENT_BYTES +1\.0 MiB  \(default\)\n", out), out
    assert re.search(r"\n  torch [\d.]+\S*: rdmacoll\.frameworks\.torch", out) or "  torch: not installed" in out, out
    assert ("what to fix:" in out) != ("nothing to fix" in out)
    if "ibverbs: NOT usable" in out:  # this machine: no RDMA; the reason is printed under it
        after = out.split("ibverbs: NOT usable", 1)[1].splitlines()
        assert len(after) > 1 and after[1].startswith("    "), out


def test_doctor_bad_setting_is_a_fix_not_a_crash():
    r = _doctor("doctor", env={"RDMACOLL_EAGER_BYTES": "lots"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "what to fix:" in r.stdout and "RDMACOLL_EAGER_BYTES='lots'" in r.stdout, r.stdout


def test_doctor_says_whether_the_tuning_file_fits_this_host(tmp_path):
    from rdmacoll import _settings

    here = _settings.tuning_entry("shm", 2, {"alpha": 1e-6, "beta": 1e-10, "gamma": 1e-10})
    other = dict(here, host="gpu-node-07", cpu="Intel(R) Xeon(R) Platinum 8480+", cores=224, transport="tcp")
    path = tmp_path / "tuning.json"
    _settings.write_tuning_file(str(path), [here, other])
    r = _doctor("doctor", env={"RDMACOLL_TUNING_FILE": str(path)})
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert f"tuning file: {path} (2 entries; this host: {here['host']}, CPU {here['cpu']}" in out, out
    assert f"  shm at 2 ranks per host, measured {here['date']}: fits this host\n" in out, out
    assert re.search(
        r"\n  tcp at 2 ranks per host, measured \S+: NOT used here: .*was measured on host gpu-node-07 "
        r"\(CPU Intel\(R\) Xeon\(R\) Platinum 8480\+, 224 cores\)",
        out,
    ), out


def test_doctor_job_report_names_every_rank_and_pair_class():
    res = run_mpi(3, "doctor_job.py", ["-1"], timeout=120)
    out = "\n".join(ln.text for ln in res.lines if ln.stream == "out")
    res.check(res.returncode == 0, "doctor failed")
    res.check(out.count("=== host 0: ranks 0, 1, 2 ===") == 1, "one report for the one host, naming its ranks")
    res.check(out.count("transports compiled in:") == 1, "the host's report printed more than once")
    res.check("job: 3 ranks on 1 host(s), all connected" in out, "no job line")
    m = re.search(
        r"\n  same host, shm: 3 pair\(s\); ranks 0 and 1: 8 B ([\d.]+) us, 16 MiB [\d.]+ ms = ([\d.]+) GB/s", out
    )
    res.check(m and float(m.group(1)) > 0 and float(m.group(2)) > 0, "no measured check of the shm pairs")


def test_doctor_job_report_across_two_hosts():
    from test_hosts import groups, net_hosts

    with net_hosts(2) as hosts:
        res = run_mpi(groups(hosts, 2), "doctor_job.py", ["-1"], timeout=180)
    out = "\n".join(ln.text for ln in res.lines if ln.stream == "out")
    res.check(res.returncode == 0, "doctor failed")
    res.check("=== host 0: ranks 0, 1 ===" in out and "=== host 1: ranks 2, 3 ===" in out, "hosts and their ranks")
    res.check(out.count("transports compiled in:") == 2, "not one report per host")
    res.check("job: 4 ranks on 2 host(s), all connected" in out, "no job line")
    res.check(re.search(r"\n  same host, shm: 2 pair\(s\); ranks 0 and 1: 8 B [\d.]+ us", out), "no same-host class")
    res.check(
        re.search(r"\n  between hosts, tcp: 4 pair\(s\); ranks 0 and 2: 8 B [\d.]+ us, 16 MiB", out),
        "no between-hosts class",
    )


def test_doctor_job_report_under_torchrun():
    res = run_torchrun(2, "doctor_job.py", ["-1"], timeout=120)
    out = "\n".join(ln.text for ln in res.lines if ln.stream == "out")
    res.check(res.returncode == 0, "doctor failed")
    res.check(out.count("transports compiled in:") == 1, "not one report")
    res.check("job: 2 ranks on 1 host(s), all connected (bootstrap: torch," in out, "no job line naming torch's store")
    res.check("  same host, shm: 1 pair(s); ranks 0 and 1: 8 B " in out, "no measured check")


def test_doctor_job_report_names_the_rank_that_could_not_connect():
    res = run_mpi(3, "doctor_job.py", ["2"], env={"RDMACOLL_TRANSPORT": "tcp"}, timeout=120)
    out = "\n".join(ln.text for ln in res.lines if ln.stream == "out")
    res.check(res.returncode != 0, "doctor succeeded although rank 2 could not connect")
    res.check("job: 3 ranks, could NOT connect:" in out, "no failure section")
    res.check(re.search(r"\n  rank 2: tcp: RDMACOLL_SOCKET_IFNAME=[^\n]*nosuchif0", out), "rank 2 is not named")
    res.check(not re.search(r"\n  rank [01]: ", out), "a rank that could connect is named")


def test_cli_version_and_help():
    from importlib.metadata import version

    import rdmacoll

    r = _doctor("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"rdmacoll {version('rdmacoll')}", r.stdout + r.stderr
    assert rdmacoll.__version__ == version("rdmacoll")
    r = _doctor("--help")
    assert r.returncode == 0 and "doctor" in r.stdout and "--version" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "rdmacoll", "--version"], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert r.stdout.strip() == f"rdmacoll {version('rdmacoll')}", r.stdout + r.stderr


def test_cli_usage_errors():
    r = _doctor("nonsense")
    assert r.returncode == 2 and "invalid choice: 'nonsense'" in r.stderr and "usage: rdmacoll" in r.stderr, r.stderr
    r = _doctor()
    assert r.returncode == 2 and "usage: rdmacoll" in r.stderr, r.stderr
