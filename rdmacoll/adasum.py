"""Adasum, the reduction Horovod 0.28.1 runs for op=Adasum on CPU tensors
(horovod/common/ops/adasum/adasum.h, over MPI), here over the core's alltoall and allgather.

Terms. Each tensor is one vector (all its elements). Two vectors a and b combine into
    a' = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
where a coefficient is 1 when its |.|^2 is below sqrt(DBL_MIN); the dot product and the
squared norms are float64 sums over the whole tensor, the combination is computed in
float64 and rounded to the tensor's dtype (float16, float32, float64: Horovod's three).
n ranks (a power of two) combine as a binary tree: level 1 combines ranks 2k and 2k+1,
level 2 the results of 4k..4k+1 with 4k+2..4k+3, and so on (the partner at distance
`level` is rank ^ level; the lower-ranked group's vector is a). Tensors reduced together
(grouped_allreduce; one per parameter in DistributedOptimizer) share one fused buffer,
but each gets its own coefficients, as Horovod's fused entries do.

How (Horovod's vector-halving, distance-doubling): at each level a rank and its partner
hold the same segment of the fused buffer; the lower rank keeps the first half and sends
the second, the upper one the reverse (one alltoall whose only non-empty split goes to
the partner). Each rank computes, per tensor, the dot product and squared norms of the
part of its kept half that the tensor covers; the 2*level ranks that together hold all
of both vectors add these partials up (one alltoall that sends 3 float64 per tensor to
each of them, summed in rank order on each, so they all compute bit-identical
coefficients), and each combines its kept half in place. After the last level a rank
owns 1/n of the result (an element is combined by one rank only, so the result is the
same on every rank); one allgather gives everyone all of it. A first allgather of 16
bytes per rank compares the ranks' element counts and dtypes, so that ranks that pass
different tensors get an error each, before any data moves.

Per rank, for N bytes in the fused buffer and T tensors: sent and received N(1 - 1/n)
over the halving levels, received N(1 - 1/n) by the final allgather, plus 24T bytes to
each of 2*level ranks per level and the 16-byte signature. Copies: the inputs into the
fused buffer (one pass); over all levels, N(1 - 1/n) elements of kept and received
halves read (through float64 temporaries) and the kept halves written; the gathered
result into the fused buffer (one pass), and into `out` when given (one more).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ._core import Handle, RdmacollValueError, _view

ADASUM = 100  # the op's value: handled here, above the core (whose ops are 0..4: _core.OPS)

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_TINY = float(np.sqrt(np.finfo(np.float64).tiny))  # Horovod's sqrt(DBL_MIN)


def check_size(n):
    """Horovod's refusal (NotImplementedError), before communicating."""
    if n & (n - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported yet.")


def check_dtype(dtype, what="Adasum input"):
    if np.dtype(dtype) not in _FLOATS:
        raise RdmacollValueError(
            f"{what} has dtype {dtype}: Adasum reduces float16, float32 and float64 tensors (as Horovod's does)"
        )


def _segment(count, rank, size):
    """(offset, count) of the part of a buffer of count elements that rank owns after
    every halving level (what _reduce leaves it with)."""
    lo, level = 0, 1
    while level < size:
        first = count >> 1
        if rank & level:
            lo, count = lo + first, count - first
        else:
            count = first
        level <<= 1
    return lo, count


def _name(name, part):
    return None if name is None else f"{name}.{part}"


def _check_same(comm, groups, name):
    """Every rank passes the same element counts and dtypes (one 16-byte allgather)."""
    desc = repr([(str(work.dtype), counts) for work, counts in groups]).encode()
    digest = int.from_bytes(hashlib.blake2b(desc, digest_size=8).digest(), "little", signed=True)
    total = sum(int(work.size) for work, _ in groups)
    mine = np.array([[total, digest]], np.int64)
    seen = comm.allgather(mine, _name(name, "adasum"))
    if (seen != mine).any():
        per_rank = ", ".join(f"rank {q}: {int(seen[q, 0])} elements" for q in range(len(seen)))
        raise RdmacollValueError(
            f"Adasum: the ranks passed different tensors (element counts or dtypes differ; {per_rank})"
        )


def _reduce(comm, work, counts, name):
    """Adasum of the fused buffer work (1-D, one dtype) whose consecutive tensors have
    counts elements each, in place, over every rank of comm."""
    rank, size = comm.rank, comm.size
    bounds = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
    lo, count = 0, int(work.size)
    level = 1
    while level < size:
        partner = rank ^ level
        first = count >> 1
        upper = bool(rank & level)
        keep_lo, keep_n = (lo + first, count - first) if upper else (lo, first)
        send_lo, send_n = (lo, first) if upper else (lo + first, count - first)
        splits = [0] * size
        splits[partner] = send_n
        other, _ = comm.alltoall(work[send_lo : send_lo + send_n], splits, _name(name, f"adasum{level}"))
        a = work[keep_lo : keep_lo + keep_n].astype(np.float64)
        b = other.astype(np.float64)
        # each tensor's part of the kept half: [starts, ends) relative to keep_lo
        starts = np.clip(bounds[:-1], keep_lo, keep_lo + keep_n) - keep_lo
        lengths = np.clip(bounds[1:], keep_lo, keep_lo + keep_n) - keep_lo - starts
        partial = np.zeros((len(counts), 3))
        if keep_n:
            nz = lengths > 0
            at = starts[nz]
            partial[nz, 0] = np.add.reduceat(a * b, at)
            own, oth = np.add.reduceat(a * a, at), np.add.reduceat(b * b, at)
            # columns: dot, |lower group's vector|^2, |upper group's vector|^2
            partial[nz, 1], partial[nz, 2] = (oth, own) if upper else (own, oth)
        # the 2*level ranks of this rank's subtree hold all of both vectors between them
        group = [q for q in range(size) if q // (2 * level) == rank // (2 * level)]
        dsplits = [3 * len(counts) if q in group else 0 for q in range(size)]
        sums, _ = comm.alltoall(np.tile(partial.reshape(-1), len(group)), dsplits, _name(name, f"adasum{level}.dots"))
        dot, na, nb = sums.reshape(len(group), len(counts), 3).sum(axis=0).T
        ca = np.where(na >= _TINY, 1.0 - dot / np.where(na >= _TINY, na, 1.0) * 0.5, 1.0)
        cb = np.where(nb >= _TINY, 1.0 - dot / np.where(nb >= _TINY, nb, 1.0) * 0.5, 1.0)
        mine, theirs = (cb, ca) if upper else (ca, cb)
        work[keep_lo : keep_lo + keep_n] = np.repeat(mine, lengths) * a + np.repeat(theirs, lengths) * b
        lo, count = keep_lo, keep_n
        level <<= 1
    gathered = comm.allgather(work[lo : lo + count], _name(name, "adasum.all"))
    at = 0
    for q in range(size):
        q_lo, q_n = _segment(int(work.size), q, size)
        work[q_lo : q_lo + q_n] = gathered[at : at + q_n]
        at += q_n


def grouped_allreduce_async(comm, xs, out=None, name=None):
    """Adasum of each array in xs across the ranks of comm (a finished Handle: the levels
    depend on each other, so the reduction runs in this call). Arrays of one dtype are
    fused into one buffer; results are views of it (out=None) or copied into out."""
    views = [_view(x) for x in xs]
    if out is not None and len(out) != len(views):
        raise RdmacollValueError(f"grouped_allreduce: {len(views)} inputs but {len(out)} outputs")
    check_size(comm.size)
    for i, v in enumerate(views):
        check_dtype(v.dtype, f"Adasum input {i}")
    by_dtype = {}
    for i, v in enumerate(views):
        by_dtype.setdefault(v.dtype, []).append(i)
    groups, plans = [], []
    for dtype, idx in by_dtype.items():
        counts = [int(views[i].size) for i in idx]
        work = comm.empty(sum(counts), dtype)
        at = 0
        for i, c in zip(idx, counts):
            work[at : at + c] = views[i].reshape(-1)
            at += c
        groups.append((work, counts))
        plans.append(idx)
    _check_same(comm, groups, name)
    results = [None] * len(views)
    for g, ((work, counts), idx) in enumerate(zip(groups, plans)):
        _reduce(comm, work, counts, _name(name, g))
        at = 0
        for i, c in zip(idx, counts):
            r = work[at : at + c].reshape(views[i].shape)
            at += c
            if out is None:
                results[i] = r
            else:
                np.copyto(_view(out[i]), r)
                results[i] = out[i]
    return Handle(None, None, value=results)


def allreduce_async(comm, x, out=None, name=None):
    """Adasum of x across the ranks of comm, as a finished Handle (see grouped_allreduce_async)."""
    results = grouped_allreduce_async(comm, [x], None if out is None else [out], name).wait()
    return Handle(None, None, value=results[0])
