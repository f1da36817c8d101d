"""The same checks under real Horovod and under rdmacoll.frameworks.torch (issue 14: dtypes,
results of Average and the scale factors, argument errors, warnings, capability probes).

RC_TEST_HVD names the module: horovod.torch or rdmacoll.frameworks.torch (the default).
Every rank emits one "case" record per check: its outcome, reduced to what Horovod's users
see — the result (dtype and values), or the exception (which of the builtin classes an
`except` clause would name it by), and the warnings (category and text).
tests/test_horovod_parity.py compares the two runs.
"""
import importlib
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit, set_rank  # noqa: E402

import torch  # noqa: E402

hvd = importlib.import_module(os.environ.get("RC_TEST_HVD", "rdmacoll.frameworks.torch"))

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool]
CLASSES = (ValueError, TypeError, RuntimeError, NotImplementedError, AssertionError)


def outcome(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = fn()
            if isinstance(got, (list, tuple)):
                res = ["ok", [describe(g) for g in got]]
            else:
                res = ["ok", describe(got)]
        except Exception as e:  # noqa: BLE001 - the class is what is compared
            res = ["raises", [c.__name__ for c in CLASSES if isinstance(e, c)], str(e)[:200]]
    res.append(sorted({f"{w.category.__name__}: {w.message}" for w in caught}))
    return res


def describe(x):
    if isinstance(x, torch.Tensor):
        return [str(x.dtype), x.float().tolist() if x.dtype == torch.bfloat16 else x.tolist()]
    return x if isinstance(x, (bool, int, float, str, type(None))) else type(x).__name__


def values(dt, r):
    if dt == torch.bool:
        return torch.tensor([True, False, r == 0, r % 2 == 1, True, False])
    # negatives: integer results truncate toward zero; odd sums: Average rounds
    return (torch.tensor([-7.0, -3.0, 5.0, 9.0, 11.0, 2.0]) + r * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 7.0])).to(dt)


