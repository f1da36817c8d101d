"""rc.init() under every launcher a job may come from: torchrun (torch's store, no MPI
imported), srun on a real one-node Slurm cluster (slurmctld and slurmd on localhost,
through the MPI's PMI), rdmacoll-run (horovodrun's flags over the user's mpirun); and
never a silent world of one: a launcher that says N > 1 processes with a bootstrap that
sees another size raises on every process."""

import contextlib
import os
import sys
from pathlib import Path

import pytest

from mpi_util import find_mpiexec, launcher_kind, rank_records, run_launcher, run_python, run_torchrun

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
try:
    import slurm_localhost
except ImportError:  # pragma: no cover
    slurm_localhost = None
finally:
    sys.path.pop(0)
from rdmacoll import run as rdmacoll_run  # noqa: E402


def _inits(res, n):
    recs = rank_records(res, n, "init")
    return [recs[r] for r in sorted(recs)]


@pytest.mark.parametrize("n", [2, 3])
def test_torchrun_bootstraps_through_torchs_store(n):
    res = run_torchrun(n, "launched.py", timeout=120)
    for rec in _inits(res, n):
        res.check(rec["error"] is None and rec["ok"] and rec["size"] == n, f"{rec}")
        res.check(rec["bootstrap"] == "torch", f"bootstrapped by {rec['bootstrap']}")
        res.check(not rec["mpi4py"], "a torchrun job imported mpi4py")


def test_torchrun_with_mpi_forced_refuses_a_world_of_one():
    res = run_torchrun(2, "launched.py", env={"RDMACOLL_BOOTSTRAP": "mpi"}, timeout=120)
    for rec in _inits(res, 2):
        res.check(
            rec["error"] and "WORLD_SIZE=2" in rec["error"] and "RDMACOLL_BOOTSTRAP=torch" in rec["error"],
            f"{rec['error']!r}",
        )


def test_launcher_variables_without_the_launcher_refuse_a_world_of_one():
    """A process alone whose environment says the job has 4 (a script run by hand inside an
    allocation of 4 tasks, say): init() raises naming the variable."""
    res = run_python("launched.py", env={"SLURM_NTASKS": "4"}, timeout=60)
    rec = _inits(res, 1)[0]
    res.check(rec["error"] and "SLURM_NTASKS=4" in rec["error"], f"{rec['error']!r}")


def test_bad_bootstrap_setting():
    res = run_python("launched.py", env={"RDMACOLL_BOOTSTRAP": "slurm"}, timeout=60)
    rec = _inits(res, 1)[0]
    res.check(
        rec["error"] and "RDMACOLL_BOOTSTRAP" in rec["error"] and "auto,mpi,torch" in rec["error"], f"{rec['error']!r}"
    )


@contextlib.contextmanager
def slurm():
    if slurm_localhost is None:
        pytest.skip("scripts/slurm_localhost.py is not next to the tests")
    cluster = slurm_localhost.SlurmCluster()
    try:
        cluster.start()
    except slurm_localhost.SlurmError as e:
        pytest.skip(f"no Slurm cluster here: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_srun_sees_every_task():
    with slurm() as cluster:
        env = {"SLURM_CONF": cluster.env()["SLURM_CONF"]}
        res = run_launcher(["srun", "-n", "2"], "launched.py", env=env, timeout=120)
        recs = _inits(res, 2)
        for rec in recs:
            res.check(rec["error"] is None and rec["ok"] and rec["size"] == 2 and rec["bootstrap"] == "mpi", f"{rec}")
        res = run_launcher(["srun", "-n", "2", "--mpi=none"], "launched.py", env=env, timeout=120)
        for rec in _inits(res, 2):
            res.check(
                rec["error"] and "SLURM_STEP_NUM_TASKS=2" in rec["error"] and "pmi" in rec["error"],
                f"srun without PMI: {rec['error']!r}",
            )


@pytest.mark.parametrize(
    "kind, hosts, want",
    [
        ("openmpi", None, ["mpirun", "-np", "4", "--bind-to", "none", "--map-by", "slot", "-x", "A", "-x", "B"]),
        (
            "openmpi",
            [("n1", 2), ("n2", 2)],
            ["mpirun", "-np", "4", "-H", "n1:2,n2:2", "--bind-to", "none", "--map-by", "slot", "-x", "A", "-x", "B"],
        ),
        ("mpich", None, ["mpirun", "-n", "4", "-genvlist", "A,B"]),
        ("mpich", [("n1", 2), ("n2", 2)], ["mpirun", "-n", "4", "-hosts", "n1:2,n2:2", "-genvlist", "A,B"]),
    ],
)
def test_rdmacoll_run_translates_horovodruns_flags(kind, hosts, want):
    cmd = rdmacoll_run.command(kind, "mpirun", 4, hosts, ["A", "B"], ["python", "t.py"])
    if kind == "openmpi" and hosts is None and (os.cpu_count() or 1) < 4:
        want.insert(3, "--oversubscribe")
    assert cmd == want + ["python", "t.py"]


def test_rdmacoll_run_reads_hostfiles_and_host_lists(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# comment\nnode1 slots=2\nnode2:3\nnode3\n")
    assert rdmacoll_run.read_hostfile(str(f)) == [("node1", 2), ("node2", 3), ("node3", 1)]
    assert rdmacoll_run.parse_hosts("a:2,b") == [("a", 2), ("b", 1)]
    with pytest.raises(ValueError):
        rdmacoll_run.parse_hosts("a:x")


@pytest.mark.parametrize("command", [["rdmacoll-run"], ["rdmacoll", "run"]], ids=["rdmacoll-run", "rdmacoll run"])
def test_rdmacoll_run_launches_with_the_users_mpi(command):
    if find_mpiexec() is None:
        pytest.skip("no mpiexec")
    exe = Path(sys.executable).parent / command[0]
    if not exe.exists():
        pytest.skip(f"{command[0]} is not installed next to this Python")
    res = run_launcher(
        [str(exe), *command[1:], "-np", "2", "-x", "RDMACOLL_TEST_PASSED=yes", "--mpirun", find_mpiexec()],
        "launched.py",
        timeout=120,
    )
    for rec in _inits(res, 2):
        res.check(rec["error"] is None and rec["ok"] and rec["size"] == 2, f"{rec}")
    printed = [ln.text for ln in res.lines if ln.text.startswith("rdmacoll-run: ")]
    flag = "-genvlist" if launcher_kind() == "mpich" else "-x"
    res.check(printed and flag in printed[0] and "RDMACOLL_TEST_PASSED" in printed[0], f"printed {printed}")


@pytest.mark.parametrize("sub, usage", [("run", "rdmacoll-run"), ("bench", "rdmacoll-bench")])
def test_cli_subcommands_take_their_commands_options(sub, usage, capsys):
    """`rdmacoll run|bench ARGS` is `rdmacoll-run|rdmacoll-bench ARGS`, options first included
    (0.1.x: "unrecognized arguments" for every option); `rdmacoll --help` lists them."""
    from rdmacoll import cli

    with pytest.raises(SystemExit) as e:
        cli.main([sub, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"usage: {usage}"), out[:200]
    with pytest.raises(SystemExit) as e:
        cli.main([sub, "--no-such-option"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"{usage}: error:" in err, err
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0 and f" {sub} " in capsys.readouterr().out
