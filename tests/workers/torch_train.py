"""DistributedOptimizer training checks, many cases in one launch.

Every case trains a small model on this rank's shard of a synthetic batch and, on every
rank, a reference model in a single process on the union of all shards (the loss is
the same function of the union batch). After every step the parameters must be
bit-identical across ranks and match the reference to a tolerance. Reports one record
per case ("case": name, "bad": what failed, plus counters) and "done".

argv[1:]: what to run, in order: case names, "api" (torch_api.py), "frozen" (every
case of torch_frozen.py: frozen, unfrozen, unused and added parameters), "errors"
(torch_errors.py: leaves the job aborted, so it comes last). Default: every case.
"""

import sys

import numpy as np
import torch
import torch.nn.functional as F
from common import digest, emit, main, set_rank

import rdmacoll
import rdmacoll.frameworks.torch as hvd

B, DIN, DOUT = 4, 12, 5  # rows per rank and micro-batch, input and output width


class Net(torch.nn.Module):
    """An MLP with a branch used only on some ranks and a layer never used."""

    def __init__(self, sparse=False):
        super().__init__()
        torch.manual_seed(7)
        self.emb = torch.nn.Embedding(10, DIN, sparse=sparse)
        self.l1 = torch.nn.Linear(DIN, 32)
        self.l2 = torch.nn.Linear(32, 32)
        self.l3 = torch.nn.Linear(32, DOUT)
        self.extra = torch.nn.Linear(DIN, DOUT)
        self.never = torch.nn.Linear(3, 3)

    def forward(self, x, ids, use_extra=False):
        h = x + self.emb(ids)
        y = self.l3(torch.tanh(self.l2(torch.tanh(self.l1(h)))))
        return y + self.extra(h) if use_extra else y


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.c1 = torch.nn.Conv2d(3, 6, 3)
        self.c2 = torch.nn.Conv2d(6, 4, 3)
        self.fc = torch.nn.Linear(4 * 4 * 4, DOUT)

    def forward(self, x, ids, use_extra=False):
        x = x[:, : 3 * 8 * 8].reshape(-1, 3, 8, 8).contiguous(memory_format=torch.channels_last)
        return self.fc(F.relu(self.c2(F.relu(self.c1(x)))).flatten(1))


def batch(step, micro, q, din=DIN):
    g = torch.Generator().manual_seed(10000 * step + 100 * micro + q)
    return torch.randn(B, din, generator=g), torch.randint(0, 10, (B,), generator=g), torch.randn(B, DOUT, generator=g)


CASES = {
    # name: options
    "sgd": dict(opt="sgd"),
    "sgd_views": dict(opt="sgd", set_to_none=False),
    "adam_passes2": dict(opt="adam", passes=2),
    "passes3_fewer": dict(opt="sgd", passes=3, run_passes=2),
    "fp16": dict(opt="sgd", compression="fp16", tol=5e-3),
    "bf16": dict(opt="sgd", compression="bf16", tol=4e-2),
    "unused": dict(opt="sgd", extra_on_rank0=True),
    "predivide": dict(opt="sgd", predivide=2.0),
    "op_sum": dict(opt="sgd", op="sum"),
    "clip": dict(opt="sgd", clip=0.05),
    "sparse": dict(opt="sgd", sparse=True, momentum=0.0),
    "channels_last": dict(opt="sgd", model="conv", din=3 * 8 * 8),
    "rebuild": dict(opt="sgd", rebuild=True),
}


def make_opt(kind, params, momentum, weight_decay):
    if kind == "adam":
        return torch.optim.Adam(params, lr=0.01)
    return torch.optim.SGD(params, lr=0.1, momentum=momentum, weight_decay=weight_decay)


