"""Gradients through collectives, as Horovod's torch functions have them: allreduce,
grouped_allreduce, allgather, grouped_allgather, broadcast, alltoall, reducescatter and
grouped_reducescatter of tensors that require grad return results autograd can
differentiate. The backward pass is itself a collective on the forward pass's process set
(every member must run it), with Horovod's rules: allreduce's and grouped_allreduce's
gradients are reduced with the same op and scaling; allgather's and broadcast's gradients
are averaged, then this rank's rows (allgather, at its position in the set) or, on the
root only, the whole gradient (broadcast) are kept; alltoall's goes back with the received
splits; reducescatter's is allgathered (times the set's size for Sum, as Horovod)."""

from __future__ import annotations

import torch

import rdmacoll as rc
from rdmacoll import RdmacollError

from . import ops


def wanted(tensor) -> bool:
    """True when the result must carry a gradient back to tensor."""
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.requires_grad
        and torch.is_grad_enabled()
        and tensor.layout == torch.strided
    )


def _global(process_set):
    """Horovod's default process set stands for None (the forward functions' argument)."""
    return ops.global_process_set if process_set is None else process_set


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, compression, prescale, postscale, process_set):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale, postscale, process_set
        return ops.allreduce_async(tensor, None, name, op, prescale, postscale, process_set, compression).wait()

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (ops.Sum, ops.Average):
            raise RdmacollError("allreduce has a gradient only for op=Sum or op=Average")
        g = ops.allreduce_async(
            grad.contiguous(), None, None, ctx.op, ctx.prescale, ctx.postscale, ctx.process_set
        ).wait()
        return g, None, None, None, None, None, None


def _own_rows(grads, rows, process_set):
    """Horovod's allgather gradient: the gradients averaged over the set, then the rows
    this rank contributed (it is at position process_set.rank() of the set)."""
    reduced = ops.grouped_allreduce_async(
        [g.contiguous() for g in grads], None, None, ops.Average, process_set=process_set
    ).wait()
    counts = ops.grouped_allgather_async(
        [torch.tensor([n], dtype=torch.int64) for n in rows], process_set=process_set
    ).wait()
    me = _global(process_set).rank()
    return [g.narrow(0, int(c[:me].sum()), n) for g, c, n in zip(reduced, counts, rows)]


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows, ctx.process_set = tensor.shape[0] if tensor.dim() else 1, process_set
        return ops.allgather_async(tensor, name, process_set).wait()

    @staticmethod
    def backward(ctx, grad):
        return _own_rows([grad], [ctx.rows], ctx.process_set)[0], None, None


class GroupedAllgather(torch.autograd.Function):
    """Horovod's HorovodGroupedAllgather: the gradients averaged as one group, then each
    tensor's rows of this rank."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows, ctx.process_set = [t.shape[0] if t.dim() else 1 for t in tensors], process_set
        return ops.grouped_allgather_async(list(tensors), name, process_set).wait()

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, *_own_rows(grads, ctx.rows, ctx.process_set))


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root, ctx.process_set = root_rank, process_set
        return ops.broadcast_async(tensor, root_rank, name, process_set).wait()

    @staticmethod
    def backward(ctx, grad):
        g = ops.allreduce_async(grad.contiguous(), None, None, ops.Average, process_set=ctx.process_set).wait()
        return (g if rc.rank() == ctx.root else torch.zeros_like(g)), None, None, None


class GroupedAllreduce(torch.autograd.Function):
    """Horovod's HorovodGroupedAllreduce: the gradients are reduced as one group, with the
    forward pass's op and scale factors."""

    @staticmethod
    def forward(ctx, op, name, compression, prescale, postscale, process_set, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale, postscale, process_set
        return tuple(
            ops.grouped_allreduce_async(
                list(tensors), None, name, op, prescale, postscale, process_set, compression
            ).wait()
        )

    @staticmethod
    def backward(ctx, *grads):
        if ctx.op not in (ops.Sum, ops.Average):
            raise RdmacollError("grouped_allreduce has a gradient only for op=Sum or op=Average")
        g = ops.grouped_allreduce_async(
            [x.contiguous() for x in grads], None, None, ctx.op, ctx.prescale, ctx.postscale, ctx.process_set
        ).wait()
        return (None, None, None, None, None, None, *g)


class Alltoall(torch.autograd.Function):
    """Horovod's HorovodAlltoall: the gradient goes back with the rows received from each
    rank as its splits. Returns (output, received splits); the splits carry no gradient."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        if splits is None:  # (explicit even splits: the backward pass needs what was received)
            p = _global(process_set).size()
            rows = tensor.shape[0] if tensor.dim() else 1
            splits = [rows // p] * p if rows % p == 0 else None
        out = ops.alltoall_async(tensor, splits, name, process_set).wait()
        output, received = out if isinstance(out, tuple) else (out, None)
        ctx.received, ctx.process_set = received, process_set
        if received is None:
            received = torch.zeros(0, dtype=torch.int32)
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, _dead):
        back, _ = ops.alltoall_async(grad.contiguous(), ctx.received, process_set=ctx.process_set).wait()
        return back, None, None, None


def _scatter_grads(ctx, grads):
    """Horovod's reducescatter gradient before its allgather: times the set's size for
    Sum (not for Average), times the scale factors."""
    if ctx.op == ops.Sum:
        grads = [g * _global(ctx.process_set).size() for g in grads]
    if ctx.prescale != 1.0:
        grads = [g * ctx.prescale for g in grads]
    if ctx.postscale != 1.0:
        grads = [g * ctx.postscale for g in grads]
    return [g.contiguous() for g in grads]


class Reducescatter(torch.autograd.Function):
    """Horovod's HorovodReducescatter: the scaled gradient (_scatter_grads), allgathered."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale, postscale, process_set
        return ops.reducescatter_async(tensor, name, op, process_set, prescale, postscale).wait()

    @staticmethod
    def backward(ctx, grad):
        g = _scatter_grads(ctx, [grad])[0]
        return ops.allgather_async(g, process_set=ctx.process_set).wait(), None, None, None, None, None


class GroupedReducescatter(torch.autograd.Function):
    """Horovod's HorovodGroupedReducescatter: the scaled gradients, allgathered as a group."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale, postscale, process_set
        return ops.grouped_reducescatter_async(list(tensors), name, op, process_set, prescale, postscale).wait()

    @staticmethod
    def backward(ctx, *grads):
        g = ops.grouped_allgather_async(_scatter_grads(ctx, grads), process_set=ctx.process_set).wait()
        return (None, None, None, None, None, *g)
