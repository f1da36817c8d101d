"""Horovod's SyncBatchNorm, on CPU tensors: in training, batch statistics over every
rank's batch (counts may differ between ranks), so each rank's output, running
statistics and input gradient are those of torch's BatchNorm over the union of the
batches. Horovod's own needs a GPU (torch.batch_norm_stats); this one is built from
differentiable torch ops and rdmacoll's allreduce, whose gradient (the allreduce of the
gradient, as Horovod's) carries every rank's part of the statistics' gradient back.

Per call in training: two allreduces of 2C+1 and C values (C channels): the sums and the
count, then the squared deviations from the union mean (two passes: exact where one
pass, E[x^2] - E[x]^2, loses digits when the mean is large against the spread)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

import rdmacoll as rc

from . import collectives, ops


class SyncBatchNorm(_BatchNorm):
    """torch.nn.BatchNorm*d whose training statistics are the job's (any input of at
    least 2 dimensions, channels in dimension 1)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
        if (not self.training and self.track_running_stats) or rc.size() == 1:
            return F.batch_norm(
                input,
                self.running_mean,
                self.running_var,
                self.weight,
                self.bias,
                self.training or not self.track_running_stats,
                self._factor(),
                self.eps,
            )
        dims = [0] + list(range(2, input.dim()))
        shape = [1, -1] + [1] * (input.dim() - 2)
        c = self.num_features
        local = torch.cat([input.sum(dims), input.new_tensor([input.numel() // c])])
        total = collectives.allreduce(local, op=ops.Sum, name="sync_batch_norm.sum")
        count = total[c]
        mean = total[:c] / count
        centered = input - mean.view(shape)
        var = collectives.allreduce((centered * centered).sum(dims), op=ops.Sum, name="sync_batch_norm.var") / count
        if self.training and self.track_running_stats:
            with torch.no_grad():
                f = self._factor()
                n = float(count)
                self.running_mean.mul_(1 - f).add_(mean.detach(), alpha=f)
                self.running_var.mul_(1 - f).add_(var.detach() * (n / max(n - 1, 1)), alpha=f)
        out = centered * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    def _factor(self) -> float:
        """The running statistics' update weight: momentum, or (momentum None) the
        cumulative average's 1 / batches seen."""
        if self.momentum is not None:
            return self.momentum
        return 1.0 / float(self.num_batches_tracked) if self.track_running_stats else 0.0
