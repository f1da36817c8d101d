"""Run Horovod 0.28.1's own example scripts over rdmacoll (the import line changed) and,
given a Python with real Horovod, over Horovod too, side by side; prints one row per run.

    python scripts/horovod_examples.py --examples HOROVOD_CHECKOUT/examples \
        [--horovod-python /tmp/hvd/venv/bin/python]

HOROVOD_CHECKOUT: `git clone -b v0.28.1 https://github.com/horovod/horovod` (the sdist has
no examples). Real Horovod: `bash ../shared/peers/build-horovod.sh /tmp/hvd` (torch only:
it is built without TensorFlow, so the TensorFlow rows run over rdmacoll alone). Each
script runs at 2 ranks (rdmacoll: the venv's mpiexec; Horovod: horovodrun --gloo, or
--mpi where Horovod needs its MPI controller: Adasum on CPU), shrunk by its own flags.

Every change made to a script besides the import line is in EDITS, with why. Scripts
that need torchvision get scripts/standins/torchvision: PyPI's torchvision wheels for
torch 2.13.0 link libtorch_cuda, which the CPU torch wheel lacks, so torchvision cannot be
imported here (the stand-in: ResNet-50 as torchvision builds it, and MNIST-shaped random
data in place of the download, which this machine cannot make).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

STANDINS = Path(__file__).resolve().parent / "standins"

IMPORTS = {
    "import horovod.torch as hvd": "import rdmacoll.frameworks.torch as hvd",
    "import horovod.tensorflow.keras as hvd": "import rdmacoll.frameworks.tensorflow.keras as hvd",
    "import horovod.tensorflow as hvd": "import rdmacoll.frameworks.tensorflow as hvd",
}
# (script, old, new, why): applied to the rdmacoll copy only
EDITS = [
    (
        "pytorch_mnist.py",
        "import horovod\n",
        "",
        "the script imports horovod for horovod.run (used only with --num-proc); README: launch the script instead",
    ),
    (
        "tensorflow2_synthetic_benchmark.py",
        "opt.variables()",
        "opt.variables",
        "Keras 3: an optimizer's variables are a property, not a method",
    ),
    (
        "tensorflow2_synthetic_benchmark_elastic.py",
        "opt.lr.assign(",
        "opt.learning_rate.assign(",
        "Keras 3: the optimizer's rate is learning_rate (Keras 2's alias lr is gone)",
    ),
    (
        "tensorflow2_keras_synthetic_benchmark.py",
        ",\n              experimental_run_tf_function=False)",
        ")",
        "Keras 3: compile() has no experimental_run_tf_function",
    ),
]
SMALL_BENCH = ["--batch-size", "8", "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "3"]
SMALL_TF = ["--batch-size", "4", "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "2"]
RUNS = [  # (script in examples/, flags, framework)
    ("pytorch/pytorch_synthetic_benchmark.py", SMALL_BENCH, "torch"),
    ("pytorch/pytorch_synthetic_benchmark.py", SMALL_BENCH + ["--fp16-allreduce"], "torch"),
    ("pytorch/pytorch_synthetic_benchmark.py", SMALL_BENCH + ["--use-adasum"], "torch"),
    ("pytorch/pytorch_mnist.py", ["--epochs", "1", "--log-interval", "50"], "torch"),
    ("tensorflow2/tensorflow2_synthetic_benchmark.py", SMALL_TF, "tf"),
    ("tensorflow2/tensorflow2_synthetic_benchmark.py", SMALL_TF + ["--fp16-allreduce"], "tf"),
    (
        "tensorflow2/tensorflow2_keras_synthetic_benchmark.py",
        ["--batch-size", "4", "--num-batches-per-iter", "1", "--num-iters", "2"],
        "tf",
    ),
]
# (tensorflow2_keras_mnist.py runs as examples/keras_mnist.py, in tests/test_tensorflow.py)
RESULT = re.compile(r"(Total img/sec on \d+ \S+: [\d.]+ \+-[\d.]+|Test set: Average loss: [\d.]+, Accuracy: [\d.]+%)")


def prepare(src: Path, dst: Path, rdmacoll: bool) -> list[str]:
    """The script, copied to dst (edited for rdmacoll); returns the edits' reasons."""
    text, why = src.read_text(), []
    if rdmacoll:
        for old, new in IMPORTS.items():
            text = re.sub(rf"^{re.escape(old)}$", new, text, flags=re.M)
        for name, old, new, reason in EDITS:
            if name == src.name and old in text:
                text = text.replace(old, new)
                why.append(reason)
    dst.write_text(text)
    return why


def copies(src: Path, tmp: Path, fw: str, horovod_python):
    """(who, ours, copy, why) for each side that runs src: rdmacoll, and Horovod where its
    Python is given (torch examples only); the copy in tmp/who, edited for rdmacoll
    (prepare), and the edits' reasons."""
    sides = [("rdmacoll", True)] + ([("horovod", False)] if horovod_python and fw == "torch" else [])
    for who, ours in sides:
        where = tmp / who
        where.mkdir(exist_ok=True)
        yield who, ours, where / src.name, prepare(src, where / src.name, ours)


def base_env() -> dict:
    """The environment both sides run in: one thread per rank, the torchvision stand-in."""
    return dict(
        os.environ,
        OMP_NUM_THREADS="1",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join(filter(None, [str(STANDINS), os.environ.get("PYTHONPATH")])),
    )


def run(cmd: list[str], cwd: Path, env: dict) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return 124, "timed out after 900 s"
    return p.returncode, p.stdout + p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", required=True, type=Path, help="Horovod checkout's examples/")
    ap.add_argument("--horovod-python", help="a Python with real Horovod (torch) installed")
    args = ap.parse_args()
    bindir = Path(sys.executable).parent
    base = base_env() | {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for script, flags, fw in RUNS:
            src = args.examples / script
            for who, ours, copy, why in copies(src, Path(tmp), fw, args.horovod_python):
                where = copy.parent
                if ours:
                    cmd = [str(bindir / "mpiexec"), "-n", "2", sys.executable, src.name, *flags]
                else:
                    hbin = Path(args.horovod_python).parent
                    mode = "--mpi" if "--use-adasum" in flags else "--gloo"  # CPU Adasum: MPI only
                    cmd = [str(hbin / "horovodrun"), "-np", "2", mode, str(args.horovod_python), src.name, *flags]
                env = dict(base, PATH=f"{cmd[0].rsplit('/', 1)[0]}:{base['PATH']}")
                rc, out = run(cmd, where, env)
                found = RESULT.findall(out)
                tail = " | ".join(out.strip().splitlines()[-3:])
                result = found[-1] if rc == 0 and found else f"FAILED ({rc}): {tail[-300:]}"
                shown = " ".join(f for f in flags if f in ("--fp16-allreduce", "--use-adasum"))
                rows.append((f"{src.name} {shown}".strip(), who, result, "; ".join(why)))
                print(f"| {rows[-1][0]} | {who} | {result} | {rows[-1][3] or '-'} |", flush=True)
    return 0 if all(not r[2].startswith("FAILED") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
