"""Sparse tensors and Adasum in rdmacoll.frameworks.torch, against independent references
and against Horovod 0.28.1 (issue 14): tests/workers/torch_sparse_adasum.py, one launch
per size (2, 3 and 4 ranks) and module.

Under rdmacoll (always run): every case with a reference is within its tolerance of it,
results are identical on every rank, and the outcomes are Horovod's as written out here
(sparse tensors refused by allreduce and allgather with ValueError; the sparse path's
gradients not coalesced, sparse_as_dense's made sparse again element-wise; Adasum's
NotImplementedError at 3 ranks, AssertionError from skip_synchronize, ValueError for
gradient_predivide_factor). Where horovod.torch is importable (run pytest from Horovod's
venv, as tests/test_horovod_parity.py), the worker also runs under Horovod: the same
references must hold for Horovod, and every outcome must equal rdmacoll's but for the
differences listed in ON_PURPOSE.
"""

import json
import math
from pathlib import Path

import pytest

from mpi_util import rank_records, require_real_horovod, run_mpi, share, shared_dir, shared_part

pytest.importorskip("torch")

HVD, RC = "horovod.torch", "rdmacoll.frameworks.torch"
# case: why rdmacoll's outcome differs from Horovod's
ON_PURPOSE = {
    "sparse_allreduce_async Max": "rdmacoll refuses ops other than Sum and Average (Horovod sums)",
}
# a raised error matches Horovod's when rdmacoll's is of every class Horovod's is
# (RdmacollValueError is a ValueError and a RuntimeError: Horovod's int32 Adasum error is
# a RuntimeError, its bfloat16 one a ValueError)
TRAINING = [
    "sparse training sgd Average",
    "sparse training sgd Sum",
    "sparse training sgd Average sparse_as_dense",
    "sparse training sparseadam Average",
    "sparse training sparseadam Average sparse_as_dense",
]


def run_worker(module, nranks, tmp_path):
    out = tmp_path / f"{module.replace('.', '_')}_{nranks}"
    out.mkdir()
    res = run_mpi(nranks, "torch_sparse_adasum.py", env={"RC_TEST_HVD": module, "RC_TEST_PARITY_DIR": out}, timeout=300)
    return read_runs(res, module, nranks, out)


def read_runs(res, module, nranks, out):
    rank_records(res, nranks, "done")
    res.check(res.returncode == 0, f"the {module} launch failed")
    return {r: json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(nranks)}


# rdmacoll's runs: parts of the launch shared per world size (mpi_util.share)
for _n in (2, 3, 4):
    _env = {"RC_TEST_HVD": RC, "RC_TEST_PARITY_DIR": shared_dir(f"sparse adasum {_n}")}
    share(_n, f"sparse adasum {_n}", {"script": "torch_sparse_adasum.py", "env": _env})


def _close(got, ref, tol):
    """Described results (nested lists, dtype strings) equal, floats within tol relative."""
    if isinstance(got, list) and isinstance(ref, list):
        return len(got) == len(ref) and all(_close(g, f, tol) for g, f in zip(got, ref))
    if isinstance(got, float) and isinstance(ref, (int, float)) and not isinstance(ref, bool):
        return math.isclose(got, ref, rel_tol=tol, abs_tol=tol)
    return got == ref


def reference_problems(runs):
    return [
        f"rank {r} {name}: {err:.3g} from the reference (tolerance {tol})"
        for r, run in runs.items()
        for name, (err, tol) in run["errors"].items()
        if not err <= tol
    ]


