"""`rdmacoll doctor`: what this host (or a whole job) offers rdmacoll, and what to fix.

    rdmacoll doctor                  # this host
    mpiexec -n 4 rdmacoll doctor     # the job: rank 0 prints one report (torchrun too)

This host: the transports compiled in and whether each can run here (with what the core
found: the interface and address tcp would listen on and why, RDMA devices, ports, link
layers, GIDs, or why not), the RDMA devices pyverbs sees when it is importable, the
memlock limit (RDMA registration pins memory), /dev/shm (where MPI's shared memory lives;
rdmacoll's own segments are memfds), cross-memory attach (ptrace scope), transparent
huge pages, the MPI library mpi4py loads, the settings in effect and where each comes
from, the tuning file and whether it fits this host, and the framework adapters that can
be used. Ends with a list of fixes, or "nothing to fix". Exit status 0; 1 only when
rdmacoll cannot run on this host at all.

Under a launcher with more than one rank: every rank examines its host, then the ranks
connect as init() does; rank 0 prints each host's report once, the ranks of every host,
the transport between each class of pairs (same host, between hosts) and a short
measured check of each class on one pair of it (8 B allreduce latency, 16 MiB allreduce
bandwidth), or the ranks that could not connect and why. Exit status 1 when any rank
could not connect.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import sys
import time
from importlib import metadata

import numpy as np

from . import _core, _settings
from .bootstrap import bootstrap, choose, mpi_library


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
        fixes.append(
            "RDMA registration pins memory: raise the memlock limit (ulimit -l unlimited, or "
            "memlock in /etc/security/limits.conf; containers: --ulimit memlock=-1)"
        )
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
        fixes.append(
            f"kernel.yama.ptrace_scope={scope} forbids cross-memory attach between ranks: rdmacoll then "
            "stages plain NumPy arrays through its own memory (use rc.empty arrays, or set it to 0)"
        )
    thp = _read("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
    if thp is not None:
        out(f"transparent huge pages for shared memory: {thp}")


def _mpi(out, fixes):
    try:
        out(f"MPI (mpi4py): {mpi_library()}")
    except Exception as e:  # noqa: BLE001 - reported as the thing to fix
        out(f"MPI (mpi4py): not usable ({type(e).__name__}: {e})")
        fixes.append("rdmacoll starts through MPI: pip install mpi4py, and an MPI (e.g. pip install rdmacoll[mpich])")
        return False
    return True


def _show(value, row) -> str:
    if row["kind"] == "bytes" and isinstance(value, int):
        return _human(value) if value >= 1024 else f"{value} B"
    if value == "":
        return "(unset)"
    return value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)


def _settings_in_effect(out, fixes) -> dict:
    try:
        values, sources = _settings.resolve()
    except _core.RdmacollError as e:
        fixes.append(str(e))
        return {}
    changed = sum(src != "default" for src in sources.values())
    out(f"settings in effect ({changed} set, {len(values) - changed} at their defaults):")
    for name, row in _settings.TABLE.items():
        out(f"  {row['env']:32s} {_show(values[name], row):>12}  ({sources[name]})")
    return values


def _tuning(out, fixes, values) -> None:
    try:
        path = _settings.tuning_path(values.get("tuning_file", ""))
    except _core.RdmacollError as e:
        fixes.append(str(e))
        return
    if path is None:
        out("tuning file: none (the cost model's shipped constants; rdmacoll-bench --tune measures this host's)")
        return
    try:
        entries, why = _settings.read_tuning_file(path)
    except _core.RdmacollError as e:
        out(f"tuning file: {path}: NOT usable")
        fixes.append(str(e))
        return
    if why:
        out(f"tuning file: {path}: ignored: {why}")
        fixes.append(f"the tuning file is ignored: rerun rdmacoll-bench --tune on this host (or remove {path})")
        return
    here = _settings.this_host()
    out(
        f"tuning file: {path} ({len(entries)} entr{'y' if len(entries) == 1 else 'ies'}; this host: {here['host']}, "
        f"CPU {here['cpu']}, {here['cores']} cores, rdmacoll {here['rdmacoll']})"
    )
    for e in entries:
        # the file as a job on this host with the entry's layout would find it
        _, why = _settings.tuning_match({"path": path, "here": here, "why": None, "entries": [e]}, e["ranks_per_host"])
        out(
            f"  {e['transport']} at {e['ranks_per_host']} ranks per host, measured {e['date']}: "
            + ("fits this host" if why is None else f"NOT used here: {why}")
        )


# Framework adapters: the distribution that enables each, and what it enables.
_ADAPTERS = (
    (("torch",), "rdmacoll.frameworks.torch: Horovod's torch API; torch.distributed backend 'rdmacoll'"),
    (("tensorflow", "tensorflow-cpu"), "rdmacoll.frameworks.tensorflow (and .keras): Horovod's TensorFlow API"),
    (("horovod",), "real Horovod, for rdmacoll-bench --compare horovod"),
)


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _frameworks(out) -> None:
    out("frameworks:")
    for dists, what in _ADAPTERS:
        found = next(((d, v) for d in dists if (v := _dist_version(d))), None)
        out(f"  {found[0]} {found[1]}: {what}" if found else f"  {dists[0]}: not installed ({what.split(':')[0]})")


def gpu_path(info: dict, rdma_usable: bool, peermem: bool) -> tuple[str, str]:
    """How GPU tensors travel in a job on this host: ("none" | "staging", why), from what
    the CUDA runtime loader found (_core.cuda_runtime()), whether an RDMA transport is
    usable and whether the nvidia_peermem module is loaded (NCCL's GPUDirect RDMA test
    after dma-buf registration). rdmacoll registers no GPU memory with the NIC yet, so a
    host that could do GPUDirect RDMA still stages, and says so."""
    if not info.get("devices"):
        return "none", f"no GPU here: {info.get('error') or 'the CUDA runtime sees no device'}"
    if not rdma_usable:
        return "staging", "through page-locked host memory (no RDMA device here, so no GPUDirect RDMA)"
    if peermem:
        return "staging", (
            "through page-locked host memory: nvidia_peermem is loaded, so GPUDirect RDMA is "
            "possible, but rdmacoll does not register GPU memory with the NIC yet"
        )
    return "staging", (
        "through page-locked host memory (no nvidia_peermem module; dma-buf registration is not used by rdmacoll yet)"
    )


def _gpu(out, usable, values) -> None:
    info = _core.cuda_runtime(str(values.get("cuda_runtime") or ""))
    if info.get("library"):
        v = info.get("runtime_version", 0)
        out(f"GPU: CUDA runtime {v // 1000}.{v % 1000 // 10} ({info['library']}), {info.get('devices', 0)} device(s)")
    else:
        out("GPU: no CUDA runtime")
    path, why = gpu_path(info, bool(usable.get("ibverbs")), os.path.isdir("/sys/module/nvidia_peermem"))
    out(f"  GPU tensors: {'not possible' if path == 'none' else path}, {why}")


def host_report(out=print) -> int:
    """This host's report; the exit status (1: rdmacoll cannot run here)."""
    fixes: list[str] = []
    out(
        f"rdmacoll {_settings.rdmacoll_version()} on {socket.gethostname()} (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)"
    )
    usable = _transports(out, fixes)
    _pyverbs(out)
    _limits(out, fixes, usable)
    mpi_ok = _mpi(out, fixes)
    values = _settings_in_effect(out, fixes)
    _tuning(out, fixes, values)
    _gpu(out, usable, values)
    _frameworks(out)
    out("")
    if fixes:
        out("what to fix:")
        for f in fixes:
            out(f"  - {f}")
    else:
        out("nothing to fix")
    return 0 if usable.get("shm") and mpi_ok else 1


