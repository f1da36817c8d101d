"""hvd.SyncBatchNorm (CPU) under mpiexec at 3 ranks with different batch sizes: every
rank's output, gradients and running statistics equal torch's BatchNorm on the union of
the batches (workers/torch_sync_bn.py)."""

import importlib.util

import pytest

from mpi_util import rank_records, run_mpi

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")


def test_sync_batch_norm_equals_batch_norm_on_the_union_batch():
    res = run_mpi(3, "torch_sync_bn.py", timeout=120)
    rank_records(res, 3, "done")
    checks = res.select(kind="check")
    res.check(len(checks) == 3 * (2 * 2 * 7 + 1), f"{len(checks)} checks")
    bad = [c for c in checks if not c["ok"]]
    res.check(not bad, "; ".join(f"rank {c['rank']} {c['name']}: {c['detail']}" for c in bad[:6]))
    res.check(res.returncode == 0, "the launch failed")
