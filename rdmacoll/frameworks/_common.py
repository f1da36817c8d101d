"""Framework-neutral helpers shared by the PyTorch and TensorFlow adapters.

Nothing here imports a framework. The adapters may rely on these names (a stable API):

- ``fusion_threshold()``: bytes per gradient bucket, the ``fusion_threshold`` setting.
- ``settings_in_effect()``: the job's settings once initialised, else this process's.
- ``parse_bytes(text)``: "64M", "1.5K", "1048576" -> bytes (the settings' one grammar).
- ``plan_buckets(items, threshold)``: group (dtype, nbytes) items into buckets.
- ``dense_span(shape, strides)``: elements a strided dense tensor spans in memory.
- ``align_up(n, a)``: n rounded up to a multiple of a.
- ``Compressor`` / ``NoneCompressor``: Horovod's compression interface.
- ``signature_digest(rows)`` / ``first_difference(lists)``: compare per-rank descriptions.
"""

from __future__ import annotations

import hashlib


from .. import _core, _session, _settings

DEFAULT_FUSION_THRESHOLD = _settings.TABLE["fusion_threshold"]["default"]  # DDP uses 25 MiB, Horovod 128 MiB
BUCKET_ALIGN = 64  # bytes: every gradient starts on a cache line


def parse_bytes(text: str) -> int:
    """'64M' / '1.5K' / '1048576' / '32MiB' -> bytes (powers of 1024), in the grammar of
    every size setting. ValueError if bad."""
    try:
        return _core.parse_size(str(text))
    except _core.RdmacollError as e:
        raise ValueError(str(e)) from None


def fusion_threshold() -> int:
    """Bucket size limit in bytes: the fusion_threshold setting (RDMACOLL_FUSION_THRESHOLD,
    or HOROVOD_FUSION_THRESHOLD so that existing job scripts keep theirs), rank 0's once
    rdmacoll is initialised. 0 puts every gradient in a bucket of its own."""
    return settings_in_effect()["fusion_threshold"]


def settings_in_effect() -> dict:
    """The settings in effect: the job's (rank 0's, broadcast at init()) once rdmacoll is
    initialised, else this process's environment."""
    session = _session.current()
    return dict(session.settings) if not session.closed else _settings.resolve()[0]


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def dense_span(shape, strides) -> int:
    """Elements between the first and one past the last element of a strided tensor with
    non-negative strides (0 for an empty tensor)."""
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(shape, strides))


def plan_buckets(items, threshold: int):
    """Split items, given in launch order as (dtype, nbytes), into buckets: consecutive
    items of one dtype whose total stays within threshold bytes (an item larger than the
    threshold gets a bucket of its own). Returns a list of lists of item indices.

    Every rank computes the same plan from the same items, so buckets need no negotiation.
    """
    buckets, current, cur_dtype, cur_bytes = [], [], None, 0
    for i, (dtype, nbytes) in enumerate(items):
        if current and (dtype != cur_dtype or cur_bytes + nbytes > threshold):
            buckets.append(current)
            current, cur_bytes = [], 0
        current.append(i)
        cur_dtype = dtype
        cur_bytes += nbytes
    if current:
        buckets.append(current)
    return buckets


def signature_digest(rows) -> str:
    """A digest of a list of printable rows (e.g. one per parameter)."""
    h = hashlib.blake2b(digest_size=16)
    for row in rows:
        h.update(repr(row).encode())
        h.update(b"\n")
    return h.hexdigest()


def first_difference(lists):
    """Given one list of rows per rank, (index, {rank: row-or-None}) of the first position
    where ranks differ, or None when all lists are equal."""
    longest = max(len(x) for x in lists)
    for i in range(longest):
        rows = {r: (x[i] if i < len(x) else None) for r, x in enumerate(lists)}
        if len({repr(v) for v in rows.values()}) > 1:
            return i, rows
    return None


class Compressor:
    """Horovod's interface: compress(tensor) -> (compressed, ctx) before the reduction,
    decompress(compressed, ctx) -> tensor after it. Static methods, no state."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression: the tensor travels as it is."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor
