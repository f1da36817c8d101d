"""Gradient averaging shared by DistributedGradientTape and DistributedOptimizer."""

from __future__ import annotations

import tensorflow as tf

import rdmacoll as rc

from .._common import fusion_threshold
from .compression import Compression
from .errors import RULES
from .functions import check_adasum, fused_allreduce


class GradientReducer:
    """Reduces one step's gradients: compress, (pre-divide), one fused collective per
    bucket of RDMACOLL_FUSION_THRESHOLD bytes, (post-scale), decompress. None gradients
    stay None; tf.IndexedSlices (embeddings) are reduced as dense tensors.

    Local variables (Horovod's PartialDistributed*: register_local()): their gradients are
    not reduced; with scale_local_gradients they are divided by the size instead, as
    Horovod does (its pull 3695), so that they weigh as a reduced Average would.

    process_set: gradients are reduced over its ranks (sizes are its size); on a rank
    outside it, or when it has one rank, they stay as they are (Horovod's
    _allreduce_cond)."""

    def __init__(
        self,
        op=rc.Average,
        compression=Compression.none,
        gradient_predivide_factor=1.0,
        name="gradients",
        scale_local_gradients=True,
        process_set=rc.global_process_set,
    ):
        RULES.check_optimizer(RULES.check_op(op), gradient_predivide_factor, 1)
        self.op = op
        self.compression = compression
        self.predivide = float(gradient_predivide_factor)
        self.threshold = fusion_threshold()
        self.name = name
        self.scale_local = bool(scale_local_gradients)
        self.local = set()  # id() of local variables
        self.ahead = {}  # id() -> variable: gradients reduced already, not to reduce in reduce_rest
        self.process_set = process_set

    def register_local(self, variable):
        self.local.add(id(variable))

    def reduced_ahead(self, variables):
        """The gradients of `variables` were reduced (compute_gradients): the next
        reduce_rest() passes theirs through."""
        self.ahead.update((id(v), v) for v in variables)

    def reduce_rest(self, grads, variables):
        """reduce(), except for the gradients of variables reduced ahead (which it forgets)."""
        if not self.ahead:
            return self.reduce(grads, variables)
        grads, variables = list(grads), list(variables)
        ahead, self.ahead = self.ahead, {}
        rest = [i for i, v in enumerate(variables) if id(v) not in ahead]
        for i, g in zip(rest, self.reduce([grads[i] for i in rest], [variables[i] for i in rest])):
            grads[i] = g
        return grads

    def reduce(self, grads, variables=None):
        """grads reduced across ranks; `variables` (same order) name the local ones."""
        grads = list(grads)
        if self.local and variables is not None:
            return self._reduce_partial(grads, list(variables))
        return self._reduce(grads)

    def _reduce_partial(self, grads, variables):
        shared = [i for i, v in enumerate(variables) if id(v) not in self.local]
        for i, g in zip(shared, self._reduce([grads[i] for i in shared])):
            grads[i] = g
        if self.scale_local:
            size = self.process_set.size()
            for i, v in enumerate(variables):
                g = grads[i]
                if id(v) in self.local and g is not None:
                    grads[i] = (
                        tf.IndexedSlices(g.values / size, g.indices, g.dense_shape)
                        if isinstance(g, tf.IndexedSlices)
                        else g / size
                    )
        return grads

    def _reduce(self, grads):
        present = [i for i, g in enumerate(grads) if g is not None]
        ps = self.process_set
        RULES.set_size(ps.size())
        if not present or not ps.included() or ps.size() <= 1:
            return grads
        if self.op == rc.Adasum:  # sparse gradients are reduced as dense here: no refusal for them
            check_adasum(ps)
        op, pre, post = self.op, 1.0, 1.0
        if self.predivide != 1.0:  # Horovod: sum of g / f, then times f / size
            op, pre, post = rc.Sum, 1.0 / self.predivide, self.predivide / ps.size()
        pairs = []
        for i in present:
            t = tf.convert_to_tensor(grads[i])
            pairs.append(self.compression.compress(t if pre == 1.0 else t * tf.cast(pre, t.dtype)))
        reduced = fused_allreduce([p[0] for p in pairs], op, self.threshold, self.name, ps)
        for i, r, (_, ctx) in zip(present, reduced, pairs):
            r = self.compression.decompress(r, ctx)
            grads[i] = r if post == 1.0 else r * tf.cast(post, r.dtype)
        return grads
