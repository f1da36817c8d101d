"""Framework-neutral helpers shared by the PyTorch and TensorFlow adapters.

Nothing here imports a framework. The adapters may rely on these names (a stable API):

- ``fusion_threshold()``: bytes per gradient bucket, from ``RDMACOLL_FUSION_THRESHOLD``.
- ``parse_bytes(text)``: "64M", "1.5K", "1048576" -> bytes.
- ``plan_buckets(items, threshold)``: group (dtype, nbytes) items into buckets.
- ``dense_span(shape, strides)``: elements a strided dense tensor spans in memory.
- ``align_up(n, a)``: n rounded up to a multiple of a.
- ``Compressor`` / ``NoneCompressor``: Horovod's compression interface.
- ``signature_digest(rows)`` / ``first_difference(lists)``: compare per-rank descriptions.
"""
from __future__ import annotations

import hashlib
import os

DEFAULT_FUSION_THRESHOLD = 32 << 20   # bytes; DDP uses 25 MiB, Horovod 128 MiB
BUCKET_ALIGN = 64                     # bytes: every gradient starts on a cache line

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_bytes(text: str) -> int:
    """'64M' / '1.5K' / '1048576' / '32MiB' -> bytes (powers of two). ValueError if bad."""
    s = str(text).strip().upper()
    num = s.rstrip("BKMGI")
    unit = s[len(num):]
    if unit not in _UNITS or not num:
        raise ValueError(f"not a byte count: {text!r} (examples: 1048576, 64K, 32M, 1G)")
    value = float(num) * _UNITS[unit]
    if value < 0:
        raise ValueError(f"not a byte count: {text!r} (negative)")
    return int(value)


def fusion_threshold(default: int = DEFAULT_FUSION_THRESHOLD) -> int:
    """Bucket size limit in bytes: RDMACOLL_FUSION_THRESHOLD (also read: HOROVOD_FUSION_THRESHOLD,
    so existing job scripts keep their setting), else `default`. 0 puts every gradient in a
    bucket of its own."""
    for var in ("RDMACOLL_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"):
        text = os.environ.get(var)
        if text:
            try:
                return parse_bytes(text)
            except ValueError as e:
                from .. import RdmacollError

                raise RdmacollError(f"{var}: {e}") from None
    return default


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
