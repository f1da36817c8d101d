"""hvd.join() while the other ranks go on with any collective (issue 14, item 6), the same
checks under real Horovod and under rdmacoll.frameworks.torch.

RC_TEST_HVD names the module: horovod.torch or rdmacoll.frameworks.torch (the default).
Ranks join at different times: rank r trains phases 0..LAST_PHASE[r] and then calls
join(), so the later phases run with some ranks joined. In every phase each training rank
runs the same cases (reductions with every op, grouped and asynchronous ones, allgather,
broadcast, alltoall, reducescatter, the object helpers, DistributedOptimizer steps, one of
them with an allreduce inside backward, and a process set without the joined ranks) and
records each outcome (horovod_parity.outcome: the result, or the exception by the builtin
classes an `except` clause would name it by, and the warnings). join()'s return value and
a collective after it end the run. Outcomes go to RC_TEST_JOIN_DIR/rank<r>.json;
tests/test_join.py compares them with references (and, where Horovod is installed, with
Horovod's run).

RC_TEST_JOIN_EXTRAS=1 (rdmacoll only: Horovod 0.28.1 crashes a joined rank on these)
adds a barrier and named allgathers to the phases.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import set_rank  # noqa: E402
from horovod_parity import hvd, outcome, save_outcomes  # noqa: E402 - (the module RC_TEST_HVD names)

import torch  # noqa: E402

# rank -> the last phase it trains (then it joins); ranks join at different times and
# rank 1 joins last (phases run: 0..3)
LAST_PHASE = {0: 2, 1: 3, 2: 0, 3: 1}
PHASES = 4


def data(r, p):
    """This rank's inputs in phase p: float32 and int32 (negatives: Average truncates)."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]) * (r + 1) + p
    xi = torch.tensor([7, -7, 9, 5], dtype=torch.int32) * (r + 1) + p
    return x, xi


class SumAcross(torch.autograd.Function):
    """y = allreduce(x, Sum), whose backward is a named allreduce too (Horovod names its
    own autograd allreduce's backward by a per-process counter, which ranks that joined at
    different times no longer share)."""

    @staticmethod
    def forward(ctx, x, name):
        ctx.name = name
        return hvd.allreduce(x.detach(), op=hvd.Sum, name=name)

    @staticmethod
    def backward(ctx, grad):
        return hvd.allreduce(grad.contiguous(), op=hvd.Sum, name=ctx.name + ".grad"), None


class Layer(torch.nn.Module):
    """A linear layer; with reduce_inside its output is summed across ranks, so that its
    backward issues an allreduce while the optimizer's gradient reductions run."""

    def __init__(self, reduce_inside):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        with torch.no_grad():
            self.lin.weight.copy_(torch.tensor([[0.5, -0.25, 1.0], [0.125, 2.0, -1.0]]))
            self.lin.bias.copy_(torch.tensor([0.5, -0.5]))
        self.reduce_inside = reduce_inside
        self.calls = 0

    def forward(self, x):
        h = self.lin(x)
        self.calls += 1
        return SumAcross.apply(h, f"inside.{self.calls}") if self.reduce_inside else h


def make_optimizers():
    """Built by every rank before any rank joins (construction is collective)."""
    out = {}
    for label, inside in (("optimizer step", False), ("optimizer step, allreduce in backward", True)):
        model = Layer(inside)
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.5),
            named_parameters=[(f"{label}.{k}", v) for k, v in model.named_parameters()],
        )
        out[label] = (model, opt)
    return out


def step(model, opt, r, p):
    opt.zero_grad()
    x = torch.tensor([[1.0, 2.0, 3.0], [float(r), float(p), 1.0]])
    model(x).sum().backward()
    opt.step()
    return [v.detach().clone() for v in model.parameters()]


