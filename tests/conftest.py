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

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS_DIR)
HOOKS = "_rdmacoll_testing"
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

import gc_tuning  # noqa: E402

gc_tuning.tune()

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


# CI's budget: the summary splits pytest's time between the host tests and the Soft-RoCE
# guest's (tests/test_rdma_guest.py), whose jobs run under emulation (.ci/run's stages)
_SPENT = {"host": 0.0, "guest": 0.0}


def pytest_runtest_logreport(report):
    _SPENT["guest" if report.nodeid.startswith("tests/test_rdma_guest.py") else "host"] += report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    terminalreporter.write_line(
        f"time in tests: host {_SPENT['host']:.0f} s, Soft-RoCE guest {_SPENT['guest']:.0f} s "
        "(setup, call and teardown of each test)"
    )
