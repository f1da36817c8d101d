"""Sparse COO tensors, reduced as Horovod 0.28.1 reduces them (horovod/torch/mpi_ops.py,
sparse_allreduce_async): every rank's indices and values are allgathered, and the result
is the sparse tensor that holds all of them, not coalesced (an index several ranks hold
appears once per rank; torch sums duplicates wherever it coalesces or applies the
tensor). Average divides the values by the number of ranks (true division, as Horovod's
`values / size`). The data moved is each rank's nonzeros, to every rank.

The handle is a Handle (poll / synchronize, as every other) that can also be called:
Horovod's is a function whose call returns the result, and code written for it calls it.
"""

from __future__ import annotations

import torch

import rdmacoll as rc
from rdmacoll import RdmacollValueError, global_process_set

from . import ops
from ._tensors import check_tensor


class SparseHandle(rc.Handle):
    """A Handle whose call, handle(), returns the result (as Horovod's sparse handle)."""

    def __call__(self):
        return self.wait()


def _part(name, what):
    return None if name is None else f"{name}.{what}"


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Start reducing the sparse COO tensor across ranks (of process_set); handle() or
    synchronize(handle) returns the sparse result. op: Sum or Average (Horovod treats any
    op other than Average as Sum; rdmacoll refuses the others). Refused while a rank is in
    hvd.join(), as Horovod's allgathers are."""
    return _reduce(tensor, name, op, process_set, ops.allgather_async)


def served_sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """sparse_allreduce_async that a rank in hvd.join() takes part in with an empty
    gradient (DistributedOptimizer's)."""
    return _reduce(tensor, name, op, process_set, ops.served_allgather_async)


def _reduce(tensor, name, op, process_set, allgather_async):
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
        raise RdmacollValueError(
            "sparse_allreduce_async takes a sparse COO tensor (torch.sparse_coo_tensor, "
            f"or a gradient of Embedding(sparse=True)), got "
            f"{getattr(tensor, 'layout', type(tensor).__name__)}"
        )
    if op not in (ops.Sum, ops.Average):
        raise RdmacollValueError(
            f"sparse_allreduce_async reduces with op=Sum or op=Average, got {op!r} "
            "(Horovod would silently sum for any other op)"
        )
    check_tensor(tensor._values(), "sparse_allreduce_async values")
    # allgather concatenates along the first dimension: indices travel as (nnz, sparse_dim)
    indices = allgather_async(tensor._indices().t().contiguous(), name=_part(name, "indices"), process_set=process_set)
    values = allgather_async(tensor._values(), name=_part(name, "values"), process_set=process_set)
    size = ops._set_size(process_set)

    def finish(parts):
        idx, val = parts
        if op == ops.Average:
            val = val / size
        return torch.sparse_coo_tensor(idx.t(), val, tensor.shape, check_invariants=False)

    return SparseHandle([indices, values], finish)
