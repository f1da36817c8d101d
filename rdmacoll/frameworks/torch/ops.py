"""Horovod's torch collectives over rdmacoll's core: tensors go in as views, never copied
(a non-contiguous tensor is made contiguous first; compression and scaling make copies).

Handles are rdmacoll.Handle objects (Horovod's are ints): pass them to poll() /
synchronize(); an adapter's result is Handle(core_handle, then=finish). The synchronous,
differentiable forms (allreduce, allgather...) are collectives.py's.
"""

from __future__ import annotations

import torch

import rdmacoll as rc
from rdmacoll import Handle, RdmacollError, global_process_set
from rdmacoll import ProcessSet, add_process_set, remove_process_set  # noqa: F401  (re-exported)
from rdmacoll.process_sets import comm_of, ranks_of

from .._horovod import BAD_ARGUMENT
from ._rules import RULES, reraise
from ._tensors import check_reducible, check_tensor, contiguous, on_host, scale_, to_core, to_torch
from .. import _join as joinable  # the collectives, announced to ranks inside join()
from .compression import Compression
from .join import join as _join_protocol

Average, Sum, Min, Max, Product, Adasum = rc.Average, rc.Sum, rc.Min, rc.Max, rc.Product, rc.Adasum
_OPS = {Average, Sum, Min, Max, Product, Adasum}


def _set_size(process_set):
    return rc.size() if process_set is None or process_set is global_process_set else process_set.size()


def resolve_op(average=None, op=None):
    """Horovod's rules (../_horovod.py): op wins; average=True/False means Average/Sum;
    default Average."""
    return RULES.resolve_op(average, op, stacklevel=4)


class _Handle(Handle):
    """rdmacoll's Handle, whose wait() raises a failed collective as Horovod's torch ops do:
    HorovodInternalError (an RdmacollError), argument errors as they are."""

    def wait(self):
        try:
            return super().wait()
        except RdmacollError as e:
            reraise(e)


def poll(handle) -> bool:
    """True once the operation behind handle has finished (never blocks)."""
    return handle.poll()


def synchronize(handle):
    """Wait for an asynchronous operation and return its result (a failed collective raises
    HorovodInternalError, as Horovod's)."""
    try:
        return handle.wait()
    except RdmacollError as e:
        reraise(e)


_scale = scale_  # Horovod's ScaleBuffer (see _tensors.scale_)


def _adasum_rules(process_set, *tensors):
    """Horovod's refusals of op=Adasum, in its order, before communicating (the reduction
    itself is the plain API's, rdmacoll/adasum.py: float16/32/64 only, run in the call, on
    host memory: CUDA tensors are refused here)."""
    RULES.check_adasum(process_set is None or process_set is global_process_set, rc.size())
    if any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in tensors):
        raise RdmacollError(
            "op=Adasum takes CPU tensors (rdmacoll runs Adasum on host memory); reduce CUDA tensors with "
            "Sum or Average, or move them to the CPU"
        )


def _fold_average(op, postscale_factor, size):
    return RULES.fold_average(op, postscale_factor, size)


class _NamesInFlight:
    """Horovod's tensor table, as far as names go: a name may not be reused while the
    operation that carries it is in flight (ValueError, before communicating)."""

    def __init__(self):
        self._handles = {}

    def check(self, name):
        if name is None:
            return
        h = self._handles.get(name)
        if h is None:
            return
        if not self._done(h):
            raise RULES.error(
                BAD_ARGUMENT,
                "Requested to allreduce, allgather, or broadcast a tensor with the same name as "
                f"another tensor that is currently being processed ({name!r}). If you want to "
                "request another tensor, use a different tensor name.",
            )
        del self._handles[name]

    def started(self, name, handle):
        if name is not None:
            if len(self._handles) >= 256:  # names used once (f"loss.{step}"): forget finished ones
                self._handles = {n: h for n, h in self._handles.items() if not self._done(h)}
            self._handles[name] = handle
        return handle

    @staticmethod
    def _done(handle):
        try:
            return handle.poll()
        except Exception:  # it failed: it is over, its error belongs to its own waiter
            return True


_in_flight = _NamesInFlight()  # process-wide, as Horovod's tensor table


def _private(x, source):
    """x, or a copy of it when it shares memory with the caller's tensor source."""
    if x.untyped_storage().data_ptr() == source.untyped_storage().data_ptr():
        return x.clone()
    return x


def _in_place(tensor):
    """(work, copy_back): the memory to reduce into (tensor's own when contiguous, else a
    contiguous copy) and the function that finishes: copy_back(work) -> tensor."""
    if tensor.is_contiguous():
        return tensor.detach(), lambda work: tensor

    def copy_back(work):
        tensor.detach().copy_(work)
        return tensor

    return tensor.detach().contiguous(), copy_back


# --------------------------------------------------------------------------- allreduce


