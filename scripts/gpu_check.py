"""The GPU check (issue 33), one torchrun launch per world size on one machine with a CUDA
GPU: every rank's tensors on the same device (several processes on one GPU).

    torchrun --nproc_per_node=2 scripts/gpu_check.py

Checks, each printed as `CHECK <name> PASS|FAIL <detail>` by rank 0 (a failure on any rank
fails the check; the script exits 1 if any failed):
- plain API: every collective on torch.cuda tensors and CuPy arrays (when CuPy is there)
  against references computed on the CPU from every rank's inputs, several dtypes, ops and
  sizes (0, 1, odd, several pipeline chunks, more than the staging ring); out=, in place,
  the *_async forms; ordering after the producer's stream (a kernel still running on a
  side stream when the collective is called);
- the torch adapter: its collectives on CUDA tensors, DistributedOptimizer on a CUDA
  model against a single-process reference;
- torch.distributed: backend "rdmacoll" on CUDA tensors (all_reduce, broadcast,
  all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single) and DDP on a CUDA
  model against the same reference.
The speed of the staging is benchmarks/gpu_staging.py's (scripts/gpu_check.sh runs both).
"""

from __future__ import annotations

import os
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist

import rdmacoll as rc
import rdmacoll.frameworks.torch.distributed  # noqa: F401  (registers the backend without the installed plugin hook)

RESULTS = []


def rank_data(r, n, dtype, seed=0):
    """Rank r's input: small integers (exact in every dtype, sums too)."""
    g = np.random.default_rng(1000 * seed + r)
    return g.integers(-4, 5, size=n).astype(np.float64)


def check(name, fn):
    """Run fn on every rank; the check passes when it passed everywhere."""
    try:
        fn()
        ok, detail = 1, ""
    except Exception as e:  # noqa: BLE001
        ok, detail = 0, f"{type(e).__name__}: {e}"
        if os.environ.get("GPU_CHECK_TRACE"):
            traceback.print_exc()
    flags = torch.tensor([ok], dtype=torch.int32)
    dist.all_reduce(flags, group=CPU_GROUP)  # (gloo: every rank's verdict)
    passed = int(flags.item()) == dist.get_world_size()
    msg = detail if detail else ("" if passed else "failed on another rank")
    if dist.get_rank() == 0 or detail:
        print(f"CHECK {name} {'PASS' if passed else 'FAIL'} {msg}".rstrip(), flush=True)
    RESULTS.append(passed)


def assert_close(got, want, what):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape}, expected {want.shape}")
    if not np.allclose(got, want, rtol=1e-2, atol=1e-2, equal_nan=True):
        bad = np.flatnonzero(~np.isclose(got, want, rtol=1e-2, atol=1e-2))
        raise AssertionError(f"{what}: {bad.size} wrong, first at {bad[0]}: {got.flat[bad[0]]} != {want.flat[bad[0]]}")


TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
}
OPS = {
    "sum": (rc.Sum, lambda xs: np.sum(xs, axis=0)),
    "average": (rc.Average, lambda xs: np.mean(xs, axis=0)),
    "min": (rc.Min, lambda xs: np.min(xs, axis=0)),
    "max": (rc.Max, lambda xs: np.max(xs, axis=0)),
    "product": (rc.Product, lambda xs: np.prod(np.clip(xs, -1, 2), axis=0)),
}


