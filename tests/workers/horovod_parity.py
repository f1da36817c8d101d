"""The same checks under real Horovod and under rdmacoll.frameworks.torch (issue 14: dtypes,
results of Average and the scale factors, argument errors, warnings, capability probes;
grouped allgather/reducescatter, gradients of every collective on the global set and on a
non-contiguous process set, broadcast_optimizer_state for every torch.optim optimizer,
and init(comm=...) in the "comm" mode).

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

DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
]
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


def cases(r, n, extra):
    """extra: surface_cases()'s, run first: Horovod names an operation without a name
    by a per-process count of operations, which the rejected "same name in flight" call
    (rank 0 only) leaves different between ranks, so every later operation must be named,
    and surface_cases' gradients run unnamed operations (Horovod's backward passes)."""
    out = dict(extra)
    for dt in DTYPES:
        d = str(dt).replace("torch.", "")
        t = values(dt, r)
        out[f"{d} allreduce Sum"] = lambda t=t, d=d: hvd.allreduce(t, op=hvd.Sum, name=f"s.{d}")
        out[f"{d} allreduce Average"] = lambda t=t, d=d: hvd.allreduce(t, name=f"a.{d}")
        out[f"{d} allreduce average=True"] = lambda t=t, d=d: hvd.allreduce(t, average=True, name=f"at.{d}")
        out[f"{d} allreduce Min"] = lambda t=t, d=d: hvd.allreduce(t, op=hvd.Min, name=f"mi.{d}")
        out[f"{d} allreduce Max"] = lambda t=t, d=d: hvd.allreduce(t, op=hvd.Max, name=f"ma.{d}")
        for pre, post, op in (
            (0.5, 1.0, "Sum"),
            (1.0, 1.5, "Sum"),
            (3.0, 0.3, "Average"),
            (-0.7, 1.0, "Average"),
            (1.0, 2.5, "Average"),
        ):
            tag = f"pre={pre} post={post} {op}"
            out[f"{d} allreduce {tag}"] = lambda t=t, d=d, pre=pre, post=post, op=op, tag=tag: hvd.allreduce(
                t, op=getattr(hvd, op), prescale_factor=pre, postscale_factor=post, name=f"p.{d}.{tag}"
            )
            out[f"{d} allreduce_ {tag}"] = lambda t=t, d=d, pre=pre, post=post, op=op, tag=tag: hvd.allreduce_(
                t.clone(), op=getattr(hvd, op), prescale_factor=pre, postscale_factor=post, name=f"pi.{d}.{tag}"
            )
            out[f"{d} grouped_allreduce {tag}"] = lambda t=t, d=d, pre=pre, post=post, op=op, tag=tag: (
                hvd.grouped_allreduce(
                    [t, t[:3]], op=getattr(hvd, op), prescale_factor=pre, postscale_factor=post, name=f"g.{d}.{tag}"
                )
            )
            out[f"{d} reducescatter {tag}"] = lambda t=t, d=d, pre=pre, post=post, op=op, tag=tag: hvd.reducescatter(
                t, op=getattr(hvd, op), prescale_factor=pre, postscale_factor=post, name=f"r.{d}.{tag}"
            )
        out[f"{d} reducescatter Average"] = lambda t=t, d=d: hvd.reducescatter(t, name=f"ra.{d}")
        out[f"{d} allgather"] = lambda t=t, d=d: hvd.allgather(t, name=f"ag.{d}")
        out[f"{d} broadcast"] = lambda t=t, d=d: hvd.broadcast(t, n - 1, name=f"b.{d}")
        out[f"{d} broadcast_"] = lambda t=t, d=d: hvd.broadcast_(t.clone(), 0, name=f"bi.{d}")
        out[f"{d} alltoall"] = lambda t=t, d=d: hvd.alltoall(t[: n * (len(t) // n)], name=f"aa.{d}")

    x = torch.arange(10.0) + r
    even = [10 // n] * n
    even[-1] += 10 - sum(even)
    out["alltoall splits list"] = lambda: hvd.alltoall(x, splits=even, name="sp.list")
    out["alltoall splits int32 tensor"] = lambda: hvd.alltoall(
        x, splits=torch.tensor(even, dtype=torch.int32), name="sp.t32"
    )
    out["alltoall splits sum below rows"] = lambda: hvd.alltoall(x, splits=[1] * n, name="sp.short")
    out["alltoall splits int64 tensor"] = lambda: hvd.alltoall(
        x, splits=torch.tensor(even, dtype=torch.int64), name="sp.t64"
    )
    out["alltoall splits float tensor"] = lambda: hvd.alltoall(
        x, splits=torch.tensor(even, dtype=torch.float32), name="sp.tf"
    )
    out["alltoall splits 2-D"] = lambda: hvd.alltoall(x, splits=torch.tensor([even], dtype=torch.int32), name="sp.2d")
    out["alltoall splits too many"] = lambda: hvd.alltoall(x, splits=[1] * (n + 1), name="sp.long")
    out["alltoall splits too few"] = lambda: hvd.alltoall(x, splits=[1] * (n - 1), name="sp.few")
    out["alltoall splits sum above rows"] = lambda: hvd.alltoall(x, splits=[11] * n, name="sp.big")
    out["alltoall no splits, rows not divisible"] = lambda: hvd.alltoall(torch.arange(float(n + 1)), name="sp.odd")
    out["allreduce op and average"] = lambda: hvd.allreduce(x, average=True, op=hvd.Sum, name="opavg")
    out["same name in flight"] = lambda: same_name_in_flight(r)
    opt = optimizer_cases()
    out.update(opt)
    for probe in (
        "mpi_built",
        "gloo_built",
        "nccl_built",
        "ccl_built",
        "ddl_built",
        "cuda_built",
        "rocm_built",
        "mpi_enabled",
        "gloo_enabled",
        "mpi_threads_supported",
    ):
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
        "optimizer names not tuples": lambda: make(lambda m: [[k, v] for k, v in m.named_parameters()]) and "built",
        "optimizer step": lambda: step(False, False),
        "optimizer step after synchronize": lambda: step(True, False),
        "optimizer step after synchronize, skip_synchronize": lambda: step(True, True),
    }


# --------------------------------------------------------------------------- the torch surface
# Inputs are small integers in float64, so sums are exact; every reference below is
# computed here from every rank's inputs with plain torch, by Horovod's rules (its
# autograd functions' backward passes), not through any collective.


def set_ranks(n):
    """A non-contiguous process set where the size allows it: [1], [0, 2], [0, 2, 3]."""
    return {1: [0], 2: [1], 3: [0, 2]}.get(n, [0] + list(range(2, n)))


def base(q, rows, cols=2):
    return torch.arange(rows * cols, dtype=torch.float64).reshape(rows, cols) + 10 * q + 1


def weight(q, shape):
    numel = 1
    for d in shape:
        numel *= d
    return ((torch.arange(numel) % 5) + 1 + q).to(torch.float64).reshape(shape)


def shares(rows, k):
    """Horovod's reducescatter split: the first rows % k ranks get one row more."""
    return [rows // k + (j < rows % k) for j in range(k)]


def grad_case(fn, xs, r):
    """Run fn on leaf copies of xs; the loss weights every output by weight(r, shape):
    (outputs, gradients)."""
    leaves = [x.clone().requires_grad_() for x in xs]
    ys = fn(leaves)
    ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
    sum((y * weight(r, y.shape)).sum() for y in ys).backward()
    return [y.detach() for y in ys] + [x.grad for x in leaves]


def surface_cases(r, n, ps):
    """{name: fn} and {name: reference outcome}, on the global set and on ps."""
    out, refs = {}, {}
    for where, P, S in (("global", hvd.global_process_set, list(range(n))), ("set", ps, set_ranks(n))):
        k = len(S)
        member = r in S
        i = S.index(r) if member else None

        def add(name, fn, ref, member=member, where=where):
            name = f"{name} {where}"
            out[name] = fn if member else (lambda: "not a member")
            refs[name] = ref() if member else ["ok", "not a member", []]

        def allred(q_fn, scale):
            return sum(q_fn(q) for q in S) * scale

        for op, pre, post in (("Sum", 0.5, 3.0), ("Average", 1.0, 1.0), ("Average", 2.0, 0.5)):
            scale = pre * post / (k if op == "Average" else 1)
            tag = f"{op} pre={pre} post={post}"
            add(
                f"grad allreduce {tag}",
                lambda op=op, pre=pre, post=post, P=P, tag=tag, where=where: grad_case(
                    lambda xs: hvd.allreduce(
                        xs[0],
                        op=getattr(hvd, op),
                        prescale_factor=pre,
                        postscale_factor=post,
                        process_set=P,
                        name=f"gar.{tag}.{where}",
                    ),
                    [base(r, 3)],
                    r,
                ),
                lambda scale=scale: [
                    "ok",
                    [
                        describe(allred(lambda q: base(q, 3), scale)),
                        describe(allred(lambda q: weight(q, (3, 2)), scale)),
                    ],
                    [],
                ],
            )
            add(
                f"grad grouped_allreduce {tag}",
                lambda op=op, pre=pre, post=post, P=P, tag=tag, where=where: grad_case(
                    lambda xs: hvd.grouped_allreduce(
                        xs,
                        op=getattr(hvd, op),
                        prescale_factor=pre,
                        postscale_factor=post,
                        process_set=P,
                        name=f"ggar.{tag}.{where}",
                    ),
                    [base(r, 2), base(r, 1, 3) * 2],
                    r,
                ),
                lambda scale=scale: [
                    "ok",
                    [
                        describe(allred(lambda q: base(q, 2), scale)),
                        describe(allred(lambda q: base(q, 1, 3) * 2, scale)),
                        describe(allred(lambda q: weight(q, (2, 2)), scale)),
                        describe(allred(lambda q: weight(q, (1, 3)), scale)),
                    ],
                    [],
                ],
            )
            rows = [shares(5, k), shares(3, k)]
            add(
                f"grad reducescatter {tag}",
                lambda op=op, pre=pre, post=post, P=P, tag=tag, where=where: grad_case(
                    lambda xs: hvd.reducescatter(
                        xs[0],
                        op=getattr(hvd, op),
                        prescale_factor=pre,
                        postscale_factor=post,
                        process_set=P,
                        name=f"grs.{tag}.{where}",
                    ),
                    [base(r, 5)],
                    r,
                ),
                lambda scale=scale, op=op, rows=rows, i=i: [
                    "ok",
                    [
                        describe(allred(lambda q: base(q, 5), scale)[sum(rows[0][:i]) : sum(rows[0][: i + 1])]),
                        describe(
                            torch.cat([weight(q, (rows[0][j], 2)) for j, q in enumerate(S)])
                            * pre
                            * post
                            * (k if op == "Sum" else 1)
                        ),
                    ],
                    [],
                ],
            )
            add(
                f"grad grouped_reducescatter {tag}",
                lambda op=op, pre=pre, post=post, P=P, tag=tag, where=where: grad_case(
                    lambda xs: hvd.grouped_reducescatter(
                        xs,
                        op=getattr(hvd, op),
                        prescale_factor=pre,
                        postscale_factor=post,
                        process_set=P,
                        name=f"ggrs.{tag}.{where}",
                    ),
                    [base(r, 5), base(r, 3, 1)],
                    r,
                ),
                lambda scale=scale, op=op, rows=rows, i=i: [
                    "ok",
                    [
                        describe(allred(lambda q: base(q, 5), scale)[sum(rows[0][:i]) : sum(rows[0][: i + 1])]),
                        describe(allred(lambda q: base(q, 3, 1), scale)[sum(rows[1][:i]) : sum(rows[1][: i + 1])]),
                        describe(
                            torch.cat([weight(q, (rows[0][j], 2)) for j, q in enumerate(S)])
                            * pre
                            * post
                            * (k if op == "Sum" else 1)
                        ),
                        describe(
                            torch.cat([weight(q, (rows[1][j], 1)) for j, q in enumerate(S)])
                            * pre
                            * post
                            * (k if op == "Sum" else 1)
                        ),
                    ],
                    [],
                ],
            )
        if member:
            gathered = sum(j + 1 for j in range(k))
            start = sum(j + 1 for j in range(i))
        add(
            "grad allgather",
            lambda P=P, i=i, where=where: grad_case(
                lambda xs: hvd.allgather(xs[0], process_set=P, name=f"gag.{where}"), [base(r, i + 1)], r
            ),
            lambda: [
                "ok",
                [
                    describe(torch.cat([base(q, j + 1) for j, q in enumerate(S)])),
                    describe(allred(lambda q: weight(q, (gathered, 2)), 1 / k)[start : start + i + 1]),
                ],
                [],
            ],
        )
        add(
            "grad grouped_allgather",
            lambda P=P, i=i, where=where: grad_case(
                lambda xs: hvd.grouped_allgather(xs, process_set=P, name=f"ggag.{where}"),
                [base(r, i + 1), base(r, 2, 1) * 3],
                r,
            ),
            lambda: [
                "ok",
                [
                    describe(torch.cat([base(q, j + 1) for j, q in enumerate(S)])),
                    describe(torch.cat([base(q, 2, 1) * 3 for q in S])),
                    describe(allred(lambda q: weight(q, (gathered, 2)), 1 / k)[start : start + i + 1]),
                    describe(allred(lambda q: weight(q, (2 * k, 1)), 1 / k)[2 * i : 2 * i + 2]),
                ],
                [],
            ],
        )
        root = S[-1]
        add(
            "grad broadcast",
            lambda P=P, root=root, where=where: grad_case(
                lambda xs: hvd.broadcast(xs[0], root, process_set=P, name=f"gbc.{where}"), [base(r, 2)], r
            ),
            lambda root=root: [
                "ok",
                [describe(base(root, 2)), describe(allred(lambda q: weight(q, (2, 2)), 1 / k) * (r == root))],
                [],
            ],
        )
        # alltoall: member j gets j + 1 rows from every member
        if member:
            offsets = [sum(range(1, j + 1)) for j in range(k + 1)]
        add(
            "grad alltoall splits",
            lambda P=P, k=k, where=where: grad_case(
                lambda xs: hvd.alltoall(xs[0], splits=[j + 1 for j in range(k)], process_set=P, name=f"gaa.{where}")[0],
                [base(r, k * (k + 1) // 2)],
                r,
            ),
            lambda k=k: [
                "ok",
                [
                    describe(torch.cat([base(q, k * (k + 1) // 2)[offsets[i] : offsets[i + 1]] for q in S])),
                    describe(
                        torch.cat(
                            [weight(q, (k * (j + 1), 2))[i * (j + 1) : (i + 1) * (j + 1)] for j, q in enumerate(S)]
                        )
                    ),
                ],
                [],
            ],
        )
        add(
            "grad alltoall even",
            lambda P=P, k=k, where=where: grad_case(
                lambda xs: hvd.alltoall(xs[0], process_set=P, name=f"gae.{where}"), [base(r, 2 * k)], r
            ),
            lambda k=k: [
                "ok",
                [
                    describe(torch.cat([base(q, 2 * k)[2 * i : 2 * i + 2] for q in S])),
                    describe(torch.cat([weight(q, (2 * k, 2))[2 * i : 2 * i + 2] for q in S])),
                ],
                [],
            ],
        )
        # forward only: several dtypes in one call, the handles of the _async forms
        mixed = lambda q, rows: [
            base(q, rows).float(),
            torch.arange(q + 2, dtype=torch.int32),  # noqa: E731
            base(q, 1, 3).long(),
        ]
        add(
            "grouped_allgather dtypes",
            lambda P=P, i=i, where=where: hvd.grouped_allgather(mixed(r, i + 1), process_set=P, name=f"ga.d.{where}"),
            lambda: ["ok", [describe(torch.cat([mixed(q, j + 1)[m] for j, q in enumerate(S)])) for m in range(3)], []],
        )
        add(
            "grouped_allgather_async",
            lambda P=P, i=i, where=where: hvd.synchronize(
                hvd.grouped_allgather_async(mixed(r, i + 1), process_set=P, name=f"ga.a.{where}")
            ),
            lambda: ["ok", [describe(torch.cat([mixed(q, j + 1)[m] for j, q in enumerate(S)])) for m in range(3)], []],
        )
        both = lambda q: [base(q, 5).float(), base(q, 3, 1), torch.arange(6, dtype=torch.int64) + q]  # noqa: E731
        for op in ("Sum", "Average"):  # (Horovod's reducescatter has no other op)

            def ref(op=op):
                total = [torch.stack([both(q)[j] for q in S]) for j in range(3)]
                # (integer Average as Horovod: the sum times 1/k in float64, toward zero)
                # (float Average as Horovod: the sum times 1/k rounded to the dtype)
                total = [
                    t.sum(0)
                    if op == "Sum"
                    else t.sum(0) * torch.tensor(1.0 / k, dtype=t.dtype)
                    if t.is_floating_point()
                    else torch.trunc(t.sum(0).double() * (1.0 / k)).long()
                    for t in total
                ]
                return [
                    "ok",
                    [describe(t[sum(shares(t.shape[0], k)[:i]) : sum(shares(t.shape[0], k)[: i + 1])]) for t in total],
                    [],
                ]

            add(
                f"grouped_reducescatter dtypes {op}",
                lambda op=op, P=P, where=where: hvd.grouped_reducescatter(
                    both(r), op=getattr(hvd, op), process_set=P, name=f"grs.d.{op}.{where}"
                ),
                ref,
            )
        add(
            "grouped_reducescatter_async Sum",
            lambda P=P, where=where: hvd.synchronize(
                hvd.grouped_reducescatter_async(both(r), op=hvd.Sum, process_set=P, name=f"grs.a.{where}")
            ),
            lambda: ref("Sum"),
        )
    out["allgather scalar"] = lambda: hvd.allgather(torch.tensor(1.0), name="ag.scalar")
    out["reducescatter scalar"] = lambda: hvd.reducescatter(torch.tensor(1.0), name="rs.scalar")
    out["reducescatter compression fp16"] = lambda: hvd.reducescatter(
        base(r, 4), compression=hvd.Compression.fp16, op=hvd.Sum, name="rs.fp16"
    )
    rows = shares(4, n)
    refs["reducescatter compression fp16"] = [
        "ok",
        describe(sum(base(q, 4) for q in range(n))[sum(rows[:r]) : sum(rows[: r + 1])]),
        [],
    ]
    out.update(optimizer_state_cases(r, n))
    return out, refs


# --------------------------------------------------------------------------- broadcast_optimizer_state

OPTIMIZERS = {
    "SGD": lambda ps, lr: torch.optim.SGD(ps, lr=lr),
    "SGD momentum": lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9, weight_decay=0.01),
    "Adam": lambda ps, lr: torch.optim.Adam(ps, lr=lr),
    "Adam amsgrad": lambda ps, lr: torch.optim.Adam(ps, lr=lr, amsgrad=True, weight_decay=0.01),
    "AdamW": lambda ps, lr: torch.optim.AdamW(ps, lr=lr),
    "Adagrad": lambda ps, lr: torch.optim.Adagrad(ps, lr=lr),
    "Adadelta": lambda ps, lr: torch.optim.Adadelta(ps, lr=lr),
    "Adamax": lambda ps, lr: torch.optim.Adamax(ps, lr=lr),
    "ASGD": lambda ps, lr: torch.optim.ASGD(ps, lr=lr),
    "NAdam": lambda ps, lr: torch.optim.NAdam(ps, lr=lr),
    "RAdam": lambda ps, lr: torch.optim.RAdam(ps, lr=lr),
    "RMSprop": lambda ps, lr: torch.optim.RMSprop(ps, lr=lr, momentum=0.5),
    "Rprop": lambda ps, lr: torch.optim.Rprop(ps, lr=lr),
    "LBFGS": lambda ps, lr: torch.optim.LBFGS(ps, lr=lr, history_size=3, max_iter=3),
    "SparseAdam": lambda ps, lr: torch.optim.SparseAdam(ps, lr=lr),
}
if hasattr(torch.optim, "Adafactor"):  # state tensors shaped unlike their parameters
    OPTIMIZERS["Adafactor"] = lambda ps, lr: torch.optim.Adafactor(ps, lr=lr)


def plain(x):
    """A JSON-ready copy of an optimizer's state_dict (tensors as dtype and values)."""
    if isinstance(x, torch.Tensor):
        return ["tensor", str(x.dtype), list(x.shape), x.tolist()]
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x if isinstance(x, (bool, int, float, str, type(None))) else repr(x)


def train(name, r, steps, lr, unused=True):
    """A model and optimizer after `steps` steps on rank r's data, with a learning rate of
    this rank's (replaced by the root's) and, if unused, a parameter that never gets a
    gradient."""
    torch.manual_seed(0)
    if name == "SparseAdam":
        model = torch.nn.Embedding(6, 3, sparse=True)
    else:
        model = torch.nn.Linear(3, 2)
        if unused:
            model.unused = torch.nn.Parameter(torch.ones(4))
    params = list(model.parameters())
    opt = OPTIMIZERS[name](params, lr)
    for s in range(steps):

        def closure(s=s):
            opt.zero_grad()
            if name == "SparseAdam":
                loss = (model(torch.tensor([r % 6, (s + 2) % 6])) ** 2).sum()
            else:
                loss = ((model(torch.ones(2, 3) * (r + s + 1)) - r) ** 2).sum()
            loss.backward()
            return loss

        opt.step(closure) if name == "LBFGS" else (closure(), opt.step())
    return model, opt


def optimizer_state_cases(r, n):
    """Each optimizer: stepped on every rank (a different number of steps per rank),
    fresh everywhere (Horovod's zero-gradient start), and stepped on the root only (a
    checkpoint restored there), with and without a parameter that gets no gradient.
    Outcome: the state_dict and parameters after broadcast_optimizer_state(opt, 0), as
    JSON; "before" is the root's before it. Under Horovod, the root-only case with a
    parameter without gradient is not run: the root has no state for it, the other ranks
    start one, and Horovod waits forever for the root's broadcast of it."""
    out = {}
    for name in OPTIMIZERS:
        for how, steps, unused in (
            ("stepped", r + 1, True),
            ("fresh", 0, True),
            ("root only", 2 * (r == 0), False),
            ("root only, no gradient", 2 * (r == 0), True),
        ):
            if how == "root only, no gradient" and hvd.__name__ == "horovod.torch":
                continue

            def case(name=name, steps=steps, unused=unused):
                model, opt = train(name, r, steps, lr=0.01 * (r + 1), unused=unused)
                before = json.dumps(plain(opt.state_dict()), sort_keys=True)
                hvd.broadcast_optimizer_state(opt, root_rank=0, **({"model": model} if name == "SparseAdam" else {}))
                return json.dumps(
                    {
                        "state": plain(opt.state_dict()),
                        "params": plain(list(model.parameters())),
                        "before": before if r == 0 else None,
                    },
                    sort_keys=True,
                )

            out[f"optimizer state {name} {how}"] = case
    return out


# --------------------------------------------------------------------------- init(comm=...)


def comm_cases(w, n):
    """init(comm=) with a split communicator, then with a list of ranks (in an order
    that renumbers them); each followed by collectives and shutdown; then a comm of a
    wrong type. Under Horovod a rank outside the list waits forever in init, so it does
    not try there. Leaves the job shut down."""
    from mpi4py import MPI

    out = {}

    def job():
        return json.dumps(
            {
                "rank": hvd.rank(),
                "size": hvd.size(),
                "local": [hvd.local_rank(), hvd.local_size()],
                "allgather": hvd.allgather(torch.tensor([w])).tolist(),
                "allreduce": hvd.allreduce(torch.tensor([float(w)]), op=hvd.Sum).tolist(),
                "broadcast": hvd.broadcast(torch.tensor([w]), root_rank=0).tolist(),
            }
        )

    hvd.shutdown()
    split = MPI.COMM_WORLD.Split(w % 2, w)
    hvd.init(comm=split)
    out["split"] = outcome(job)
    hvd.shutdown()
    listed = [n - 1, 0] + list(range(2, n - 1))
    out["listed"] = listed
    if w in listed or hvd.__name__ != "horovod.torch":
        try:
            hvd.init(comm=listed)
            out["list"] = outcome(job)
            hvd.shutdown()
        except Exception as e:  # noqa: BLE001 - the class is what is compared
            out["list"] = ["raises", [c.__name__ for c in CLASSES if isinstance(e, c)], str(e)[:200], []]
    out["bad type"] = outcome(lambda: hvd.init(comm=3.5))
    return out


def timeline(r, out_dir):
    """start_timeline / stop_timeline at run time (Horovod needs HOROVOD_TIMELINE set at
    init for them; rdmacoll does not): which named operations each file holds."""
    hvd.allreduce(torch.ones(3), name="before")
    hvd.start_timeline(os.path.join(out_dir, "t.json"))
    hvd.allreduce(torch.ones(3), name="during")
    h = hvd.allreduce_async(torch.ones(1000), name="during.async")
    hvd.start_timeline(os.path.join(out_dir, "u.json"), mark_cycles=True)  # waits for h to run
    hvd.allgather(torch.ones(2), name="second")
    hvd.synchronize(h)
    hvd.stop_timeline()
    hvd.stop_timeline()  # a second stop does nothing
    hvd.allreduce(torch.ones(3), name="after")
    files = {}
    for f in ("t", "u"):
        with open(os.path.join(out_dir, f"{f}.rank{r}.json")) as fh:
            trace = json.load(fh)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        files[f] = sorted({e["args"]["name"] for e in events if e.get("cat") == "op" and "name" in e.get("args", {})})
    return files


def save_outcomes(results, directory, rank=None, size=None, **extra):
    """This rank's outcomes to directory/rank<r>.json (one file per rank: Open MPI may
    merge lines of two ranks on stdout); "done" goes to stdout. rank, size: the job's at
    the start, where the worker may have shut it down since (default: hvd's now)."""
    rank = hvd.rank() if rank is None else rank
    size = hvd.size() if size is None else size
    with open(os.path.join(directory, f"rank{rank}.json"), "w") as f:
        json.dump({"module": hvd.__name__, "size": size, "cases": results, **extra}, f)
    emit("done", module=hvd.__name__, cases=len(results))


def main():
    """Outcomes go to RC_TEST_PARITY_DIR/rank<r>.json (one file per rank: Open MPI may
    merge lines of two ranks on stdout); "done" goes to stdout."""
    mode, refs = os.environ.get("RC_TEST_PARITY_MODE"), {}
    if mode == "comm":
        from mpi4py import MPI  # noqa: F401 - initialised by mpi4py: Horovod's shutdown then leaves MPI up
    hvd.init(process_sets="dynamic")
    r, n = hvd.rank(), hvd.size()
    set_rank(r)
    if mode == "timeline":
        results = timeline(r, os.environ["RC_TEST_PARITY_DIR"])
    elif mode == "comm":
        results = comm_cases(r, n)
    else:
        surface, refs = surface_cases(r, n, hvd.add_process_set(set_ranks(n)))
        todo = surface if mode == "surface" else cases(r, n, surface)
        results = {name: outcome(fn) for name, fn in todo.items()}
    save_outcomes(results, os.environ["RC_TEST_PARITY_DIR"], r, n, refs=refs)
    hvd.shutdown()


if __name__ == "__main__":
    main()
