"""Runs tests/test_horovod_rules.py's table (CASES) under mpiexec, 3 ranks, in every adapter
named by argv[1]: "rdmacoll" (rdmacoll.frameworks.torch, then rdmacoll.frameworks.tensorflow,
sharing one rdmacoll job) or "horovod.torch" (real Horovod: the torch rows).

Per row and adapter, the outcome on this rank: {"value": the result as nested lists} or
{"raises": the class names of the exception's MRO, "text": its message,
"caught_as_internal": whether `except hvd.HorovodInternalError` catches it}. Records:
one "done" {outcomes: json {adapter: {case: outcome}}} per rank.
"""

import json
import os
import sys
import types
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import emit, main, set_rank  # noqa: E402
from test_horovod_rules import CASES, expectation  # noqa: E402  (tests/ is on the path: common.py)


class TorchDriver:
    """The rows' view of a torch module (rdmacoll.frameworks.torch or horovod.torch)."""

    framework = "torch"

    def __init__(self, hvd, adapter):
        import torch

        self.torch, self.hvd, self.adapter = torch, hvd, adapter
        self.ps = None

    @property
    def rank(self):
        return self.hvd.rank()

    @property
    def size(self):
        return self.hvd.size()

    def t(self, values, dtype="float32"):
        return self.torch.tensor(values, dtype=getattr(self.torch, dtype))

    def plain(self, x):
        if isinstance(x, (tuple, list)):
            return [self.plain(v) for v in x]
        return x.tolist() if isinstance(x, self.torch.Tensor) else x

    def alltoall(self, rows, splits=None):
        return self.hvd.alltoall(self.t(rows), splits=splits)

    def optimizer(self, duplicate_names=False, **kw):
        x, y = self.torch.zeros(2, requires_grad=True), self.torch.zeros(3, requires_grad=True)
        named = [("w", x), ("w", y)] if duplicate_names else [("a", x), ("b", y)]
        self.hvd.DistributedOptimizer(self.torch.optim.SGD([x, y], lr=0.1), named_parameters=named, **kw)
        return "made"

    def parameter_names(self):
        x, y = self.torch.zeros(2, requires_grad=True), self.torch.zeros(3, requires_grad=True)
        named = self.hvd.DistributedOptimizer(
            self.torch.optim.SGD([x, y], lr=0.1), named_parameters=[("a", x), ("w", y)]
        )
        unnamed = self.hvd.DistributedOptimizer(self.torch.optim.SGD([x, y], lr=0.1))
        return [[named._parameter_names[x], named._parameter_names[y]], [unnamed._parameter_names[p] for p in (x, y)]]

    def uneven_hosts(self, hosts):
        return uneven_hosts(self.hvd, hosts)

    def disagree(self):
        x = self.t([1.0, 2.0])
        if self.rank == 0:
            return self.hvd.allreduce(x, name="disagree")
        return self.hvd.allgather(x, name="disagree")


class TFDriver(TorchDriver):
    """The rows' view of rdmacoll.frameworks.tensorflow (Keras 3 optimizers)."""

    framework = "tf"

    def __init__(self, hvd, adapter):
        import keras
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        self.tf, self.keras, self.hvd, self.adapter = tf, keras, hvd, adapter
        self.ps = None

    def t(self, values, dtype="float32"):
        return self.tf.constant(values, dtype=getattr(self.tf, dtype))

    def plain(self, x):
        if isinstance(x, (tuple, list)):
            return [self.plain(v) for v in x]
        return x.numpy().tolist() if hasattr(x, "numpy") else x

    def optimizer(self, duplicate_names=False, **kw):
        self.hvd.DistributedOptimizer(self.keras.optimizers.SGD(0.1), **kw)
        return "made"


def uneven_hosts(hvd, hosts):
    """[cross_rank(), cross_size(), is_homogeneous()] of hvd in a job laid out on `hosts`
    (one host name per rank, this rank's as launched), the package's world replaced for
    the call."""
    from rdmacoll import _session

    real = _session.require()
    rank = real.rank
    local_rank, local_size, cross_rank, cross_size, homogeneous = _session.layout(list(hosts), rank)
    fake = types.SimpleNamespace(
        comm=real.comm,
        closed=False,
        rank=rank,
        size=len(hosts),
        local_rank=local_rank,
        local_size=local_size,
        cross_rank=cross_rank,
        cross_size=cross_size,
        is_homogeneous=homogeneous,
        host_of=list(hosts),
    )
    _session._current = fake
    try:
        return [hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()]
    finally:
        _session._current = real


def outcome(driver, call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return {"value": driver.plain(call(driver))}
        except Exception as e:  # noqa: BLE001 - the outcome is the exception
            internal = getattr(driver.hvd, "HorovodInternalError", None)
            return {
                "raises": [c.__name__ for c in type(e).__mro__],
                "text": str(e)[:400],
                "caught_as_internal": internal is not None and isinstance(e, internal),
            }


def body():
    which = sys.argv[1]
    if which == "rdmacoll":
        import rdmacoll.frameworks.tensorflow as hvd_tf
        import rdmacoll.frameworks.torch as hvd_torch

        drivers = [TorchDriver(hvd_torch, "torch"), TFDriver(hvd_tf, "tf")]
    else:
        import importlib

        drivers = [TorchDriver(importlib.import_module(which), "horovod")]
    results = {d.adapter: {} for d in drivers}

    def run(case, d):
        if expectation(case, d.adapter) is not None:
            results[d.adapter][case] = outcome(d, CASES[case][0])

    def options(case):
        return CASES[case][2] if len(CASES[case]) > 2 else {}

    first = drivers[0].hvd
    for case in CASES:  # before init()
        if options(case).get("before_init"):
            for d in drivers:
                run(case, d)

    def start():
        ps = first.ProcessSet([0, 1])
        first.init(process_sets=[ps])
        for d in drivers:
            d.ps = ps
        set_rank(first.rank())

    start()
    later = [c for c in CASES if options(c).get("breaks")]
    for case in CASES:
        if not options(case).get("before_init") and case not in later:
            for d in drivers:
                run(case, d)
    for case in later:  # each leaves the job broken: a fresh one after it
        for d in drivers:
            if expectation(case, d.adapter) is not None:  # (Horovod cannot init after a shutdown)
                run(case, d)
                first.shutdown()
                start()
    emit("done", outcomes=json.dumps(results))
    first.shutdown()


if __name__ == "__main__":
    main(body)
