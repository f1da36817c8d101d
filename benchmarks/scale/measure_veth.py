#!/usr/bin/env python3
"""rdmacoll's allreduce, measured on network-namespace hosts whose links tc rate-limits:
reference times to validate a network simulator against.

    cd /work/main && sudo /tmp/fresh5/.venv/bin/python benchmarks/scale/measure_veth.py \\
        --hosts 4,8 --out docs/scale/veth_measured.json
    # quick check that it works (a minute or two):
    sudo /tmp/fresh5/.venv/bin/python benchmarks/scale/measure_veth.py --hosts 4 \\
        --sizes 1M,4M --calib-sizes 8,64K,1M,4M --launches 1 --hier-hosts 4 --out /tmp/smoke.json

    # the link fit again from a saved file's calibration points (measures nothing):
    python benchmarks/scale/measure_veth.py --refit docs/scale/veth_measured.json

Needs root (network namespaces, tc), iproute2 and the MPICH mpiexec next to the Python
that runs it (the venv's: `pip install -e '.[test]'`). The ranks run the installed
rdmacoll as copied at the start (a temporary copy first on their PYTHONPATH, so that a
reinstall during the sweep cannot mix builds; --live-install imports the installed one at
each launch); every launch records the core library it loaded (path, mtime, sha256).

Topology (scripts/netns_testbed.py): N hosts, each a network namespace with one interface,
eth0, a veth pair to a bridge in a namespace of its own: a star around one switch. Every
host's link is shaped to the same rate R (--rate, tc syntax, default 1gbit) in both
directions: a tbf root qdisc on eth0 inside the host (host -> switch) and on the host's
bridge port p<i> in the bridge namespace (switch -> host). So each host has a full-duplex
link of R to a non-blocking switch. No delay is emulated (this kernel has no netem): the
latency is veth's. TCP moves 1448 payload bytes per 1514-byte frame (tbf counts the
Ethernet header), so R's payload ceiling is 0.956 R. tbf lets a burst of --burst bytes
through at veth speed after the link was idle for burst/R (1 ms at 1gbit); timed calls
come a barrier apart, so its bucket is mostly drained and small messages are shaped too.

Checks, before anything is timed: plain TCP streams (a socket per flow, no rdmacoll) at 2
hosts, h0 -> h1, h1 -> h0 and both at once (full duplex), and on every testbed of 3 hosts
or more 3 hosts -> h0 at once (the bridge-side shaping: an aggregate near R) and h0 -> 3
hosts (the host-side shaping). A goodput outside 0.85..1.02 R stops the run
(--ignore-shaping-check goes on).

Link calibration (2 hosts, 1 rank each): broadcast from rank 0 (forced broadcast:chain:
the root's buffer goes through slot messages to rank 1, exactly n bytes one way; the call
ends when the slowest rank, the receiver, has it all) for sizes 8 B .. 64 MiB, and a
2-rank allreduce forced to recursive_doubling (each rank sends its whole vector to the
other: n bytes each way at once, plus the reduction). Per series, the model t = alpha +
beta n: alpha (s per message) the median time of the sizes up to 1 KiB, beta (s per byte)
by least squares on relative error over the sizes from 1 MiB; the sizes where tbf's burst
puts it more than 25% off are named. Also one least-squares line through every size
(relative error), and the effective bandwidth at the largest size against R.

Allreduce (float32 sum, out of place into a preallocated array, plain NumPy memory):
each algorithm forced with RDMACOLL_ALGO=allreduce:<name>, ring_slots, tree,
recursive_doubling and halving_doubling at every --hosts count with 1 rank per host;
hierarchical at --hier-hosts with --hier-ranks-per-host ranks per host (shm within a
host, tcp across). One launch (one MPMD mpiexec) per configuration runs every size,
smallest first: warm-up calls (the first one's result is checked against NumPy), then
timed calls, each starting at a barrier, its time the slowest rank's; the launch's value
is the median of its calls. Every configuration of a testbed is launched --launches
times, in rounds (each round runs every configuration once, the order rotating from
round to round), and the record's value is the median over launches. Rank 0 reports the
algorithm that ran (comm.last_algorithm after the last timed call) and the machine's CPU
busy fraction over the timed calls (/proc/stat: more ranks than cores compete with the
kernel's TCP work).

Output: --out (JSON: machine, rate, the tc commands run, the shaping checks, the link fit,
the calibration points, every launch with its build, and records {hosts, ranks_per_host,
algorithm, bytes, seconds_median, seconds_per_launch, ran, ...}), and a table on stdout.
The link model: alpha = the median time of the sizes up to 1 KiB, beta from the sizes
from 1 MiB, and the sizes where tbf's burst makes it more than 25% off; also the one
least-squares line through every size. Every launch
has a timeout, after which exactly the processes it started are killed; the namespaces
are deleted however the run ends.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORD = "@@mv "
ALGOS = "ring_slots,tree,recursive_doubling,halving_doubling"
DEFAULT_SIZES = "1M,4M,16M,64M,256M"
DEFAULT_CALIB = "8,16,64,256,1K,4K,16K,64K,256K,1M,4M,16M,64M"
TCP_PAYLOAD = 1448 / 1514  # payload per frame byte: MSS with timestamps / frame with Ethernet header
CHECK_BAND = (0.85, 1.02)  # accepted goodput / R of the plain TCP checks
# rank 0's resolved settings kept in the JSON (the ones that shape the algorithms' messages)
SETTINGS_KEPT = ("algo", "transport", "segment_bytes", "slot_bytes", "slots", "eager_bytes", "tuning_file", "timeout")


# --------------------------------------------------------------------------- parsing


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (8, 64K, 1M, 256MiB)")
    prefix = m.group(2).lower()
    return int(float(m.group(1)) * 1024 ** ("kmgt".find(prefix) + 1 if prefix else 0))


def parse_sizes(text: str) -> list[int]:
    return sorted({parse_size(t) for t in text.split(",") if t.strip()})


def parse_rate(text: str) -> float:
    """Bits per second of a tc rate ("1gbit", "500mbit", "100mbps" = bytes, "1gibit")."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)(i?)(bit|bps)", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a tc rate: {text!r} (1gbit, 500mbit, 2.5gbit)")
    num, prefix, iec, unit = float(m.group(1)), m.group(2).lower(), m.group(3), m.group(4).lower()
    scale = (1024 if iec else 1000) ** ("kmgt".find(prefix) + 1) if prefix else 1
    return num * scale * (8 if unit == "bps" else 1)


