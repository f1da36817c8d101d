"""Horovod's rules (rdmacoll/frameworks/_horovod.py) against both adapters: one table, one
launch of 3 ranks (tests/workers/horovod_rules.py) that runs every row in the torch and
the TensorFlow adapter; where horovod.torch imports, a second launch runs the torch rows
under real Horovod 0.28.1.

Each row: what to call (a function of the worker's driver `f`: f.hvd the module, f.t() a
tensor, f.ps a process set of ranks 0 and 1, f.optimizer() a DistributedOptimizer of a
small model...) and what must come out, per adapter: an exception (class names that must
be in its MRO, names that must not, words of its text) on every rank, or a value per rank.

The expected types are Horovod's, from its sources (not from rdmacoll's rule module):
- ValueError raised in Horovod's Python (op with average, gradient_predivide_factor
  without Average, backward_passes_per_step < 1, named_parameters): ValueError in both
  frameworks, no tf.errors type.
- Its enqueue's INVALID_ARGUMENT (splits, root rank; operations.cc): torch ValueError
  (std::invalid_argument through pybind11), not HorovodInternalError; TensorFlow
  InvalidArgumentError.
- NotImplementedError (Adasum's limits) in both.
- Ranks that disagree (an ErrorOp: PRECONDITION_ERROR): torch HorovodInternalError
  (horovod/torch/mpi_ops.py: synchronize), TensorFlow FailedPreconditionError.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from mpi_util import TF_ENV, rank_records, require_real_horovod, run_mpi, share, shared_part

RANKS = 3
RC = ("torch", "tf")  # rdmacoll's adapters
HVD = "horovod.torch"


def value_error(text):
    return {
        "torch": {"is": ["ValueError"], "not": ["HorovodInternalError"], "text": text},
        "tf": {"is": ["ValueError"], "not": ["OpError"], "text": text},
    }


def bad_argument(text):
    return {
        "torch": {"is": ["ValueError"], "not": ["HorovodInternalError"], "text": text},
        "tf": {"is": ["InvalidArgumentError", "OpError"], "text": text},
    }


def not_implemented(text):
    return {a: {"is": ["NotImplementedError"], "text": text} for a in RC}


def ranks_disagree(text):
    return {
        "torch": {"is": ["HorovodInternalError", "RuntimeError"], "caught_as_internal": True, "text": text},
        "tf": {"is": ["FailedPreconditionError", "OpError"], "text": text},
    }


def value(fn, adapters=RC):
    """Every adapter returns fn(rank, size) (a nested list) on every rank."""
    return {a: {"value": fn} for a in adapters}


def rows_data(rank, size, n=5):
    """n rows [rank * 10 + i]."""
    return [[rank * 10.0 + i] for i in range(n)]


# id: (call(f), {adapter: expectation}, options). Expectations for "horovod" are real
# Horovod's where they differ from the torch adapter's (None: not run under Horovod);
# without one, Horovod must give the torch adapter's. Options: "breaks": the job is
# re-initialised after the row; "before_init": run before init().
CASES = {
    # --- op / average
    "op and average": (
        lambda f: f.hvd.allreduce(f.t([1.0, 2.0]), average=True, op=f.hvd.Sum),
        value_error("The op parameter supersedes average. Please provide only one of them."),
    ),
    "average=False sums": (
        lambda f: f.hvd.allreduce(f.t([1.0, 2.0]), average=False),
        value(lambda r, n: [1.0 * n, 2.0 * n]),
    ),
    "no op averages": (
        lambda f: f.hvd.allreduce(f.t([f.rank * 3.0, 1.0])),
        value(lambda r, n: [3.0 * (n - 1) / 2, 1.0]),
    ),
    # --- Adasum
    "Adasum on 3 ranks": (
        lambda f: f.hvd.allreduce(f.t([1.0, 2.0]), op=f.hvd.Adasum),
        not_implemented("Running Adasum with non-power of 2 ranks is not supported yet."),
    ),
    "Adasum on a process set (every rank, the one outside it too)": (
        lambda f: f.hvd.allreduce(f.t([1.0, 2.0]), op=f.hvd.Adasum, process_set=f.ps),
        not_implemented("Adasum does not support non-global process sets yet."),
    ),
    # --- optimizers
    "optimizer gradient_predivide_factor with Sum": (
        lambda f: f.optimizer(op=f.hvd.Sum, gradient_predivide_factor=2.0),
        value_error("gradient_predivide_factor not supported with op != Average"),
    ),
    "optimizer backward_passes_per_step=0": (
        lambda f: f.optimizer(backward_passes_per_step=0),
        value_error("backward_passes_per_step must be > 0"),
    ),
    "optimizer duplicate names, before init()": (
        lambda f: f.optimizer(duplicate_names=True),
        {
            "torch": {
                "is": ["ValueError"],
                "text": "Parameter names in named_parameters must be unique. Found duplicates: w",
            }
        },
        {"before_init": True},
    ),
    "rank() before init()": (
        lambda f: f.hvd.rank(),
        value_error("hvd.init()"),  # Horovod: "Horovod has not been initialized; use hvd.init()."
        {"before_init": True},
    ),
    "optimizer _parameter_names": (
        lambda f: f.parameter_names(),
        {"torch": {"value": lambda r, n: [["a", "w"], ["allreduce.noname.0.0", "allreduce.noname.0.1"]]}},
    ),
    # --- alltoall splits
    "splits summing below the rows (the rest not sent)": (
        lambda f: f.alltoall(rows_data(f.rank, f.size), splits=[1, 1, 1]),
        value(lambda r, n: [[[q * 10.0 + r] for q in range(n)], [1] * n]),
    ),
    "splits summing above the rows": (
        lambda f: f.alltoall(rows_data(f.rank, f.size), splits=[2, 2, 2]),
        bad_argument("Sum of splits entries is greater than the first dimension of tensor."),
    ),
    "splits with too few entries": (
        lambda f: f.alltoall(rows_data(f.rank, f.size), splits=[1, 1]),
        bad_argument("Number of entries in splits does not equal number of workers."),
    ),
    "no splits, rows not divisible": (
        lambda f: f.alltoall(rows_data(f.rank, f.size)),
        bad_argument("splits not provided, but first dimension of tensor is not an even multiple"),
    ),
    "splits 2-D": (
        lambda f: f.alltoall(rows_data(f.rank, f.size), splits=[[1, 1, 1]]),
        bad_argument("alltoall expects a 1D splits tensor"),
    ),
    "splits negative": (
        lambda f: f.alltoall(rows_data(f.rank, f.size), splits=[-1, 3, 3]),
        {**bad_argument("splits must not be negative"), "horovod": None},
    ),
    # --- broadcast root
    "root rank outside the job": (
        lambda f: f.hvd.broadcast(f.t([1.0]), root_rank=3),
        bad_argument("broadcast received invalid root rank 3 for provided process set"),
    ),
    "root rank outside the process set (every rank)": (
        lambda f: f.hvd.broadcast(f.t([1.0]), root_rank=2, process_set=f.ps),
        bad_argument("broadcast received invalid root rank 2 for provided process set"),
    ),
    "a process set that is not registered": (
        lambda f: f.hvd.allreduce(f.t([1.0]), process_set=f.hvd.ProcessSet([0, 2])),
        {**bad_argument("Process set does not exist or has not been registered."), "horovod": None},
    ),
    # --- dtypes (rdmacoll takes more than Horovod's CPU build: docs/torch.md)
    "bool allreduce": (
        lambda f: f.hvd.allreduce(f.t([True, False], "bool"), op=f.hvd.Sum),
        {
            **bad_argument("bool"),
            "horovod": {"is": ["ValueError"], "text": "Tensor type torch.BoolTensor is not supported."},
        },
    ),
    "uint8 allreduce": (
        lambda f: f.hvd.allreduce(f.t([1, 2], "uint8"), op=f.hvd.Sum),
        {
            **value(lambda r, n: [n, 2 * n]),
            "horovod": {"is": ["ValueError"], "text": "Tensor type torch.ByteTensor is not supported."},
        },
    ),
    "bool allgather": (
        lambda f: f.hvd.allgather(f.t([f.rank == 0], "bool")),
        {
            **value(lambda r, n: [q == 0 for q in range(n)]),
            "horovod": {"is": ["ValueError"], "text": "Tensor type torch.BoolTensor is not supported."},
        },
    ),
    # --- the job's layout: Horovod's cross communicator is the ranks with this local rank
    "cross_rank, cross_size, is_homogeneous on uneven hosts": (
        lambda f: f.uneven_hosts(["a", "a", "b"]),
        {**value(lambda r, n: [[0, 2, False], [0, 1, False], [1, 2, False]][r]), "horovod": None},
    ),
    # --- failures while communicating
    # Not run under real Horovod: 0.28.1's torch ops name their tensors "allreduce.NAME" and
    # "allgather.NAME" (torch/mpi_ops_v2.cc GetOpName), so its coordinator sees two tensors
    # that some ranks never submit and waits; the stall inspector names them each minute,
    # and with HOROVOD_STALL_SHUTDOWN_TIME_SECONDS the job shuts down and cannot init again
    # (seen here: "MPI_Query_thread() ... after MPI_FINALIZE", every rank exits 1)
    "ranks disagree (rank 0 allreduce, the others allgather)": (
        lambda f: f.disagree(),
        {**ranks_disagree("collective mismatch"), "horovod": None},
        {"breaks": True},
    ),
}


def expectation(case, adapter):
    """The expectation of `case` for adapter ("torch", "tf", "horovod"); None: not run."""
    expect = CASES[case][1]
    if adapter == "horovod":
        return expect.get("horovod", expect.get("torch"))
    return expect.get(adapter)


def params():
    return [pytest.param(c, a, id=f"{a}: {c}") for c in CASES for a in RC if expectation(c, a) is not None]


def check(outcomes, case, adapter, want):
    """Every rank's outcome of `case` against `want`; returns the problems."""
    bad = []
    for r, got in sorted(outcomes.items()):
        if "value" in want:
            expected = want["value"](r, RANKS)
            if got.get("value") != expected:
                bad.append(f"rank {r}: want {expected}, got {got}")
            continue
        if "raises" not in got:
            bad.append(f"rank {r}: want an exception, got {got}")
            continue
        names = got["raises"]
        missing = [n for n in want["is"] if n not in names]
        forbidden = [n for n in want.get("not", ()) if n in names]
        if missing or forbidden or want["text"] not in got["text"]:
            bad.append(f"rank {r}: want {want}, got {got}")
        if want.get("caught_as_internal") and not got.get("caught_as_internal"):
            bad.append(f"rank {r}: `except hvd.HorovodInternalError` does not catch it: {got}")
    return bad