def run_case(name, o, r, p):
    bad = []
    din = o.get("din", DIN)
    make = ConvNet if o.get("model") == "conv" else (lambda: Net(o.get("sparse", False)))
    model, ref = make(), make()
    if o.get("model") == "conv":
        model.to(memory_format=torch.channels_last)
        ref.to(memory_format=torch.channels_last)
    passes, run_passes = o.get("passes", 1), o.get("run_passes", o.get("passes", 1))
    momentum = o.get("momentum", 0.9)
    wd = 0.0 if o.get("sparse") else 1e-3
    comp = {"fp16": hvd.Compression.fp16, "bf16": hvd.Compression.bf16}.get(o.get("compression"), hvd.Compression.none)
    op = hvd.Sum if o.get("op") == "sum" else hvd.Average
    opt = hvd.DistributedOptimizer(
        make_opt(o["opt"], model.parameters(), momentum, wd),
        named_parameters=model.named_parameters(),
        compression=comp,
        backward_passes_per_step=passes,
        op=op,
        gradient_predivide_factor=o.get("predivide", 1.0),
    )
    ropt = make_opt(o["opt"], ref.parameters(), momentum, wd)
    if not isinstance(opt, type(ropt)):
        bad.append("isinstance")
    if len(opt.bucket_sizes()) < 2 and o.get("model") != "conv":
        bad.append(f"expected several buckets, got {opt.bucket_sizes()}")
    tol = o.get("tol", 2e-5)
    scale = 1.0 if o.get("op") == "sum" else 1.0 / p
    steps = 4
    for step in range(steps):
        if step == 2 and o.get("rebuild"):
            for m in (model, ref):
                m.double()
                m.l1.weight.requires_grad_(False)
        dtype = next(model.parameters()).dtype
        opt.zero_grad(set_to_none=o.get("set_to_none", True))
        ropt.zero_grad()
        for micro in range(run_passes):
            x, ids, y = batch(step, micro, r, din)
            loss = F.mse_loss(model(x.to(dtype), ids, o.get("extra_on_rank0") and r == 0), y.to(dtype)) / run_passes
            loss.backward()
        rloss = 0
        for q in range(p):
            for micro in range(run_passes):
                x, ids, y = batch(step, micro, q, din)
                rloss = (
                    rloss
                    + F.mse_loss(ref(x.to(dtype), ids, o.get("extra_on_rank0") and q == 0), y.to(dtype)) / run_passes
                )
        (rloss * scale).backward()
        for prm in ref.parameters():  # Horovod's rule: no gradient counts as zero
            if prm.grad is None and prm.requires_grad:
                prm.grad = torch.zeros_like(prm)
        if o.get("clip"):
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["clip"])
            torch.nn.utils.clip_grad_norm_(ref.parameters(), o["clip"])
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        ropt.step()
        if o.get("model") == "conv":
            for prm in model.parameters():
                if prm.grad.stride() != prm.stride():
                    bad.append(f"step {step}: grad strides {prm.grad.stride()} != param strides {prm.stride()}")
        state = [prm.detach() for prm in model.parameters()]
        digests = hvd.allgather_object([digest(t.float().numpy()) for t in state])
        if any(d != digests[0] for d in digests):
            bad.append(f"step {step}: parameters differ between ranks")
        err = max(
            float(((a.detach() - b.detach()).abs() / (b.detach().abs() + 1e-2)).max())
            for a, b in zip(model.parameters(), ref.parameters())
        )
        if not np.isfinite(err) or err > tol:
            bad.append(f"step {step}: differs from the single-process reference by {err:.3g} (tol {tol})")
    nparams = sum(1 for prm in model.parameters() if prm.requires_grad)
    emit("case", case=name, bad=bad, stats=opt.stats, buckets=opt.bucket_sizes(), nparams=nparams)


