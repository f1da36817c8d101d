"""What each collective moves, how nccl-tests counts it, the inputs every implementation
is fed and the NumPy reference its results are checked against.

Sizes follow nccl-tests: `bytes` is the largest buffer of the call (allreduce, broadcast:
the buffer; allgather: the gathered output; reducescatter: the input of every share;
alltoall: one rank's send buffer) and `count` the elements one call argument names
(allgather, reducescatter, alltoall: one rank's part, bytes / itemsize / ranks).
algbw = bytes / time; busbw = algbw * bus_factor: the share of the data each rank's link
must carry in an optimal algorithm, which compares across rank counts.
"""

from __future__ import annotations

import numpy as np

REDUCING = ("allreduce", "reducescatter")
INPLACE = ("allreduce", "broadcast")  # the collectives rdmacoll can run in place (out=x)
SPLIT = ("allgather", "reducescatter", "alltoall")  # bytes divided among the ranks


def bus_factor(collective: str, nranks: int) -> float:
    """nccl-tests' busbw / algbw (PERFORMANCE.md): 2(n-1)/n for allreduce, (n-1)/n for
    allgather, reducescatter and alltoall, 1 for broadcast."""
    n = nranks
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in SPLIT:
        return (n - 1) / n
    if collective == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def counts(collective: str, nbytes: int, itemsize: int, nranks: int) -> tuple[int, int]:
    """(elements of the largest buffer, the `count` column) for a requested size: split
    collectives round down to a whole number of elements per rank, and up to one."""
    total = nbytes // itemsize
    if collective in SPLIT:
        part = max(total // nranks, 1 if nbytes > 0 else 0)
        return part * nranks, part
    return total, total


def sizes(minbytes: int, maxbytes: int, factor: int, collective: str, itemsize: int, nranks: int, step: int = 0):
    """[(bytes, total elements, count)] of the sweep: minbytes times powers of factor, or
    (factor 1, as nccl-tests' -f 1 -i step) minbytes plus multiples of step; maxbytes last
    where the steps jump over it; sizes that round to the same element count are listed
    once."""
    if factor <= 1 and step < 1:
        raise ValueError("a linear sweep (factor 1) needs step >= 1")
    requested, n = [], minbytes
    while n <= maxbytes:
        requested.append(n)
        n = (n * factor if n else 1) if factor > 1 else n + step
    if requested[-1] != maxbytes:
        requested.append(maxbytes)
    out, seen = [], set()
    for n in requested:
        total, count = counts(collective, n, itemsize, nranks)
        if total not in seen:
            seen.add(total)
            out.append((total * itemsize, total, count))
    return out


# --------------------------------------------------------------------------- data

# Reductions get small integers (1..3: sums, products and averages stay exact in every
# dtype at the rank counts a host runs); data movement gets 0..250, rank-shifted, so a
# part landing in the wrong place shows.


def _cycle(rank: int, start: int, reducing: bool) -> np.ndarray:
    if reducing:
        return (np.arange(3) + start + rank) % 3 + 1
    return (np.arange(251) + start + 7 * rank) % 251


def pattern(rank: int, start: int, n: int, dtype: np.dtype, reducing: bool) -> np.ndarray:
    """Elements start .. start+n of rank's input."""
    return np.resize(_cycle(rank, start, reducing).astype(dtype), n)


def send_buffer(collective: str, rank: int, total: int, count: int, dtype: np.dtype) -> np.ndarray:
    """What rank passes to the collective (broadcast: the root's is the one that counts)."""
    n = count if collective == "allgather" else total
    return pattern(rank, 0, n, dtype, collective in REDUCING)


def _reduced(nranks: int, start: int, n: int, dtype: np.dtype, op: str) -> np.ndarray:
    """Elements start .. start+n of the reduction of every rank's input: computed on one
    period (3 elements) and repeated. Integers reduce in int64 and wrap like NumPy."""
    rows = np.stack([_cycle(r, start, True) for r in range(nranks)])
    integer = dtype.kind in "iu"
    rows = rows.astype(np.int64 if integer else np.float64)
    fn = {"Sum": np.sum, "Average": np.sum, "Min": np.min, "Max": np.max, "Product": np.prod}[op]
    acc = fn(rows, axis=0)
    if op == "Average":
        acc = acc / nranks
    return np.resize(acc.astype(dtype), n)


def expected(
    collective: str, rank: int, nranks: int, total: int, count: int, dtype: np.dtype, op: str, root: int = 0
) -> np.ndarray:
    """What rank must hold after the collective (broadcast: root's input)."""
    if collective == "allreduce":
        return _reduced(nranks, 0, total, dtype, op)
    if collective == "reducescatter":
        return _reduced(nranks, rank * count, count, dtype, op)
    if collective == "broadcast":
        return pattern(root, 0, total, dtype, False)
    if collective == "allgather":
        return np.concatenate([pattern(r, 0, count, dtype, False) for r in range(nranks)])
    if collective == "alltoall":
        return np.concatenate([pattern(r, rank * count, count, dtype, False) for r in range(nranks)])
    raise ValueError(f"unknown collective {collective!r}")


def count_wrong(got, want: np.ndarray) -> int:
    """Elements that differ: exactly for integers, beyond a few ulps for floats (Average
    scales by 1/n in the element's precision). A result of the wrong length is all wrong."""
    got = np.asarray(got).reshape(-1)
    if got.size != want.size:
        return max(got.size, want.size)
    if got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8)):
        return 0
    if want.dtype.kind in "iu":
        return int(np.count_nonzero(got != want))
    eps = float(np.finfo(want.dtype).eps) if want.dtype.kind == "f" else 2.0**-7  # bfloat16
    g, w = got.astype(np.float64), want.astype(np.float64)
    return int(np.count_nonzero(~np.isclose(g, w, rtol=4 * eps, atol=0)))
