"""Sparse tensors and Adasum, the same checks under real Horovod and under
rdmacoll.frameworks.torch (issue 14): sparse_allreduce_async, sparse gradients in
DistributedOptimizer (allgathered, and sparse_as_dense; SGD and SparseAdam), op=Adasum in
allreduce / allreduce_ / grouped_allreduce and DistributedOptimizer(op=Adasum); under
rdmacoll only, sparse gradients with hvd.join() and a rank without one in a step.

RC_TEST_HVD names the module (horovod.torch or rdmacoll.frameworks.torch). Outcomes are
horovod_parity.py's (the result, or the exception's builtin classes, and the warnings).
Where a case has a reference, computed here independently (NumPy for Adasum's tree; a
single process on the union batch for sparse training; every rank's Adasum optimizer
simulated in one process), its error against it is recorded too:
RC_TEST_PARITY_DIR/rank<r>.json holds {"cases": {name: outcome}, "errors": {name: [error, tolerance]}}.
"""

import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit, set_rank  # noqa: E402
from horovod_parity import hvd, outcome  # noqa: E402  (the module RC_TEST_HVD names)
from reference import adasum_tree  # noqa: E402


# --------------------------------------------------------------------------- references


def error(got, want):
    """max |got - want| / (1 + |want|) over tensors or arrays (sparse ones as dense)."""
    worst = 0.0
    for g, w in zip(got, want):
        g = g.to_dense() if isinstance(g, torch.Tensor) and g.is_sparse else g
        w = w.to_dense() if isinstance(w, torch.Tensor) and w.is_sparse else w
        g, w = np.asarray(torch.as_tensor(g).double()), np.asarray(torch.as_tensor(w).double())
        if g.shape != w.shape:
            return float("inf")
        if g.size:
            worst = max(worst, float((np.abs(g - w) / (1 + np.abs(w))).max()))
    return worst


def sparse_parts(t):
    """What a sparse result is compared by: its layout facts, raw indices and values."""
    return ("sparse", t.sparse_dim(), bool(t.is_coalesced()), t._indices(), t._values())


# --------------------------------------------------------------------------- sparse tensors


def sparse_input(q, kind):
    """Rank q's sparse tensor: 1-D (two entries, one index shared by every rank), or
    embedding-like rows (sparse_dim 1, values (nnz, 3); rank 0 holds none)."""
    if kind == "1d":
        return torch.sparse_coo_tensor(
            torch.tensor([[q, 7]]), torch.tensor([1.0 + q, 0.5 * q]), (9,), check_invariants=True
        )
    if kind == "int":
        return torch.sparse_coo_tensor(
            torch.tensor([[q, 2]]), torch.tensor([10 + q, 3 * q]), (6,), check_invariants=True
        )
    rows = torch.tensor([[(3 * q + i) % 8 for i in range(q)]], dtype=torch.int64)
    vals = torch.arange(q * 3, dtype=torch.float32).reshape(q, 3) + q
    return torch.sparse_coo_tensor(rows, vals, (8, 3), check_invariants=True)


def sparse_reference(n, kind, average):
    parts = [sparse_input(q, kind) for q in range(n)]
    idx = torch.cat([p._indices() for p in parts], 1)
    val = torch.cat([p._values() for p in parts])
    return torch.sparse_coo_tensor(idx, val / n if average else val, parts[0].shape, check_invariants=True)


def sparse_cases(r, n, out):
    s = sparse_input(r, "1d")
    out["sparse allreduce"] = (lambda: hvd.allreduce(s, name="sp.dense"), None, 0)
    out["sparse allgather"] = (lambda: hvd.allgather(s, name="sp.ag"), None, 0)
    for kind, op in (("1d", "Sum"), ("1d", "Average"), ("rows", "Average"), ("int", "Sum")):
        t = sparse_input(r, kind)

        def run(t=t, kind=kind, op=op):
            h = hvd.sparse_allreduce_async(t, f"sp.{kind}.{op}", getattr(hvd, op))
            return sparse_parts(h())  # Horovod's handle is a function: calling it gives the result

        def ref(kind=kind, op=op):
            want = sparse_reference(n, kind, op == "Average")
            return (want._indices(), want._values())

        out[f"sparse_allreduce_async {kind} {op}"] = (run, lambda ref=ref: ref(), 0.0)
    out["sparse_allreduce_async Max"] = (
        lambda: sparse_parts(hvd.sparse_allreduce_async(s, "sp.max", hvd.Max)()),
        None,
        0,
    )