def human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def plan_iters(nbytes: int) -> tuple[int, int]:
    """(warm-up calls, timed calls) at a size: fewer where one call takes seconds."""
    for limit, warmup, iters in (
        (256 << 10, 3, 20),
        (1 << 20, 2, 10),
        (4 << 20, 2, 8),
        (16 << 20, 1, 6),
        (64 << 20, 1, 4),
    ):
        if nbytes <= limit:
            return warmup, iters
    return 1, 3


# --------------------------------------------------------------------------- ranks


def emit(kind: str, **fields) -> None:
    sys.stdout.write(RECORD + json.dumps({"kind": kind, **fields}, default=str) + "\n")
    sys.stdout.flush()


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine (/proc/stat is not per namespace)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(v) - v[3] - v[4], sum(v)


def core_fingerprint(path: str) -> dict:
    """The installed core library: path, modification time, sha256 (first 16 hex)."""
    import hashlib

    st = os.stat(path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"path": path, "mtime": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(st.st_mtime)), "sha256": digest}


def worker(spec_path: str) -> int:
    """One rank: every case of the spec, smallest first; rank 0 reports."""
    import numpy as np

    import rdmacoll as rc

    with open(spec_path) as f:
        spec = json.load(f)
    build = core_fingerprint(rc._core.__file__)  # the build this rank loaded (others reinstall it)
    rc.init()
    sess = rc._session.current()
    comm = sess.comm
    r, p = rc.rank(), rc.size()
    emit(
        "where",
        rank=r,
        host=socket.gethostname(),
        local_rank=rc.local_rank(),
        local_size=rc.local_size(),
        cross_size=rc.cross_size(),
        transport=comm.transport,
        peers=comm.peer_transports(),
    )
    if r == 0:
        emit("settings", settings={k: sess.settings.get(k) for k in SETTINGS_KEPT}, version=rc.__version__, build=build)

    def period(rank: int):
        # small integers: every sum is exact in float32, whatever the order of reduction
        return ((np.arange(251) * 7 + rank * 13) % 11 + 1).astype(np.float32)

    clock = time.perf_counter
    for case in spec["cases"]:
        op, nbytes, warmup, iters = case["op"], case["bytes"], case["warmup"], case["iters"]
        n = nbytes // 4
        x = np.resize(period(r), n)
        out = np.empty_like(x)
        if op == "allreduce":
            call = functools.partial(rc.allreduce, x, op=rc.Sum, out=out)
            want_period = sum(period(q) for q in range(p))
        else:
            call = functools.partial(rc.broadcast, x, 0, out=out)
            want_period = period(0)
        ok = False
        for w in range(max(1, warmup)):
            rc.barrier()
            call()
            if w == 0:  # correctness once per size, on the first call
                ok = bool(np.array_equal(out, np.resize(want_period, n)))
        c0 = cpu_ticks()
        times = np.empty(iters)
        for i in range(iters):
            rc.barrier()
            t0 = clock()
            call()
            times[i] = clock() - t0
        ran = comm.last_algorithm
        c1 = cpu_ticks()
        every = rc.allgather(times[np.newaxis])  # (ranks, iters)
        oks = rc.allgather(np.array([int(ok)], np.int64))
        if r == 0:
            emit(
                "case",
                op=op,
                bytes=nbytes,
                warmup=max(1, warmup),
                iters=iters,
                seconds=every.max(axis=0).tolist(),  # per call: the slowest rank's
                ran=ran,
                ok=bool(oks.all()),
                cpu_busy=(c1[0] - c0[0]) / max(1, c1[1] - c0[1]),
            )
        del call, x, out  # before the next size's arrays
    rc.shutdown()
    emit("done", rank=r)
    return 0


# --------------------------------------------------------------------------- plain TCP checks


