"""The synchronous collectives of Horovod's torch API (allreduce, grouped_allreduce,
allgather, grouped_allgather, broadcast, alltoall, reducescatter, grouped_reducescatter):
through autograd.py when an input requires grad (the result then carries its gradient
back through the matching collective), else ops.py's asynchronous form and its wait."""

from __future__ import annotations

from rdmacoll import Average

from . import autograd
from .compression import Compression
from .ops import (
    allgather_async,
    allreduce_async,
    alltoall_async,
    broadcast_async,
    global_process_set,
    grouped_allgather_async,
    grouped_allreduce_async,
    grouped_reducescatter_async,
    reducescatter_async,
    resolve_op,
)


def allreduce(
    tensor,
    average=None,
    name=None,
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
):
    """tensor reduced across ranks (Average by default), as a new tensor (differentiable
    when tensor requires grad)."""
    if autograd.wanted(tensor):
        return autograd.Allreduce.apply(
            tensor, resolve_op(average, op), name, compression, prescale_factor, postscale_factor, process_set
        )
    return allreduce_async(
        tensor, average, name, op, prescale_factor, postscale_factor, process_set, compression
    ).wait()


def grouped_allreduce(
    tensors,
    average=None,
    name=None,
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
):
    tensors = list(tensors)
    if any(autograd.wanted(t) for t in tensors):
        return list(
            autograd.GroupedAllreduce.apply(
                resolve_op(average, op), name, compression, prescale_factor, postscale_factor, process_set, *tensors
            )
        )
    return grouped_allreduce_async(
        tensors, average, name, op, prescale_factor, postscale_factor, process_set, compression
    ).wait()


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along the first dimension (sizes may differ);
    differentiable when tensor requires grad."""
    if autograd.wanted(tensor):
        return autograd.Allgather.apply(tensor, name, process_set)
    return allgather_async(tensor, name, process_set).wait()


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor, as a new tensor on every rank (differentiable when tensor
    requires grad)."""
    if autograd.wanted(tensor):
        return autograd.Broadcast.apply(tensor, root_rank, name, process_set)
    return broadcast_async(tensor, root_rank, name, process_set).wait()


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """splits[j] rows of tensor to rank j; returns the rows every rank sent here (and, when
    splits is given, a tensor of how many came from each rank), as Horovod does."""
    if autograd.wanted(tensor):
        out, received = autograd.Alltoall.apply(tensor, splits, name, process_set)
        return out if splits is None else (out, received)
    return alltoall_async(tensor, splits, name, process_set).wait()


def reducescatter(
    tensor,
    name=None,
    compression=Compression.none,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    """The reduction of tensor across ranks, split along the first dimension (the first
    rows % size ranks get one row more); differentiable when tensor requires grad."""
    x, ctx = compression.compress(tensor)
    if autograd.wanted(x):
        out = autograd.Reducescatter.apply(
            x, name, resolve_op(None, op), process_set, prescale_factor, postscale_factor
        )
    else:
        out = reducescatter_async(x, name, op, process_set, prescale_factor, postscale_factor).wait()
    return compression.decompress(out, ctx)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Each tensor concatenated with the same tensor of every rank along the first
    dimension, as one operation; a tuple, differentiable where a tensor requires grad."""
    tensors = list(tensors)
    if any(autograd.wanted(t) for t in tensors):
        return autograd.GroupedAllgather.apply(name, process_set, *tensors)
    return grouped_allgather_async(tensors, name, process_set).wait()


def grouped_reducescatter(
    tensors,
    name=None,
    compression=Compression.none,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    """Each tensor reduced across ranks and split along the first dimension, as one
    operation per dtype; a list, differentiable where a tensor requires grad."""
    packed = [compression.compress(t) for t in tensors]
    xs = [x for x, _ in packed]
    if any(autograd.wanted(x) for x in xs):
        out = autograd.GroupedReducescatter.apply(
            name, resolve_op(None, op), process_set, prescale_factor, postscale_factor, *xs
        )
    else:
        out = grouped_reducescatter_async(xs, name, op, process_set, prescale_factor, postscale_factor).wait()
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(out, packed)]