def cases(r, n):
    out = {}
    for dt in DTYPES:
        d = str(dt).replace("torch.", "")
        t = values(dt, r)
        out[f"{d} allreduce Sum"] = lambda t=t, d=d: hvd.allreduce(t, op=hvd.Sum, name=f"s.{d}")
        out[f"{d} allreduce Average"] = lambda t=t, d=d: hvd.allreduce(t, name=f"a.{d}")
        out[f"{d} allreduce average=True"] = lambda t=t, d=d: hvd.allreduce(t, average=True, name=f"at.{d}")
        out[f"{d} allreduce Min"] = lambda t=t, d=d: hvd.allreduce(t, op=hvd.Min, name=f"mi.{d}")
        out[f"{d} allreduce Max"] = lambda t=t, d=d: hvd.allreduce(t, op=hvd.Max, name=f"ma.{d}")
        for pre, post, op in ((0.5, 1.0, "Sum"), (1.0, 1.5, "Sum"), (3.0, 0.3, "Average"),
                              (-0.7, 1.0, "Average"), (1.0, 2.5, "Average")):
            tag = f"pre={pre} post={post} {op}"
            out[f"{d} allreduce {tag}"] = (
                lambda t=t, d=d, pre=pre, post=post, op=op, tag=tag: hvd.allreduce(
                    t, op=getattr(hvd, op), prescale_factor=pre, postscale_factor=post, name=f"p.{d}.{tag}"))
            out[f"{d} allreduce_ {tag}"] = (
                lambda t=t, d=d, pre=pre, post=post, op=op, tag=tag: hvd.allreduce_(
                    t.clone(), op=getattr(hvd, op), prescale_factor=pre, postscale_factor=post,
                    name=f"pi.{d}.{tag}"))
            out[f"{d} grouped_allreduce {tag}"] = (
                lambda t=t, d=d, pre=pre, post=post, op=op, tag=tag: hvd.grouped_allreduce(
                    [t, t[:3]], op=getattr(hvd, op), prescale_factor=pre, postscale_factor=post,
                    name=f"g.{d}.{tag}"))
            out[f"{d} reducescatter {tag}"] = (
                lambda t=t, d=d, pre=pre, post=post, op=op, tag=tag: hvd.reducescatter(
                    t, op=getattr(hvd, op), prescale_factor=pre, postscale_factor=post, name=f"r.{d}.{tag}"))
        out[f"{d} reducescatter Average"] = lambda t=t, d=d: hvd.reducescatter(t, name=f"ra.{d}")
        out[f"{d} allgather"] = lambda t=t, d=d: hvd.allgather(t, name=f"ag.{d}")
        out[f"{d} broadcast"] = lambda t=t, d=d: hvd.broadcast(t, n - 1, name=f"b.{d}")
        out[f"{d} broadcast_"] = lambda t=t, d=d: hvd.broadcast_(t.clone(), 0, name=f"bi.{d}")
        out[f"{d} alltoall"] = lambda t=t, d=d: hvd.alltoall(t[:n * (len(t) // n)], name=f"aa.{d}")

    x = torch.arange(10.0) + r
    even = [10 // n] * n
    even[-1] += 10 - sum(even)
    out["alltoall splits list"] = lambda: hvd.alltoall(x, splits=even, name="sp.list")
    out["alltoall splits int32 tensor"] = lambda: hvd.alltoall(
        x, splits=torch.tensor(even, dtype=torch.int32), name="sp.t32")
    out["alltoall splits sum below rows"] = lambda: hvd.alltoall(x, splits=[1] * n, name="sp.short")
    out["alltoall splits int64 tensor"] = lambda: hvd.alltoall(
        x, splits=torch.tensor(even, dtype=torch.int64), name="sp.t64")
    out["alltoall splits float tensor"] = lambda: hvd.alltoall(
        x, splits=torch.tensor(even, dtype=torch.float32), name="sp.tf")
    out["alltoall splits 2-D"] = lambda: hvd.alltoall(
        x, splits=torch.tensor([even], dtype=torch.int32), name="sp.2d")
    out["alltoall splits too many"] = lambda: hvd.alltoall(x, splits=[1] * (n + 1), name="sp.long")
    out["alltoall splits too few"] = lambda: hvd.alltoall(x, splits=[1] * (n - 1), name="sp.few")
    out["alltoall splits sum above rows"] = lambda: hvd.alltoall(x, splits=[11] * n, name="sp.big")
    out["alltoall no splits, rows not divisible"] = lambda: hvd.alltoall(
        torch.arange(float(n + 1)), name="sp.odd")
    out["allreduce op and average"] = lambda: hvd.allreduce(x, average=True, op=hvd.Sum, name="opavg")
    out["same name in flight"] = lambda: same_name_in_flight(r)
    opt = optimizer_cases()
    out.update(opt)
    for probe in ("mpi_built", "gloo_built", "nccl_built", "ccl_built", "ddl_built", "cuda_built",
                  "rocm_built", "mpi_enabled", "gloo_enabled", "mpi_threads_supported"):
        out[f"probe {probe}"] = lambda probe=probe: type(getattr(hvd, probe)()).__name__
    return out


def same_name_in_flight(r):
    """Rank 0 starts "dup" while rank 1 holds back, so it is certainly in flight, then
    starts a second "dup": Horovod refuses it (ValueError) before communicating."""
    if r == 1:
        time.sleep(0.5)
    h = hvd.allreduce_async(torch.ones(4), name="dup")
    try:
        if r == 0:
            hvd.allreduce_async(torch.ones(4), name="dup")
        return "accepted" if r == 0 else "not tried"
    finally:
        hvd.synchronize(h)


def optimizer_cases():
    def make(named):
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return model, hvd.DistributedOptimizer(opt, named_parameters=named(model))

    def step(after_synchronize, skip):
        model, opt = make(lambda m: m.named_parameters())
        model(torch.ones(1, 3)).sum().backward()
        if after_synchronize:
            opt.synchronize()
        if skip:
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        return "stepped"

    return {
        "optimizer duplicate names": lambda: make(lambda m: [("w", p) for p in m.parameters()]) and "built",
        "optimizer missing names": lambda: make(lambda m: list(m.named_parameters())[:1]) and "built",
        "optimizer names not tuples": lambda: make(lambda m: [[k, v] for k, v in m.named_parameters()])
        and "built",
        "optimizer step": lambda: step(False, False),
        "optimizer step after synchronize": lambda: step(True, False),
        "optimizer step after synchronize, skip_synchronize": lambda: step(True, True),
    }


def timeline(r, out_dir):
    """start_timeline / stop_timeline at run time (Horovod needs HOROVOD_TIMELINE set at
    init for them; rdmacoll does not): which named operations each file holds."""
    hvd.allreduce(torch.ones(3), name="before")
    hvd.start_timeline(os.path.join(out_dir, "t.json"))
    hvd.allreduce(torch.ones(3), name="during")
    h = hvd.allreduce_async(torch.ones(1000), name="during.async")
    hvd.start_timeline(os.path.join(out_dir, "u.json"), mark_cycles=True)   # waits for h to run
    hvd.allgather(torch.ones(2), name="second")
    hvd.synchronize(h)
    hvd.stop_timeline()
    hvd.stop_timeline()   # a second stop does nothing
    hvd.allreduce(torch.ones(3), name="after")
    files = {}
    for f in ("t", "u"):
        with open(os.path.join(out_dir, f"{f}.rank{r}.json")) as fh:
            trace = json.load(fh)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        files[f] = sorted({e["args"]["name"] for e in events if e.get("cat") == "op" and "name" in e.get("args", {})})
    return files


def save_outcomes(results, directory):
    """This rank's outcomes to directory/rank<r>.json (one file per rank: Open MPI may
    merge lines of two ranks on stdout); "done" goes to stdout."""
    with open(os.path.join(directory, f"rank{hvd.rank()}.json"), "w") as f:
        json.dump({"module": hvd.__name__, "size": hvd.size(), "cases": results}, f)
    emit("done", module=hvd.__name__, cases=len(results))


def main():
    """Outcomes go to RC_TEST_PARITY_DIR/rank<r>.json (one file per rank: Open MPI may
    merge lines of two ranks on stdout); "done" goes to stdout."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    set_rank(r)
    if os.environ.get("RC_TEST_PARITY_MODE") == "timeline":
        results = timeline(r, os.environ["RC_TEST_PARITY_DIR"])
    else:
        results = {name: outcome(fn) for name, fn in cases(r, n).items()}
    save_outcomes(results, os.environ["RC_TEST_PARITY_DIR"])
    hvd.shutdown()


if __name__ == "__main__":
    main()