def plain_torch(dev, r, p):
    sizes = [0, 1, 1001, 3 * (1 << 20) + 5, 20 * (1 << 20) + 3]  # (4M chunks, a 64M ring: the last wraps it)
    for dt in ("float32", "float16", "bfloat16", "int32", "float64", "uint8"):
        for opname, (op, ref) in OPS.items():
            if dt == "uint8" and opname in ("average", "product"):
                continue
            if dt in ("int32",) and opname == "average":
                continue
            for n in sizes if (dt == "float32" and opname in ("sum", "average")) else sizes[:4]:

                def one(dt=dt, opname=opname, op=op, ref=ref, n=n):
                    xs = [rank_data(q, n, dt) for q in range(p)]
                    if opname == "product":
                        xs = [np.clip(x, -1, 2) for x in xs]
                    if dt == "uint8":
                        xs = [np.abs(x) for x in xs]
                    x = torch.tensor(xs[r], dtype=TORCH_DTYPES[dt], device=dev)
                    y = rc.allreduce(x, op=op, name=f"ar.{dt}.{opname}.{n}")
                    assert isinstance(y, torch.Tensor) and y.device == x.device, f"result on {getattr(y, 'device', y)}"
                    want = ref(np.stack(xs)) if n else np.zeros(0)
                    if dt in ("int32",) and opname == "average":
                        want = np.trunc(want)
                    assert_close(y.float().cpu().numpy(), want, f"allreduce {dt} {opname} n={n}")

                check(f"plain.torch.allreduce.{dt}.{opname}.n{n}", one)

    def inplace_async():
        n = 5 * (1 << 20) + 7
        xs = [rank_data(q, n, "float32", 1) for q in range(p)]
        x = torch.tensor(xs[r], dtype=torch.float32, device=dev)
        out = rc.allreduce(x, op=rc.Sum, out=x, name="inplace")
        assert out is x
        assert_close(x.cpu().numpy(), np.sum(xs, axis=0), "in place")
        h = rc.allreduce_async(torch.tensor(xs[r], dtype=torch.float32, device=dev), op=rc.Sum, name="async")
        assert_close(rc.synchronize(h).cpu().numpy(), np.sum(xs, axis=0), "async")

    check("plain.torch.allreduce.inplace_and_async", inplace_async)

    def stream_order():
        # The input is written by a kernel on a side stream that is still running when
        # allreduce is called: the collective must see the written values.
        n = 8 * (1 << 20)
        s = torch.cuda.Stream(device=dev)
        x = torch.zeros(n, device=dev)
        with torch.cuda.stream(s):
            torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time
            x.fill_(float(r + 1))
            y = rc.allreduce(x, op=rc.Sum, name="stream")
            z = y * 2  # queued on s after the result is ready on it
        s.synchronize()
        want = float(sum(q + 1 for q in range(p)))
        assert_close(z[:: 1 << 16].cpu().numpy(), np.full(128, 2 * want), "stream-ordered")

    check("plain.torch.stream_order", stream_order)

    for n in (0, 7, 3 * (1 << 20) + 1, 24 * (1 << 20)):

        def bcast(n=n):
            for root in range(p):
                xs = [rank_data(q, n, "float32", 2) for q in range(p)]
                x = torch.tensor(xs[r], dtype=torch.float32, device=dev)
                y = rc.broadcast(x, root, name=f"bc.{n}.{root}")
                assert_close(y.cpu().numpy(), xs[root], f"broadcast root {root}")
                rc.broadcast(x, root, out=x, name=f"bci.{n}.{root}")
                assert_close(x.cpu().numpy(), xs[root], f"broadcast in place root {root}")

        check(f"plain.torch.broadcast.n{n}", bcast)

    def others():
        rows = [q + 1 for q in range(p)]
        xs = [rank_data(q, rows[q] * 3, "float32", 3).reshape(rows[q], 3) for q in range(p)]
        x = torch.tensor(xs[r], dtype=torch.float32, device=dev)
        g = rc.allgather(x, name="ag")
        assert g.device == x.device
        assert_close(g.cpu().numpy(), np.concatenate(xs), "allgather")
        m = [rank_data(q, 4 * p * 5, "float32", 4).reshape(4 * p, 5) for q in range(p)]
        rs = rc.reducescatter(torch.tensor(m[r], device=dev), op=rc.Sum, name="rs")
        assert_close(rs.cpu().numpy(), np.sum(m, axis=0)[4 * r : 4 * r + 4], "reducescatter")
        splits = [(q + r) % 3 for q in range(p)]
        a = [rank_data(q, sum((j + q) % 3 for j in range(p)) * 2, "float32", 5).reshape(-1, 2) for q in range(p)]
        data, received = rc.alltoall(
            torch.tensor(a[r], device=dev), splits=splits, name="a2a", return_received_splits=True
        )
        want = []
        for q in range(p):
            off = sum((j + q) % 3 for j in range(r))
            want.append(a[q][off : off + (r + q) % 3])
        assert_close(data.cpu().numpy(), np.concatenate(want), "alltoall")
        assert list(received) == [(r + q) % 3 for q in range(p)], received
        h = rc.allgather_async(x, name="ag.async")
        assert_close(rc.synchronize(h).cpu().numpy(), np.concatenate(xs), "allgather_async")

    check("plain.torch.allgather_reducescatter_alltoall", others)


