"""Grouped allgather and reducescatter of the plain API (Horovod's grouped_allgather and
grouped_reducescatter): a list of arrays moves as one collective, not one per array.

- grouped_allgather: every rank packs its arrays' bytes behind a header (how many arrays;
  per array its rows and a signature of its dtype and trailing shape) into one uint8
  buffer; one allgather of the buffers (their lengths may differ between ranks) gives
  every rank every header, from which it cuts each array's rows out in rank order. A count
  or signature that differs between ranks raises on every rank (each sees all headers).
- grouped_reducescatter: per dtype, rank q's share of every array (the core's split: the
  first rows % size ranks get one row more) goes into row q of a (size, longest share)
  buffer of library memory, zero padded; one reducescatter of it gives each rank its row.
One copy in and one copy out per array, as grouped_allreduce.
"""

from __future__ import annotations

import zlib

import numpy as np

from ._core import Average, Handle, RdmacollError, RdmacollValueError, _view
from .process_sets import comm_for

_ALIGN = 8


def _padded(nbytes):
    return -(-nbytes // _ALIGN) * _ALIGN


def _signature(v):
    """The same number on every rank for arrays that may be gathered together."""
    return zlib.crc32(f"{v.dtype}|{v.shape[1:]}".encode())


def _views(xs, what):
    views = [_view(x) for x in xs]
    if not views:
        raise RdmacollValueError(f"{what} needs at least one array")
    for i, v in enumerate(views):
        if v.ndim == 0:
            raise RdmacollValueError(
                f"{what}: array {i} is a scalar; {what} needs arrays of at least "
                "one dimension (the one it concatenates or splits)"
            )
    return [np.ascontiguousarray(v) for v in views]


def grouped_allgather_async(xs, name=None, process_set=None):
    """grouped_allgather queued to run in the background; returns a Handle."""
    c = comm_for(process_set, "Allgather")
    views = _views(xs, "grouped_allgather")
    header = np.array([len(views)] + [w for v in views for w in (v.shape[0], _signature(v))], np.int64)
    buf = c.empty(header.nbytes + sum(_padded(v.nbytes) for v in views), np.uint8)
    buf[: header.nbytes] = header.view(np.uint8)
    o = header.nbytes
    for v in views:
        buf[o : o + v.nbytes] = v.reshape(-1).view(np.uint8)
        o += _padded(v.nbytes)

    def finish(gathered):
        return _unpack(gathered, views, header)

    return Handle(c.allgather_async(buf, name), finish)


def _unpack(gathered, views, mine):
    """Every array's rows from every rank's chunk of gathered, in rank order."""
    k = len(views)
    row_bytes = [v.itemsize * int(np.prod(v.shape[1:])) for v in views]
    chunks: list[tuple[int, list[int]]] = []  # (offset of the rows, rows of each array) per rank
    o = 0
    while o < gathered.size:
        count = int(gathered[o : o + 8].copy().view(np.int64)[0])
        head = gathered[o : o + 8 * (1 + 2 * count)].copy().view(np.int64)
        if count != k or (head[2::2] != mine[2::2]).any():
            rank = len(chunks)
            raise RdmacollError(
                f"grouped_allgather: rank {rank} of the set passed {count} arrays with signatures "
                f"{head[2::2].tolist()}, this rank {k} arrays with {mine[2::2].tolist()}: every rank "
                "must pass as many arrays, of the same dtypes and shapes past the first dimension"
            )
        rows = head[1::2].tolist()
        chunks.append((o + head.nbytes, rows))
        o += head.nbytes + sum(_padded(r * b) for r, b in zip(rows, row_bytes))
    out = []
    for i, v in enumerate(views):
        res = np.empty((sum(rows[i] for _, rows in chunks),) + v.shape[1:], v.dtype)
        dst, flat = 0, res.reshape(-1).view(np.uint8)
        for start, rows in chunks:
            src = start + sum(_padded(r * b) for r, b in zip(rows[:i], row_bytes))
            n = rows[i] * row_bytes[i]
            flat[dst : dst + n] = gathered[src : src + n]
            dst += n
        out.append(res)
    return out


def grouped_allgather(xs, name=None, process_set=None):
    """Each array of xs concatenated with the same array of every rank along the first
    dimension (which may differ per rank), as one collective; returns a list."""
    return grouped_allgather_async(xs, name, process_set).wait()


def _first_rows(rows, size):
    """The core's reducescatter split: where each rank's rows start (size + 1 entries)."""
    base, extra = divmod(rows, size)
    starts = [0]
    for q in range(size):
        starts.append(starts[-1] + base + (q < extra))
    return starts


def grouped_reducescatter_async(xs, op=Average, name=None, process_set=None):
    """grouped_reducescatter queued to run in the background; returns a Handle."""
    c = comm_for(process_set, "Reducescatter")
    views = _views(xs, "grouped_reducescatter")
    size, me = c.size, c.rank
    groups: dict[np.dtype, list[int]] = {}
    for i, v in enumerate(views):
        groups.setdefault(v.dtype, []).append(i)
    parts, plans = [], []
    for g, (dtype, idx) in enumerate(groups.items()):
        starts = {i: _first_rows(views[i].shape[0], size) for i in idx}
        per_row = {i: int(np.prod(views[i].shape[1:])) for i in idx}
        width = max(sum((starts[i][q + 1] - starts[i][q]) * per_row[i] for i in idx) for q in range(size))
        fused = c.empty((size, width), dtype)
        for q in range(size):
            o = 0
            for i in idx:
                part = views[i][starts[i][q] : starts[i][q + 1]].reshape(-1)
                fused[q, o : o + part.size] = part
                o += part.size
            fused[q, o:] = 0
        parts.append(c.reducescatter_async(fused, op, None if name is None else f"{name}.{g}"))
        plans.append([(i, starts[i][me + 1] - starts[i][me], per_row[i]) for i in idx])

    def finish(results):
        out = [None] * len(views)
        for plan, r in zip(plans, results):
            row, o = r.reshape(-1), 0
            for i, rows, n in plan:
                out[i] = row[o : o + rows * n].reshape((rows,) + views[i].shape[1:])
                o += rows * n
        return out

    return Handle(parts, finish)


def grouped_reducescatter(xs, op=Average, name=None, process_set=None):
    """Each array of xs reduced across ranks and split along the first dimension (the
    first rows % size ranks get one row more), as one collective per dtype; returns a list."""
    return grouped_reducescatter_async(xs, op, name, process_set).wait()
