"""rdmacoll's torch.distributed backend under torchrun, against references computed here
from every rank's deterministic input.

    torch_dist.py ops        every op of the backend, sync and async, in the default group
                             and in groups of subsets (new_group), uneven splits included
    torch_dist.py ddp        DDP over gloo and over rdmacoll from the same seed (plain,
                             no_sync + accumulation, a comm hook, find_unused_parameters)
    torch_dist.py fsdp       FSDP2 (fully_shard) over gloo and over rdmacoll
    torch_dist.py mismatch   ranks call different sizes: every rank raises DistBackendError
                             (this script imports no rdmacoll: the backend comes from
                             torch's plugin hook, rdmacoll_torch_plugin)
    torch_dist.py lost       DDP training; at step 3 the last rank is lost before its
                             backward (RC_TEST_LOSE=kill: SIGKILLs itself; stall: sleeps
                             RC_TEST_STALL_S past RDMACOLL_TIMEOUT, then goes on): every
                             rank left must raise from the step (never a native crash);
                             records "error" {step, type, text}

Records: "check" {name, ok, detail}; "params" {run, digest, diff}; "error" {text, type}; "done".
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from common import digest, emit, main, set_rank


def data(rank, shape, dtype=torch.float32):
    n = 1
    for d in shape:
        n *= d
    return ((torch.arange(n, dtype=torch.int64) * 7 + rank * 13) % 11 - 5).to(dtype).reshape(shape)


def ops():
    import rdmacoll.frameworks.torch.distributed  # noqa: F401

    dist.init_process_group("rdmacoll")
    r, p = dist.get_rank(), dist.get_world_size()
    set_rank(r)
    results = []

    def check(name, got, want):
        ok = (
            torch.equal(got, want)
            if not got.dtype.is_floating_point
            else torch.allclose(got, want, rtol=1e-5, atol=1e-5)
        )
        results.append(ok)
        emit(
            "check",
            name=name,
            ok=bool(ok),
            detail="" if ok else f"got {got.reshape(-1)[:6].tolist()} want {want.reshape(-1)[:6].tolist()}",
        )

    def each(shape, dtype, ranks=range(p)):
        return [data(q, shape, dtype) for q in ranks]

    reds = {
        dist.ReduceOp.SUM: lambda xs: sum(xs[1:], xs[0].clone()),
        dist.ReduceOp.PRODUCT: lambda xs: torch.stack(xs).prod(0).to(xs[0].dtype),
        dist.ReduceOp.MIN: lambda xs: torch.stack(xs).min(0).values,
        dist.ReduceOp.MAX: lambda xs: torch.stack(xs).max(0).values,
        dist.ReduceOp.AVG: lambda xs: sum(xs[1:], xs[0].clone()) / len(xs),
    }
    for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
        for op, ref in reds.items():
            if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
                continue
            for n in (1, 7, 100003):
                t = data(r, (n,), dtype)
                if op == dist.ReduceOp.PRODUCT:
                    t = t % 2 + 1
                    xs = [x % 2 + 1 for x in each((n,), dtype)]
                else:
                    xs = each((n,), dtype)
                dist.all_reduce(t, op=op)
                check(f"all_reduce {op} {dtype} {n}", t.float(), ref(xs).float())
        t = data(r, (1000,), dtype)
        w = dist.all_reduce(t, async_op=True)
        fut = w.get_future()
        w.wait()
        check(f"all_reduce async {dtype}", fut.value()[0].float(), sum(each((1000,), dtype)).float())
    t = data(r, (64,))
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    check("all_reduce PREMUL_SUM 0.5", t, sum(each((64,), torch.float32)) * 0.5)
    ts = [data(r, (5,)), data(r + 1, (3, 2))]
    dist.all_reduce_coalesced(ts)
    check("all_reduce_coalesced 0", ts[0], sum(each((5,), torch.float32)))
    check("all_reduce_coalesced 1", ts[1], sum(data(q + 1, (3, 2)) for q in range(p)))
    for root in range(p):
        t = data(r, (33, 3))
        dist.broadcast(t, src=root)
        check(f"broadcast from {root}", t, data(root, (33, 3)))
    outs = [torch.empty(4, 5) for _ in range(p)]
    dist.all_gather(outs, data(r, (4, 5)))
    for q in range(p):
        check(f"all_gather part {q}", outs[q], data(q, (4, 5)))
    out = torch.empty(p * 6)
    w = dist.all_gather_into_tensor(out, data(r, (6,)), async_op=True)
    w.wait()
    check("all_gather_into_tensor async", out, torch.cat(each((6,), torch.float32)))
    out = torch.empty(10)
    dist.reduce_scatter_tensor(out, data(r, (p * 10,)))
    check("reduce_scatter_tensor", out, sum(each((p * 10,), torch.float32))[r * 10 : (r + 1) * 10])
    out = torch.empty(3, 2)
    dist.reduce_scatter(out, [data(r + q, (3, 2)) for q in range(p)])
    check("reduce_scatter list", out, sum(data(q + r, (3, 2)) for q in range(p)))
    # all_to_all_single: even, then uneven splits (rank q sends q + j + 1 rows to rank j)
    x = data(r, (2 * p, 3))
    y = torch.empty(2 * p, 3)
    dist.all_to_all_single(y, x)
    check("all_to_all_single even", y, torch.cat([data(q, (2 * p, 3))[2 * r : 2 * r + 2] for q in range(p)]))
    ins = [r + j + 1 for j in range(p)]
    outs_n = [q + r + 1 for q in range(p)]
    x = data(r, (sum(ins), 2))
    y = torch.empty(sum(outs_n), 2)
    dist.all_to_all_single(y, x, output_split_sizes=outs_n, input_split_sizes=ins)
    want = torch.cat(
        [
            data(q, (sum(q + j + 1 for j in range(p)), 2))[sum(q + j + 1 for j in range(r)) :][: q + r + 1]
            for q in range(p)
        ]
    )
    check("all_to_all_single uneven", y, want)
    # The names torch before 2.12 calls (all_gather_into_tensor, reduce_scatter_tensor,
    # all_to_all_single and their coalesced forms: torch 2.11 on the GPU machine), called
    # on the group itself: without them a Python group has no backend for them at all.
    pg = dist.group.WORLD
    out = torch.empty(p * 6)
    pg._allgather_base(out, data(r, (6,))).wait()
    check("old name _allgather_base", out, torch.cat(each((6,), torch.float32)))
    out = torch.empty(10)
    pg._reduce_scatter_base(out, data(r, (p * 10,))).wait()
    check("old name _reduce_scatter_base", out, sum(each((p * 10,), torch.float32))[r * 10 : (r + 1) * 10])
    y = torch.empty(2 * p, 3)
    pg.alltoall_base(y, data(r, (2 * p, 3)), [], []).wait()
    check("old name alltoall_base", y, torch.cat([data(q, (2 * p, 3))[2 * r : 2 * r + 2] for q in range(p)]))
    outs = [torch.empty(p * 2), torch.empty(p * 3)]
    pg.allgather_into_tensor_coalesced(outs, [data(r, (2,)), data(r + 50, (3,))]).wait()
    check("old name allgather_into_tensor_coalesced", outs[1], torch.cat([data(q + 50, (3,)) for q in range(p)]))
    outs = [torch.empty(2)]
    pg.reduce_scatter_tensor_coalesced(outs, [data(r, (p * 2,))]).wait()
    check("old name reduce_scatter_tensor_coalesced", outs[0], sum(each((p * 2,), torch.float32))[2 * r : 2 * r + 2])
    outs = [torch.empty(q + 1, 2) for q in range(p)]
    dist.all_to_all(outs, [data(r * 10 + j, (r + 1, 2)) for j in range(p)])
    for q in range(p):
        check(f"all_to_all list from {q}", outs[q], data(q * 10 + r, (q + 1, 2)))
    for root in range(p):
        t = data(r, (9,))
        dist.reduce(t, dst=root)
        if r == root:
            check(f"reduce to {root}", t, sum(each((9,), torch.float32)))
        else:
            check(f"reduce to {root}: others unchanged", t, data(r, (9,)))
        g = [torch.empty(4) for _ in range(p)] if r == root else None
        dist.gather(data(r, (4,)), gather_list=g, dst=root)
        if r == root:
            for q in range(p):
                check(f"gather to {root} from {q}", g[q], data(q, (4,)))
        t = torch.empty(3)
        dist.scatter(t, scatter_list=[data(q + 100, (3,)) for q in range(p)] if r == root else None, src=root)
        check(f"scatter from {root}", t, data(r + 100, (3,)))
    dist.barrier()
    # groups: a non-contiguous subset, the rest, every rank
    subsets = [[0, p - 1], list(range(1, p)), list(range(p))]
    groups = [dist.new_group(s) for s in subsets]
    for s, g in zip(subsets, groups):
        if r not in s:
            continue
        t = data(r, (50,))
        dist.all_reduce(t, group=g)
        check(f"group {s} all_reduce", t, sum(data(q, (50,)) for q in s))
        outs = [torch.empty(2) for _ in s]
        dist.all_gather(outs, data(r, (2,)), group=g)
        for i, q in enumerate(s):
            check(f"group {s} all_gather {q}", outs[i], data(q, (2,)))
        t = data(r, (5,))
        dist.broadcast(t, src=s[-1], group=g)
        check(f"group {s} broadcast", t, data(s[-1], (5,)))
        w = dist.all_reduce(data(r, (3,)), group=g, async_op=True)
        w.wait()
    try:
        dist.send(torch.ones(1), dst=(r + 1) % p)
        emit("check", name="send raises", ok=False, detail="send returned")
    except NotImplementedError as e:
        emit("check", name="send raises", ok="all_to_all_single" in str(e), detail=str(e))
    dist.destroy_process_group()
    emit("done", checks=len(results))


def train(backend_group, model, steps, rank, mode):
    """20 steps of SGD on rank-dependent data; the final parameters."""
    if mode == "unused":
        ddp = nn.parallel.DistributedDataParallel(model, process_group=backend_group, find_unused_parameters=True)
    else:
        ddp = nn.parallel.DistributedDataParallel(model, process_group=backend_group)
    if mode == "hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(backend_group, default_hooks.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    for _step in range(steps):
        opt.zero_grad()
        micro = 2 if mode == "accumulate" else 1
        for m in range(micro):
            x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
            if m < micro - 1:
                with ddp.no_sync():
                    ((ddp(x) - y) ** 2).mean().backward()
            else:
                ((ddp(x) - y) ** 2).mean().backward()
        opt.step()
    return torch.cat([q.detach().reshape(-1) for q in model.parameters()])


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.unused = nn.Linear(16, 32), nn.Linear(32, 4), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def ddp():
    import rdmacoll.frameworks.torch.distributed  # noqa: F401

    dist.init_process_group("gloo")
    r = dist.get_rank()
    set_rank(r)
    ours = dist.new_group(backend="rdmacoll")
    for mode in ("plain", "accumulate", "hook", "unused"):
        params = {}
        for name, group in (("gloo", dist.group.WORLD), ("rdmacoll", ours)):
            torch.manual_seed(0)
            model = WithUnused() if mode == "unused" else nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
            params[name] = train(group, model, 20, r, mode)
        emit(
            "params",
            run=mode,
            digest=digest(params["rdmacoll"].numpy()),
            diff=float((params["rdmacoll"] - params["gloo"]).abs().max()),
        )
    dist.destroy_process_group()
    emit("done")


def fsdp():
    import rdmacoll.frameworks.torch.distributed  # noqa: F401

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        emit("skip", why=f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard")
        emit("done")
        return
    dist.init_process_group("gloo")
    r = dist.get_rank()
    set_rank(r)
    ours = dist.new_group(backend="rdmacoll")
    from torch.distributed.device_mesh import DeviceMesh

    params = {}
    for name, group in (("gloo", dist.group.WORLD), ("rdmacoll", ours)):
        mesh = DeviceMesh.from_group(group, "cpu")
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(100 + r)
        for _ in range(20):
            x = torch.randn(8, 16, generator=g)
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        params[name] = torch.cat([q.full_tensor().detach().reshape(-1) for q in model.parameters()])
    emit(
        "params",
        run="fsdp",
        digest=digest(params["rdmacoll"].numpy()),
        diff=float((params["rdmacoll"] - params["gloo"]).abs().max()),
    )
    emit("done")
    sys.stdout.flush()
    dist.destroy_process_group()


def mismatch():
    # no import of rdmacoll here: torch's plugin hook registered the backend at `import torch`
    # (rdmacoll_torch_plugin), as a script written for gloo or NCCL finds it
    before = sorted(m for m in sys.modules if m.split(".")[0] == "rdmacoll")
    dist.init_process_group("rdmacoll")
    r = dist.get_rank()
    set_rank(r)
    emit("imported_before_init", modules=before)
    try:
        dist.all_reduce(torch.ones(10 + r))
        emit("error", text=None, type=None)
    except Exception as e:  # noqa: BLE001 - the type is what is checked
        emit("error", text=str(e), type=type(e).__name__)
    emit("done")


def lost():
    import rdmacoll.frameworks.torch.distributed  # noqa: F401

    how = os.environ["RC_TEST_LOSE"]
    dist.init_process_group("rdmacoll")
    r, n = dist.get_rank(), dist.get_world_size()
    set_rank(r)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + r)
    for step in range(6):
        x = torch.randn(8, 16, generator=g)
        if step == 3 and r == n - 1:
            emit("lost", how=how)
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(float(os.environ["RC_TEST_STALL_S"]))
        try:
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        except Exception as e:  # noqa: BLE001 - its type and text are what is checked
            emit("error", step=step, type=type(e).__name__, text=str(e)[:3000])
            break
    emit("done")
    # the job is broken: leave without tearing down what a dead peer shares
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main({"ops": ops, "ddp": ddp, "fsdp": fsdp, "mismatch": mismatch, "lost": lost}[sys.argv[1]])