def allreduce_async(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    compression=Compression.none,
):
    """Start reducing tensor across ranks (of process_set); synchronize(handle) returns a
    new tensor."""
    op = resolve_op(average, op)  # Horovod's order: op, Adasum, dtype (Python), then the set (enqueue)
    if op == Adasum:
        _adasum_rules(process_set, tensor)
    check_reducible(tensor, "allreduce input")  # sparse tensors: ValueError (sparse_allreduce_async)
    if process_set is not global_process_set and process_set is not None:  # (the fast path: two identity tests)
        comm_of(process_set, "Allreduce")
    _in_flight.check(name)
    op, postscale_factor = _fold_average(op, postscale_factor, _set_size(process_set))
    x, ctx = compression.compress(tensor.detach())
    x = contiguous(x)
    if prescale_factor != 1.0:
        x = _scale(_private(x, tensor), prescale_factor)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    h = _in_flight.started(
        name, joinable.allreduce_async(to_core(x), op=op, name=name, out=to_core(out), process_set=process_set)
    )

    def finish(_):
        return compression.decompress(_scale(out, postscale_factor), ctx)

    return _Handle(h, finish)


def allreduce_async_(
    tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set
):
    """Start reducing tensor in place; synchronize(handle) returns tensor."""
    op = resolve_op(average, op)
    if op == Adasum:
        _adasum_rules(process_set, tensor)
    check_reducible(tensor, "allreduce_ input")
    if process_set is not global_process_set and process_set is not None:
        comm_of(process_set, "Allreduce")
    _in_flight.check(name)
    op, postscale_factor = _fold_average(op, postscale_factor, _set_size(process_set))
    work, copy_back = _in_place(tensor)
    _scale(work, prescale_factor)
    a = to_core(work)
    h = _in_flight.started(name, joinable.allreduce_async(a, op=op, name=name, out=a, process_set=process_set))
    return _Handle(h, lambda _: copy_back(_scale(work, postscale_factor)))


def allreduce_(
    tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set
):
    """Reduce tensor in place; returns tensor."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set).wait()


def _grouped(tensors, op, name, prescale_factor, postscale_factor, compression, inplace, process_set):
    if op == Adasum:
        _adasum_rules(process_set, *tensors)
    for i, t in enumerate(tensors):
        check_reducible(t, f"grouped_allreduce input {i}", "grouped_allreduce")
    if process_set is not global_process_set and process_set is not None:
        comm_of(process_set, "Allreduce")
    _in_flight.check(name)
    op, postscale_factor = _fold_average(op, postscale_factor, _set_size(process_set))
    packed = []
    for t in tensors:
        x, ctx = compression.compress(t.detach())
        x = contiguous(x)
        if prescale_factor != 1.0:
            x = _scale(_private(x, t), prescale_factor)
        packed.append((x, ctx))
    h = _in_flight.started(
        name,
        joinable.grouped_allreduce_async([on_host(x) for x, _ in packed], op=op, name=name, process_set=process_set),
    )

    def finish(results):
        out = []
        for t, (x, ctx), r in zip(tensors, packed, results):
            r = compression.decompress(_scale(to_torch(r, x.device).view(x.shape), postscale_factor), ctx)
            if inplace:
                t.detach().copy_(r)
                r = t
            out.append(r)
        return out

    return _Handle(h, finish)


def grouped_allreduce_async(
    tensors,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    compression=Compression.none,
):
    """Reduce a list of tensors as one fused operation per dtype; returns a handle whose
    result is a list of new tensors."""
    return _grouped(
        list(tensors), resolve_op(average, op), name, prescale_factor, postscale_factor, compression, False, process_set
    )


def grouped_allreduce_async_(
    tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set
):
    """In-place form of grouped_allreduce_async; the result is the list of inputs."""
    return _grouped(
        list(tensors),
        resolve_op(average, op),
        name,
        prescale_factor,
        postscale_factor,
        Compression.none,
        True,
        process_set,
    )


def grouped_allreduce_(
    tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set
):
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set).wait()


# --------------------------------------------------------------------------- the others


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _allgather_async(tensor, name, process_set, joinable.allgather_async)


def served_allgather_async(tensor, name=None, process_set=global_process_set):
    """allgather_async, never refused while a rank is in hvd.join(): a joined rank takes
    part with no rows (../_join.py). For DistributedOptimizer's sparse gradients, where a
    joined rank's gradient is empty (Horovod refuses these; rdmacoll serves them)."""
    return _allgather_async(tensor, name, process_set, rc.allgather_async)


def _allgather_async(tensor, name, process_set, start):
    if process_set is not global_process_set and process_set is not None:
        comm_of(process_set, "Allgather")
    check_tensor(tensor, "allgather input")
    _check_rows(tensor, "Allgather")
    _in_flight.check(name)
    x = contiguous(tensor.detach())
    return _Handle(_in_flight.started(name, start(to_core(x), name=name, process_set=process_set)), to_torch)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    check_tensor(tensor, "broadcast_ input", "broadcast")
    RULES.check_root(root_rank, ranks_of(process_set))
    _in_flight.check(name)
    work, copy_back = _in_place(tensor)
    a = to_core(work)
    return _Handle(
        _in_flight.started(name, joinable.broadcast_async(a, root_rank, name=name, out=a, process_set=process_set)),
        lambda _: copy_back(work),
    )


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrite tensor with root_rank's, in place; returns tensor."""
    return broadcast_async_(tensor, root_rank, name, process_set).wait()


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    check_tensor(tensor, "broadcast input", "broadcast")
    return broadcast_async_(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank, name, process_set)


