"""Bring every rank to rank root's model and optimizer: broadcast_parameters,
broadcast_optimizer_state, and the object helpers Horovod's torch module exports."""

from __future__ import annotations

import collections.abc

import torch

import rdmacoll as rc
from rdmacoll import RdmacollError

from .. import _join as joinable  # announced to ranks inside join() (which refuse them, as Horovod)
from ._rules import raising_as_horovod
from .ops import broadcast_async_, global_process_set
from .adasum_optimizer import _DistributedAdasumOptimizer
from .optimizer import _DistributedOptimizer


@raising_as_horovod
def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's picklable obj on every rank (of process_set; root_rank is a global rank)."""
    return joinable.broadcast_object(obj, root_rank, name, process_set)


@raising_as_horovod
def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's picklable obj, as a list in rank order (of process_set's ranks)."""
    return joinable.allgather_object(obj, name, process_set)


def _named_tensors(params):
    if isinstance(params, collections.abc.Mapping):
        items = list(params.items())
    elif isinstance(params, collections.abc.Iterable):
        items = []
        for i, p in enumerate(params):
            items.append(p if isinstance(p, tuple) and len(p) == 2 else (f"param.{i}", p))
    else:
        raise RdmacollError(
            f"broadcast_parameters: expected a state_dict or named_parameters(), got {type(params).__name__}"
        )
    for n, t in items:
        if not isinstance(t, torch.Tensor):
            raise RdmacollError(f"broadcast_parameters: {n!r} is a {type(t).__name__}, not a tensor")
    return items


@raising_as_horovod
def broadcast_parameters(params, root_rank=0, process_set=global_process_set):
    """Overwrite every rank's parameters (a state_dict or model.named_parameters()) with
    root_rank's, in place. Every rank must pass the same names, shapes and dtypes (a
    difference raises RdmacollError naming it). With a process_set, only its ranks take
    part (root_rank is a global rank in it); Horovod 0.28.1 has no process_set here."""
    handles = [
        broadcast_async_(t, root_rank, name=f"broadcast.{n}", process_set=process_set)
        for n, t in _named_tensors(params)
    ]
    for h in handles:
        h.wait()


class _TensorSlot:
    """A tensor's place in an optimizer state skeleton (what travels by pickle)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, t):
        self.shape, self.dtype = tuple(t.shape), t.dtype


def _skeleton(obj, tensors):
    """obj with every tensor replaced by a _TensorSlot; tensors collects them in order."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _TensorSlot(obj)
    if isinstance(obj, dict):
        return {k: _skeleton(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_skeleton(v, tensors) for v in obj)
    return obj


def _fill(obj, tensors):
    """The inverse of _skeleton on a receiving rank: fresh tensors where slots were."""
    if isinstance(obj, _TensorSlot):
        t = torch.empty(obj.shape, dtype=obj.dtype)
        tensors.append(t)
        return t
    if isinstance(obj, dict):
        return {k: _fill(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fill(v, tensors) for v in obj)
    return obj


def _initialize_state(optimizer, model):
    """Horovod's start for an optimizer without state (no step taken yet): a zero gradient
    for every parameter that requires one (sparse for SparseAdam, and for SGD on the
    sparse Embedding parameters of model), then one step of the optimizer itself (a
    DistributedOptimizer's own step would be a collective). LBFGS, whose step needs a
    closure, stays empty."""
    if isinstance(optimizer, torch.optim.LBFGS):
        return
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or (
                    isinstance(optimizer, torch.optim.SGD) and id(p) in sparse
                ):
                    p.grad = p.grad.to_sparse()
    # (the Adasum optimizer's step is a collective too: 0.1.x stepped it on the root only,
    # which then waited for peers inside the broadcast, a mismatch)
    for distributed in (_DistributedOptimizer, _DistributedAdasumOptimizer):
        if isinstance(optimizer, distributed):
            super(distributed, optimizer).step()
            return
    optimizer.step()


@raising_as_horovod
def broadcast_optimizer_state(optimizer, root_rank=0, model=None, process_set=global_process_set):
    """Give every rank root_rank's optimizer state (momentum buffers, Adam moments, step
    counts, LBFGS's history) and hyperparameters (learning rate...), e.g. after restoring
    a checkpoint on rank 0 or to repair a rank that diverged. Any torch.optim optimizer:
    the state_dict's structure, Python numbers included, travels pickled once; every
    tensor (whatever its shape: 0-d step counts too) travels by broadcast into a tensor of
    its own; the others load it with load_state_dict.

    An optimizer that took no step yet is first stepped with zero gradients, as Horovod
    does (model names sparse Embedding parameters for SGD, as in Horovod): on the root
    when its state is empty, and on a rank whose state is empty when the root's was too
    (the ranks then change their parameters alike, e.g. by weight decay; a rank whose
    state is empty while the root's is not just receives it). process_set: as for
    broadcast_parameters."""
    fresh = not optimizer.state_dict()["state"]
    tensors = []
    if rc.rank() == root_rank:
        if fresh:
            _initialize_state(optimizer, model)
        skeleton = _skeleton(optimizer.state_dict(), tensors)
        joinable.broadcast_object(
            (skeleton, fresh), root_rank, name="broadcast_optimizer_state", process_set=process_set
        )
    else:
        skeleton, root_fresh = joinable.broadcast_object(
            None, root_rank, name="broadcast_optimizer_state", process_set=process_set
        )
        if fresh and root_fresh:
            _initialize_state(optimizer, model)
        state = _fill(skeleton, tensors)
    handles = [
        broadcast_async_(
            t.contiguous() if not t.is_contiguous() else t,
            root_rank,
            name=f"optimizer_state.{i}",
            process_set=process_set,
        )
        for i, t in enumerate(tensors)
    ]
    for h in handles:
        h.wait()
    if rc.rank() != root_rank:
        optimizer.load_state_dict(state)
