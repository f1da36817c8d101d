"""rdmacoll.frameworks.tensorflow (Horovod's TensorFlow / Keras 3 API) under the real
mpiexec. TensorFlow imports slowly, so one 2-rank launch runs every check of
workers/tf_checks.py (each test below reads its part), one at 3 ranks runs the checks
whose results depend on the number of ranks (process sets, errors, Adasum's refusal, TF1
sessions), and a last one runs the Keras example, a Horovod script whose only change is
its import line. (A 4-rank launch, 19 s of CI, ran them too until 0.1.x: the adapter's part
does not depend on 3 or 4; Adasum's two-level tree at 4 ranks, the same rdmacoll.adasum
under both adapters, runs in tests/test_torch_sparse_adasum.py.)"""

import importlib.util
from pathlib import Path

import pytest

from mpi_util import TF_ENV, rank_records, run_mpi, share, shared_part

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="TensorFlow is not installed (pip install '.[test]' brings tensorflow-cpu)",
)

NRANKS = 2
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "keras_mnist.py"


def launch_checks(nranks, names=(), timeout=280):
    """workers/tf_checks.py at nranks ranks (only the checks named, if any), every rank done."""
    return finished(run_mpi(nranks, "tf_checks.py", list(names), env=TF_ENV, timeout=timeout), nranks)


def finished(res, nranks):
    crashes = res.select(kind="crash")
    res.check(not crashes, "a rank crashed: " + "; ".join(c["error"] for c in crashes[:2]))
    rank_records(res, nranks, "done")
    res.check(res.returncode == 0, "the launch failed")
    return res


@pytest.fixture(scope="module")
def checks():
    return launch_checks(NRANKS)


def assert_check(res, name, nranks=NRANKS):
    recs = res.select(kind="check", name=name)
    res.check(len(recs) == nranks, f"{len(recs)} ranks reported check {name}")
    for r in recs:
        res.check(r["ok"], f"rank {r['rank']}: {name} failed: {r['detail']}")


def assert_training(res, run, tol=1e-5):
    """After every epoch: weights identical on every rank (same digest) and within tol
    of a single process trained on the union of the ranks' batches."""
    recs = res.select(kind="epoch", run=run)
    epochs = sorted({r["epoch"] for r in recs})
    res.check(len(epochs) >= 2 and len(recs) == NRANKS * len(epochs), f"{run}: epoch records {recs}")
    for e in epochs:
        mine = [r for r in recs if r["epoch"] == e]
        res.check(len({r["digest"] for r in mine}) == 1, f"{run} epoch {e}: ranks' weights differ")
        worst = max(r["diff"] for r in mine)
        res.check(worst < tol, f"{run} epoch {e}: {worst:.3g} from the single-process weights")


def test_collectives_eager_and_tf_function(checks):
    assert_check(checks, "collectives")


def test_gradients_as_horovod_registers_them(checks):
    assert_check(checks, "gradients")


def test_layout_ops_broadcast_in_place_and_grouped_collectives(checks):
    assert_check(checks, "layout_ops_and_the_rest")


def test_partial_distributed_tape_and_optimizer_keep_local_gradients(checks):
    assert_check(checks, "partial_distributed")


def test_sync_batch_normalization_equals_the_union_batch(checks):
    assert_check(checks, "sync_batch_norm")


def test_graph_mode_collectives_run_in_program_order(checks):
    assert_check(checks, "graph_order")


def test_one_step_is_fused_into_threshold_buckets(checks):
    assert_check(checks, "fusion")


def test_model_fit_matches_one_process_on_union_batch(checks):
    assert_check(checks, "fit_matches_union")
    assert_training(checks, "fit")


def test_backward_passes_per_step(checks):
    assert_check(checks, "fit_backward_passes")
    assert_training(checks, "fit-passes2")


def test_gradient_tape_in_tf_function_matches_one_process(checks):
    assert_check(checks, "tape_in_tf_function")
    assert_training(checks, "tape")


