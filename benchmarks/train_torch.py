"""Training step time: rdmacoll's DistributedOptimizer and torch DistributedDataParallel
over gloo and over rdmacoll's torch.distributed backend, same model, same data, same
threads, in the same launch.

    mpiexec -n 2 python benchmarks/train_torch.py                 # 8x2048 MLP, batch 32/rank
    torchrun --standalone --nproc_per_node 2 benchmarks/train_torch.py
    mpiexec -n 2 python benchmarks/train_torch.py --model cnn --png cnn.png

Configurations, interleaved in every round (medians of --rounds rounds, each the median of
--steps timed steps after --warmup):
  compute        forward + backward + step, no communication: the compute time
  rdmacoll       hvd.DistributedOptimizer, zero_grad() as PyTorch does (set_to_none=True:
                 every gradient is copied into its bucket by the hook)
  rdmacoll-views the same with zero_grad(set_to_none=False): gradients stay bucket views
  ddp-gloo       torch.nn.parallel.DistributedDataParallel, gloo backend, defaults
  ddp-rdmacoll   the same DDP over rdmacoll's torch.distributed backend
                 (rdmacoll.frameworks.torch.distributed, a group of every rank)
  ddp-nocomm     the same DDP with a comm hook that hands each bucket back unreduced:
                 what DDP itself costs (bucket copies, hooks) when communication is free,
                 the floor of every ddp-* row (its parameters diverge: timing only)
  comm-only rows: the same buckets reduced alone (no compute), rdmacoll and gloo

Per step it reports total, compute, communication (alone), exposed (total - compute)
and hidden (communication - exposed, as a share of communication) time, how long step()
waited for the reductions (rdmacoll: the exposed communication it saw), the gradient
tensors and buckets, how often a gradient was copied into its bucket, and draws a bar
chart (rank 0, matplotlib) of compute vs exposed communication per configuration.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")   # before torch loads its OpenMP

import argparse  # noqa: E402
import gc  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import rdmacoll.frameworks.torch as hvd  # noqa: E402
import rdmacoll.frameworks.torch.distributed  # noqa: E402,F401 - registers the backend "rdmacoll"


def build_model(args):
    torch.manual_seed(0)
    if args.model == "mlp":
        layers = [nn.Linear(args.width, args.width) for _ in range(args.layers)]
        return nn.Sequential(*[m for lin in layers for m in (lin, nn.ReLU())][:-1])
    if args.model == "cnn":
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        return nn.Sequential(block(3, 64), block(64, 128), nn.MaxPool2d(2), block(128, 256),
                             block(256, 256), nn.MaxPool2d(2), block(256, 512), block(512, 512),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))
    if args.model == "transformer":
        layer = nn.TransformerEncoderLayer(args.width // 4, 8, args.width, batch_first=True)
        return nn.Sequential(nn.TransformerEncoder(layer, args.layers // 2), nn.Flatten(),
                             nn.Linear(args.width // 4 * 64, 1000))
    raise SystemExit(f"unknown model {args.model}")


def make_batch(args, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    if args.model == "mlp":
        x = torch.randn(args.batch, args.width, generator=g)
        return x, torch.randn(args.batch, args.width, generator=g)
    if args.model == "cnn":
        return torch.randn(args.batch, 3, 32, 32, generator=g), torch.randint(0, 1000, (args.batch,), generator=g)
    return torch.randn(args.batch, 64, args.width // 4, generator=g), torch.randint(0, 1000, (args.batch,), generator=g)


def loss_fn(args, out, y):
    return F.mse_loss(out, y) if args.model == "mlp" else F.cross_entropy(out, y)


def time_steps(step, args):
    for _ in range(args.warmup):
        step()
    hvd.barrier()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _no_comm_hook(state, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def run_config(name, args, rank, groups):
    """Median step time of one configuration, plus what the optimizer saw."""
    model = build_model(args)
    x, y = make_batch(args, rank)
    extra = {}
    if name.startswith("ddp-"):
        ddp = nn.parallel.DistributedDataParallel(model, process_group=groups.get(name[4:], groups["gloo"]))
        if name == "ddp-nocomm":  # DDP's own cost: buckets handed back unreduced
            ddp.register_comm_hook(None, _no_comm_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)

        def step():
            opt.zero_grad()
            loss_fn(args, ddp(x), y).backward()
            opt.step()
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        if name.startswith("rdmacoll"):
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        keep_views = name == "rdmacoll-views"

        def step():
            opt.zero_grad(set_to_none=not keep_views)
            loss_fn(args, model(x), y).backward()
            opt.step()
    t = time_steps(step, args)
    if name.startswith("rdmacoll"):
        steps = opt.stats["steps"]
        extra = {"copies_per_step": opt.stats["copies"] / steps, "wait_per_step": opt.stats["wait_s"] / steps,
                 "launched_in_backward": opt.stats["launched_in_backward"] / steps,
                 "buckets": opt.bucket_sizes()}
    del model, opt
    gc.collect()
    return t, extra


def comm_only(args, sizes, pg):
    """The same buckets reduced with nothing else running: rdmacoll, then gloo."""
    import rdmacoll

    bufs = [torch.ones(n // 4) for n in sizes]
    lib = [torch.from_numpy(rdmacoll.empty((n // 4,), "float32")).fill_(1) for n in sizes]

    def ours():
        for b in lib:
            hvd.allreduce_(b)

    def gloo():
        for b in bufs:
            dist.all_reduce(b, group=pg)
    return time_steps(ours, args), time_steps(gloo, args)


def binding():
    cpus = sorted(os.sched_getaffinity(0))
    return f"{socket.gethostname()} cpus {cpus}"


def draw(path, rows, compute, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, _ in rows]
    totals = [t for _, t in rows]
    exposed = [max(0.0, t - compute) for t in totals]
    comp = [min(t, compute) for t in totals]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(names, [c * 1e3 for c in comp], label="compute")
    ax.bar(names, [e * 1e3 for e in exposed], bottom=[c * 1e3 for c in comp], label="exposed communication")
    for i, t in enumerate(totals):
        ax.text(i, t * 1e3, f"{t * 1e3:.0f} ms", ha="center", va="bottom")
    ax.set_ylabel("ms per step (median)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "transformer"])
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--png", default="train_torch.png")
    args = ap.parse_args()

    torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    if torchrun:  # gloo's default group first: rdmacoll then bootstraps through its store
        dist.init_process_group("gloo")
    hvd.init()
    rank, size, lsize = hvd.rank(), hvd.size(), hvd.local_size()
    # cores this host's ranks may run on, shared out among them (same for DDP and rdmacoll)
    mine = (socket.gethostname(), sorted(os.sched_getaffinity(0)))
    host_cpus = set().union(*(set(c) for h, c in hvd.allgather_object(mine) if h == mine[0]))
    threads = max(1, len(host_cpus) // lsize)
    torch.set_num_threads(threads)
    if not torchrun:
        host = hvd.broadcast_object(socket.gethostname(), 0)
        port = hvd.broadcast_object(_free_port() if rank == 0 else None, 0)
        addr = "127.0.0.1" if lsize == size else host
        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=size)
    pg = dist.group.WORLD
    groups = {"gloo": pg, "rdmacoll": dist.new_group(backend="rdmacoll")}
    bindings = hvd.allgather_object(binding())

    model = build_model(args)
    grads = [p for p in model.parameters() if p.requires_grad]
    nbytes = sum(p.numel() * p.element_size() for p in grads)
    del model

    configs = ["compute", "rdmacoll", "rdmacoll-views", "ddp-gloo", "ddp-rdmacoll", "ddp-nocomm"]
    times = {c: [] for c in configs}
    extras = {}
    comm = {"rdmacoll": [], "gloo": []}
    for _ in range(args.rounds):
        for c in configs:
            t, extra = run_config(c, args, rank, groups)
            times[c].append(t)
            extras.setdefault(c, []).append(extra)
        ours, gloo = comm_only(args, extras["rdmacoll"][-1]["buckets"], pg)
        comm["rdmacoll"].append(ours)
        comm["gloo"].append(gloo)
    med = {c: statistics.median(v) for c, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in comm.items()}
    dist.destroy_process_group()
    if rank != 0:
        return
    compute = med["compute"]
    ex = extras["rdmacoll"][-1]
    print(f"# model {args.model}: {sum(p.numel() for p in grads) / 1e6:.1f}M parameters, "
          f"{len(grads)} gradient tensors, average {nbytes / len(grads) / 2**20:.2f} MiB; batch {args.batch}/rank")
    print(f"# {size} ranks ({lsize} per host), torch {torch.__version__}, torch.set_num_threads({threads}), "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    for r, b in enumerate(bindings):
        print(f"# rank {r} bound to: {b}")
    print(f"# rdmacoll buckets: {len(ex['buckets'])}, sizes (MiB) "
          f"{[round(s / 2**20, 2) for s in ex['buckets']]}")
    print(f"# medians of {args.rounds} rounds, each the median of {args.steps} steps after {args.warmup} warm-up")
    print(f"{'config':<16}{'step ms':>9}{'compute':>9}{'comm':>9}{'exposed':>9}{'hidden':>8}"
          f"{'step() wait':>12}{'copies/step':>13}{'x DDP':>7}")
    for c in configs:
        t = med[c]
        comm_t = {"rdmacoll": cmed["rdmacoll"], "rdmacoll-views": cmed["rdmacoll"], "ddp-gloo": cmed["gloo"],
                  "ddp-rdmacoll": cmed["rdmacoll"]}.get(c, 0.0)
        exposed = max(0.0, t - compute) if c != "compute" else 0.0
        hidden = max(0.0, min(1.0, (comm_t - exposed) / comm_t)) if comm_t else 0.0
        ours = c.startswith("rdmacoll")
        copies = statistics.median(e["copies_per_step"] for e in extras[c]) if ours else float("nan")
        wait = statistics.median(e["wait_per_step"] for e in extras[c]) * 1e3 if ours else float("nan")
        print(f"{c:<16}{t * 1e3:9.1f}{compute * 1e3:9.1f}{comm_t * 1e3:9.1f}{exposed * 1e3:9.1f}"
              f"{hidden * 100:7.0f}%{wait:12.1f}{copies:13.1f}{t / med['ddp-gloo']:7.2f}")
    print(f"comm-only: rdmacoll {cmed['rdmacoll'] * 1e3:.1f} ms, gloo {cmed['gloo'] * 1e3:.1f} ms for "
          f"{nbytes / 2**20:.0f} MiB of gradients")
    try:
        draw(args.png, [(c, med[c]) for c in configs], compute,
             f"{args.model}, {size} ranks, batch {args.batch}/rank, {threads} thread(s)/rank")
        print(f"chart: {args.png}")
    except ImportError:
        print("chart: skipped (pip install matplotlib)")


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
