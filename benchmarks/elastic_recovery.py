"""Elastic recovery: how long a job stands still when one of its 4 workers dies, in
rdmacoll (rdmacoll-run --elastic) and in real Horovod 0.28.1 (horovodrun --gloo, elastic),
each as its users run it, launches interleaved.

    python benchmarks/elastic_recovery.py [--launches 5] [--horovod /tmp/hvd/venv/bin/python]

Each launch: 4 workers on four names of this machine (one slot each: both drivers
blacklist a failed worker's host), --min-np 3, tests/workers/elastic_torch.py training a
small float64 layer with hvd.elastic.run and a TorchState commit per step, 20 ms pause
between steps; the worker of the third host SIGKILLs itself in step 10, mid-step. Measured
from its last record before the kill to rank 0's first committed step in the world of 3
(the kill is seen by the survivors as their collectives fail; both drivers then form a new
world, the survivors restore the last commit, sync and step). Medians of the launches.
--horovod: the Python of a virtualenv with Horovod 0.28.1 built by
../shared/peers/build-horovod.sh (its horovodrun beside it); without it, rdmacoll alone.
--gloo-timeout S adds Horovod with HOROVOD_GLOO_TIMEOUT_SECONDS=S (default 30: only the
rank that shared a connection with the dead worker sees it at once; the others wait that
long for a receive before they reset). --baseline PYTHON adds another build of rdmacoll
(a virtualenv of an earlier commit), to compare a change with what it replaces.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = Path(__file__).resolve().parent.parent / "tests" / "workers" / "elastic_torch.py"
STEPS, KILL_STEP, PAUSE = 30, 10, 0.02


def local_names() -> list[str]:
    """Four names of this machine that both drivers take for four hosts: localhost,
    127.0.0.1, this host's name and its outbound address (Horovod starts workers of
    local addresses directly, as rdmacoll does, and keys hosts by name)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # (no packet is sent: the route picks the address)
        outbound = s.getsockname()[0]
    names = ["localhost", "127.0.0.1", socket.gethostname(), outbound]
    if len(set(names)) < 4:
        raise SystemExit(f"need four distinct names of this machine, have {names}")
    return names


def launch(kind: str, python: str, hosts: list[str], extra_env: dict) -> dict:
    victim = hosts[2]
    args = [str(STEPS), f"kill={victim}:{KILL_STEP}", f"pause={PAUSE}"]
    common = ["-np", "4", "--min-np", "3", "-H", ",".join(f"{h}:1" for h in hosts)]
    bindir = Path(python).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RDMACOLL_", "HOROVOD_"))}
    env.update(PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1", RDMACOLL_TUNING_FILE="none")
    env["PYTHONPATH"] = str(WORKER.parent) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra_env)
    if kind == "rdmacoll":
        cmd = [str(bindir / "rdmacoll-run"), *common, python, str(WORKER), *args]
    else:
        cmd = [str(bindir / "horovodrun"), "--gloo", *common, python, str(WORKER), *args]
        env["ELASTIC_HVD"] = "horovod.torch"
    with tempfile.TemporaryDirectory() as cwd:
        t0 = time.time()
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    records = []
    for line in out.stdout.splitlines():
        at = line.find("@@rc ")
        if at >= 0:
            records.append(json.loads(line[at + 5 :]))
    killed = [r for r in records if r["kind"] == "killing"]
    after = [r for r in records if r["kind"] == "step" and r["size"] == 3]
    done = [r for r in records if r["kind"] == "done"]
    if out.returncode != 0 or not killed or not after or len(done) != 3:
        tail = "\n".join((out.stdout + out.stderr).splitlines()[-40:])
        raise SystemExit(f"{kind}: the launch failed (status {out.returncode}):\n{tail}")
    errors = {d["error"] for d in done}
    return {
        "recovery_s": min(r["t"] for r in after) - killed[0]["t"],
        "job_s": time.time() - t0,
        "agree": len({d["digest"] for d in done}) == 1,
        "error": max(errors),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--horovod", help="the Python of a virtualenv with Horovod 0.28.1 (build-horovod.sh)")
    ap.add_argument("--gloo-timeout", type=int, help="also Horovod with HOROVOD_GLOO_TIMEOUT_SECONDS set to this")
    ap.add_argument(
        "--baseline",
        help="the Python of a virtualenv with another build of rdmacoll (an earlier commit), measured beside",
    )
    args = ap.parse_args()
    hosts = local_names()
    kinds = {"rdmacoll": (sys.executable, {})}
    if args.baseline:
        kinds["rdmacoll baseline"] = (args.baseline, {})
    if args.horovod:
        kinds["horovod"] = (args.horovod, {})
        if args.gloo_timeout:
            kinds[f"horovod, gloo timeout {args.gloo_timeout} s"] = (
                args.horovod,
                {"HOROVOD_GLOO_TIMEOUT_SECONDS": str(args.gloo_timeout)},
            )
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for i in range(args.launches):
        for kind in list(kinds) if i % 2 == 0 else reversed(list(kinds)):
            python, extra_env = kinds[kind]
            runs[kind].append(launch(kind.split()[0].rstrip(","), python, hosts, extra_env))
            print(f"{kind:9s} launch {i + 1}: {runs[kind][-1]}", file=sys.stderr, flush=True)
    print(
        f"\n4 workers on {', '.join(hosts)}; the third SIGKILLs itself in step {KILL_STEP}; medians of {args.launches}"
    )
    print("| | kill -> next step (s) | x rdmacoll's | whole job (s) | ranks agree | error vs reference |")
    print("|---|---|---|---|---|---|")
    ours = statistics.median(r["recovery_s"] for r in runs["rdmacoll"])
    for kind, rs in runs.items():
        rec = statistics.median(r["recovery_s"] for r in rs)
        job = statistics.median(r["job_s"] for r in rs)
        agree = all(r["agree"] for r in rs)
        print(f"| {kind} | {rec:.3f} | {rec / ours:.1f} | {job:.1f} | {agree} | {max(r['error'] for r in rs):.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