# --------------------------------------------------------------------------- the job


def _measure(comm) -> tuple[float, float]:
    """(seconds per 8 B allreduce, seconds per 16 MiB allreduce) on a 2-rank communicator:
    medians of 5 batches and 5 calls, NumPy arrays, float32 Sum."""
    small, big = np.ones(2, np.float32), np.ones(4 << 20, np.float32)
    for _ in range(50):
        comm.allreduce(small, small, int(_core.Sum), None)
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            comm.allreduce(small, small, int(_core.Sum), None)
        batches.append((time.perf_counter() - t0) / 200)
    comm.allreduce(big, big, int(_core.Sum), None)
    calls = []
    for _ in range(5):
        comm.barrier()
        t0 = time.perf_counter()
        comm.allreduce(big, big, int(_core.Sum), None)
        calls.append(time.perf_counter() - t0)
    return statistics.median(batches), statistics.median(calls)


def _pair_classes(host_of, kinds) -> list:
    """[(class name, transport, pairs)] in order of first pair: same host or between
    hosts, by the transport that carries the pair."""
    classes: dict = {}
    n = len(host_of)
    for a in range(n):
        for b in range(a + 1, n):
            where = "same host" if host_of[a] == host_of[b] else "between hosts"
            classes.setdefault((where, kinds[a][b]), []).append((a, b))
    return [(where, kind, pairs) for (where, kind), pairs in classes.items()]


