"""pytest hooks (imported by conftest.py) that run the Soft-RoCE guest jobs beside the host
tests: tests/test_rdma_guest.py's jobs start in a background thread as soon as the tests are
collected, and its tests move to the end of the run, where they check what their job
returned. The emulated machines' boot and work then overlap the host tests' process
launches and waits instead of following them (tests/test_rdma_guest.py, class Beside)."""

import sys

GUEST_MODULE = "test_rdma_guest"


def _guest_module():
    return sys.modules.get(GUEST_MODULE)


def pytest_collection_modifyitems(session, config, items):
    guest = [it for it in items if it.module.__name__ == GUEST_MODULE]
    if guest:
        items[:] = [it for it in items if it.module.__name__ != GUEST_MODULE] + guest


def pytest_collection_finish(session):
    mod = _guest_module()
    if mod is None or session.config.option.collectonly or mod.WHY_NOT is not None:
        return
    names = [it.name for it in session.items if it.module.__name__ == GUEST_MODULE]
    if names:
        mod.BESIDE.start(names)


def pytest_sessionfinish(session, exitstatus):
    mod = _guest_module()
    if mod is not None:
        session.config._rdmacoll_guest_lines = mod.BESIDE.stop()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for line in getattr(config, "_rdmacoll_guest_lines", []):
        terminalreporter.write_line(line)
