"""Gradients through collectives, as Horovod's torch functions have them: allreduce,
allgather and broadcast of a tensor that requires grad return a result autograd can
differentiate. The backward pass is itself a collective (every rank must run it), with
Horovod's rules: allreduce's gradient is reduced with the same op and scaling; allgather's
and broadcast's gradients are averaged, then this rank's rows (allgather) or, on the root
only, the whole gradient (broadcast) are kept."""
from __future__ import annotations

import torch

import rdmacoll as rc
from rdmacoll import RdmacollError

from . import ops


def wanted(tensor) -> bool:
    """True when the result must carry a gradient back to tensor."""
    return (isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()
            and tensor.layout == torch.strided)


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, compression, prescale, postscale):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return ops.allreduce_async(tensor, None, name, op, prescale, postscale, None, compression).wait()

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (ops.Sum, ops.Average):
            raise RdmacollError("allreduce has a gradient only for op=Sum or op=Average")
        g = ops.allreduce_async(grad.contiguous(), None, None, ctx.op, ctx.prescale, ctx.postscale).wait()
        return g, None, None, None, None, None


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        return ops.allgather_async(tensor, name).wait()

    @staticmethod
    def backward(ctx, grad):
        g = ops.allreduce_async(grad.contiguous(), None, None, ops.Average).wait()
        rows = ops.allgather_async(torch.tensor([ctx.rows], dtype=torch.int64)).wait().tolist()
        start = sum(rows[:rc.rank()])
        return g.narrow(0, start, ctx.rows), None


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root = root_rank
        return ops.broadcast_async(tensor, root_rank, name).wait()

    @staticmethod
    def backward(ctx, grad):
        g = ops.allreduce_async(grad.contiguous(), None, None, ops.Average).wait()
        return (g if rc.rank() == ctx.root else torch.zeros_like(g)), None, None
