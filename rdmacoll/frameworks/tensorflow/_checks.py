"""Argument checks made before communicating, for the arguments Horovod's enqueue rejects
with INVALID_ARGUMENT (horovod/common/operations.cc): a broadcast root outside the process
set, alltoall splits that do not fit. The core rejects them too, but as a plain
RdmacollError; checked here they raise InvalidArgumentError (errors.py), with the core's
words."""

from __future__ import annotations

import rdmacoll as rc
from rdmacoll.process_sets import comm_of

from .errors import InvalidArgumentError


def _ranks(process_set):
    if process_set is None or process_set is rc.global_process_set:
        return range(rc.size())
    return process_set.ranks or ()


def root_rank(root, process_set):
    """root (a global rank) must be a rank of process_set."""
    if root not in _ranks(process_set):
        if process_set is None or process_set is rc.global_process_set:
            raise InvalidArgumentError(f"broadcast: root_rank {root} is not a rank of this job (size {rc.size()})")
        raise InvalidArgumentError(f"broadcast received invalid root rank {root} for provided process set")


def splits(rows, split_list, process_set):
    """alltoall of `rows` rows: split_list (or None, an even split) must give every rank of
    process_set its rows, all of them."""
    if process_set is not None and process_set is not rc.global_process_set:
        comm_of(process_set, "Alltoall")  # (ValueError first on a rank outside the set, as Horovod)
    size = len(_ranks(process_set))
    if split_list is None:
        if size and rows % size:
            raise InvalidArgumentError(
                f"alltoall: the first dimension ({rows}) is not divisible by size() ({size}); pass splits"
            )
        return
    if len(split_list) != size:
        raise InvalidArgumentError(f"alltoall: splits has {len(split_list)} entries, size() is {size}")
    if any(s < 0 for s in split_list):
        raise InvalidArgumentError(f"alltoall: splits must not be negative, got {list(split_list)}")
    if sum(split_list) != rows:
        raise InvalidArgumentError(f"alltoall: splits sum to {sum(split_list)} but the first dimension is {rows}")
