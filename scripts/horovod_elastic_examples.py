"""Run Horovod 0.28.1's own elastic examples (examples/elastic/) under `rdmacoll-run
--elastic` (the import line changed) and, given a Python with real Horovod, under
horovodrun --gloo's elastic mode, side by side; one worker is SIGKILLed mid-training and
the job must finish in the world that is left. Prints one row per run.

    python scripts/horovod_elastic_examples.py --examples HOROVOD_CHECKOUT/examples \
        [--horovod-python /tmp/hvd/venv/bin/python] [--only NAME]

Each run: 3 workers, one slot on each of three names of this machine (both drivers
blacklist a failed worker's host; benchmarks/elastic_recovery.py), -np 3 --min-np 2. When
the example prints the run's trigger line, the worker on the third name (found by the
host its driver gave it, among this run's processes only) is SIGKILLed; the run passes
when the job exits 0, prints the run's `after` line (training went on) after the kill,
and its final line: the synthetic benchmarks' says the world was 2; MNIST's lines do not
show the world's size, its `after` line is from epochs the job reaches a second or more
after the kill. The examples' edits and the torchvision stand-in are
scripts/horovod_examples.py's (EDITS, STANDINS): the same table for both scripts.

Left out, and why: tensorflow2_mnist_elastic.py, tensorflow2_keras_mnist_elastic.py and
tensorflow/tensorflow_keras_mnist_elastic.py load MNIST through Keras, which downloads it
and checks the file's hash (this machine has no network, and a stand-in file would fail the
hash); pytorch_imagenet_resnet50_elastic.py reads an ImageNet folder.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from horovod_examples import base_env, copies  # noqa: E402

sys.path.pop(0)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from elastic_recovery import local_names  # noqa: E402

sys.path.pop(0)

# (script in examples/, flags, framework, trigger, after, final): regexes over its output
RUNS = [
    (
        "elastic/pytorch/pytorch_mnist_elastic.py",
        ["--epochs", "4", "--log-interval", "5", "--batch-size", "64"],
        "torch",
        r"Train Epoch: 1 \[640/",
        # epochs 3-4: a second after the kill (an epoch takes one here), so printed after it;
        # its DistributedSampler keeps the first world's partition: the lines do not show the size
        r"Train Epoch: [34] \[",
        r"Test set: Average loss: [\d.]+, Accuracy: [\d.]+%",
    ),
    (
        "elastic/pytorch/pytorch_synthetic_benchmark_elastic.py",
        ["--batch-size", "2", "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "8"],
        "torch",
        r"Iter #1: ",
        r"Iter #\d: ",
        r"Total img/sec on 2 CPU\(s\): [\d.]+ \+-[\d.]+",
    ),
    (
        "elastic/tensorflow2/tensorflow2_synthetic_benchmark_elastic.py",
        [
            "--no-cuda",
            "--model",
            "MobileNetV3Small",
            "--batch-size",
            "4",
            "--num-warmup-batches",
            "1",
            "--num-batches-per-iter",
            "1",
            "--num-iters",
            "8",
        ],
        "tf",
        r"Iter #1: ",
        r"Iter #\d: ",
        r"Total img/sec on 2 CPUs?\(s\): [\d.]+ \+-[\d.]+",
    ),
]
TIMEOUT_S = 600


def victims(host: str | None, script: str) -> list[int]:
    """This run's processes of the example on `host` (any host for None; script: its copy's
    path, in this run's own folder: both drivers start workers in sessions of their own), by
    the host their driver gave them (rdmacoll-run: RDMACOLL_ELASTIC_HOST, horovodrun:
    HOROVOD_HOSTNAME)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        try:
            if script not in (d / "cmdline").read_bytes().decode(errors="replace"):
                continue
            env = (d / "environ").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        if (
            host is None
            or f"RDMACOLL_ELASTIC_HOST={host}".encode() in env
            or f"HOROVOD_HOSTNAME={host}".encode() in env
        ):
            found.append(pid)
    return found


def kill(pids: list[int]) -> list[int]:
    """SIGKILLs those still there; returns those it reached."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            reached.append(pid)
        except ProcessLookupError:
            pass
    return reached


def launch(cmd: list[str], cwd: Path, env: dict, script: str, victim: str, trigger: str, after: str):
    """Runs the job; kills the victim's worker at the trigger line. Returns (exit status,
    output, seconds from start to the kill, whether an `after` line came after it)."""
    job = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines, state = [], {"killed_at": None, "after": False}
    t0 = time.monotonic()

    def read():
        for line in job.stdout:
            lines.append(line)
            if state["killed_at"] is None and re.search(trigger, line):
                pids = kill(victims(victim, script))
                state["killed_at"] = time.monotonic() - t0 if pids else -1.0
            elif state["killed_at"] is not None and re.search(after, line):
                state["after"] = True

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        rc = job.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)  # the launcher's session, then its workers' (their own)
        kill(victims(None, script))
        rc = job.wait()
        lines.append(f"timed out after {TIMEOUT_S} s\n")
    reader.join(timeout=10)
    return rc, "".join(lines), state["killed_at"], state["after"], time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", required=True, type=Path, help="Horovod checkout's examples/")
    ap.add_argument("--horovod-python", help="a Python with real Horovod (torch) installed")
    ap.add_argument("--only", help="run the examples whose file name contains this")
    args = ap.parse_args()
    hosts = local_names()[:3]
    bindir = Path(sys.executable).parent
    base = base_env() | {"PYTHONUNBUFFERED": "1"}
    common = ["-np", "3", "--min-np", "2", "-H", ",".join(f"{h}:1" for h in hosts)]
    print(f"3 workers on {', '.join(hosts)}; the one on {hosts[2]} is SIGKILLed at the trigger line")
    print("| example | launcher | kill at (s) | result after it | job (s) | edits besides the import |")
    print("|---|---|---|---|---|---|")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for script, flags, fw, trigger, after, final in RUNS:
            if args.only and args.only not in script:
                continue
            src = args.examples / script
            for who, ours, copy, why in copies(src, Path(tmp), fw, args.horovod_python):
                where = copy.parent
                python = sys.executable if ours else args.horovod_python
                run = [str(bindir / "rdmacoll-run")] if ours else [str(Path(python).parent / "horovodrun"), "--gloo"]
                cmd = [*run, *common, python, str(where / src.name), *flags]
                env = dict(base, PATH=f"{Path(python).parent}:{base['PATH']}")
                rc, out, killed_at, came, took = launch(
                    cmd, where, env, str(where / src.name), hosts[2], trigger, after
                )
                found = re.findall(final, out)
                ok = rc == 0 and killed_at is not None and killed_at >= 0 and came and found
                tail = " | ".join(out.strip().splitlines()[-4:])
                result = found[-1] if ok else f"FAILED (exit {rc}, kill at {killed_at}, after: {came}): {tail[-400:]}"
                failed += not ok
                kill = f"{killed_at:.1f}" if killed_at is not None and killed_at >= 0 else "-"
                print(f"| {src.name} | {who} | {kill} | {result} | {took:.0f} | {'; '.join(why) or '-'} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