def phase_cases(r, n, p, optimizers, pair):
    x, xi = data(r, p)
    # every collective is named: Horovod names unnamed ones by a per-process counter,
    # which the process set's members and the others do not share
    cases = {
        "allreduce Sum": lambda: hvd.allreduce(x, op=hvd.Sum, name=f"sum.{p}"),
        "allreduce Average": lambda: hvd.allreduce(x, name=f"avg.{p}"),
        "allreduce Average int32": lambda: hvd.allreduce(xi, op=hvd.Average, name=f"avgi.{p}"),
        "allreduce Max": lambda: hvd.allreduce(x - 100, op=hvd.Max, name=f"max.{p}"),
        "allreduce Min": lambda: hvd.allreduce(x, op=hvd.Min, name=f"min.{p}"),
        "allreduce Product": lambda: hvd.allreduce(x, op=hvd.Product, name=f"prod.{p}"),
        "allreduce named": lambda: hvd.allreduce(x, op=hvd.Sum, name="metric"),
        "allreduce_ pre/post": lambda: hvd.allreduce_(
            x.clone(), op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5, name=f"scaled.{p}"
        ),
        "allreduce_async": lambda: hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, name=f"async.{p}")),
        "grouped_allreduce": lambda: hvd.grouped_allreduce([x, xi.double(), x[:2]], op=hvd.Sum, name=f"grouped.{p}"),
        "allgather": lambda: hvd.allgather(x[: r + 1], name=f"gather.{p}"),
        "allgather_async": lambda: hvd.synchronize(hvd.allgather_async(x, name=f"gathera.{p}")),
        "broadcast": lambda: hvd.broadcast(x, 0, name=f"bcast.{p}"),
        "broadcast_async_": lambda: hvd.synchronize(hvd.broadcast_async_(x.clone(), 0, name=f"bcasta.{p}")),
        "alltoall": lambda: hvd.alltoall(torch.arange(2.0 * n) + r, name=f"a2a.{p}"),
        "reducescatter": lambda: hvd.reducescatter(torch.arange(2.0 * n) + r, op=hvd.Sum, name=f"rs.{p}"),
        "broadcast_object": lambda: str(hvd.broadcast_object({"phase": p, "rank": r}, 0, name=f"object.{p}")),
        # (a name of its own per phase: Horovod crashes a joined rank on an allgather whose
        # name it has seen before, RC_TEST_JOIN_EXTRAS)
        "allgather_object": lambda: hvd.allgather_object(r, name=f"objects.{p}"),
    }
    for label, (model, opt) in optimizers.items():
        cases[label] = lambda model=model, opt=opt: step(model, opt, r, p)
    if pair is not None and pair.included() and p <= min(LAST_PHASE[0], LAST_PHASE[1]):
        # a process set without the ranks that joined: Horovod's join is the global set's
        cases["process set allreduce"] = lambda: hvd.allreduce(x, op=hvd.Sum, name=f"pair.{p}", process_set=pair)
    if os.environ.get("RC_TEST_JOIN_EXTRAS"):
        cases["barrier"] = lambda: hvd.barrier()
        cases["allgather named"] = lambda: hvd.allgather(x, name="gathered")
    return cases


def main():
    """Process set {0, 1} from 3 ranks on (then ranks 2 and 3 join before 0 and 1)."""
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or 0)
    pair = hvd.ProcessSet([0, 1]) if size >= 3 else None
    hvd.init(process_sets=[pair] if pair is not None else None)
    r, n = hvd.rank(), hvd.size()
    set_rank(r)
    torch.set_num_threads(1)
    optimizers = make_optimizers()
    results = {}
    for p in range(PHASES):
        if p > LAST_PHASE[r]:
            break
        for name, fn in phase_cases(r, n, p, optimizers, pair).items():
            results[f"phase {p} {name}"] = outcome(fn)
    results["join"] = outcome(hvd.join)
    results["after join"] = outcome(lambda: hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after"))
    save_outcomes(results, os.environ["RC_TEST_JOIN_DIR"])
    hvd.shutdown()


if __name__ == "__main__":
    main()
