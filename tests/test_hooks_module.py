"""The test hooks are a module of their own, _rdmacoll_testing (csrc/python/testing/), built
beside _core from the same static core and never installed (CMakeLists.txt): the installed
package carries no hook. The one hook that read the core's process state, the fork guard's
count, stays in _core as fork_tracked_fds (the hooks' module has its own copy of the core,
whose registry would always read 0)."""

import importlib.metadata
import os
import sysconfig

import _rdmacoll_testing
import rdmacoll
from rdmacoll import _core


def test_installed_package_has_no_test_hooks():
    assert not hasattr(_core, "_testing"), "_core still has the submodule _testing"
    package = os.path.dirname(os.path.abspath(rdmacoll.__file__))
    in_package = [os.path.join(d, f) for d, _, files in os.walk(package) for f in files if "testing" in f]
    assert not in_package, f"test hooks inside the rdmacoll package: {in_package}"
    try:
        record = [str(f) for f in importlib.metadata.files("rdmacoll") or []]
    except importlib.metadata.PackageNotFoundError:
        record = []  # the package is a source tree here (PYTHONPATH): its directory was checked above
    assert not [f for f in record if "testing" in f], f"the installed distribution lists test hooks: {record}"
    hooks = os.path.realpath(_rdmacoll_testing.__file__)
    installed = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    assert not any(hooks.startswith(d + os.sep) for d in installed), f"the test hooks are installed: {hooks}"


def test_fork_tracked_fds_counts_the_cores_descriptors():
    before = _core.fork_tracked_fds()
    comm = _core.Communicator(0, 1, 1, {"transport": "shm"}, {}, {})
    try:
        comm.connect([comm.address()])
        held = _core.fork_tracked_fds()
        assert held > before, f"a communicator over shm holds no tracked descriptor ({before} -> {held})"
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report the count its fork handler left, never return to pytest
            try:
                os.write(w, str(_core.fork_tracked_fds()).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            in_child = f.read()
        os.waitpid(pid, 0)
        assert in_child == "0", f"a forked child still tracks {in_child} of the parent's {held} descriptors"
        assert _core.fork_tracked_fds() == held, "the fork closed descriptors in the parent"
    finally:
        comm.close()
    assert _core.fork_tracked_fds() == before, "close() left tracked descriptors behind"