def tcp_sink(port: int, count: int) -> int:
    """Accept `count` connections, read each to EOF; print one JSON line per connection."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(count)
    results, threads = [], []

    def drain(conn, peer):
        buf, got, t0 = bytearray(1 << 20), 0, None
        while True:
            m = conn.recv_into(buf)
            if t0 is None:
                t0 = time.monotonic()
            if not m:
                break
            got += m
        t1 = time.monotonic()
        conn.close()
        results.append({"src": peer[0], "bytes": got, "t0": t0, "t1": t1})

    for _ in range(count):
        conn, peer = srv.accept()
        t = threading.Thread(target=drain, args=(conn, peer))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    print(json.dumps(results), flush=True)
    return 0


def tcp_source(addr: str, port: int, nbytes: int, start: float) -> int:
    """At monotonic time `start`, send nbytes to addr:port and close."""
    data = bytes(min(nbytes, 8 << 20))
    time.sleep(max(0.0, start - time.monotonic()))
    for _ in range(200):
        try:
            conn = socket.create_connection((addr, port), timeout=30)
            break
        except ConnectionRefusedError:
            time.sleep(0.02)
    else:
        raise SystemExit(f"cannot connect to {addr}:{port}")
    left = nbytes
    while left > 0:
        k = min(left, len(data))
        conn.sendall(memoryview(data)[:k])
        left -= k
    conn.shutdown(socket.SHUT_WR)
    conn.recv(1)  # EOF when the sink has read everything
    conn.close()
    return 0


def tcp_flows(tb, flows: list[tuple[int, int]], nbytes: int, port: int = 5201) -> list[dict]:
    """Every flow (src host, dst host) at once, nbytes each; each flow's goodput (bits/s)
    by the receiving sink's clock (CLOCK_MONOTONIC is the machine's, in every namespace)."""
    me = [sys.executable, str(Path(__file__).resolve())]
    dsts = sorted({d for _, d in flows})
    procs = []
    try:
        sinks = {
            d: subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    tb.host_ns[d],
                    *me,
                    "--tcp-sink",
                    str(port),
                    str(sum(1 for _, x in flows if x == d)),
                ],
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            for d in dsts
        }
        procs += list(sinks.values())
        start = time.monotonic() + 1.5
        for s, d in flows:
            procs.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        tb.host_ns[s],
                        *me,
                        "--tcp-source",
                        tb.addresses[d],
                        str(port),
                        str(nbytes),
                        repr(start),
                    ],
                    start_new_session=True,
                )
            )
        out = []
        for d, proc in sinks.items():
            text, _ = proc.communicate(timeout=120)
            for rec in json.loads(text.strip().splitlines()[-1]):
                src = tb.addresses.index(rec["src"])
                out.append({"src": src, "dst": d, **rec, "bits_per_s": rec["bytes"] * 8 / (rec["t1"] - rec["t0"])})
        for proc in procs:
            proc.wait(timeout=60)
        return out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def shaping_checks(tb, rate_bits: float, nbytes: int) -> list[dict]:
    """Plain TCP goodput against R: point to point and full duplex at 2 hosts; incast and
    outcast (3 peers) from 3 hosts. Each check: measured / R and whether it passed."""
    h = tb.hosts
    if h == 2:
        cases = [("p2p h0->h1", [(0, 1)]), ("p2p h1->h0", [(1, 0)]), ("duplex h0<->h1", [(0, 1), (1, 0)])]
    else:
        k = min(3, h - 1)
        cases = [
            (f"incast {k} hosts->h0", [(s, 0) for s in range(1, k + 1)]),
            (f"outcast h0->{k} hosts", [(0, d) for d in range(1, k + 1)]),
        ]
    checks = []
    for name, flows in cases:
        res = tcp_flows(tb, flows, nbytes)
        if name.startswith(("incast", "outcast")):  # one link carries all: the aggregate
            t0, t1 = min(f["t0"] for f in res), max(f["t1"] for f in res)
            measured = [sum(f["bytes"] for f in res) * 8 / (t1 - t0)]
        else:  # each flow has links of its own
            measured = [f["bits_per_s"] for f in res]
        ratios = [m / rate_bits for m in measured]
        ok = all(CHECK_BAND[0] <= x <= CHECK_BAND[1] for x in ratios)
        checks.append(
            {
                "hosts": h,
                "check": name,
                "bytes_per_flow": nbytes,
                "goodput_bits_per_s": measured,
                "goodput_over_rate": ratios,
                "flows": res,
                "ok": ok,
            }
        )
        print(
            f"# shaping check {name:22s} goodput/R = {', '.join(f'{x:.3f}' for x in ratios)}"
            f"  (TCP payload ceiling {TCP_PAYLOAD:.3f}) {'ok' if ok else 'OUTSIDE ' + str(CHECK_BAND)}",
            flush=True,
        )
    return checks


# --------------------------------------------------------------------------- namespaces and tc


def snapshot_package(into: str) -> str:
    """Copy the installed rdmacoll package (Python files and the core library) into
    `into`, so that every launch runs the same build while others reinstall it; returns
    the directory to put first on the ranks' PYTHONPATH. Found without importing it."""
    code = "import importlib.util as u; print(u.find_spec('rdmacoll').submodule_search_locations[0])"
    src = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=into, check=True)
    pkg = src.stdout.strip()
    if not pkg or Path(pkg).resolve().is_relative_to(REPO):
        raise SystemExit(f"rdmacoll resolves to {pkg!r}, not an installed copy: install it (pip install .)")
    shutil.copytree(pkg, os.path.join(into, "rdmacoll"), ignore=shutil.ignore_patterns("__pycache__"))
    return into


def load_testbed():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import netns_testbed
    finally:
        sys.path.pop(0)
    return netns_testbed


def shape(tb, rate: str, burst: int, latency: str) -> list[str]:
    """tbf on both ends of every host's veth pair; returns the commands run."""
    cmds = []
    for i, ns in enumerate(tb.host_ns):
        tbf = ["root", "tbf", "rate", rate, "burst", str(burst), "latency", latency]
        cmds.append(["tc", "-n", ns, "qdisc", "add", "dev", "eth0", *tbf])  # host -> switch
        cmds.append(["tc", "-n", tb.bridge_ns, "qdisc", "add", "dev", f"p{i}", *tbf])  # switch -> host
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)}: {(r.stderr or r.stdout).strip()}")
    return [shlex.join(c) for c in cmds]


