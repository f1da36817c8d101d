"""Run Horovod 0.28.1's own TensorFlow test file over rdmacoll, its import lines changed,
and summarise what passes, what fails and why (issue 37's measure).

    python scripts/horovod_tests.py --tests HOROVOD_CHECKOUT/test [--np 2] [--timeout 10]

HOROVOD_CHECKOUT: `git clone -b v0.28.1 https://github.com/horovod/horovod` (the sdist has
no tests). The file runs as Horovod's CI runs it, once per rank under mpiexec, every test
in one process (`run_all_in_graph_and_eager_modes`: each test in graph and eager mode),
with RDMACOLL_TIMEOUT set to --timeout so that a collective that cannot finish fails fast.
Changed in the copy: the two import lines (`horovod.tensorflow` -> rdmacoll's adapter,
`horovod.tensorflow.util` -> its util module), and test/utils/common.py is replaced by the
two functions the file takes from it (the original imports cloudpickle and mock, which
the test extras do not install). Prints the counts and one line per failing test and mode
with the first words of its error; rank 0's log and junit XML stay in the work directory.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

IMPORTS = {
    "from horovod.tensorflow.util import _executing_eagerly": "from rdmacoll.frameworks.tensorflow.util import _executing_eagerly",
    "import horovod.tensorflow as hvd": "import rdmacoll.frameworks.tensorflow as hvd",
}
FILES = ("test_tensorflow.py", "base_test_tensorflow.py")
COMMON = """import os


def mpi_env_rank_and_size():
    for rank_var, size_var in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        rank, size = os.environ.get(rank_var), os.environ.get(size_var)
        if rank is not None and size is not None:
            return int(rank), int(size)
    return 0, 1


def skip_or_fail_gpu_test(test, message):
    if int(os.environ.get("HOROVOD_TEST_GPU", 0)):
        test.fail(message)
    else:
        test.skipTest(message)
"""
RANK = """#!/bin/sh
R=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}
exec "$PYTHON" -m pytest -q -rA -p no:cacheprovider --junitxml="$WORK/r$R.xml" test_tensorflow.py > "$WORK/r$R.log" 2>&1
"""


def prepare(tests: Path, work: Path) -> None:
    parallel = tests / "parallel"
    for name in FILES:
        text = (parallel / name).read_text()
        for old, new in IMPORTS.items():
            text = text.replace(old, new)
        if "import horovod" in text or "from horovod" in text:
            raise SystemExit(f"{name}: an import of horovod is left that this script does not change")
        (work / name).write_text(text)
    (work / "common.py").write_text(COMMON)
    (work / "rank.sh").write_text(RANK)
    os.chmod(work / "rank.sh", 0o755)


def summarise(work: Path) -> int:
    log = (work / "r0.log").read_text(errors="replace")
    tests = ET.parse(work / "r0.xml").getroot().iter("testcase")
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for tc in tests:
        kinds = {c.tag for c in tc}
        counts["failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"] += 1
    print(f"tests (either mode): {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    m = re.search(r"^=* ?(\d+ (?:failed|passed).*) in [\d.]+s", log, re.M)
    print("pytest (tests and subtests, rank 0):", m.group(1) if m else "(no summary line: see r0.log)")
    why = {}
    for tc in ET.parse(work / "r0.xml").getroot().iter("testcase"):
        for c in tc:
            if c.tag in ("failure", "error"):
                why[tc.get("name")] = re.sub(r"\s+", " ", c.get("message") or "")[:160]
    failed = set(re.findall(r"^SUBFAILED\[(\w+)\] \S+::(\w+)", log, re.M))
    failed |= {("-", name) for name in re.findall(r"^(?:FAILED|ERROR) \S+::(\w+)", log, re.M)}
    failed = sorted(failed, key=lambda f: (f[1], f[0]))
    for mode, name in failed:
        print(f"  {name} [{mode}]: {why.get(name, '')}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests", type=Path, required=True, help="Horovod 0.28.1's test/ directory")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0, help="RDMACOLL_TIMEOUT for the run (s)")
    ap.add_argument("--work", type=Path, default=None, help="where the copy, logs and XML go (default: a new temp dir)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="horovod-tests-"))
    work.mkdir(parents=True, exist_ok=True)
    prepare(args.tests, work)
    env = dict(os.environ, WORK=str(work), PYTHON=sys.executable, RDMACOLL_TIMEOUT=str(args.timeout))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    mpiexec = shutil.which("mpiexec") or "mpiexec"
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    extra = ["--oversubscribe"] if args.np > 2 and "Open MPI" in version else []
    try:
        subprocess.run([mpiexec, *extra, "-n", str(args.np), str(work / "rank.sh")], cwd=work, env=env, timeout=3600)
    except subprocess.TimeoutExpired:  # (subprocess.run has killed mpiexec, whose ranks go with it)
        print("the run did not end within an hour: the summary covers what rank 0 wrote")
    print(f"work directory: {work}")
    return summarise(work)


if __name__ == "__main__":
    sys.exit(main())