# --------------------------------------------------------------------------- sparse training

NROWS, DIM, B = 12, 4, 5


class EmbNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.emb = torch.nn.Embedding(NROWS, DIM, sparse=True)
        self.lin = torch.nn.Linear(DIM, 2)

    def forward(self, ids, use_emb=True):
        return self.lin(self.emb(ids) if use_emb else torch.ones(len(ids), DIM))


def emb_batch(step, q):
    g = torch.Generator().manual_seed(1000 * step + q)
    return torch.randint(0, NROWS, (B,), generator=g), torch.randn(B, 2, generator=g)


def emb_optimizers(model, kind):
    """[(optimizer, named parameters)]: SGD over everything, or SparseAdam for the
    embedding and Adam for the linear layer (the usual pairing)."""
    if kind == "sgd":
        return [(torch.optim.SGD(model.parameters(), lr=0.5), list(model.named_parameters()))]
    return [
        (torch.optim.SparseAdam([model.emb.weight], lr=0.05), [("emb.weight", model.emb.weight)]),
        (torch.optim.Adam(model.lin.parameters(), lr=0.05), list(model.lin.named_parameters())),
    ]


def sparse_training(r, n, kind, sparse_as_dense, op):
    model = EmbNet()
    opts = [
        hvd.DistributedOptimizer(o, named_parameters=named, sparse_as_dense=sparse_as_dense, op=op)
        for o, named in emb_optimizers(model, kind)
    ]
    for step in range(3):
        for o in opts:
            o.zero_grad()
        ids, y = emb_batch(step, r)
        F.mse_loss(model(ids), y).backward()
        for o in opts:
            o.step()
    g = model.emb.weight.grad
    return [p.detach().clone() for p in model.parameters()] + [str(g.layout), g.sparse_dim(), bool(g.is_coalesced())]


def sparse_training_reference(n, kind, op):
    """One process, the union batch (loss: the mean over ranks of each rank's loss for
    Average, their sum for Sum)."""
    model = EmbNet()
    opts = [o for o, _ in emb_optimizers(model, kind)]
    for step in range(3):
        for o in opts:
            o.zero_grad()
        loss = sum(F.mse_loss(model(ids), y) for ids, y in (emb_batch(step, q) for q in range(n)))
        (loss / n if op == "Average" else loss).backward()
        for o in opts:
            o.step()
    return [p.detach() for p in model.parameters()]


JOIN_STEPS = [3, 2, 3, 1]  # steps per rank before hvd.join()


def join_loss(model, step, q):
    """Rank 0 does not use the embedding in step 1: it sends an empty sparse gradient."""
    ids, y = emb_batch(step, q)
    return F.mse_loss(model(ids, use_emb=not (step == 1 and q == 0)), y)


def sparse_join(r, n):
    """rdmacoll only (Horovod hangs or fails when a rank has no sparse gradient): uneven
    steps, hvd.join() (joined ranks send zeros and empty sparse gradients), the last
    rank's parameters, then a step of every rank (the ranks rebuilt their buckets while
    others were joined: every rank rebuilds alike after join())."""
    model = EmbNet()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.5), named_parameters=model.named_parameters()
    )
    for step in range(JOIN_STEPS[r]):
        opt.zero_grad()
        join_loss(model, step, r).backward()
        opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=hvd.join())
    opt.zero_grad()
    join_loss(model, max(JOIN_STEPS[:n]), r).backward()
    opt.step()
    return [p.detach().clone() for p in model.parameters()]


def sparse_join_reference(n):
    model = EmbNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(max(JOIN_STEPS[:n]) + 1):  # (the last: every rank, after join())
        opt.zero_grad()
        (
            sum(join_loss(model, step, q) for q in range(n) if step < JOIN_STEPS[q] or step == max(JOIN_STEPS[:n])) / n
        ).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def training_cases(r, n, out):
    for kind, sad, op in (
        ("sgd", False, "Average"),
        ("sgd", False, "Sum"),
        ("sgd", True, "Average"),
        ("sparseadam", False, "Average"),
        ("sparseadam", True, "Average"),
    ):
        name = f"sparse training {kind} {op}{' sparse_as_dense' if sad else ''}"
        out[name] = (
            lambda kind=kind, sad=sad, op=op: sparse_training(r, n, kind, sad, getattr(hvd, op)),
            lambda kind=kind, op=op: sparse_training_reference(n, kind, op),
            2e-5,
        )
    if hvd.__name__.startswith("rdmacoll"):
        out["sparse training join, a rank without the sparse gradient"] = (
            lambda: sparse_join(r, n),
            lambda: sparse_join_reference(n),
            2e-5,
        )


