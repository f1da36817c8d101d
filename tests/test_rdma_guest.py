"""RDMA on the kernel's Soft-RoCE, from a machine without RDMA: boots the QEMU guests of
scripts/rdma_guest.py and runs there
  - the ibverbs suite on one guest: tests/test_rdma.py (the ibverbs transport's
    conformance among it) and test_ibverbs.py's device probe, none of them skipped (the
    guest has a device);
  - two guests as two hosts (each its own kernel, /dev/shm and rxe device, joined by a
    network of their own), 2 ranks per host under one mpiexec: with
    RDMACOLL_TRANSPORT=auto a rank reaches its host peer by shm and the others by ibverbs,
    hierarchical runs over ibverbs, and every result matches NumPy.

Skips where the guest cannot run here (not root, no QEMU, not set up: `sudo python3
scripts/rdma_guest.py setup`, which .ci/run does), saying why. RDMACOLL_RDMA_MATRIX=full
runs test_rdma.py's full matrix in the guest (about 15 minutes under emulation; CI runs
"ci")."""

import os
import re
import shlex
import sys
import time
import warnings
from pathlib import Path

import pytest

from mpi_util import Line, Result, check_across_hosts

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
sys.path.insert(0, str(REPO / "scripts"))
try:
    import rdma_guest
finally:
    sys.path.pop(0)

GUEST = rdma_guest.Guest()
WHY_NOT = "this is the guest already" if os.environ.get("RDMACOLL_IN_GUEST") else GUEST.available()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no Soft-RoCE guest: {WHY_NOT}")

BIN = Path(sys.executable).parent
MATRIX = os.environ.get("RDMACOLL_RDMA_MATRIX", "ci")
# NumPy's OpenBLAS starts a thread per vCPU in every process: 0.7 s of each import of numpy
# under emulation, for nothing (one rank per vCPU, no BLAS); mpi_util sets it for launches too.
NO_BLAS_POOL = {"OPENBLAS_NUM_THREADS": "1"}


def _summary(output: str) -> dict[str, int]:
    """pytest's closing counts: {'passed': 40, 'skipped': 1, ...}."""
    last = [ln for ln in output.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    return {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", last[-1])} if last else {}


# pytest.ini's 300 s would cut the guest's own limit short: under emulation the suite's
# time follows the host's speed (it ran past 300 s once on this 2-core host)
@pytest.mark.timeout(1900 if MATRIX == "full" else 660)
def test_ibverbs_suite_in_guest():
    # test_ibverbs.py's other tests run on the host as they would here (the blobs, the
    # loader, init() without the library); its init-runs-everywhere branch, init() and an
    # allreduce over the device, runs here as the first half of test_rdma.py's fork test
    files = ["test_ibverbs.py::test_probe_transport", "test_rdma.py"]
    cmd = f"{shlex.quote(str(BIN / 'pytest'))} -q -rs --durations=12 -p no:cacheprovider {' '.join(files)}"
    t0 = time.monotonic()
    rc, out = GUEST.run(
        cmd,
        timeout=1800 if MATRIX == "full" else 600,
        cwd=str(TESTS),
        env={"RDMACOLL_RDMA_MATRIX": MATRIX} | NO_BLAS_POOL,
        echo=False,
    )
    counts = _summary(out)
    print(f"in the guest ({time.monotonic() - t0:.0f} s, matrix {MATRIX}): {counts}")
    print("\n".join(ln for ln in out.splitlines() if re.match(r"\s*[\d.]+s (call|setup|teardown) ", ln)))
    tail = "\n".join(out.splitlines()[-60:])
    assert rc == 0 and counts.get("passed"), f"the suite failed in the guest (status {rc}):\n{tail}"
    assert not counts.get("skipped"), f"tests skipped in the guest, which has a device:\n{tail}"


@pytest.mark.timeout(800)  # above twice the guests' own limit below, boot and power-off included
def test_two_hosts_shm_inside_verbs_across():
    # the selector's choice, and each cross-host shape once
    # ci: the default pass alone: it runs eager, the slot algorithms and hierarchical (its
    # large sizes) across the hosts; the forced ones over verbs run in the suite above,
    # between the ranks of one guest
    algos = (
        [""]
        if MATRIX == "ci"
        else ["", "hierarchical", "ring_slots", "recursive_doubling", "halving_doubling", "tree", "eager"]
    )
    # MPICH's hydra on rchost0 starts its proxy on rchost1 through scripts/guest_rsh.py (the
    # guests have no ssh); torchrun's multi-node launch runs in tests/test_hosts.py, where
    # importing torch does not cost 25 s per process as it does under emulation
    rsh = REPO / "scripts" / "guest_rsh.py"
    mpiexec = (
        f"{shlex.quote(str(BIN / 'mpiexec'))} -launcher rsh -launcher-exec {shlex.quote(str(rsh))} "
        f"-localhost 10.9.0.1 -hosts 10.9.0.1:2,10.9.0.2:2 -n 4 {shlex.quote(sys.executable)} "
        f"{shlex.quote(str(TESTS / 'workers' / 'hosts.py'))} {shlex.quote(','.join(algos))}"
    )
    launch = f'if [ "$HOST_INDEX" = 0 ]; then {mpiexec}; else {shlex.quote(sys.executable)} {shlex.quote(str(rsh))} serve; fi'
    # A normal run takes ~40 s: a stuck collective errors after RDMACOLL_TIMEOUT on every
    # rank, a stuck launch is killed at the guests' limit, with the output kept either way
    env = {
        "RDMACOLL_TRANSPORT": "auto",
        "RDMACOLL_TUNING_FILE": "none",
        "PYTHONUNBUFFERED": "1",
        "RDMACOLL_TIMEOUT": "120",
        "UCX_TLS": "tcp,self,sm",
    } | NO_BLAS_POOL
    for attempt in (1, 2):
        results = GUEST.run_hosts([launch, launch], timeout=240, env=env, echo=False)
        now = time.time()
        res = Result(
            ["mpiexec on rchost0, its proxy on rchost1:", launch],
            max(rc for rc, _ in results),
            [Line(now, "out", text) for _, out in results for text in out.splitlines()],
        )
        if res.select(kind="where") or attempt == 2:
            break
        # No rank reached init(): the two emulated machines did not get the job started
        # (hydra's proxy across them; once in ~13 runs here, output lost to a timeout then).
        # Once more, saying so; a job that started and failed is never run again.
        warnings.warn(
            f"two guests: the job never started (status {res.returncode}); once more. Its output:\n{res.output(60)}",
            stacklevel=1,
        )
    cases = check_across_hosts(res, 2, 2, "ibverbs", algos)
    print(f"two hosts: {len(cases)} cases right; ranks reach their host peer by shm, the others by ibverbs")
