"""DistributedOptimizer(op=Adasum): Horovod 0.28.1's _DistributedAdasumOptimizer
(horovod/torch/optimizer.py). Each rank applies the wrapped optimizer to its own
gradients; what is combined across ranks is the change that step made to each parameter
(its delta), by Adasum (rdmacoll/adasum.py), and every rank's parameters become the
parameters before the step plus the combined delta. The wrapped optimizer's state
(momentum, Adam's moments) stays each rank's own, as in Horovod.

Horovod steps each parameter in its gradient hook during backward and reduces that
parameter's delta at once; here step() does it for every parameter together: the wrapped
optimizer's step, then one Adasum of all deltas (fused per dtype, each parameter with its
own coefficients, as Horovod's fused entries have). The parameters are the same; the
work runs after backward instead of overlapping it. As Horovod's: synchronize() does
nothing, entering skip_synchronize() raises AssertionError, compression applies to the
deltas, and a number of ranks that is not a power of two raises NotImplementedError
(at step() here, in backward there).
"""

from __future__ import annotations

import contextlib

import torch

import rdmacoll as rc
from rdmacoll import RdmacollError

from .. import _join as joinable  # announced to ranks inside join()
from ._params import collect_params, name_params
from ._rules import RULES
from ._tensors import contiguous, on_host, to_torch
from .ops import global_process_set


class _DistributedAdasumOptimizer:
    """Mixed in before the user's optimizer class (isinstance checks keep working)."""

    def _rc_adasum_setup(self, named_parameters, compression):
        self._rc_compression = compression
        # Horovod's checks of named_parameters (the names themselves are not needed here)
        name_params(named_parameters, collect_params(self))

    def synchronize(self):
        """Nothing to wait for: step() reduces (as Horovod's Adasum optimizer)."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # (a generator: the error comes on entering the with block, as Horovod's)

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        RULES.check_adasum(True, rc.size())
        # every group's, now (add_param_group's included, which Horovod never steps)
        params = [p for p in collect_params(self) if p.requires_grad]
        with torch.no_grad():
            starts = [p.detach().clone() for p in params]
            super().step()
            packed = []
            for p, start in zip(params, starts):
                p.sub_(start)  # p holds this rank's delta
                c, ctx = self._rc_compression.compress(p.detach())
                packed.append((contiguous(c), ctx))
            reduced = joinable.grouped_allreduce([on_host(c) for c, _ in packed], op=rc.Adasum, name="adasum.step")
            for p, start, (c, ctx), r in zip(params, starts, packed, reduced):
                start.add_(self._rc_compression.decompress(to_torch(r, c.device).view(c.shape), ctx))
                p.copy_(start)
        return loss


def adasum_optimizer(
    optimizer, named_parameters, compression, backward_passes_per_step, gradient_predivide_factor, process_set
):
    """DistributedOptimizer(op=Adasum), with Horovod's checks in Horovod's order; None on
    one rank, where Horovod builds its plain optimizer with op=Sum instead (optimizer.py's
    DistributedOptimizer then does)."""
    RULES.check_optimizer(rc.Adasum, gradient_predivide_factor, backward_passes_per_step)
    if rc.size() == 1:  # Horovod's plain optimizer then, whose Adasum of one rank is the identity
        return None
    RULES.check_adasum(process_set is None or process_set is global_process_set, 1)  # (the size: at step())
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise RdmacollError(f"DistributedOptimizer needs a torch.optim.Optimizer, got {type(optimizer).__name__}")
    cls = type(optimizer.__class__.__name__, (_DistributedAdasumOptimizer, optimizer.__class__), {})
    dist = cls.__new__(cls)
    dist.__dict__.update(optimizer.__dict__)
    dist._rc_adasum_setup(named_parameters, compression)
    return dist
