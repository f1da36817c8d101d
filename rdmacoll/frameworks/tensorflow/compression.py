"""Horovod's gradient compression: Compression.none, Compression.fp16."""

from __future__ import annotations

import tensorflow as tf

from .._common import Compressor, NoneCompressor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 (half the bytes), come back in their dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """Pass Compression.none (default) or Compression.fp16 as `compression=`."""

    none = NoneCompressor
    fp16 = FP16Compressor
