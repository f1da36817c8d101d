"""rdmacoll.frameworks.torch under mpiexec: the API against NumPy references, training
that matches a single process on the union batch, misuse errors, and a Horovod script
that runs with only its import line changed. Few launches, many checks each."""

import io
import tokenize
from pathlib import Path

import pytest

from mpi_util import rank_records, require_real_horovod, run_mpi, share, shared_part

pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "torch_synthetic_train.py"
TRAIN_BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "train_torch.py"
CASES = [
    "sgd",
    "sgd_views",
    "adam_passes2",
    "passes3_fewer",
    "fp16",
    "bf16",
    "unused",
    "predivide",
    "op_sum",
    "clip",
    "sparse",
    "channels_last",
    "rebuild",
    "restore_diverged",
    "model_mismatch",
    "join",
]
SMALL_BUCKETS = {"RDMACOLL_FUSION_THRESHOLD": "1K"}  # several buckets even for small models
# workers/torch_frozen.py's cases. rdmacoll: every one identical on every rank and equal
# to the single-process reference. Real Horovod 0.28.1, as measured (docs/torch.md): it
# never reduces parameters that were frozen when the optimizer was wrapped or that came
# later through add_param_group (ranks drift apart), and gives parameters frozen after
# wrapping a zero gradient (momentum and weight decay keep moving them).
FROZEN_CASES = [
    "frozen",
    "frozen_adam_passes2",
    "unused_odd_steps",
    "unused_rank0_only",
    "unfreeze",
    "unfreeze_passes2",
    "freeze_later",
    "add_group",
]
HOROVOD_FROZEN = {
    "unfreeze": "ranks differ",
    "unfreeze_passes2": "ranks differ",
    "add_group": "ranks differ",
    "freeze_later": "differs from the reference",
}


def frozen_outcomes(res, nranks):
    """{case: "same" | "ranks differ" | "differs from the reference" | error text}."""
    out = {}
    for name in FROZEN_CASES:
        recs = {r["rank"]: r for r in res.select(kind="frozen_case", case=name)}
        res.check(sorted(recs) == list(range(nranks)), f"frozen case {name}: ranks {sorted(recs)} reported")
        rec = recs[0]
        if rec["error"]:
            out[name] = rec["error"]
        elif not all(r["identical"] for r in recs.values()):
            out[name] = "ranks differ"
        elif not isinstance(rec["err"], float) or rec["err"] > 2e-5:
            out[name] = "differs from the reference"
        else:
            out[name] = "same"
    return out


def check_cases(res, nranks, cases):
    for name in cases:
        recs = {r["rank"]: r for r in res.select(kind="case", case=name)}
        res.check(sorted(recs) == list(range(nranks)), f"case {name}: ranks {sorted(recs)} reported")
        for r, rec in recs.items():
            res.check(not rec["bad"], f"case {name}, rank {r}: {rec['bad']}")
    return {name: rank_records_of(res, name) for name in cases}


def rank_records_of(res, name):
    return {r["rank"]: r for r in res.select(kind="case", case=name)}


def check_api(res, nranks):
    for r, rec in rank_records(res, nranks, "api").items():
        res.check(not rec["bad"], f"rank {r}: API checks failed: {rec['bad']}")
        res.check(rec["checks"] > 50, f"rank {r}: only {rec['checks']} API checks ran")


# Parts of the launch shared per world size (mpi_util.share), after the others: the error
# cases and join_plain leave the job aborted.
THREE_RANK_CASES = ["sgd", "adam_passes2", "unused", "fp16", "clip", "restore_diverged", "join"]
share(
    2,
    "torch train",
    {"script": "torch_train.py", "args": ["api", *CASES, "frozen", "errors"], "env": SMALL_BUCKETS},
    position=1,
)
share(
    3,
    "torch train",
    {"script": "torch_train.py", "args": ["api", *THREE_RANK_CASES, "frozen", "join_plain"], "env": SMALL_BUCKETS},
    position=1,
)