def outcomes_of(res, nranks):
    """{adapter: {case: {rank: outcome}}} from the worker's "done" records."""
    out = {}
    for r, rec in rank_records(res, nranks, "done").items():
        for adapter, cases in json.loads(rec["outcomes"]).items():
            for case, outcome in cases.items():
                out.setdefault(adapter, {}).setdefault(case, {})[r] = outcome
    return out


# rdmacoll's run: a part of the launch shared per world size (mpi_util.share), whose ranks
# import torch for other parts already; first (its "before init()" rows)
BOTH = all(importlib.util.find_spec(m) is not None for m in ("torch", "tensorflow"))
if BOTH:
    share(RANKS, "horovod rules", {"script": "horovod_rules.py", "args": ["rdmacoll"], "env": TF_ENV}, position=-1)


@pytest.fixture(scope="module")
def rdmacoll_outcomes():
    if not BOTH:
        pytest.skip("the rules run in both adapters: torch and tensorflow must be installed")
    return outcomes_of(shared_part(RANKS, "horovod rules"), RANKS)


@pytest.mark.timeout(900)  # (the first of its world runs the shared launch)
@pytest.mark.parametrize("case, adapter", params())
def test_rule(rdmacoll_outcomes, case, adapter):
    got = rdmacoll_outcomes.get(adapter, {}).get(case)
    assert got, f"the worker did not run {case!r} in the {adapter} adapter"
    bad = check(got, case, adapter, expectation(case, adapter))
    assert not bad, "\n".join(bad)


def test_torch_rows_under_real_horovod():
    """The same rows under horovod.torch: each gives what the table says Horovod gives."""
    pytest.importorskip("torch")
    require_real_horovod()
    res = run_mpi(RANKS, "horovod_rules.py", [HVD], timeout=400)
    got = outcomes_of(res, RANKS).get("horovod", {})
    bad = []
    for case in CASES:
        want = expectation(case, "horovod")
        if want is not None:
            bad += [f"{case}: {b}" for b in check(got.get(case, {}), case, "horovod", want)] or []
            if case not in got:
                bad.append(f"{case}: not run")
    assert not bad, "\n".join(bad)