def tc_stats(tb) -> dict:
    """Every shaped qdisc's counters (bytes, packets, drops, overlimits)."""
    out = {}
    for i, ns in enumerate(tb.host_ns):
        for where, nsname, dev in (("host", ns, "eth0"), ("bridge", tb.bridge_ns, f"p{i}")):
            r = subprocess.run(
                ["tc", "-s", "-j", "-n", nsname, "qdisc", "show", "dev", dev], capture_output=True, text=True
            )
            try:
                q = json.loads(r.stdout)[0]
                out[f"h{i}.{where}"] = {k: q.get(k) for k in ("kind", "bytes", "packets", "drops", "overlimits")}
            except (ValueError, IndexError):
                out[f"h{i}.{where}"] = {"error": (r.stderr or r.stdout).strip()}
    return out


# --------------------------------------------------------------------------- launching


def run_launch(cmd: list[str], env: dict, timeout: float, cwd: str) -> dict:
    """Run one launcher command (tests/mpi_util.py's run_command: a session of its own,
    killed with everything it started, and only that, past `timeout`). Returns
    returncode, timed_out, records, output tail."""
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from mpi_util import run_command
    finally:
        sys.path.pop(0)
    returncode, out, err, timed_out = run_command(cmd, env, cwd, timeout)
    records = []
    for line in out.splitlines():
        i = line.find(RECORD)
        if i >= 0:
            try:
                records.append(json.loads(line[i + len(RECORD) :]))
            except ValueError:
                pass
    other = [ln for ln in out.splitlines() if RECORD not in ln] + err.splitlines()
    return {"returncode": returncode, "timed_out": timed_out, "records": records, "output_tail": other[-40:]}


