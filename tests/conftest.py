"""pytest setup: tests/ on sys.path (mpi_util, reference), a clear message when the
source tree shadows the installed package, the test hooks' module found, and the garbage
collector tuned (gc_tuning.py).

The test hooks (csrc/python/testing/) are their own extension module, _rdmacoll_testing,
which `pip install .` builds into this tree's build directory (pyproject.toml's build-dir,
build/<wheel tag>/hooks/) and never installs. Its directory goes on sys.path and on PYTHONPATH,
so that the ranks the tests launch (mpiexec workers) import it too."""

import glob
import importlib.util
import os
import sys
import sysconfig

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS_DIR)
HOOKS = "_rdmacoll_testing"
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

import gc_tuning  # noqa: E402

gc_tuning.tune()

# Byte code: the README's test install is `pip install --no-compile`, so what the tests
# import is compiled at its first import and kept: this process and every one it starts
# write it, whatever the environment says (with PYTHONDONTWRITEBYTECODE, as on this project's
# machines, every rank would compile torch from source: 2-3 s more per process).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

try:
    import rdmacoll._core  # noqa: F401
except ImportError as e:
    import rdmacoll

    raise ImportError(
        f"cannot import the compiled core ({e}); rdmacoll was found at {rdmacoll.__file__}. "
        "Install the package (pip install .) and run the `pytest` script (pytest tests), not "
        "`python -m pytest` from the repository root, whose source tree has no compiled _core."
    ) from e


def _hooks_dir():
    """The directory of this interpreter's _rdmacoll_testing: already importable (PYTHONPATH),
    else the newest one under ROOT/build/*/hooks/; None where there is none."""
    spec = importlib.util.find_spec(HOOKS)
    if spec is not None and spec.origin:
        return os.path.dirname(spec.origin)
    built = glob.glob(os.path.join(ROOT, "build", "*", "hooks", HOOKS + sysconfig.get_config_var("EXT_SUFFIX")))
    return os.path.dirname(max(built, key=os.path.getmtime)) if built else None


_dir = _hooks_dir()
if _dir is None:
    raise ImportError(
        f"the test hooks' module {HOOKS}{sysconfig.get_config_var('EXT_SUFFIX')} was not found: "
        f"not importable, and not under {os.path.join(ROOT, 'build', '*', 'hooks')}. Build it with "
        f"`{sys.executable} -m pip install {ROOT}` (the CMake option RDMACOLL_TESTING, on by "
        "default, builds it into build/<wheel tag>/hooks/ there; it is never installed), or put the "
        "directory that holds it on PYTHONPATH."
    )
if _dir not in sys.path:
    sys.path.insert(0, _dir)
_path = os.environ.get("PYTHONPATH", "")
if _dir not in _path.split(os.pathsep):
    os.environ["PYTHONPATH"] = _dir + (os.pathsep + _path if _path else "")


# Work that runs beside the host's tests, on the CPU they leave idle: the Soft-RoCE guest's
# jobs (tests/test_rdma_guest.py) and the release wheel's build (tests/test_wheel.py). A
# module with such work has start_beside(test_names), called when pytest has collected,
# and stop(), at the run's end; its tests wait for the work and check. The guest's tests
# move to the end. CI's budget: the summary says where the time went (.ci/run prints the
# stages).
GUEST_TESTS = "tests/test_rdma_guest.py::"
_SPENT = {"host": 0.0, "guest": 0.0}
_guest_module: list = []
_beside: list = []  # modules whose work started beside


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.nodeid.startswith(GUEST_TESTS))  # stable: the guest's last


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    names: dict = {}
    for item in session.items:
        module = getattr(item, "module", None)
        if hasattr(module, "start_beside"):
            names.setdefault(module, []).append(item.originalname)
    for module, tests in names.items():
        _beside.append(module)
        if module.__name__.endswith("test_rdma_guest"):
            _guest_module.append(module)  # (its QEMU's CPU is kept apart in the summary)
        module.start_beside(tests)


def pytest_sessionfinish(session, exitstatus):
    for module in _beside:
        module.stop()


def _guest_cpu():
    return sum(module.cpu_seconds() for module in _guest_module)


_CPU: dict = {}  # nodeid -> CPU seconds of this process and the processes it reaped in the test


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """CPU time per test (setup, call, teardown): this process's and its reaped children's
    (the ranks, launchers and tools a test starts), less the guests' QEMU, which runs beside
    (its own line in the summary). On CI's 2 busy cores CPU, not wall time, is what a test
    costs the run."""
    t0, g0 = os.times(), _guest_cpu()
    yield
    t1 = os.times()
    spent = sum(t1[i] - t0[i] for i in range(4)) - (_guest_cpu() - g0)
    _CPU[item.nodeid] = spent


def pytest_runtest_logreport(report):
    _SPENT["guest" if report.nodeid.startswith(GUEST_TESTS) else "host"] += report.duration


_LINES: list = []  # what tests gave the run's summary (summary_line)


@pytest.fixture
def summary_line():
    """summary_line(text): a line for the run's summary, for a measurement CI's log keeps
    (a passing test's own output is not shown)."""
    return _LINES.append


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for line in _LINES:
        terminalreporter.write_line(line)
    jobs = {job: took for module in _guest_module for job, took in module.spent().items()}
    beside = ", ".join(f"{job} {took:.0f} s" for job, took in jobs.items())
    terminalreporter.write_line(
        f"time in tests: host {_SPENT['host']:.0f} s, then waiting for the Soft-RoCE guest {_SPENT['guest']:.0f} s "
        "(setup, call and teardown of each test)"
        + (f"; the guest's jobs, beside the host's tests: {beside}" if beside else "")
    )
    if _CPU:
        guest = f", the Soft-RoCE guests' QEMU {_guest_cpu():.0f} s" if _guest_module else ""
        host = sum(cpu for nodeid, cpu in _CPU.items() if not nodeid.startswith(GUEST_TESTS))
        terminalreporter.write_line(f"CPU time: host tests and their processes {host:.0f} s{guest}")
        files: dict = {}
        for nodeid, cpu in _CPU.items():
            files[nodeid.split("::")[0]] = files.get(nodeid.split("::")[0], 0.0) + cpu
        top = sorted(files.items(), key=lambda kv: -kv[1])[:12]
        terminalreporter.write_line(
            "CPU by file: " + ", ".join(f"{f.removesuffix('.py')} {cpu:.0f} s" for f, cpu in top)
        )
        terminalreporter.write_sep("=", "25 tests using the most CPU (with their processes)")
        for nodeid, cpu in sorted(_CPU.items(), key=lambda kv: -kv[1])[:25]:
            terminalreporter.write_line(f"{cpu:7.2f}s  {nodeid}")
