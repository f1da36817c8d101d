"""Gradient averaging shared by DistributedGradientTape and DistributedOptimizer."""
from __future__ import annotations

import tensorflow as tf

import rdmacoll as rc

from .._common import fusion_threshold
from .compression import Compression
from .functions import fused_allreduce


class GradientReducer:
    """Reduces one step's gradients: compress, (pre-divide), one fused collective per
    bucket of RDMACOLL_FUSION_THRESHOLD bytes, (post-scale), decompress. None gradients
    stay None; tf.IndexedSlices (embeddings) are reduced as dense tensors."""

    def __init__(self, op=rc.Average, compression=Compression.none, gradient_predivide_factor=1.0,
                 name="gradients"):
        if gradient_predivide_factor != 1.0 and op != rc.Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        if op not in (rc.Average, rc.Sum, rc.Min, rc.Max, rc.Product):
            raise ValueError(f"unsupported op for gradients: {op!r}")
        self.op = op
        self.compression = compression
        self.predivide = float(gradient_predivide_factor)
        self.threshold = fusion_threshold()
        self.name = name

    def reduce(self, grads):
        grads = list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return grads
        op, pre, post = self.op, 1.0, 1.0
        if self.predivide != 1.0:   # Horovod: sum of g / f, then times f / size
            op, pre, post = rc.Sum, 1.0 / self.predivide, self.predivide / rc.size()
        pairs = []
        for i in present:
            t = tf.convert_to_tensor(grads[i])
            pairs.append(self.compression.compress(t if pre == 1.0 else t * tf.cast(pre, t.dtype)))
        reduced = fused_allreduce([p[0] for p in pairs], op, self.threshold, self.name)
        for i, r, (_, ctx) in zip(present, reduced, pairs):
            r = self.compression.decompress(r, ctx)
            grads[i] = r if post == 1.0 else r * tf.cast(post, r.dtype)
        return grads