def plain_cupy(dev, r, p):
    try:
        import cupy
    except ImportError:
        print("CHECK plain.cupy SKIP (no cupy)")
        return

    def all_ops():
        with cupy.cuda.Device(dev.index):
            for n in (0, 1000, 6 * (1 << 20) + 1):
                xs = [rank_data(q, n, "float32", 6) for q in range(p)]
                x = cupy.asarray(xs[r], dtype=cupy.float32)
                y = rc.allreduce(x, op=rc.Sum, name=f"cp.{n}")
                assert isinstance(y, cupy.ndarray), type(y)
                assert_close(cupy.asnumpy(y), np.sum(xs, axis=0), f"cupy allreduce n={n}")
                b = rc.broadcast(x, p - 1, name=f"cpb.{n}")
                assert_close(cupy.asnumpy(b), xs[p - 1], "cupy broadcast")
            xs = [rank_data(q, 6, "float64", 7).reshape(2, 3) for q in range(p)]
            g = rc.allgather(cupy.asarray(xs[r]), name="cpag")
            assert isinstance(g, cupy.ndarray)
            assert_close(cupy.asnumpy(g), np.concatenate(xs), "cupy allgather")
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                z = cupy.full(1 << 20, r + 1, dtype=cupy.float32)
                y = rc.allreduce(z, op=rc.Sum, name="cps")
                w = y + 0
            s.synchronize()
            assert_close(cupy.asnumpy(w[:4]), np.full(4, sum(q + 1 for q in range(p))), "cupy stream")

    check("plain.cupy.collectives", all_ops)


def adapter(dev, r, p):
    import rdmacoll.frameworks.torch as hvd

    hvd.init()

    def ops():
        x = torch.arange(10, dtype=torch.float32, device=dev) * (r + 1)
        y = hvd.allreduce(x, op=hvd.Sum, name="hvd.ar")
        assert y.device == x.device
        assert_close(y.cpu().numpy(), np.arange(10) * sum(q + 1 for q in range(p)), "hvd allreduce")
        avg = hvd.allreduce(x, name="hvd.avg")
        assert_close(avg.cpu().numpy(), np.arange(10) * np.mean([q + 1 for q in range(p)]), "hvd average")
        z = torch.full((3,), float(r), device=dev, dtype=torch.bfloat16)
        hvd.allreduce_(z, op=hvd.Sum, name="hvd.bf16")
        assert_close(z.float().cpu().numpy(), np.full(3, sum(range(p))), "hvd allreduce_ bfloat16")
        t = torch.full((2, 2), float(r), device=dev)
        hvd.broadcast_(t, root_rank=p - 1, name="hvd.bc")
        assert_close(t.cpu().numpy(), np.full((2, 2), p - 1), "hvd broadcast_")
        g = hvd.allgather(torch.full((r + 1, 2), float(r), device=dev), name="hvd.ag")
        assert g.device == x.device
        assert_close(g.cpu().numpy(), np.concatenate([np.full((q + 1, 2), q) for q in range(p)]), "hvd allgather")
        gr = hvd.grouped_allreduce([x, x * 2], op=hvd.Sum, name="hvd.grouped")
        assert gr[0].device == x.device
        assert_close(gr[1].cpu().numpy(), 2 * np.arange(10) * sum(q + 1 for q in range(p)), "hvd grouped")
        a = hvd.alltoall(torch.arange(2 * p, dtype=torch.float32, device=dev) + 100 * r, name="hvd.a2a")
        assert_close(a.cpu().numpy(), np.concatenate([np.arange(2 * r, 2 * r + 2) + 100 * q for q in range(p)]), "a2a")
        rs = hvd.reducescatter(torch.ones(2 * p, 3, device=dev) * (r + 1), op=hvd.Sum, name="hvd.rs")
        assert_close(rs.cpu().numpy(), np.full((2, 3), sum(q + 1 for q in range(p))), "hvd reducescatter")

    check("adapter.torch.collectives", ops)

    def optimizer():
        ref, batches = reference_training(p)
        torch.manual_seed(0)
        model = make_model().to(dev)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        for xb, yb in batches:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb[r].to(dev)), yb[r].to(dev))
            loss.backward()
            opt.step()
        for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
            assert_close(a.cpu().numpy(), b.numpy(), f"DistributedOptimizer parameter {name}")

    check("adapter.torch.distributed_optimizer", optimizer)


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def reference_training(p, steps=5):
    """A single-process model trained on every rank's batch at once (equal shards: the
    mean over all equals the mean of the ranks' means), and the batches."""
    g = torch.Generator().manual_seed(7)
    batches = [(torch.randn(p, 8, 16, generator=g), torch.randn(p, 8, 4, generator=g)) for _ in range(steps)]
    torch.manual_seed(0)
    ref = make_model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for xb, yb in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(ref(xb.reshape(-1, 16)), yb.reshape(-1, 4)).backward()
        opt.step()
    return ref, batches