def launch_env(algo_rule: str, snapshot: str | None) -> tuple[dict, dict]:
    """(the launch's environment, the RDMACOLL_* part of it): the caller's RDMACOLL_*
    variables, the algorithm rule, no tuning file (the shipped constants), transport auto;
    the snapshot of the installed package first on the path."""
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if snapshot:
        env["PYTHONPATH"] = os.pathsep.join([snapshot, *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("RDMACOLL_TUNING_FILE", "none")
    env.setdefault("RDMACOLL_TRANSPORT", "auto")
    env["RDMACOLL_ALGO"] = algo_rule
    return env, {k: v for k, v in sorted(env.items()) if k.startswith("RDMACOLL_")}


def launch(
    tb, mpiexec: str, ranks_per_host: int, cases: list[dict], algo_rule: str, timeout: float, snapshot: str | None
) -> dict:
    """One MPMD mpiexec over the testbed's hosts running this file's worker on `cases`."""
    tmp = tempfile.mkdtemp(prefix="measure-veth-")
    try:
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump({"cases": cases}, f)
        env, rc_env = launch_env(algo_rule, snapshot)
        cmd = tb.mpiexec_command(
            mpiexec, ranks_per_host, [sys.executable, str(Path(__file__).resolve()), "--worker", spec]
        )
        t0 = time.monotonic()
        res = run_launch(cmd, env, timeout, tmp)
        res["wall_seconds"] = time.monotonic() - t0
        res["env"] = rc_env
        got = {(c["op"], c["bytes"]) for c in res["records"] if c["kind"] == "case"}
        missing = [c for c in cases if (c["op"], c["bytes"]) not in got]
        res["ok"] = res["returncode"] == 0 and not res["timed_out"] and not missing
        if not res["ok"]:
            why = "timed out" if res["timed_out"] else f"exit status {res['returncode']}"
            res["error"] = f"{why}; {len(missing)} of {len(cases)} cases missing"
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def launch_timeout(cases: list[dict], rate_bits: float, scale: float) -> float:
    """A guard against hangs, not a speed check: 8 times a call's data over R per call
    (recursive doubling at 8 hosts moves 3x its vector per link), plus start-up."""
    per_byte = 8 * 8 / rate_bits
    return scale * (120 + sum((c["warmup"] + c["iters"]) * (0.05 + c["bytes"] * per_byte) for c in cases))


# --------------------------------------------------------------------------- fitting


def fit_alpha_beta(points: list[tuple[int, float]], relative: bool) -> dict:
    """t = alpha + beta * n by least squares (relative: on t's relative error)."""
    import numpy as np

    n = np.array([p[0] for p in points], np.float64)
    t = np.array([p[1] for p in points], np.float64)
    a = np.stack([np.ones_like(n), n], axis=1)
    w = 1 / t if relative else np.ones_like(t)
    (alpha, beta), *_ = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)
    pred = alpha + beta * n
    return {
        "alpha_s": float(alpha),
        "beta_s_per_byte": float(beta),
        "bandwidth_bits_per_s": float(8 / beta) if beta > 0 else None,
        "sizes": [int(x) for x in n],
        "max_relative_error": float(np.max(np.abs(pred - t) / t)),
        "weighting": "relative error (each size weighs the same)" if relative else "absolute error",
    }


def link_fit(pts: list[tuple[int, float]], rate_bits: float | None) -> dict:
    """The link's alpha-beta model from one calibration series [(bytes, seconds)].

    model: alpha = the median time of the sizes up to 1 KiB (where n * beta is below 1%
    of it), beta = least squares on relative error over the sizes from 1 MiB (8x tbf's
    burst: R's rate, no burst credit); its error at every size, and the sizes where it is
    off by more than 25% (tbf's burst: a few KiB to a few tens of KiB pass faster than R).
    all_sizes: one least-squares line through every size (relative error), as asked of a
    plain alpha-beta fit; from_64KiB: the same over the sizes from 64 KiB."""
    model: dict = {}
    small = [t for n, t in pts if n <= 1024]
    large = [(n, t) for n, t in pts if n >= 1 << 20]
    if small and len(large) >= 2:
        bw = fit_alpha_beta(large, relative=True)
        alpha, beta = statistics.median(small), bw["beta_s_per_byte"]
        errors = {n: (alpha + beta * n - t) / t for n, t in pts}
        window = [n for n, e in errors.items() if abs(e) > 0.25]
        model = {
            "alpha_s": alpha,
            "beta_s_per_byte": beta,
            "bandwidth_bits_per_s": 8 / beta,
            "relative_error_by_size": {str(n): round(e, 4) for n, e in errors.items()},
            "burst_window_sizes": window,
            "max_relative_error": max((abs(e) for n, e in errors.items() if n not in window), default=None),
            "how": "alpha: median time of the sizes <= 1 KiB; beta: least squares (relative error) over the sizes "
            ">= 1 MiB; burst_window_sizes: where t = alpha + beta n is off by more than 25% (tbf's burst)",
            "fit_from_1MiB": bw,
        }
    nmax, tmax = max(pts)
    from_64k = [q for q in pts if q[0] >= 64 << 10]
    return {
        "model": model,
        "all_sizes": fit_alpha_beta(pts, relative=True),
        "from_64KiB": fit_alpha_beta(from_64k, relative=True) if len(from_64k) >= 2 else None,
        "largest": {
            "bytes": nmax,
            "seconds": tmax,
            "bits_per_s": nmax * 8 / tmax,
            "over_rate": nmax * 8 / tmax / rate_bits if rate_bits else None,
            "over_tcp_payload_ceiling": nmax * 8 / tmax / (rate_bits * TCP_PAYLOAD) if rate_bits else None,
        },
    }


# --------------------------------------------------------------------------- the sweep


def machine_info(mpiexec: str) -> dict:
    import numpy

    info = {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "loadavg_start": os.getloadavg(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
        with open("/proc/meminfo") as f:
            info["mem_total"] = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        from importlib.metadata import version

        info["rdmacoll"] = version("rdmacoll")
    except Exception:  # informational only
        info["rdmacoll"] = None
    git = lambda *args: subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True).stdout.strip()
    info["source_tree"] = {
        "head": git("rev-parse", "HEAD"),
        "uncommitted_csrc_files": git("status", "--short", "--", "csrc").splitlines(),
        "note": "the ranks run the installed rdmacoll (launches[].build), which need not match this tree",
    }
    v = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"Version:\s*(\S+)", v)
    info["mpiexec"] = f"{mpiexec} (MPICH hydra {m.group(1)})" if m else mpiexec
    return info


def summarize(per_launch: dict) -> list[dict]:
    """per_launch: {(hosts, rph, algo, op, bytes): [case records, one per launch]} -> records."""
    out = []
    for (hosts, rph, algo, op, nbytes), cases in per_launch.items():
        medians = [statistics.median(c["seconds"]) for c in cases]
        out.append(
            {
                "hosts": hosts,
                "ranks_per_host": rph,
                "algorithm": algo,
                "op": op,
                "bytes": nbytes,
                "seconds_median": statistics.median(medians) if medians else None,
                "seconds_per_launch": medians,
                "ran": sorted({c["ran"] for c in cases}),
                "correct": all(c["ok"] for c in cases),
                "warmup": cases[0]["warmup"] if cases else None,
                "iterations": cases[0]["iters"] if cases else None,
                "seconds_calls_per_launch": [c["seconds"] for c in cases],
                "cpu_busy_per_launch": [round(c["cpu_busy"], 3) for c in cases],
                "builds_per_launch": [(c.get("build") or {}).get("sha256") for c in cases],
                "rdmacoll_env": cases[0]["env"] if cases else None,
                "settings": cases[0]["settings"] if cases else None,
                "ranks": hosts * rph,
                "ranks_per_core": hosts * rph / (os.cpu_count() or 1),
            }
        )
    return out


def ring_bound(hosts: int, nbytes: int, rate_bits: float) -> float:
    """The allreduce lower bound over links of R: each host sends and receives 2(H-1)/H of
    the vector, at R's TCP payload rate."""
    return 2 * (hosts - 1) / hosts * nbytes * 8 / (rate_bits * TCP_PAYLOAD)


def print_table(records: list[dict], sizes: list[int], rate_bits: float | None) -> None:
    rows = [r for r in records if r["op"] == "allreduce" and r["hosts"] > 0]
    print()
    print("allreduce float32 sum: median over launches of each launch's median call (ms); a call = the slowest rank")
    if rate_bits:
        print("(x) = time / the bound 2(H-1)/H * bytes / (R * 1448/1514), each host's link carrying its share once")
    head = f"{'hosts x rph':>11}  {'algorithm':<19}" + "".join(f"{human(s):>19}" for s in sizes) + "  ran"
    print(head)
    print("-" * len(head))
    for r0 in sorted({(r["hosts"], r["ranks_per_host"], r["algorithm"]) for r in rows}):
        cells = []
        ran = set()
        for s in sizes:
            rec = next(
                (r for r in rows if (r["hosts"], r["ranks_per_host"], r["algorithm"], r["bytes"]) == (*r0, s)), None
            )
            if rec is None or rec["seconds_median"] is None:
                cells.append(f"{'-':>19}")
                continue
            ran.update(rec["ran"])
            t = rec["seconds_median"]
            mark = ("" if rec["correct"] else "!") + ("~" if len(set(rec.get("builds_per_launch") or [])) > 1 else "")
            extra = f" ({t / ring_bound(r0[0], s, rate_bits):.2f}x)" if rate_bits else ""
            cells.append(f"{t * 1e3:>11.1f}{extra:>7}{mark}".rjust(19))
        print(f"{r0[0]:>5} x {r0[1]:<3}  {r0[2]:<19}" + "".join(cells) + "  " + ",".join(sorted(ran)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="4,8", help="host counts of the flat runs, 1 rank per host (default 4,8)")
    ap.add_argument("--algos", default=ALGOS, help=f"algorithms of the flat runs (default {ALGOS})")
    ap.add_argument("--hier-hosts", default="2,4", help="host counts of hierarchical runs ('' for none; default 2,4)")
    ap.add_argument("--hier-ranks-per-host", type=int, default=2)
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"allreduce sizes in bytes (default {DEFAULT_SIZES})")
    ap.add_argument(
        "--sizes-at",
        action="append",
        default=[],
        metavar="HOSTS:SIZES",
        help="other sizes at one host count, e.g. 8:1M,4M,16M,64M (repeatable)",
    )
    ap.add_argument("--calib-sizes", default=DEFAULT_CALIB, help="link calibration sizes ('' to skip the calibration)")
    ap.add_argument("--launches", type=int, default=3, help="launches per configuration (median; default 3)")
    ap.add_argument("--rate", default="1gbit", help="every link's rate, tc syntax (default 1gbit; none: unshaped)")
    ap.add_argument("--burst", type=parse_size, default=None, help="tbf burst (default max(128K, 1 ms at R))")
    ap.add_argument("--tbf-latency", default="50ms", help="tbf latency (queue length = R * latency + burst)")
    ap.add_argument("--ignore-shaping-check", action="store_true", help="go on when a plain TCP check is off R")
    ap.add_argument("--timeout-scale", type=float, default=1.0, help="stretch every launch's timeout")
    ap.add_argument(
        "--live-install",
        action="store_true",
        help="ranks import the installed rdmacoll as it is at each launch (default: a copy taken at the start)",
    )
    ap.add_argument("--out", default=str(REPO / "docs" / "scale" / "veth_measured.json"))
    a = ap.parse_args()

    if os.geteuid() != 0:
        ap.error("needs root (network namespaces, tc)")
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    if not os.access(mpiexec, os.X_OK):
        mpiexec = shutil.which("mpiexec") or ap.error("no mpiexec next to this Python or on PATH")
    netns_testbed = load_testbed()
    shaped = a.rate.lower() != "none"
    rate_bits = parse_rate(a.rate) if shaped else None
    burst = a.burst or (max(128 << 10, int(rate_bits / 8 / 1000)) if shaped else None)
    flat_hosts = sorted({int(h) for h in a.hosts.split(",") if h.strip()})
    hier_hosts = sorted({int(h) for h in a.hier_hosts.split(",") if h.strip()})
    algos = [x.strip() for x in a.algos.split(",") if x.strip()]
    sizes = parse_sizes(a.sizes)
    sizes_at = {}
    for item in a.sizes_at:
        h, _, s = item.partition(":")
        sizes_at[int(h)] = parse_sizes(s)
    calib = parse_sizes(a.calib_sizes)
    testbeds = sorted(set(flat_hosts) | set(hier_hosts) | ({2} if calib else set()))
    nproc = os.cpu_count() or 1

    def term(signum, frame):  # SIGTERM unwinds like Ctrl-C: launches killed, namespaces deleted
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, term)
    t_start = time.monotonic()
    result = {
        "what": "rdmacoll allreduce on network-namespace hosts, veth links shaped by tc tbf (benchmarks/scale/measure_veth.py)",
        "command": shlex.join([sys.executable, *sys.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(mpiexec),
        "rate": a.rate,
        "rate_bits_per_s": rate_bits,
        "tcp_payload_fraction": TCP_PAYLOAD,
        "tbf": {"burst_bytes": burst, "latency": a.tbf_latency} if shaped else None,
        "topology": "star: every host's eth0 -- veth -- port p<i> of one Linux bridge (its own namespace); "
        "tbf at R on eth0 egress (host->switch) and on p<i> egress (switch->host); the bridge itself is not limited",
        "tc_commands": {},
        "tc_stats_after": {},
        "shaping_checks": [],
        "timing": "per call: a barrier, then the call; a call's time is the slowest rank's; a launch's value is "
        "the median of its timed calls (after warm-up calls; the first warm-up call is checked against NumPy); "
        "a record's value the median over launches. float32 sum, plain NumPy input, out= a preallocated NumPy array.",
        "oversubscription": f"{nproc} cores; each record gives ranks_per_core (ranks / cores): above 1, ranks and the "
        "kernel's TCP and tbf work share the cores, cpu_busy_per_launch is the machine's busy fraction over the timed calls",
        "launches": [],
        "records": [],
        "notes": [],
    }
    per_launch: dict = {}
    calib_cases: dict = {}
    out_path = Path(a.out)
    snap_dir = tempfile.mkdtemp(prefix="measure-veth-rdmacoll-")
    snapshot = None if a.live_install else snapshot_package(snap_dir)
    result["rdmacoll_copy"] = (
        "the installed package, copied at the start (ranks import the copy: a reinstall during the sweep changes nothing)"
        if snapshot
        else "the installed package as it was at each launch (--live-install)"
    )

    def save():
        result["records"] = summarize(per_launch)
        result["wall_seconds"] = time.monotonic() - t_start
        result["machine"]["loadavg_end"] = os.getloadavg()
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_suffix(out_path.suffix + ".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(out_path)

    def one(tb, label, rph, algo, algo_rule, cases, round_):
        timeout = launch_timeout(cases, rate_bits or 1e9, a.timeout_scale)
        load = os.getloadavg()
        res = launch(tb, mpiexec, rph, cases, algo_rule, timeout, snapshot)
        where = [r for r in res["records"] if r["kind"] == "where"]
        settings = next((r for r in res["records"] if r["kind"] == "settings"), {})
        entry = {
            "hosts": tb.hosts,
            "ranks_per_host": rph,
            "algorithm": algo,
            "round": round_,
            "env": res["env"],
            "settings": settings.get("settings"),
            "build": settings.get("build"),
            "transports": sorted({w["transport"] for w in where}),
            "hostnames": sorted({w["host"] for w in where}),
            "wall_seconds": round(res["wall_seconds"], 2),
            "timeout_s": round(timeout),
            "loadavg_before": load,
            "ok": res["ok"],
        }
        if not res["ok"]:
            entry["error"] = res["error"]
            entry["output_tail"] = res["output_tail"]
        result["launches"].append(entry)
        for c in res["records"]:
            if c["kind"] == "case":
                c["env"], c["settings"], c["build"] = res["env"], entry["settings"], entry["build"]
                key = (tb.hosts, rph, algo, c["op"], c["bytes"])
                (calib_cases if label == "calibration" else per_launch).setdefault(key, []).append(c)
        status = "ok" if res["ok"] else f"FAILED: {res['error']}"
        print(
            f"# {tb.hosts} hosts x {rph} {algo:<20} round {round_ + 1}/{a.launches}: "
            f"{res['wall_seconds']:6.1f} s, load {load[0]:.2f}, {status}",
            flush=True,
        )
        if not res["ok"]:
            print("\n".join("#   " + ln for ln in res["output_tail"][-15:]), flush=True)
        save()

    try:
        for h in testbeds:
            tag = f"mv{os.getpid() % 100000}h{h}"
            with netns_testbed.Testbed(hosts=h, tag=tag) as tb:
                if shaped:
                    result["tc_commands"][str(h)] = shape(tb, a.rate, burst, a.tbf_latency)
                    nbytes = min(64 << 20, max(4 << 20, int(rate_bits / 8 * 0.4)))
                    checks = shaping_checks(tb, rate_bits, nbytes)
                    result["shaping_checks"] += checks
                    save()
                    if not all(c["ok"] for c in checks) and not a.ignore_shaping_check:
                        raise SystemExit("shaping check failed (see above); --ignore-shaping-check goes on anyway")
                configs = []  # (label, ranks per host, algorithm, RDMACOLL_ALGO, cases)
                if h == 2 and calib:
                    cases = [
                        {"op": op, "bytes": s, "warmup": w, "iters": n}
                        for op in ("broadcast", "allreduce")
                        for s in calib
                        for w, n in [plan_iters(s)]
                    ]
                    configs.append(
                        ("calibration", 1, "calibration", "broadcast:chain,allreduce:recursive_doubling", cases)
                    )
                h_sizes = sizes_at.get(h, sizes)
                cases = [
                    {"op": "allreduce", "bytes": s, "warmup": w, "iters": n}
                    for s in h_sizes
                    for w, n in [plan_iters(s)]
                ]
                if h in flat_hosts:
                    configs += [("flat", 1, x, f"allreduce:{x}", cases) for x in algos]
                if h in hier_hosts:
                    rph = a.hier_ranks_per_host
                    configs.append(("hier", rph, "hierarchical", "allreduce:hierarchical", cases))
                for k in range(a.launches):
                    shift = k % len(configs)
                    for label, rph, algo, rule, cs in configs[shift:] + configs[:shift]:
                        one(tb, label, rph, algo, rule, cs, k)
                if shaped:
                    result["tc_stats_after"][str(h)] = tc_stats(tb)
            save()
    except KeyboardInterrupt:
        result["notes"].append("interrupted: the sweep is incomplete")
        save()
        print("# interrupted; partial results in", out_path, file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(snap_dir, ignore_errors=True)

    # the link fit, from the calibration's launch medians
    if calib_cases:
        result["calibration"] = [
            {
                "op": op,
                "bytes": nbytes,
                "seconds_median": statistics.median(medians),
                "seconds_per_launch": medians,
                "ran": sorted({c["ran"] for c in cs}),
                "correct": all(c["ok"] for c in cs),
            }
            for (_, _, _, op, nbytes), cs in sorted(calib_cases.items())
            for medians in [[statistics.median(c["seconds"]) for c in cs]]
        ]
        result["link_fit"] = fit_link(result)
    builds = {}
    for x in result["launches"]:
        if x.get("build"):
            builds.setdefault(x["build"]["sha256"], x["build"])
    result["builds"] = list(builds.values())
    if len(builds) > 1:
        result["notes"].append(
            f"the installed rdmacoll changed during the sweep ({len(builds)} builds: {', '.join(builds)}); "
            "each launch's is in launches[].build, each record's in builds_per_launch"
        )
    result["notes"].append(
        f"{nproc} cores: the 8-host runs put 8 ranks on them (4 per core), the hierarchical ones "
        f"{max(hier_hosts or [0]) * a.hier_ranks_per_host}; besides the ranks, every byte crosses two veth pairs, "
        "two tbf qdiscs and the bridge in the kernel (softirq), on the same cores"
    )
    save()
    print(f"\nwall time {result['wall_seconds']:.0f} s; written to {out_path}")
    return report(result)


def fit_link(result: dict) -> dict:
    """link_fit from the result's calibration points (both series), rate and tbf burst."""
    rate_bits, tbf = result.get("rate_bits_per_s"), result.get("tbf")
    fit: dict = {
        "primitive": {
            "broadcast": "2 ranks on 2 hosts, rdmacoll broadcast from rank 0 forced to chain: n bytes one way "
            "through slot messages; the call's time is the slowest rank's (the receiver's)",
            "allreduce": "2 ranks on 2 hosts, allreduce forced to recursive_doubling: each rank sends its whole "
            "vector to the other, n bytes each way at once, and reduces it (float32)",
        },
        "notes": [],
    }
    for op, name in (("broadcast", "one_way"), ("allreduce", "both_ways")):
        pts = [(p["bytes"], p["seconds_median"]) for p in result.get("calibration", []) if p["op"] == op]
        if len(pts) >= 2:
            fit[name] = link_fit(pts, rate_bits)
    if tbf and rate_bits:
        burst = tbf["burst_bytes"]
        fit["notes"].append(
            f"tbf lets up to {burst} bytes through at veth speed after the link was idle for burst/R "
            f"({burst * 8 / rate_bits * 1e3:.2f} ms), and the calls here come a barrier apart: its credit "
            "carries messages of a few KiB to a few tens of KiB faster than R (burst_window_sizes), while from "
            "64 KiB on a call takes n / (R's payload rate) with no visible alpha (the credit pays for it)"
        )
    return fit


def report(result: dict) -> int:
    """The calibration, the link fit and the table of medians; 1 if anything failed."""
    rate_bits = result.get("rate_bits_per_s")
    if result.get("link_fit"):
        print("\nlink calibration (2 hosts x 1 rank; median over launches):")
        print(f"{'bytes':>10} {'broadcast s':>13} {'allreduce s':>13}")
        for s in sorted({p["bytes"] for p in result["calibration"]}):
            row = {p["op"]: p["seconds_median"] for p in result["calibration"] if p["bytes"] == s}
            print(
                f"{human(s):>10} {row.get('broadcast', float('nan')):>13.6f} {row.get('allreduce', float('nan')):>13.6f}"
            )
        for name in ("one_way", "both_ways"):
            e = result["link_fit"].get(name)
            if not e:
                continue
            m, f0 = e["model"], e["all_sizes"]
            line = f"{name}: "
            if m:
                window = ", ".join(human(x) for x in m["burst_window_sizes"]) or "no sizes"
                line += (
                    f"alpha {m['alpha_s'] * 1e6:.1f} us, beta {m['beta_s_per_byte'] * 1e9:.3f} ns/B "
                    f"({m['bandwidth_bits_per_s'] / 1e9:.3f} Gbit/s; max error {m['max_relative_error']:.0%} "
                    f"outside {window}); "
                )
            line += (
                f"one least-squares line over all sizes: alpha {f0['alpha_s'] * 1e6:.1f} us, "
                f"beta {f0['beta_s_per_byte'] * 1e9:.3f} ns/B (max error {f0['max_relative_error']:.0%})"
            )
            lg = e["largest"]
            line += f"\n  {human(lg['bytes'])}: {lg['bits_per_s'] / 1e9:.3f} Gbit/s"
            if lg["over_rate"]:
                line += f" = {lg['over_rate']:.3f} R ({lg['over_tcp_payload_ceiling']:.3f} of the TCP payload ceiling)"
            print(line)
    all_sizes = sorted({r["bytes"] for r in result["records"]})
    print_table(result["records"], all_sizes, rate_bits)
    bad = [r for r in result["records"] if not r["correct"]]
    if bad:
        print(f"\n! {len(bad)} records had a wrong result: {[(r['hosts'], r['algorithm'], r['bytes']) for r in bad]}")
    failed = [x for x in result["launches"] if not x["ok"]]
    if failed:
        print(f"\n! {len(failed)} launches failed: {[(x['hosts'], x['algorithm'], x.get('error')) for x in failed]}")
    if len(result.get("builds") or []) > 1:
        print("\n~ launches on different builds: the installed rdmacoll changed during the sweep")
    return 0 if not failed and not bad else 1


def refit(path: str) -> int:
    """--refit FILE: the link fit again from FILE's calibration points (nothing measured),
    written back into FILE, and the report printed."""
    result = json.loads(Path(path).read_text())
    if result.get("calibration"):
        result["link_fit"] = fit_link(result)
        result.setdefault("notes", []).append(
            f"link_fit recomputed {time.strftime('%Y-%m-%dT%H:%M:%S%z')} by measure_veth.py --refit from the "
            "stored calibration points (no new measurement)"
        )
        Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return report(result)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--worker":
        sys.exit(worker(sys.argv[2]))
    if len(sys.argv) >= 4 and sys.argv[1] == "--tcp-sink":
        sys.exit(tcp_sink(int(sys.argv[2]), int(sys.argv[3])))
    if len(sys.argv) >= 6 and sys.argv[1] == "--tcp-source":
        sys.exit(tcp_source(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])))
    if len(sys.argv) == 3 and sys.argv[1] == "--refit":
        sys.exit(refit(sys.argv[2]))
    sys.exit(main())
