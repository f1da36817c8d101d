"""Training step time: rdmacoll's DistributedOptimizer, torch DistributedDataParallel
over gloo and over rdmacoll's torch.distributed backend, and real Horovod where it is
installed: same model, same data, same threads, in the same processes.

    mpiexec -n 2 python benchmarks/train_torch.py                 # 8x2048 MLP, batch 32/rank
    torchrun --standalone --nproc_per_node 2 benchmarks/train_torch.py
    mpiexec -n 2 python benchmarks/train_torch.py --model cnn --png cnn.png

Configurations (every one built once and kept; --warmup steps each, then --rounds rounds
that visit every configuration in turn for --steps steps, so that the machine's drift
hits all alike; medians over the rounds; --configs picks a subset):
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
  horovod        real Horovod's horovod.torch.DistributedOptimizer, zero_grad() default,
                 in the same processes (only where horovod.torch imports, built against
                 the same MPI as mpi4py: ../shared/peers/build-horovod.sh; --no-horovod
                 leaves it out). Horovod's runtime is initialised for its own visits only
                 (hvd.init() before, one untimed step, hvd.shutdown() after): its
                 background thread polls MPI every cycle whether or not anything is
                 reduced (measured here with nothing to do: 0.8-1.0 s of CPU per second
                 on one of the two ranks in 4 of 6 inits, depending on how the ranks'
                 1 ms cycles line up), which on a rank's only core would slow every
                 other configuration, as no user running one library sees it.
                 --horovod-resident keeps it initialised for the whole run instead.
  comm-only rows: the same buckets reduced alone (no compute), rdmacoll and gloo, and
                 Horovod's allreduce of every gradient tensor (what its optimizer submits)

Per step it reports (each round's time is the slowest rank's) total, compute,
communication (alone), exposed (total - compute) and hidden (communication - exposed, as
a share of communication) time, how long step() waited for the reductions (rdmacoll:
rank 0's wait, which includes waiting for a slower rank), the gradient tensors and
buckets, how often a gradient was copied into its bucket, every round's times, and draws
a bar chart (rank 0, matplotlib) of compute vs exposed communication per configuration.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # before torch loads its OpenMP

import argparse  # noqa: E402
import contextlib  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import rdmacoll.frameworks.torch as hvd  # noqa: E402
import rdmacoll.frameworks.torch.distributed  # noqa: E402,F401 - registers the backend "rdmacoll"


ALL_CONFIGS = ["compute", "rdmacoll", "rdmacoll-views", "ddp-gloo", "ddp-rdmacoll", "ddp-nocomm", "horovod"]


def build_model(args):
    torch.manual_seed(0)
    if args.model == "mlp":
        layers = [nn.Linear(args.width, args.width) for _ in range(args.layers)]
        return nn.Sequential(*[m for lin in layers for m in (lin, nn.ReLU())][:-1])
    if args.model == "cnn":

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

        return nn.Sequential(
            block(3, 64),
            block(64, 128),
            nn.MaxPool2d(2),
            block(128, 256),
            block(256, 256),
            nn.MaxPool2d(2),
            block(256, 512),
            block(512, 512),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(512, 1000),
        )
    if args.model == "transformer":
        layer = nn.TransformerEncoderLayer(args.width // 4, 8, args.width, batch_first=True)
        return nn.Sequential(
            nn.TransformerEncoder(layer, args.layers // 2), nn.Flatten(), nn.Linear(args.width // 4 * 64, 1000)
        )
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


def import_horovod(args):
    """horovod.torch, or None (not installed, --no-horovod, or not in --configs)."""
    if args.no_horovod or "horovod" not in args.configs.split(","):
        return None
    try:
        import horovod.torch as real
    except ImportError:
        return None
    return real


class HorovodRuntime:
    """Real Horovod's runtime: initialised only while a Horovod configuration runs (live()),
    or for the whole run (resident)."""

    def __init__(self, real, resident):
        self.real, self.resident = real, resident
        if real is not None and resident:
            real.init()

    @contextlib.contextmanager
    def live(self, needed=True):
        if self.real is None or self.resident or not needed:
            yield
            return
        self.real.init()
        try:
            yield
        finally:
            self.real.shutdown()

    def warm_steps(self):
        """Untimed steps at the start of each visit: after hvd.init() Horovod negotiates
        every tensor afresh (its response cache starts empty)."""
        return 0 if self.resident else 1

    def close(self):
        if self.real is not None and self.resident:
            self.real.shutdown()


def make_config(name, args, rank, groups, real=None):
    """One configuration's model, optimizer and step(), kept alive for the whole run (the
    rounds visit every configuration in turn), and a function that reports what the
    optimizer saw."""
    model = build_model(args)
    x, y = make_batch(args, rank)
    if name.startswith("ddp-"):
        ddp = nn.parallel.DistributedDataParallel(model, process_group=groups.get(name[4:], groups["gloo"]))
        if name == "ddp-nocomm":  # DDP's own cost: buckets handed back unreduced
            ddp.register_comm_hook(None, _no_comm_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)

        def step():
            opt.zero_grad()
            loss_fn(args, ddp(x), y).backward()
            opt.step()
    elif name == "horovod":
        opt = real.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9), named_parameters=model.named_parameters()
        )

        def step():
            opt.zero_grad()
            loss_fn(args, model(x), y).backward()
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

    def stats():
        if not name.startswith("rdmacoll"):
            return {}
        steps = opt.stats["steps"]
        return {
            "copies_per_step": opt.stats["copies"] / steps,
            "wait_per_step": opt.stats["wait_s"] / steps,
            "launched_in_backward": opt.stats["launched_in_backward"] / steps,
            "buckets": opt.bucket_sizes(),
        }

    return step, stats


def visit(step, args, warm=0):
    """Mean time of args.steps consecutive steps (after warm untimed ones), the ranks
    aligned first."""
    for _ in range(warm):
        step()
    hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    return (time.perf_counter() - t0) / args.steps


def comm_only(args, sizes, pg, shapes, horovod_rt=None):
    """The same buckets reduced with nothing else running: rdmacoll, then gloo; and with
    Horovod's runtime, every gradient tensor submitted at once (as its optimizer does),
    then waited for."""
    import rdmacoll

    bufs = [torch.ones(n // 4) for n in sizes]
    lib = [torch.from_numpy(rdmacoll.empty((n // 4,), "float32")).fill_(1) for n in sizes]
    grads = [torch.ones(s) for s in shapes]

    def ours():
        for b in lib:
            hvd.allreduce_(b)

    def gloo():
        for b in bufs:
            dist.all_reduce(b, group=pg)

    res = {"rdmacoll": time_steps(ours, args), "gloo": time_steps(gloo, args)}
    real = horovod_rt.real if horovod_rt is not None else None
    if real is not None:

        def horovod():
            handles = [real.allreduce_async_(g, name=f"g{i}") for i, g in enumerate(grads)]
            for h in handles:
                real.synchronize(h)

        with horovod_rt.live():
            res["horovod"] = time_steps(horovod, args)
    return res


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
    ap.add_argument("--steps", type=int, default=2, help="consecutive steps per visit")
    ap.add_argument("--warmup", type=int, default=3, help="steps per configuration before timing")
    ap.add_argument("--rounds", type=int, default=10, help="visits of every configuration")
    ap.add_argument("--png", default="train_torch.png")
    ap.add_argument("--no-horovod", action="store_true", help="leave real Horovod out even if installed")
    ap.add_argument(
        "--horovod-resident",
        action="store_true",
        help="keep Horovod initialised for the whole run (its polling thread then "
        "shares every configuration's cores), not only during its own visits",
    )
    ap.add_argument(
        "--configs",
        default=",".join(ALL_CONFIGS),
        help="comma-separated subset to run (compute and rdmacoll always run: the "
        "other rows are measured against them)",
    )
    args = ap.parse_args()
    unknown = set(args.configs.split(",")) - set(ALL_CONFIGS)
    if unknown:
        ap.error(f"unknown configurations {sorted(unknown)}; known: {','.join(ALL_CONFIGS)}")
    args.configs += ",compute,rdmacoll"

    torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    if torchrun:  # gloo's default group first: rdmacoll then bootstraps through its store
        dist.init_process_group("gloo")
    hvd.init()
    real = import_horovod(args)
    horovod_rt = HorovodRuntime(real, args.horovod_resident)
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
    shapes = [p.shape for p in grads]
    del model

    configs = [c for c in ALL_CONFIGS if c in args.configs.split(",") and (c != "horovod" or real)]
    runs = {}
    for c in configs:
        with horovod_rt.live(c == "horovod"):
            runs[c] = make_config(c, args, rank, groups, real)
            for _ in range(args.warmup):
                runs[c][0]()
    times = {c: [] for c in configs}
    comm = {}
    for _ in range(args.rounds):  # every round visits every configuration: drift cancels
        for c in configs:
            with horovod_rt.live(c == "horovod"):
                times[c].append(visit(runs[c][0], args, horovod_rt.warm_steps() if c == "horovod" else 0))
        for k, v in comm_only(
            args, runs["rdmacoll"][1]()["buckets"], pg, shapes, horovod_rt if "horovod" in configs else None
        ).items():
            comm.setdefault(k, []).append(v)
    # each round's time is the slowest rank's: ranks run at different speeds (the two cores
    # here differ by up to ~8% on the same compute), a synchronous step cannot beat the
    # slowest, and "exposed" must not count the faster rank waiting for it
    per_rank = hvd.allgather_object((times, comm))
    times = {c: [max(r[0][c][i] for r in per_rank) for i in range(len(v))] for c, v in times.items()}
    comm = {k: [max(r[1][k][i] for r in per_rank) for i in range(len(v))] for k, v in comm.items()}
    extras = {c: runs[c][1]() for c in configs}
    med = {c: statistics.median(v) for c, v in times.items()}
    # exposed: the median over rounds of (step - compute step) of the same round
    exposed_med = {c: statistics.median(t - u for t, u in zip(times[c], times["compute"])) for c in configs}
    cmed = {k: statistics.median(v) for k, v in comm.items()}
    dist.destroy_process_group()
    horovod_rt.close()
    if rank != 0:
        return
    compute = med["compute"]
    ex = extras["rdmacoll"]
    print(
        f"# model {args.model}: {sum(p.numel() for p in grads) / 1e6:.1f}M parameters, "
        f"{len(grads)} gradient tensors, average {nbytes / len(grads) / 2**20:.2f} MiB; batch {args.batch}/rank"
    )
    print(
        f"# {size} ranks ({lsize} per host), torch {torch.__version__}, torch.set_num_threads({threads}), "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
    )
    for r, b in enumerate(bindings):
        print(f"# rank {r} bound to: {b}")
    if "horovod" in med:
        print(
            "# horovod: "
            + (
                "initialised for the whole run (--horovod-resident): its polling thread "
                "shares every configuration's cores"
                if args.horovod_resident
                else "initialised only for its own visits (hvd.init(), one untimed step, timed steps, hvd.shutdown())"
            )
        )
    print(f"# rdmacoll buckets: {len(ex['buckets'])}, sizes (MiB) {[round(s / 2**20, 2) for s in ex['buckets']]}")
    print(
        f"# {args.warmup} warm-up steps per configuration, then {args.rounds} rounds visiting every "
        f"configuration in turn for {args.steps} step(s); medians over the rounds of the slowest "
        f"rank's time (exposed: of the round's step minus the round's compute step)"
    )
    print(
        f"{'config':<16}{'step ms':>9}{'compute':>9}{'comm':>9}{'exposed':>9}{'hidden':>8}"
        f"{'step() wait':>12}{'copies/step':>13}{'x DDP':>7}"
    )
    for c in configs:
        t = med[c]
        comm_t = {
            "rdmacoll": cmed["rdmacoll"],
            "rdmacoll-views": cmed["rdmacoll"],
            "ddp-gloo": cmed["gloo"],
            "ddp-rdmacoll": cmed["rdmacoll"],
            "horovod": cmed.get("horovod", 0.0),
        }.get(c, 0.0)
        exposed = max(0.0, exposed_med[c]) if c != "compute" else 0.0
        hidden = max(0.0, min(1.0, (comm_t - exposed) / comm_t)) if comm_t else 0.0
        ours = c.startswith("rdmacoll")
        copies = extras[c]["copies_per_step"] if ours else float("nan")
        wait = extras[c]["wait_per_step"] * 1e3 if ours else float("nan")
        print(
            f"{c:<16}{t * 1e3:9.1f}{compute * 1e3:9.1f}{comm_t * 1e3:9.1f}{exposed * 1e3:9.1f}"
            f"{hidden * 100:7.0f}%{wait:12.1f}{copies:13.1f}{t / med.get('ddp-gloo', float('nan')):7.2f}"
        )
    for c in configs:
        print(f"rounds {c}: " + " ".join(f"{t * 1e3:.0f}" for t in times[c]))
    print(
        f"comm-only: rdmacoll {cmed['rdmacoll'] * 1e3:.1f} ms, gloo {cmed['gloo'] * 1e3:.1f} ms"
        + (f", horovod {cmed['horovod'] * 1e3:.1f} ms" if "horovod" in cmed else "")
        + f" for {nbytes / 2**20:.0f} MiB of gradients"
    )
    if "horovod" in med:
        step_ratio = statistics.median(a / b for a, b in zip(times["rdmacoll"], times["horovod"]))
        ours, theirs = exposed_med["rdmacoll"], exposed_med["horovod"]
        ratio = f"{max(0.0, ours) / theirs:.2f}x" if theirs > 0 else "n/a (Horovod exposed nothing)"
        print(
            f"vs horovod: step {step_ratio:.2f}x (median of the rounds' ratios), exposed {ratio} "
            f"({ours * 1e3:.1f} ms against {theirs * 1e3:.1f} ms)"
        )
    else:
        left_out = args.no_horovod or "horovod" not in args.configs.split(",")
        print(
            "horovod: not measured ("
            + ("left out by --configs/--no-horovod" if left_out else "horovod.torch does not import here")
            + ")"
        )
    try:
        draw(
            args.png,
            [(c, med[c]) for c in configs],
            compute,
            f"{args.model}, {size} ranks, batch {args.batch}/rank, {threads} thread(s)/rank",
        )
        print(f"chart: {args.png}")
    except ImportError:
        print("chart: skipped (pip install matplotlib)")


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
