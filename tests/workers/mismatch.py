"""Ranks that disagree about a call: every rank must raise, naming the difference.

The last rank deviates in one way per case; the others agree. Per case, after a barrier
every rank times its call until the RdmacollError, checks that a later call raises too
(the communicator stays broken), then calls init() alone, which must build the world
again (a new epoch: Horovod's job goes on after a mismatch, and its scripts call init()
again), and checks a correct allreduce there. Records: one "mismatch" per case and rank
(rebuilt: the epoch went one up; total_ok: the allreduce after it summed right), then
"done".

Argument "torch": the shape cases (and one count case) through Horovod's torch API
(rdmacoll.frameworks.torch) with torch tensors, which must raise HorovodInternalError as
Horovod's do; "error_type" in each record names what was raised.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

from common import emit, init, main

EAGER, RING = 1000, 100_000  # elements: below and above the default eager limit (32 KiB)

# case: (what the agreeing ranks pass, what the last rank passes), each as
# (collective, shape, dtype, op name, name), and the words every rank's message must
# contain. Shapes: Horovod checks them for every collective (the whole shape; allgather
# and alltoall: the dimensions after the first), with the same element counts here.
CASES = {
    "count": (
        ("allreduce", EAGER, "float32", "Sum", None),
        ("allreduce", EAGER + 1, "float32", "Sum", None),
        "different counts",
    ),
    "count large": (
        ("allreduce", RING, "float32", "Sum", None),
        ("allreduce", RING + 7, "float32", "Sum", None),
        "different counts",
    ),
    "count small vs large": (
        ("allreduce", 10, "float32", "Sum", None),
        ("allreduce", RING, "float32", "Sum", None),
        "different counts",
    ),
    "dtype": (
        ("allreduce", EAGER, "float32", "Sum", None),
        ("allreduce", EAGER, "float64", "Sum", None),
        "different dtypes",
    ),
    "dtype same bytes": (
        ("allreduce", RING, "float32", "Sum", None),
        ("allreduce", RING, "int32", "Sum", None),
        "different dtypes",
    ),
    "op": (("allreduce", EAGER, "float32", "Sum", None), ("allreduce", EAGER, "float32", "Max", None), "different ops"),
    "op large": (
        ("allreduce", RING, "float64", "Min", None),
        ("allreduce", RING, "float64", "Max", None),
        "different ops",
    ),
    "name": (
        ("allreduce", EAGER, "float32", "Sum", "grad.a"),
        ("allreduce", EAGER, "float32", "Sum", "grad.b"),
        "different names",
    ),
    "name missing": (
        ("allreduce", RING, "float32", "Sum", "grad.a"),
        ("allreduce", RING, "float32", "Sum", None),
        "different names",
    ),
    "shape": (
        ("allreduce", (3, 4), "float32", "Sum", None),
        ("allreduce", (4, 3), "float32", "Sum", None),
        "different shapes",
    ),
    "shape large": (
        ("allreduce", (1000, 100), "float32", "Sum", None),
        ("allreduce", (100, 1000), "float32", "Sum", None),
        "different shapes",
    ),
    "shape rank": (
        ("allreduce", (12,), "float32", "Sum", None),
        ("allreduce", (1, 12), "float32", "Sum", None),
        "different shapes",
    ),
    "shape grouped": (
        ("grouped", (3, 4), "float32", "Sum", None),
        ("grouped", (4, 3), "float32", "Sum", None),
        "different shapes",
    ),
    "shape broadcast": (
        ("broadcast", (3, 4), "float32", None, None),
        ("broadcast", (4, 3), "float32", None, None),
        "different shapes",
    ),
    "shape allgather": (
        ("allgather", (1, 2, 3), "float32", None, None),
        ("allgather", (1, 3, 2), "float32", None, None),
        "different shapes",
    ),
    "shape alltoall": (
        ("alltoall", (0, 2, 3), "float32", None, None),
        ("alltoall", (0, 3, 2), "float32", None, None),
        "different shapes",
    ),
    "shape reducescatter": (
        ("reducescatter", (0, 6), "float32", "Sum", None),
        ("reducescatter", (0, 3, 2), "float32", "Sum", None),
        "different shapes",
    ),
}


TORCH = sys.argv[1:] == ["torch"]
if TORCH:
    import torch

    CASES = {k: v for k, v in CASES.items() if k == "count" or k.startswith("shape")}


def call(rc, spec):
    kind, shape, dtype, op, name = spec
    p = rc.size()
    # a first dimension of 0 stands for size() rows (alltoall, reducescatter: one per rank)
    shape = (shape,) if isinstance(shape, int) else tuple(d or p for d in shape)
    ones = (lambda s, dt: torch.ones(s, dtype=getattr(torch, dt))) if TORCH else np.ones
    x = ones(shape, dtype)
    if kind == "allreduce":
        return rc.allreduce(x, op=getattr(rc, op), name=name)
    if kind == "grouped":  # the shape of the first of two arrays differs
        return rc.grouped_allreduce([x, ones(5, dtype)], op=getattr(rc, op), name=name)
    if kind == "broadcast":
        return rc.broadcast(x, 0, name=name)
    if kind == "reducescatter":
        return rc.reducescatter(x, op=getattr(rc, op), name=name)
    return getattr(rc, kind)(x, name=name)


def shape_text(spec, p):
    """How the error names a rank's shape (rdmacoll's " with shape [...]"): None where the
    ranks compare a key (grouped: fused tensors); allgather and alltoall's rows are free."""
    kind, shape, *_ = spec
    if kind == "grouped":
        return None
    dims = [str(d or p) for d in ((shape,) if isinstance(shape, int) else shape)]
    if kind in ("allgather", "alltoall"):
        dims[0] = "*"
    return "[" + ", ".join(dims) + "]"


def body():
    rc = plain = init()
    if TORCH:
        import rdmacoll.frameworks.torch as rc  # its init() joins the session init() started
    world = MPI.COMM_WORLD
    p, r = rc.size(), rc.rank()
    for case, (agreed, deviant, words) in CASES.items():
        mine = deviant if r == p - 1 else agreed
        call(rc, agreed)  # a correct call first: the mismatch is not the first message
        world.Barrier()
        t0 = time.perf_counter()
        error = later = error_type = None
        try:
            call(rc, mine)
        except RuntimeError as e:  # RdmacollError; HorovodInternalError (torch), a subclass
            error, error_type = str(e), type(e).__name__
        seconds = time.perf_counter() - t0
        try:
            call(rc, agreed)
        except RuntimeError as e:
            later = str(e)
        shapes = [shape_text(agreed, p), shape_text(deviant, p)] if case.startswith("shape") else None
        epoch = plain._session.current().epoch
        rc.init()  # the world ended in a mismatch: init() builds it again (rdmacoll._rebuild)
        rebuilt = plain._session.current().epoch == epoch + 1
        total = plain.allreduce(np.full(5, r + 1, np.float32), op=plain.Sum)
        emit(
            "mismatch",
            case=case,
            error=error,
            error_type=error_type,
            seconds=seconds,
            later=later,
            words=words,
            shapes=shapes,
            rebuilt=rebuilt,
            total_ok=bool((total == p * (p + 1) // 2).all()),
        )
    emit("done")


main(body)
