"""DistributedOptimizer misuse gives a clear RdmacollError, never a hang or a diluted
average. One record "error_case" per check (with "error": the message, or None); the last
case (a rank skipping backward) leaves the job aborted, so it runs last.
"""

import torch
import torch.nn.functional as F
from common import emit
from torch.utils.checkpoint import checkpoint

import rdmacoll.frameworks.torch as hvd


def error_of(fn):
    try:
        fn()
    except hvd.RdmacollError as e:
        return str(e)
    return None


def run():
    """The checks, one record "error_case" each; the job is aborted afterwards."""
    r = hvd.rank()
    torch.manual_seed(3)
    x, y = torch.randn(4, 8).requires_grad_(), torch.randn(4, 8)

    # A layer used in two reentrant checkpointed segments: its hook fires twice per pass.
    lin = torch.nn.Linear(8, 8)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=0.1))

    def reentrant():
        h = checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=True)
        h = checkpoint(lambda t: torch.tanh(lin(t)), h, use_reentrant=True)
        F.mse_loss(h, y).backward()

    emit("error_case", case="reentrant", error=error_of(reentrant))
    hvd.allreduce(torch.ones(1))  # queued reductions finish; the job goes on

    # More backward passes than backward_passes_per_step.
    lin2 = torch.nn.Linear(8, 8)
    opt2 = hvd.DistributedOptimizer(torch.optim.SGD(lin2.parameters(), lr=0.1), backward_passes_per_step=2)

    def three_passes():
        for _ in range(3):
            F.mse_loss(lin2(x), y).backward()

    emit("error_case", case="too_many_passes", error=error_of(three_passes))
    hvd.allreduce(torch.ones(1))

    # The non-reentrant checkpoint is fine, and matches the plain computation.
    lin3 = torch.nn.Linear(8, 8)
    opt3 = hvd.DistributedOptimizer(torch.optim.SGD(lin3.parameters(), lr=0.1))
    h = checkpoint(lambda t: torch.tanh(lin3(t)), x, use_reentrant=False)
    F.mse_loss(checkpoint(lambda t: torch.tanh(lin3(t)), h, use_reentrant=False), y).backward()
    opt3.step()
    emit("error_case", case="non_reentrant_ok", error=None, copies=opt3.stats["copies"])

    # A rank that calls step() without backward: every rank raises.
    opt3.zero_grad()
    if r != 1:
        F.mse_loss(lin3(x), y).backward()
    emit("error_case", case="no_backward", error=error_of(opt3.step))
    del opt, opt2
