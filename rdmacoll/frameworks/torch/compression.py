"""Gradient compression, Horovod's interface: Compression.none, .fp16, .bf16."""

from __future__ import annotations

import torch

from .._common import Compressor, NoneCompressor


class _CastCompressor(Compressor):
    """Floating-point tensors travel as `wire`, and come back in their own dtype."""

    wire = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire:
            return tensor.to(cls.wire), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Floating-point tensors travel as float16 (half the bytes; range +-65504)."""

    wire = torch.float16


class BF16Compressor(_CastCompressor):
    """Floating-point tensors travel as bfloat16 (half the bytes, float32's range)."""

    wire = torch.bfloat16


class Compression:
    """hvd.Compression.none / .fp16 / .bf16, as DistributedOptimizer(compression=...)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