def _splits_list(splits, rows, size):
    """Horovod's checks of alltoall's splits (../_horovod.py), before communicating: a list,
    or a 1-D int32 tensor, of size() entries whose sum is at most rows (the rows past the
    sum are not sent); without splits, rows must divide evenly."""
    if splits is None:
        return RULES.alltoall_splits(rows, None, size)
    if not isinstance(splits, torch.Tensor):
        splits = torch.tensor(splits, dtype=torch.int32)  # (what Horovod does with a list)
    return RULES.alltoall_splits(
        rows, splits.reshape(-1).tolist(), size, splits.dim(), str(splits.dtype).replace("torch.", "")
    )


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    if process_set is not global_process_set and process_set is not None:
        comm_of(process_set, "Alltoall")
    check_tensor(tensor, "alltoall input", "alltoall")
    rows = tensor.shape[0] if tensor.dim() else 1
    send = _splits_list(splits, rows, _set_size(process_set))
    _in_flight.check(name)
    x = contiguous(tensor.detach())
    if send is not None and sum(send) < rows:
        x = x[: sum(send)]  # Horovod sends only the rows the splits cover
    h = _in_flight.started(
        name,
        joinable.alltoall_async(to_core(x), send, name=name, return_received_splits=True, process_set=process_set),
    )

    def finish(result):
        data, received = result
        out = to_torch(data)
        return out if splits is None else (out, torch.as_tensor(received, dtype=torch.int32))

    return _Handle(h, finish)


def _check_rows(tensor, what):
    """Horovod's refusal of scalars (before communicating): these collectives split or
    concatenate along the first dimension."""
    RULES.check_rows(tensor.dim(), what)


def reducescatter_async(
    tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0
):
    if process_set is not global_process_set and process_set is not None:
        comm_of(process_set, "Reducescatter")
    op = resolve_op(None, op)
    check_reducible(tensor, "reducescatter input", "reducescatter")
    _check_rows(tensor, "Reducescatter")
    _in_flight.check(name)
    op, postscale_factor = _fold_average(op, postscale_factor, _set_size(process_set))
    x = contiguous(tensor.detach())
    if prescale_factor != 1.0:
        x = _scale(_private(x, tensor), prescale_factor)
    h = _in_flight.started(name, joinable.reducescatter_async(to_core(x), op=op, name=name, process_set=process_set))
    return _Handle(h, lambda r: _scale(to_torch(r), postscale_factor))


# --------------------------------------------------------------------------- grouped allgather / reducescatter


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Start allgathering a list of tensors as one operation; synchronize(handle) returns
    a tuple of new tensors (each concatenated along the first dimension)."""
    if process_set is not global_process_set and process_set is not None:
        comm_of(process_set, "Allgather")
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        check_tensor(t, f"grouped_allgather input {i}", "grouped_allgather")
        _check_rows(t, "Allgather")
    _in_flight.check(name)
    h = joinable.grouped_allgather_async(
        [on_host(contiguous(t.detach())) for t in tensors], name=name, process_set=process_set
    )
    return _Handle(
        _in_flight.started(name, h), lambda results: tuple(to_torch(r, t.device) for r, t in zip(results, tensors))
    )


def grouped_reducescatter_async(
    tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0
):
    """Start reducescattering a list of tensors as one operation per dtype;
    synchronize(handle) returns a tuple of new tensors."""
    if process_set is not global_process_set and process_set is not None:
        comm_of(process_set, "Reducescatter")
    op = resolve_op(None, op)
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        check_reducible(t, f"grouped_reducescatter input {i}", "grouped_reducescatter")
        _check_rows(t, "Reducescatter")
    _in_flight.check(name)
    op, postscale_factor = _fold_average(op, postscale_factor, _set_size(process_set))
    xs = []
    for t in tensors:
        x = contiguous(t.detach())
        xs.append(_scale(_private(x, t), prescale_factor) if prescale_factor != 1.0 else x)
    h = joinable.grouped_reducescatter_async([on_host(x) for x in xs], op=op, name=name, process_set=process_set)
    return _Handle(
        _in_flight.started(name, h),
        lambda results: tuple(_scale(to_torch(r, x.device), postscale_factor) for r, x in zip(results, xs)),
    )


def barrier(process_set=global_process_set):
    try:
        joinable.barrier(process_set)
    except RdmacollError as e:
        reraise(e)


def join(device=-1):
    """Called by a rank that ran out of data: until every rank has joined, it takes part
    with zeros in the allreduces, grouped allreduces, barriers and DistributedOptimizer
    steps the others still issue (Average still divides by size(), as Horovod's).
    Allgather, broadcast, alltoall and reducescatter raise Horovod's error on the training
    ranks while a rank is joined. Returns the rank that joined last (ties: the higher
    rank). See join.py."""
    try:
        return _join_protocol()
    except RdmacollError as e:
        reraise(e)