def restore_diverged(r, p):
    """broadcast_parameters + broadcast_optimizer_state bring a diverged rank back."""
    bad = []
    model = Net()
    opt = hvd.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
    )
    for step in range(2):
        opt.zero_grad()
        x, ids, y = batch(step, 0, r)
        F.mse_loss(model(x, ids), y).backward()
        opt.step()
    if r == 1:  # diverge: parameters, moments, learning rate
        with torch.no_grad():
            for prm in model.parameters():
                prm.add_(1.0)
        for st in opt.state.values():
            st["exp_avg"].mul_(-3)
        opt.param_groups[0]["lr"] = 0.5
    fresh = torch.optim.Adam(Net().parameters(), lr=0.3)  # no state at all yet
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    hvd.broadcast_optimizer_state(opt if r == 0 else fresh, root_rank=0)

    def fingerprint(o, m):
        sd = o.state_dict()
        tensors = [t for st in sd["state"].values() for t in st.values() if torch.is_tensor(t)]
        return (
            [digest(t.detach().numpy()) for t in m.state_dict().values()],
            [digest(t.numpy()) for t in tensors],
            [g["lr"] for g in sd["param_groups"]],
        )

    prints = hvd.allgather_object(fingerprint(opt, model))
    if any(f != prints[0] for f in prints):
        bad.append("model or optimizer state differs after broadcasting")
    if r != 0 and (
        len(fresh.state) != len(opt.state)
        or fresh.param_groups[0]["lr"] != 0.01
        or fingerprint(fresh, model)[1] != fingerprint(opt, model)[1]
    ):
        bad.append("a fresh optimizer did not receive the state")
    for step in range(2, 4):
        opt.zero_grad()
        x, ids, y = batch(step, 0, r)
        F.mse_loss(model(x, ids), y).backward()
        opt.step()
    prints = hvd.allgather_object(fingerprint(opt, model))
    if any(f != prints[0] for f in prints):
        bad.append("ranks diverged again after the broadcast")
    emit("case", case="restore_diverged", bad=bad)


def model_mismatch(r, p):
    """Ranks whose models differ get an error naming the first differing parameter."""
    bad = []
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 3 if r == p - 1 else 2))
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters())
        bad.append("no error for different models")
    except hvd.RdmacollError as e:
        if "1.weight" not in str(e) or "differs between ranks" not in str(e):
            bad.append(f"unclear error: {e}")
    try:
        hvd.DistributedOptimizer(
            torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=list(m.named_parameters())[:1]
        )
        bad.append("no error for unnamed parameters")
    except hvd.RdmacollError as e:
        if "not named" not in str(e):
            bad.append(f"unclear error: {e}")
    if float(hvd.allreduce(torch.ones(1), op=hvd.Sum)) != p:
        bad.append("collectives broken after the errors")
    emit("case", case="model_mismatch", bad=bad)


JOIN_STEPS = [3, 1, 3, 2]  # steps per rank: uneven; with 3 ranks ranks 0 and 2 tie for last


def join_case(r, p):
    """hvd.join(): ranks with fewer batches join early and reduce zeros for the others'
    steps; Average divides by size(). After join(), parameters broadcast from the last
    rank to join equal a single-process reference that sums only the training ranks."""
    bad = []
    steps = JOIN_STEPS[:p]
    expected_last = max(q for q in range(p) if steps[q] == max(steps))
    stats = {}
    for label, op, passes in (("sgd_avg", hvd.Average, 1), ("adam_sum_passes2", hvd.Sum, 2)):
        model, ref = Net(), Net()
        inner = (
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            if label == "sgd_avg"
            else torch.optim.Adam(model.parameters(), lr=0.01)
        )
        ropt = (
            torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
            if label == "sgd_avg"
            else torch.optim.Adam(ref.parameters(), lr=0.01)
        )
        opt = hvd.DistributedOptimizer(
            inner, named_parameters=model.named_parameters(), op=op, backward_passes_per_step=passes
        )
        scale = 1.0 / p if op == hvd.Average else 1.0
        for step in range(steps[r]):
            opt.zero_grad()
            for micro in range(passes):
                x, ids, y = batch(step, micro, r)
                (F.mse_loss(model(x, ids), y) / passes).backward()
            opt.step()
        last = hvd.join()
        if last != expected_last:
            bad.append(f"{label}: join() returned {last}, expected {expected_last}")
        hvd.broadcast_parameters(model.state_dict(), root_rank=last)
        for step in range(max(steps)):  # reference: joined ranks contribute zeros
            ropt.zero_grad()
            rloss = 0
            for q in range(p):
                if step < steps[q]:
                    for micro in range(passes):
                        x, ids, y = batch(step, micro, q)
                        rloss = rloss + F.mse_loss(ref(x, ids), y) / passes
            (rloss * scale).backward()
            for prm in ref.parameters():
                if prm.grad is None:
                    prm.grad = torch.zeros_like(prm)
            ropt.step()
        digests = hvd.allgather_object([digest(t.detach().numpy()) for t in model.parameters()])
        if any(d != digests[0] for d in digests):
            bad.append(f"{label}: parameters differ between ranks after join")
        err = max(
            float(((a.detach() - b.detach()).abs() / (b.detach().abs() + 1e-2)).max())
            for a, b in zip(model.parameters(), ref.parameters())
        )
        if not np.isfinite(err) or err > 2e-5:
            bad.append(f"{label}: differs from the reference by {err:.3g}")
        stats[label] = dict(opt.stats)
    # everyone joins at once: the highest rank is "last"; collectives work afterwards
    if hvd.join() != p - 1:
        bad.append("simultaneous join() did not return the highest rank")
    if float(hvd.allreduce(torch.ones(1), op=hvd.Sum)) != p:
        bad.append("collectives broken after join()")
    emit("case", case="join", bad=bad, stats=stats)