def _ranks(rs) -> str:
    return ", ".join(str(r) for r in rs)


def job_report(exchange, out=print) -> int:
    """Under a launcher: every rank examines its host and connects; rank 0 prints. Collective."""
    lines: list[str] = []
    status = host_report(lines.append)
    hosts = exchange.allgather((socket.gethostname(), lines, status))
    rank, size = exchange.rank, exchange.size
    world, failure = None, None
    try:
        world = bootstrap(config={"timeout": "60"}, exchange=exchange)
    except Exception as e:  # noqa: BLE001 - reported by rank 0; every rank got the same error
        failure = f"{type(e).__name__}: {e}"
    if world is None:
        if rank == 0:
            _print_hosts(out, hosts, None)
            out(f"job: {size} ranks, could NOT connect:")
            detail = failure.split(": ", 2)[-1] if "rdmacoll.init() failed" in failure else failure
            for part in detail.split("; "):
                out("  " + " ".join(part.split()))
        return 1
    kinds = exchange.allgather([d.split()[0] if d else "" for d in world.core.peer_transports()])
    classes = _pair_classes(world.host_of, kinds)
    measured = []
    for _where, _kind, pairs in classes:
        a, b = pairs[0]
        sub = world.core.split([a, b]) if rank in (a, b) else None
        blobs = exchange.allgather(sub.address() if sub is not None else None)
        mine = None
        if sub is not None:
            sub.connect([blobs[a], blobs[b]])
            mine = _measure(sub)
            sub.close()
        # The others wait in the core's barrier, which yields the CPU on a shared host
        # (MPI's allgather would spin beside the pair being measured).
        world.core.barrier()
        got = exchange.allgather(mine)
        measured.append((max(got[a][0], got[b][0]), max(got[a][1], got[b][1])))
    world.core.barrier()
    world.core.close()
    if rank == 0:
        _print_hosts(out, hosts, world.host_of)
        out(
            f"job: {size} ranks on {len(set(world.host_of))} host(s), all connected "
            f"(bootstrap: {exchange.name}, transport setting {world.settings['transport']!r})"
        )
        out(
            "pairs (measured on the first pair of each class: 8 B and 16 MiB float32 allreduce, NumPy arrays, "
            "slower rank of the two; busbw of 2 ranks = size / time):"
        )
        for (where, kind, pairs), (lat, big) in zip(classes, measured):
            a, b = pairs[0]
            out(
                f"  {where}, {kind}: {len(pairs)} pair(s); ranks {a} and {b}: 8 B {lat * 1e6:.1f} us, "
                f"16 MiB {big * 1e3:.2f} ms = {(16 << 20) / big / 1e9:.2f} GB/s"
            )
    return max(status for _, _, status in hosts)


def _print_hosts(out, hosts, host_of) -> None:
    """Each host's report once (its lowest rank's), with its ranks."""
    if host_of is None:  # not connected: hosts by name
        names = {}
        host_of = [names.setdefault(name, len(names)) for name, _, _ in hosts]
    for h in sorted(set(host_of)):
        ranks = [r for r, x in enumerate(host_of) if x == h]
        out(f"=== host {h}: ranks {_ranks(ranks)} ===")
        for line in hosts[ranks[0]][1]:
            out(f"  {line}" if line else "")


def doctor(out=print) -> int:
    """`rdmacoll doctor`: this host alone, or the job when a launcher started several ranks."""
    try:
        exchange = choose()
    except Exception as e:  # noqa: BLE001 - the host report says what is wrong with MPI
        out(f"(not examining the job: {type(e).__name__}: {e})")
        return host_report(out)
    if exchange.size == 1:
        return host_report(out)
    return job_report(exchange, out if exchange.rank == 0 else (lambda *_: None))


HELP = "what this host (under a launcher: the job) offers rdmacoll, what to fix"
DESCRIPTION = (
    "What this host offers rdmacoll and what to fix; under mpiexec -n N or "
    "torchrun, rank 0 prints one report for the whole job (hosts, ranks, the transport of "
    "each class of pairs and a short measured check of each)."
)


def main(argv=None) -> int:
    """python -m rdmacoll.doctor [doctor] [options]: the `rdmacoll doctor` subcommand."""
    argv = list(sys.argv[1:] if argv is None else argv)
    argparse.ArgumentParser(prog="rdmacoll doctor", description=DESCRIPTION).parse_args(
        argv[1:] if argv[:1] == ["doctor"] else argv
    )
    return doctor()


if __name__ == "__main__":
    sys.exit(main())