# --------------------------------------------------------------------------- Adasum


def vector(q, count, dtype, seed):
    return torch.randn(count, generator=torch.Generator().manual_seed(seed + 101 * q), dtype=torch.float64).to(dtype)


def adasum_cases(r, n, out):
    np_of = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}
    tol = {torch.float16: 2e-3, torch.float32: 2e-6, torch.float64: 1e-12}
    for dt in (torch.float32, torch.float64, torch.float16):
        d = str(dt).replace("torch.", "")
        for count in (37, 3, 1):
            out[f"adasum {d} allreduce {count}"] = (
                lambda dt=dt, d=d, count=count: [
                    hvd.allreduce(vector(r, count, dt, count), op=hvd.Adasum, name=f"ad.{d}.{count}")
                ],
                lambda dt=dt, count=count: [adasum_tree([vector(q, count, dt, count) for q in range(n)], np_of[dt])],
                tol[dt],
            )
    x = vector(r, 20, torch.float32, 5)

    def want(scale=1.0):  # (a reference exists for powers of two only: called when the case ran)
        return [scale * adasum_tree([vector(q, 20, torch.float32, 5) for q in range(n)], np.float32)]

    out["adasum allreduce_"] = (lambda: [hvd.allreduce_(x.clone(), op=hvd.Adasum, name="ad.inplace")], want, 2e-6)
    out["adasum allreduce_async"] = (
        lambda: [hvd.synchronize(hvd.allreduce_async(x, op=hvd.Adasum, name="ad.async"))],
        want,
        2e-6,
    )
    out["adasum prescale postscale"] = (
        lambda: [hvd.allreduce(x, op=hvd.Adasum, name="ad.scale", prescale_factor=0.5, postscale_factor=3.0)],
        lambda: want(1.5),
        4e-6,
    )
    # two tensors, each its own coefficients (not one vector of both)
    ys = [vector(r, 11, torch.float32, 6) * (1 + r), vector(r, 4, torch.float32, 7)]
    out["adasum grouped_allreduce"] = (
        lambda: hvd.grouped_allreduce(ys, op=hvd.Adasum, name="ad.group"),
        lambda: [
            adasum_tree([vector(q, 11, torch.float32, 6) * (1 + q) for q in range(n)], np.float32),
            adasum_tree([vector(q, 4, torch.float32, 7) for q in range(n)], np.float32),
        ],
        2e-6,
    )
    same = vector(0, 9, torch.float32, 8)
    out["adasum identical vectors"] = (
        lambda: [hvd.allreduce(same, op=hvd.Adasum, name="ad.same")],
        lambda: [same],
        2e-6,
    )
    onehot = torch.zeros(4)
    onehot[r % 4] = 1.0
    out["adasum orthogonal vectors"] = (
        lambda: [hvd.allreduce(onehot, op=hvd.Adasum, name="ad.orth")],
        lambda: [torch.zeros(4).index_fill_(0, torch.arange(n) % 4, 1.0)],
        0.0,
    )
    z = torch.zeros(6) if r == 0 else vector(r, 6, torch.float32, 9)
    out["adasum zero vector on rank 0"] = (
        lambda: [hvd.allreduce(z, op=hvd.Adasum, name="ad.zero")],
        lambda: [adasum_tree([torch.zeros(6)] + [vector(q, 6, torch.float32, 9) for q in range(1, n)], np.float32)],
        2e-6,
    )
    out["adasum int32"] = (
        lambda: hvd.allreduce(torch.arange(4, dtype=torch.int32), op=hvd.Adasum, name="ad.i32"),
        None,
        0,
    )
    out["adasum bfloat16"] = (lambda: hvd.allreduce(x.bfloat16(), op=hvd.Adasum, name="ad.bf16"), None, 0)


# --------------------------------------------------------------------------- Adasum optimizer


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.l1 = torch.nn.Linear(5, 3)
        self.l2 = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


def mlp_batch(step, q):
    g = torch.Generator().manual_seed(500 * step + q)
    return torch.randn(4, 5, generator=g), torch.randn(4, 2, generator=g)


