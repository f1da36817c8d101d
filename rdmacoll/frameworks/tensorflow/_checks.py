"""Argument checks made before communicating, for the arguments Horovod's enqueue rejects
with INVALID_ARGUMENT (horovod/common/operations.cc): a broadcast root outside the process
set, alltoall splits that do not fit. The rules are ../_horovod.py's; here they raise
InvalidArgumentError (errors.py)."""

from __future__ import annotations

import rdmacoll as rc
from rdmacoll.process_sets import comm_of, ranks_of

from .errors import RULES


def root_rank(root, process_set):
    """root (a global rank) must be a rank of process_set."""
    RULES.check_root(root, ranks_of(process_set))


def splits(rows, split_list, process_set, ndim=1):
    """alltoall of `rows` rows: split_list (or None, an even split) gives every rank of
    process_set its rows, summing to at most rows (the rows past the sum are not sent, as
    Horovod). Returns the list to send with (None: even split)."""
    if process_set is not None and process_set is not rc.global_process_set:
        comm_of(process_set, "Alltoall")  # (ValueError first on a rank outside the set, as Horovod)
    return RULES.alltoall_splits(rows, split_list, len(ranks_of(process_set)), ndim)