def expected_problems(runs, n):
    """Horovod's outcomes, as written here, that rdmacoll must show."""
    problems = []
    pow2 = n & (n - 1) == 0
    for r, run in runs.items():
        cases = run["cases"]

        def want(name, kind, classes=(), text=""):
            got = cases[name]
            if got[0] != kind or not set(classes) <= set(got[1] if kind == "raises" else ()) or text not in str(got):
                problems.append(f"rank {r} {name}: {str(got)[:200]}, expected {kind} {classes} {text!r}")

        for name in ("sparse allreduce", "sparse allgather"):
            want(name, "raises", ["ValueError"], "Tensor type torch.sparse.FloatTensor is not supported.")
        want("sparse_allreduce_async Max", "raises", ["ValueError"])
        if run["module"] == RC:
            want("sparse training join, a rank without the sparse gradient", "ok")
        want("broadcast_optimizer_state of an Adasum optimizer", "ok")  # (any number of ranks: no step)
        for name in TRAINING:
            want(name, "ok")
            layout = cases[name][1][-3:]
            dense = "sparse_as_dense" in name  # Horovod: to_sparse() of the dense sum; else the gathered rows
            if cases[name][0] == "ok" and layout != ["torch.sparse_coo", 2 if dense else 1, dense]:
                problems.append(f"rank {r} {name}: the embedding's gradient is {layout}")
        for name in [c for c in cases if c.startswith("adasum")]:
            if name == "adasum optimizer skip_synchronize":
                want(name, "raises", ["AssertionError"], "Skipping synchronization is not supported")
            elif name == "adasum optimizer gradient_predivide_factor":
                want(name, "raises", ["ValueError"], "gradient_predivide_factor not supported with op != Average")
            elif not pow2:
                want(name, "raises", ["NotImplementedError"], "Running Adasum with non-power of 2 ranks")
            elif name in ("adasum int32", "adasum bfloat16"):
                want(name, "raises", ["ValueError", "RuntimeError"])
            else:
                want(name, "ok")
                if name not in run["errors"]:
                    problems.append(f"rank {r} {name}: no reference compared")
    return problems


def same_on_every_rank(runs):
    """Every case's outcome (results are reduced: the same everywhere) equals rank 0's."""
    first = runs[0]["cases"]
    return [
        f"rank {r} {name}: {str(c)[:120]} but rank 0 {str(first[name])[:120]}"
        for r, run in runs.items()
        for name, c in run["cases"].items()
        if c != first[name]
    ]


@pytest.fixture(scope="module")
def rdmacoll_runs():
    def get(nranks):
        label = f"sparse adasum {nranks}"
        return read_runs(shared_part(nranks, label), RC, nranks, shared_dir(label))

    return get


@pytest.mark.timeout(900)  # (the first of a world runs the shared launch)
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_sparse_and_adasum_against_references(nranks, rdmacoll_runs):
    runs = rdmacoll_runs(nranks)
    problems = reference_problems(runs) + expected_problems(runs, nranks) + same_on_every_rank(runs)
    assert not problems, f"{len(problems)} problems, first: " + "; ".join(problems[:5])


def differences(hvd_runs, rc_runs):
    out = []
    for r in hvd_runs:
        for name, h in hvd_runs[r]["cases"].items():
            c = rc_runs[r]["cases"].get(name)
            if name in ON_PURPOSE:
                continue
            if c is None or h[0] != c[0] or h[-1] != c[-1]:
                out.append(f"rank {r} {name}: {str(c)[:150]}, Horovod {str(h)[:150]}")
            elif h[0] == "raises" and not set(h[1]) <= set(c[1]):
                out.append(f"rank {r} {name}: raises {c[1]}, Horovod {h[1]}")
            elif h[0] == "ok":
                tol = 2 * rc_runs[r]["errors"].get(name, [0, 0])[1]
                if not _close(c[1], h[1], tol):
                    out.append(f"rank {r} {name}: {str(c[1])[:150]}, Horovod {str(h[1])[:150]}")
    return out


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_side_by_side_with_real_horovod(nranks, rdmacoll_runs, tmp_path):
    require_real_horovod()
    hvd_runs = run_worker(HVD, nranks, tmp_path)
    diff = differences(hvd_runs, rdmacoll_runs(nranks))
    assert not diff, f"{len(diff)} differences from Horovod, first: " + "; ".join(diff[:6])
    # the references and the outcomes written out above are Horovod's own
    problems = reference_problems(hvd_runs) + [
        p
        for p in expected_problems(hvd_runs, nranks)
        if "Max" not in p and "adasum int32" not in p and "adasum bfloat16" not in p
    ]
    assert not problems, "the references misdescribe Horovod: " + "; ".join(problems[:5])