def inner(kind, params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9) if kind == "sgd" else torch.optim.Adam(params, lr=0.02)


def adasum_training(r, kind, passes=1):
    model = Mlp()
    opt = hvd.DistributedOptimizer(
        inner(kind, model.parameters()),
        named_parameters=model.named_parameters(),
        op=hvd.Adasum,
        backward_passes_per_step=passes,
    )
    for step in range(3):
        opt.zero_grad()
        for micro in range(passes):
            x, y = mlp_batch(10 * step + micro, r)
            (F.mse_loss(model(x), y) / passes).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def adasum_training_reference(n, kind, passes=1):
    """Every rank simulated: its own model copy and optimizer state; after each local step
    the parameters are the common start plus the Adasum tree of the ranks' deltas."""
    models = [Mlp() for _ in range(n)]
    opts = [inner(kind, m.parameters()) for m in models]
    for step in range(3):
        starts = [p.detach().clone() for p in models[0].parameters()]
        for q, (m, o) in enumerate(zip(models, opts)):
            o.zero_grad()
            for micro in range(passes):
                x, y = mlp_batch(10 * step + micro, q)
                (F.mse_loss(m(x), y) / passes).backward()
            o.step()
        deltas = [[(p.detach() - s).numpy() for p, s in zip(m.parameters(), starts)] for m in models]
        for i, s in enumerate(starts):
            new = s + torch.from_numpy(adasum_tree([d[i] for d in deltas], np.float32)).view(s.shape)
            for m in models:
                with torch.no_grad():
                    list(m.parameters())[i].copy_(new)
    return [p.detach() for p in models[0].parameters()]


def adasum_optimizer_cases(r, n, out):
    for kind, passes in (("sgd", 1), ("adam", 2)):
        out[f"adasum optimizer {kind} passes={passes}"] = (
            lambda kind=kind, passes=passes: adasum_training(r, kind, passes),
            lambda kind=kind, passes=passes: adasum_training_reference(n, kind, passes),
            1e-5,
        )

    def skip():
        model = Mlp()
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(), op=hvd.Adasum
        )
        with opt.skip_synchronize():
            return "entered"

    out["adasum optimizer skip_synchronize"] = (skip, None, 0)

    def broadcast_state():
        """Horovod's pytorch_synthetic_benchmark.py --use-adasum: the broadcasts before any
        step. A fresh optimizer's state is made by one step of the wrapped optimizer on every
        rank (0.1.x stepped the Adasum optimizer itself, a collective, on the root only)."""
        model = Mlp()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(r)  # ranks differ until the broadcast
        opt = hvd.DistributedOptimizer(
            torch.optim.Adam(model.parameters(), lr=0.02), named_parameters=model.named_parameters(), op=hvd.Adasum
        )
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        state = opt.state_dict()["state"]
        return [p.detach().clone() for p in model.parameters()] + [
            torch.as_tensor(v, dtype=torch.float32) for k in sorted(state) for v in state[k].values()
        ]

    out["broadcast_optimizer_state of an Adasum optimizer"] = (broadcast_state, None, 0)
    out["adasum optimizer gradient_predivide_factor"] = (
        lambda: (
            hvd.DistributedOptimizer(
                torch.optim.SGD(Mlp().parameters(), lr=0.1), op=hvd.Adasum, gradient_predivide_factor=2.0
            )
            and "built"
        ),
        None,
        0,
    )


def main():
    """Outcomes go to RC_TEST_PARITY_DIR/rank<r>.json (Open MPI may merge the ranks'
    lines on stdout); "done" goes to stdout."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    set_rank(r)
    cases = {}
    sparse_cases(r, n, cases)
    training_cases(r, n, cases)
    adasum_cases(r, n, cases)
    adasum_optimizer_cases(r, n, cases)
    results, errors = {}, {}
    for name, (fn, ref, tol) in cases.items():
        got = []
        results[name] = outcome(lambda fn=fn, got=got: got.append(fn()) or got[0])
        if ref is not None and got:
            errors[name] = [error([g for g in got[0] if isinstance(g, torch.Tensor)], ref()), tol]
    with open(os.path.join(os.environ["RC_TEST_PARITY_DIR"], f"rank{r}.json"), "w") as f:
        json.dump({"module": hvd.__name__, "size": n, "cases": results, "errors": errors}, f)
    emit("done", module=hvd.__name__, cases=len(results))
    hvd.shutdown()


if __name__ == "__main__":
    main()
