"""Gradient buckets: one buffer of rdmacoll's allocated memory per bucket, every
parameter's gradient a view into it (with the parameter's own strides, channels_last
included), so backward accumulates straight into memory peers reach and the bucket is
reduced in place, with no packing copy. Parameters on a CUDA device get a bucket on that
device (the core stages it through its pipeline: runtime/staging.h)."""

from __future__ import annotations

import torch

from .._common import BUCKET_ALIGN, align_up, dense_span, plan_buckets
from ._tensors import library_tensor


def grad_strides(p):
    """The strides p's gradient gets: p's own when p is dense and non-overlapping (what
    autograd's layout contract gives it), else contiguous ones."""
    shape, strides = tuple(p.shape), tuple(p.stride())
    if all(s >= 0 for s in strides) and dense_span(shape, strides) == p.numel():
        return strides
    return torch.empty(shape).stride()


class Bucket:
    """Consecutive parameters (in launch order) of one dtype, in one buffer."""

    __slots__ = ("index", "dtype", "params", "views", "buffer", "flat", "nbytes", "ready", "handle")

    def __init__(self, index, dtype, params, device=None):
        self.index, self.dtype, self.params = index, dtype, params
        itemsize = torch.empty((), dtype=dtype).element_size()
        offsets, nbytes = [], 0
        for p in params:
            nbytes = align_up(nbytes, BUCKET_ALIGN)
            offsets.append(nbytes // itemsize)
            nbytes += dense_span(p.shape, grad_strides(p)) * itemsize
        self.nbytes = align_up(nbytes, itemsize)
        if device is None or device.type == "cpu":
            self.buffer = library_tensor(max(self.nbytes, itemsize))
        else:
            self.buffer = torch.zeros(max(self.nbytes, itemsize), dtype=torch.uint8, device=device)
        self.flat = self.buffer.view(dtype)[: self.nbytes // itemsize]
        self.views = [self.flat.as_strided(p.shape, grad_strides(p), off) for p, off in zip(params, offsets)]
        self.ready = 0  # parameters whose gradient is complete this step
        self.handle = None  # the reduction in flight


class Layout:
    """Buckets for params (given in registration order), launched in reverse order (the
    order backward produces gradients), one dtype and device each. Identical on every rank
    given identical params."""

    def __init__(self, params, threshold):
        order = [p for p in reversed(params) if p.requires_grad]
        items = [((p.dtype, p.device), dense_span(p.shape, grad_strides(p)) * p.element_size()) for p in order]
        self.buckets = []
        self.where = {}  # id(param) -> (bucket, position in bucket)
        for b, idx in enumerate(plan_buckets(items, threshold)):
            first = order[idx[0]]
            bucket = Bucket(b, first.dtype, [order[i] for i in idx], first.device)
            self.buckets.append(bucket)
            for j, p in enumerate(bucket.params):
                self.where[id(p)] = (bucket, j)

    def sizes(self):
        return [b.nbytes for b in self.buckets]