def test_broadcast_callback_makes_ranks_identical(checks):
    assert_check(checks, "broadcast_callback")
    recs = rank_records(checks, NRANKS, "broadcast")
    checks.check(len({r["initial"] for r in recs.values()}) == NRANKS, "ranks did not start different")
    for field in ("at_start", "optimizer", "final"):
        checks.check(len({r[field] for r in recs.values()}) == 1, f"ranks' {field} digests differ")
    checks.check(recs[1]["at_start"] == recs[0]["initial"], "rank 1 did not start from rank 0's weights")


def test_metric_average_and_lr_warmup_callbacks(checks):
    assert_check(checks, "metric_average_and_warmup")


def test_mixed_precision_ranks_stay_identical(checks):
    assert_check(checks, "mixed_precision")


RANK_DEPENDENT = (
    "process_sets",
    "error_types",
    "adasum",
    "init_comm",
    "session_graphs",
    "mismatch_raises",
    "horovod_arithmetic",
    "compute_gradients",
)


# at 3 ranks: a part of the launch shared per world size (mpi_util.share), whose ranks
# import TensorFlow for tests/test_horovod_rules.py's part already
if importlib.util.find_spec("tensorflow") is not None:
    share(3, "tf rank dependent", {"script": "tf_checks.py", "args": list(RANK_DEPENDENT), "env": TF_ENV})


@pytest.fixture(scope="module", params=[3])
def more_ranks(request):
    """The RANK_DEPENDENT checks at 3 ranks: (result, number of ranks)."""
    return finished(shared_part(request.param, "tf rank dependent"), request.param), request.param


@pytest.mark.parametrize("name", RANK_DEPENDENT)
def test_rank_dependent_checks_at_2_ranks(checks, name):
    """process_sets: every collective, gradients, tapes and the layout ops on process sets.
    error_types: Horovod's tf.errors types. session_graphs: TF1 tf.compat.v1.Session graphs
    (one and several collectives per run, a DistributedOptimizer train op with the
    start-up broadcast and with BroadcastGlobalVariablesHook, tf.gradients, a process set).
    adasum: op=Adasum against the NumPy tree at 2 ranks, Horovod's refusal at 3.
    init_comm: init(comm=) with a list of ranks and with a split mpi4py communicator.
    mismatch_raises: FailedPreconditionError eagerly, in tf.function and in a Session, and
    init() goes on after it. horovod_arithmetic: scale factors, scalar reducescatter,
    grouped IndexedSlices, 21 collectives in one Session.run (issue 37). compute_gradients:
    DistributedOptimizer.(_)compute_gradients reduce, apply_gradients does not again."""
    assert_check(checks, name)


@pytest.mark.timeout(900)  # (the first of its world runs the shared launch)
@pytest.mark.parametrize("name", RANK_DEPENDENT)
def test_rank_dependent_checks_at_3_ranks(more_ranks, name):
    res, n = more_ranks
    assert_check(res, name, n)


def test_join_serves_allreduce_and_refuses_allgather(checks):
    assert_check(checks, "join_serves_allreduce")


def test_horovod_keras_script_runs_with_only_its_import_changed():
    text = EXAMPLE.read_text()
    imports = [ln for ln in text.splitlines() if "hvd" in ln and ln.lstrip().startswith("import")]
    assert imports == [
        "import rdmacoll.frameworks.tensorflow.keras as hvd  # was: import horovod.tensorflow.keras "
        "as hvd  # noqa: E402"
    ], imports
    res = run_mpi(
        NRANKS,
        EXAMPLE,
        ["--epochs", "2", "--steps-per-epoch", "6", "--batch-size", "16", "--threads", "1"],
        env=TF_ENV,
        timeout=200,
    )
    out = res.output()
    res.check(res.returncode == 0, "the example failed")
    res.check("Epoch 2/2" in out and "lr:" in out, "the example did not train two epochs")