@pytest.mark.timeout(900)  # (the first of a world runs the shared launch)
def test_two_ranks_api_training_and_errors():
    res = shared_part(2, "torch train")
    check_api(res, 2)
    res.check(frozen_outcomes(res, 2) == dict.fromkeys(FROZEN_CASES, "same"), f"{frozen_outcomes(res, 2)}")
    recs = check_cases(res, 2, CASES)
    for r in range(2):
        sgd, views = recs["sgd"][r], recs["sgd_views"][r]
        # zero_grad(set_to_none=True) drops the views: each used gradient (7 of 11) is
        # copied into its bucket once per step (4 steps); set_to_none=False copies none.
        res.check(sgd["stats"]["copies"] == 7 * 4, f"rank {r}: copies {sgd['stats']}")
        res.check(views["stats"]["copies"] == 0, f"rank {r}: copies with views kept {views['stats']}")
        res.check(
            len(sgd["buckets"]) > 2 and sgd["stats"]["launched_in_backward"] > 0,
            f"rank {r}: buckets {sgd['buckets']}, {sgd['stats']}",
        )
        res.check(recs["passes3_fewer"][r]["stats"]["launched_in_step"] > 0, "fewer passes: launched at step")
        res.check(recs["rebuild"][r]["stats"]["rebuilds"] == 1, f"rank {r}: {recs['rebuild'][r]['stats']}")
    errors = {(e["rank"], e["case"]): e for e in res.select(kind="error_case")}
    for r in range(2):
        for case, words in (("reentrant", "use_reentrant=False"), ("too_many_passes", "backward_passes_per_step=2")):
            e = errors.get((r, case))
            res.check(e is not None and e["error"] and words in e["error"], f"rank {r}, {case}: {e}")
        res.check(errors.get((r, "non_reentrant_ok"), {}).get("error", "missing") is None, "non-reentrant checkpoint")
    skipped = errors.get((1, "no_backward"), {}).get("error") or ""
    waiting = errors.get((0, "no_backward"), {}).get("error") or ""
    res.check("without a backward pass" in skipped, f"rank that skipped backward: {skipped!r}")
    res.check("without running backward()" in waiting, f"rank that ran backward: {waiting!r}")


@pytest.mark.timeout(900)
def test_three_ranks_training():
    res = shared_part(3, "torch train")
    check_api(res, 3)
    res.check(frozen_outcomes(res, 3) == dict.fromkeys(FROZEN_CASES, "same"), f"{frozen_outcomes(res, 3)}")
    check_cases(res, 3, THREE_RANK_CASES + ["join_plain"])


@pytest.mark.parametrize("nranks", [2, 3])
def test_frozen_parameters_side_by_side_with_real_horovod(nranks):
    """The same frozen-parameter script under real Horovod: where it agrees with rdmacoll
    and where (HOROVOD_FROZEN) it does not. Runs where horovod.torch is importable (a
    Horovod 0.28.1 build: ../shared/peers/build-horovod.sh, then rdmacoll and pytest
    installed into its venv)."""
    require_real_horovod()
    res = run_mpi(nranks, "torch_frozen.py", env={"RC_TEST_HVD": "horovod.torch"}, timeout=300)
    want = {name: HOROVOD_FROZEN.get(name, "same") for name in FROZEN_CASES}
    res.check(frozen_outcomes(res, nranks) == want, f"Horovod: {frozen_outcomes(res, nranks)}, expected {want}")


def test_horovod_script_with_only_the_import_changed():
    # rdmacoll appears in the code (not in comments or strings) on the import line only
    text = EXAMPLE.read_text()
    lines = text.splitlines()
    rows = {
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.NAME and tok.string == "rdmacoll"
    }
    assert [lines[i - 1] for i in sorted(rows)] == ["import rdmacoll.frameworks.torch as hvd"]
    res = run_mpi(
        2,
        EXAMPLE,
        [
            "--epochs",
            "2",
            "--train-size",
            "512",
            "--test-size",
            "256",
            "--batches-per-allreduce",
            "2",
            "--fp16-allreduce",
        ],
        timeout=300,
    )
    out = res.output()
    res.check(res.returncode == 0, "the script failed")
    res.check("Test set: Average loss" in out and "done: final accuracy" in out, "the script did not finish")


def test_training_benchmark_runs():
    """benchmarks/train_torch.py end to end on a tiny model, every configuration (the
    numbers are not checked: speed goals live in the benchmark, never in tests)."""
    res = run_mpi(
        2,
        TRAIN_BENCH,
        ["--width", "64", "--layers", "2", "--rounds", "2", "--steps", "1", "--warmup", "1", "--png", "chart.png"],
        timeout=300,
    )
    out = res.output()
    res.check(res.returncode == 0, "the benchmark failed")
    for row in ("compute", "rdmacoll", "rdmacoll-views", "ddp-gloo", "ddp-rdmacoll", "ddp-nocomm"):
        res.check(any(line.split()[1:2] == [row] for line in out.splitlines()), f"no {row} row")
    res.check("vs horovod:" in out or "horovod: not measured" in out, "no Horovod line")
