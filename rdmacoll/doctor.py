"""`rdmacoll doctor`: what this host offers rdmacoll, and what to fix.

    rdmacoll doctor          # or: python -m rdmacoll.doctor

Prints the transports compiled in and whether each can run here (with what the core
found: RDMA devices, ports, link layers, GIDs, or why not), the RDMA devices pyverbs
sees when it is importable, the memlock limit (RDMA registration pins memory), /dev/shm
(where MPI's shared memory lives; rdmacoll's own segments are memfds), cross-memory
attach (ptrace scope), transparent huge pages, and the MPI library mpi4py loads. Ends
with a list of fixes, or "nothing to fix". Exit status 0; 1 only when rdmacoll cannot
run on this host at all.
"""
from __future__ import annotations

import os
import resource
import sys

from . import _core, _settings


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _transports(out, fixes):
    compiled = list(_core.TRANSPORTS)
    out(f"transports compiled in: {', '.join(compiled)}")
    try:  # this host's own choices (interface, RDMA device) from its environment
        settings = _settings.resolve(scope="rank")[0]
    except _core.RdmacollError as e:
        fixes.append(str(e))
        settings = {}
    usable = {}
    for name in compiled:
        ok, lines = _core.probe_transport(name, settings)
        usable[name] = ok
        out(f"  {name}: {'usable' if ok else 'NOT usable'}")
        for line in lines:
            out(f"    {line}")
    if not usable.get("shm"):
        fixes.append("shared memory does not work: check that memfd_create and /proc/PID/fd are available")
    if "ibverbs" not in compiled:
        out("  ibverbs: not compiled in (build where the verbs headers are: Debian libibverbs-dev)")
    return usable


def _pyverbs(out):
    try:
        import pyverbs.device as d  # type: ignore[import-not-found]
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        out(f"pyverbs: not importable ({type(e).__name__}); the core's own loader was used above")
        return
    try:
        devices = d.get_device_list()
    except Exception as e:  # noqa: BLE001
        out(f"pyverbs: importable, but listing devices failed: {e}")
        return
    out(f"pyverbs: {len(devices)} RDMA device(s)")
    for dev in devices:
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        out(f"  {name}")


def _limits(out, fixes, usable):
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    show = lambda v: "unlimited" if v == resource.RLIM_INFINITY else _human(v)  # noqa: E731
    out(f"memlock limit: soft {show(soft)}, hard {show(hard)}")
    if usable.get("ibverbs") and soft != resource.RLIM_INFINITY and soft < (1 << 30):
        fixes.append("RDMA registration pins memory: raise the memlock limit (ulimit -l unlimited, or "
                     "memlock in /etc/security/limits.conf; containers: --ulimit memlock=-1)")
    try:
        st = os.statvfs("/dev/shm")
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        out(f"/dev/shm: {_human(total)} ({_human(free)} free)")
        if total < (1 << 30):
            fixes.append("/dev/shm is small (MPI keeps its shared memory there; containers: --shm-size=8g)")
    except OSError as e:
        out(f"/dev/shm: not available ({e})")
    scope = _read("/proc/sys/kernel/yama/ptrace_scope")
    out(f"cross-memory attach (Yama ptrace_scope): {'no Yama' if scope is None else scope}")
    if scope not in (None, "0"):
        fixes.append(f"kernel.yama.ptrace_scope={scope} forbids cross-memory attach between ranks: rdmacoll then "
                     "stages plain NumPy arrays through its own memory (use rc.empty arrays, or set it to 0)")
    thp = _read("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
    if thp is not None:
        out(f"transparent huge pages for shared memory: {thp}")


def _mpi(out, fixes):
    from .bootstrap import mpi_library

    try:
        out(f"MPI (mpi4py): {mpi_library()}")
    except Exception as e:  # noqa: BLE001 - reported as the thing to fix
        out(f"MPI (mpi4py): not usable ({type(e).__name__}: {e})")
        fixes.append("rdmacoll starts through MPI: pip install mpi4py, and an MPI (e.g. pip install rdmacoll[mpich])")
        return False
    return True


def doctor(out=print) -> int:
    fixes: list[str] = []
    out(f"rdmacoll {_version()} (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    usable = _transports(out, fixes)
    _pyverbs(out)
    _limits(out, fixes, usable)
    mpi_ok = _mpi(out, fixes)
    out("")
    if fixes:
        out("what to fix:")
        for f in fixes:
            out(f"  - {f}")
    else:
        out("nothing to fix")
    return 0 if usable.get("shm") and mpi_ok else 1


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("rdmacoll")
    except Exception:  # noqa: BLE001
        return "(not installed)"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["doctor"] or len(argv) > 1:
        print("usage: rdmacoll doctor", file=sys.stderr)
        return 2
    return doctor()


if __name__ == "__main__":
    sys.exit(doctor())