def join_plain(r, p):
    """Collectives of the plain rdmacoll API (the adapter announces nothing for them) on
    rank 0 while the other ranks are joined: they take part from the call itself, an
    allreduce with zeros, an allgather and an alltoall with no rows. Then a reducescatter,
    whose parts a joined rank cannot know: every rank raises, naming it or the joined
    rank's join.failed call.
    Leaves the job aborted."""
    bad, error = [], None
    try:
        if r == 0:
            s = rdmacoll.allreduce(np.full(3, 2.0, np.float32), op=rdmacoll.Sum, name="metric")
            if s.tolist() != [2.0] * 3:
                bad.append(f"plain allreduce with joined ranks: {s.tolist()}")
            g = rdmacoll.allgather(np.arange(4, dtype=np.int64).reshape(2, 2), name="rows")
            if g.tolist() != [[0, 1], [2, 3]]:
                bad.append(f"plain allgather with joined ranks: {g.tolist()}")
            a = rdmacoll.alltoall(np.arange(p, dtype=np.float32), name="exchange")
            if a.tolist() != [0.0]:
                bad.append(f"plain alltoall with joined ranks: {a.tolist()}")
            rdmacoll.reducescatter(np.zeros(p, np.float32), name="scatter")
            bad.append("the reducescatter with joined ranks did not raise")
        else:
            hvd.join()
            bad.append("join() returned although rank 0 started a reducescatter")
    except hvd.RdmacollError as e:
        error = str(e)
    # (the joined rank that meets the reducescatter first names it; the others, training or
    # joined, may see its abort first: the mismatch against its join.failed call)
    if error is None or "join.failed" not in error and "cannot take part in reducescatter" not in error:
        bad.append(f"unclear error: {error!r}")
    emit("case", case="join_plain", bad=bad, error=error)


def body():
    hvd.init()
    set_rank(hvd.rank())
    r, p = hvd.rank(), hvd.size()
    torch.set_num_threads(1)
    wanted = sys.argv[1:] or list(CASES) + ["restore_diverged", "model_mismatch"]
    for name in wanted:
        if name == "api":
            import torch_api

            torch_api.run()
        elif name == "frozen":
            import torch_frozen

            torch_frozen.run()
        elif name == "errors":
            import torch_errors

            torch_errors.run()
        elif name == "restore_diverged":
            restore_diverged(r, p)
        elif name == "model_mismatch":
            model_mismatch(r, p)
        elif name == "join":
            join_case(r, p)
        elif name == "join_plain":
            join_plain(r, p)
        else:
            run_case(name, CASES[name], r, p)
    emit("done")


main(body)