def backend(dev, r, p):
    pg = dist.new_group(backend="rdmacoll")

    def all_reduce():
        x = torch.full((1000,), float(r + 1), device=dev)
        dist.all_reduce(x, group=pg)
        assert_close(x[:3].cpu().numpy(), np.full(3, sum(q + 1 for q in range(p))), "all_reduce")

    def broadcast():
        b = torch.full((5,), float(r), device=dev)
        dist.broadcast(b, src=p - 1, group=pg)
        assert_close(b.cpu().numpy(), np.full(5, p - 1), "broadcast")

    def all_gather_into_tensor():
        out = torch.empty(p * 4, device=dev)
        dist.all_gather_into_tensor(out, torch.full((4,), float(r), device=dev), group=pg)
        assert_close(out.cpu().numpy(), np.repeat(np.arange(p), 4), "all_gather_into_tensor")

    def all_gather():
        outs = [torch.empty(3, device=dev) for _ in range(p)]
        dist.all_gather(outs, torch.full((3,), float(r), device=dev), group=pg)
        assert_close(torch.stack(outs).cpu().numpy(), np.repeat(np.arange(p), 3).reshape(p, 3), "all_gather")

    def reduce_scatter_tensor():
        rs = torch.empty(3, device=dev)
        dist.reduce_scatter_tensor(rs, torch.arange(3 * p, dtype=torch.float32, device=dev), group=pg)
        assert_close(rs.cpu().numpy(), p * np.arange(3 * r, 3 * r + 3), "reduce_scatter_tensor")

    def all_to_all_single():
        a2a = torch.empty(p, device=dev)
        dist.all_to_all_single(a2a, torch.arange(p, dtype=torch.float32, device=dev) + 10 * r, group=pg)
        assert_close(a2a.cpu().numpy(), np.array([10 * q + r for q in range(p)]), "all_to_all_single")

    for fn in (all_reduce, broadcast, all_gather_into_tensor, all_gather, reduce_scatter_tensor, all_to_all_single):
        check(f"backend.cuda.{fn.__name__}", fn)

    def ddp():
        ref, batches = reference_training(p)
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(
            make_model().to(dev), device_ids=[dev.index], process_group=pg
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for xb, yb in batches:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb[r].to(dev)), yb[r].to(dev)).backward()
            opt.step()
        for (name, a), b in zip(model.module.state_dict().items(), ref.state_dict().values()):
            assert_close(a.cpu().numpy(), b.numpy(), f"DDP parameter {name}")

    check("backend.cuda.ddp", ddp)


CPU_GROUP = None


def main():
    global CPU_GROUP
    local = int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo")
    CPU_GROUP = dist.group.WORLD
    rc.init()
    r, p = rc.rank(), rc.size()
    assert (r, p) == (dist.get_rank(), dist.get_world_size())
    if r == 0:
        print(f"cuda runtime: {rc._core.cuda_runtime()}", flush=True)
        avail = [line for line in open("/proc/meminfo") if line.startswith("MemAvailable")]
        print(f"LANG={os.environ.get('LANG')} LC_ALL={os.environ.get('LC_ALL')} {avail}", flush=True)
    sections = [plain_torch, plain_cupy, adapter, backend]
    for section in sections:
        try:
            section(dev, r, p)
        except Exception as e:  # noqa: BLE001 (a section that broke before its checks)
            print(f"CHECK {section.__name__} FAIL {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
            RESULTS.append(False)
    failed = RESULTS.count(False)
    if r == 0:
        print(f"\nSUMMARY {p} ranks: {len(RESULTS) - failed} passed, {failed} failed", flush=True)
    rc.shutdown()
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
