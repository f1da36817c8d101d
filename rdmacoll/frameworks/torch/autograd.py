"""Gradients through collectives, as Horovod's torch functions have them: allreduce,
grouped_allreduce, allgather, broadcast, alltoall and reducescatter of tensors that
require grad return results autograd can differentiate. The backward pass is itself a
collective (every rank must run it), with Horovod's rules: allreduce's and
grouped_allreduce's gradients are reduced with the same op and scaling; allgather's and
broadcast's gradients are averaged, then this rank's rows (allgather) or, on the root
only, the whole gradient (broadcast) are kept; alltoall's goes back with the received
splits; reducescatter's is allgathered (times the size for Sum, as Horovod)."""
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


class GroupedAllreduce(torch.autograd.Function):
    """Horovod's HorovodGroupedAllreduce: the gradients are reduced as one group, with the
    forward pass's op and scale factors."""

    @staticmethod
    def forward(ctx, op, name, compression, prescale, postscale, *tensors):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return tuple(ops.grouped_allreduce_async(list(tensors), None, name, op, prescale, postscale, None,
                                                 compression).wait())

    @staticmethod
    def backward(ctx, *grads):
        if ctx.op not in (ops.Sum, ops.Average):
            raise RdmacollError("grouped_allreduce has a gradient only for op=Sum or op=Average")
        g = ops.grouped_allreduce_async([x.contiguous() for x in grads], None, None, ctx.op, ctx.prescale,
                                        ctx.postscale).wait()
        return (None, None, None, None, None, *g)


class Alltoall(torch.autograd.Function):
    """Horovod's HorovodAlltoall: the gradient goes back with the rows received from each
    rank as its splits. Returns (output, received splits); the splits carry no gradient."""

    @staticmethod
    def forward(ctx, tensor, splits, name):
        if splits is None:  # (explicit even splits: the backward pass needs what was received)
            p = rc.size()
            rows = tensor.shape[0] if tensor.dim() else 1
            splits = [rows // p] * p if rows % p == 0 else None
        out = ops.alltoall_async(tensor, splits, name).wait()
        output, received = out if isinstance(out, tuple) else (out, None)
        ctx.received = received
        if received is None:
            received = torch.zeros(0, dtype=torch.int32)
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, _dead):
        back, _ = ops.alltoall_async(grad.contiguous(), ctx.received).wait()
        return back, None, None


class Reducescatter(torch.autograd.Function):
    """Horovod's HorovodReducescatter: the gradient times the size for Sum (as Horovod,
    not for Average), times the scale factors, allgathered."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return ops.reducescatter_async(tensor, name, op, None, prescale, postscale).wait()

    @staticmethod
    def backward(ctx, grad):
        g = grad * rc.size() if ctx.op == ops.Sum else grad
        g = g * ctx.prescale * ctx.postscale if (ctx.prescale, ctx.postscale) != (1.0, 1.0) else g
        return ops.allgather_async(g.contiguous()).wait(), None, None, None, None
