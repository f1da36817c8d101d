"""DistributedOptimizer with frozen and changing parameters, under rdmacoll's Horovod API
or, to compare, real Horovod (RC_TEST_HVD=horovod.torch).

Every case trains a model on this rank's shard of a synthetic batch and, on every rank,
a reference: the same model in one process with plain torch.optim on the union of all
shards (the loss is the same function of the union batch), with Horovod's rule that a
parameter which requires a gradient but got none this step has a zero gradient. After
every step it checks whether the parameters are bit-identical on every rank and how far
they are from the reference, and reports one record per case: "case", "identical" (every
step), "err" (largest relative difference from the reference over the steps), "error"
(an exception's type and text, if the case raised). Run alone it ends with "done";
torch_train.py runs it too ("frozen"), in its own launch.

argv[1:]: case names (default: all).
"""

import importlib
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from common import digest, emit, main, set_rank

hvd = importlib.import_module(os.environ.get("RC_TEST_HVD", "rdmacoll.frameworks.torch"))

B, DIN, DOUT, STEPS = 4, 12, 5, 4


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.l1 = torch.nn.Linear(DIN, 32)
        self.l2 = torch.nn.Linear(32, 32)
        self.l3 = torch.nn.Linear(32, DOUT)
        self.extra = torch.nn.Linear(DIN, DOUT)

    def forward(self, x, use_extra):
        y = self.l3(torch.tanh(self.l2(torch.tanh(self.l1(x)))))
        return y + self.extra(x) if use_extra else y


# name: what changes, and when. freeze: frozen before wrapping; unfreeze: {step: layers}
# made trainable before that step; freeze_at: {step: layers} frozen before that step;
# extra: when the `extra` branch is used ("odd": odd steps on every rank, "rank0": rank 0
# only, "never"); add_group: {step: layer} added with optimizer.add_param_group.
CASES = {
    "frozen": dict(freeze=["l2"]),
    "frozen_adam_passes2": dict(freeze=["l1"], opt="adam", passes=2),
    "unused_odd_steps": dict(extra="odd"),
    "unused_rank0_only": dict(extra="rank0"),
    "unfreeze": dict(freeze=["l1", "l3"], unfreeze={1: ["l3"], 2: ["l1"]}),
    "unfreeze_passes2": dict(freeze=["l2"], unfreeze={2: ["l2"]}, opt="adam", passes=2),
    "freeze_later": dict(freeze_at={2: ["l2"]}),
    "add_group": dict(exclude=["l3"], add_group={2: "l3"}),
}


def batch(step, micro, q):
    g = torch.Generator().manual_seed(10000 * step + 100 * micro + q)
    return torch.randn(B, DIN, generator=g), torch.randn(B, DOUT, generator=g)


def make_opt(kind, params):
    if kind == "adam":
        return torch.optim.Adam(params, lr=0.01)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)


def set_trainable(models, layers, flag):
    for m in models:
        for layer in layers:
            getattr(m, layer).requires_grad_(flag)


def uses_extra(o, step, q):
    when = o.get("extra", "never")
    return (when == "odd" and step % 2 == 1) or (when == "rank0" and q == 0)


def run_case(name, o, r, p):
    model, ref = Net(), Net()
    set_trainable((model, ref), o.get("freeze", []), False)
    passes = o.get("passes", 1)
    kind = o.get("opt", "sgd")

    def params(m):
        return [prm for n, prm in m.named_parameters() if n.split(".")[0] not in o.get("exclude", [])]

    named = [(n, prm) for n, prm in model.named_parameters() if n.split(".")[0] not in o.get("exclude", [])]
    opt = hvd.DistributedOptimizer(
        make_opt(kind, params(model)), named_parameters=named, backward_passes_per_step=passes
    )
    ropt = make_opt(kind, params(ref))
    identical, err = True, 0.0
    for step in range(STEPS):
        set_trainable((model, ref), o.get("unfreeze", {}).get(step, []), True)
        set_trainable((model, ref), o.get("freeze_at", {}).get(step, []), False)
        if step in o.get("add_group", {}):
            layer = o["add_group"][step]
            opt.add_param_group({"params": list(getattr(model, layer).parameters()), "lr": 0.05})
            ropt.add_param_group({"params": list(getattr(ref, layer).parameters()), "lr": 0.05})
        model.zero_grad()  # also parameters outside the optimizer (add_group)
        ref.zero_grad()
        opt.zero_grad()
        ropt.zero_grad()
        for micro in range(passes):
            x, y = batch(step, micro, r)
            (F.mse_loss(model(x, uses_extra(o, step, r)), y) / passes).backward()
        rloss = 0
        for q in range(p):
            for micro in range(passes):
                x, y = batch(step, micro, q)
                rloss = rloss + F.mse_loss(ref(x, uses_extra(o, step, q)), y) / passes
        (rloss / p).backward()
        for group in ropt.param_groups:  # Horovod's rule: no gradient counts as zero
            for prm in group["params"]:
                if prm.grad is None and prm.requires_grad:
                    prm.grad = torch.zeros_like(prm)
        opt.step()
        ropt.step()
        digests = hvd.allgather_object([digest(t.detach().numpy()) for t in model.parameters()])
        identical = identical and all(d == digests[0] for d in digests)
        err = max(
            err,
            max(
                float(((a.detach() - b.detach()).abs() / (b.detach().abs() + 1e-2)).max())
                for a, b in zip(model.parameters(), ref.parameters())
            ),
        )
    emit("frozen_case", case=name, identical=identical, err=err if np.isfinite(err) else str(err), error=None)


def run(names=None):
    for name in names or list(CASES):
        try:
            run_case(name, CASES[name], hvd.rank(), hvd.size())
        except Exception as e:  # reported, so that Horovod's failures are compared too
            emit("frozen_case", case=name, identical=None, err=None, error=f"{type(e).__name__}: {e}")


def body():
    hvd.init()
    set_rank(hvd.rank())
    torch.set_num_threads(1)
    run(sys.argv[1:])
    emit("done")


if __name__ == "__main__":
    main(body)
