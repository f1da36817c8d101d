"""rdmacoll's allreduce at scale: its own schedules replayed on SimGrid (docs/scale.md).

The schedules are the algorithm table's code run by csrc/trace/ (rdmacoll._core.schedule
exports the same steps); benchmarks/scale/simulate.cc replays them as one-sided puts on a
platform (SimGrid 3.32's C++ API: Debian's libsimgrid-dev). This script builds that
simulator, checks it against the selector's closed-form costs, sweeps platforms, ranks and
sizes, and writes the tables and plots of docs/scale.md.

    python benchmarks/scale/sweep.py agree [--ranks 64]        # simulated vs closed form
    python benchmarks/scale/sweep.py sweep --out docs/scale/sweep.json [--budget-s 60]
    python benchmarks/scale/sweep.py report docs/scale/sweep.json   # markdown + plots
    python benchmarks/scale/sweep.py validate docs/scale/veth_measured.json
    python benchmarks/scale/sweep.py innet docs/scale/sweep.json     # switches that sum, what-if
    python benchmarks/scale/sweep.py add docs/scale/sweep.json --point fattree,tree,4096,16777216

Link parameters (defaults: 200 Gb/s, 1 us per link, so 2 us between two hosts on one
switch; the network's gamma 1.2e-11 s/B) are flags. The closed forms get the constants
the platform's links imply: alpha = the latency of a route, beta = 1 / the bandwidth of
its slowest link.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIB, MIB = 1 << 10, 1 << 20
# The algorithms that run between hosts (direct and ring read peers in place: one host).
NETWORK_ALGOS = ["ring_slots", "recursive_doubling", "halving_doubling", "tree", "eager", "hierarchical"]
SIZES = [8, 64 * KIB, MIB, 16 * MIB, 256 * MIB]
PLATFORMS = ["fattree", "fattree4", "dragonfly", "hosts8"]
RANKS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
SIZE_NAMES = {8: "8 B", 64 * KIB: "64 KiB", MIB: "1 MiB", 16 * MIB: "16 MiB", 256 * MIB: "256 MiB"}
EAGER_BYTES = 32 * KIB  # RDMACOLL_EAGER_BYTES' default: eager runs up to it


class SimulatorUnavailable(RuntimeError):
    """cmake, a C++ compiler or SimGrid (libsimgrid-dev, pkg-config) is missing."""


def build(build_dir: Path) -> Path:
    """Builds rdmacoll-sim (CMake: RDMACOLL_SIMULATOR=ON, no Python modules) into build_dir;
    returns the binary. Raises SimulatorUnavailable naming what is missing."""
    for tool in ("cmake", "pkg-config"):
        if shutil.which(tool) is None:
            raise SimulatorUnavailable(f"{tool} not found")
    if subprocess.run(["pkg-config", "--exists", "simgrid"]).returncode != 0:
        raise SimulatorUnavailable("SimGrid not found by pkg-config (Debian: apt install libsimgrid-dev)")
    build_dir = Path(build_dir)
    steps = [
        ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DRDMACOLL_PYTHON=OFF", "-DRDMACOLL_SIMULATOR=ON"],
        ["cmake", "--build", str(build_dir), "--target", "rdmacoll-sim", "-j", str(os.cpu_count() or 2)],
    ]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise SimulatorUnavailable(f"{' '.join(cmd)} failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return build_dir / "rdmacoll-sim"


class Links:
    """A platform's link parameters (platform_models gives the cost-model constants they imply)."""

    def __init__(self, bandwidth=25e9, latency=1e-6, local_bandwidth=40e9, local_latency=0.5e-6, gamma=1.2e-11):
        self.bandwidth, self.latency = bandwidth, latency
        self.local_bandwidth, self.local_latency, self.gamma = local_bandwidth, local_latency, gamma

    def flags(self) -> list[str]:
        return [
            *("--bandwidth", repr(self.bandwidth), "--latency", repr(self.latency)),
            *("--local-bandwidth", repr(self.local_bandwidth), "--local-latency", repr(self.local_latency)),
            *("--gamma", repr(self.gamma)),
        ]


class Simulator:
    def __init__(self, binary: Path, links: Links | None = None):
        self.binary = Path(binary)
        self.links = links or Links()

    def run(self, platform, algorithm, ranks, nbytes, timeout=3600, **settings) -> dict:
        """One simulated allreduce: {"seconds", "steps", ...}; settings: segment_bytes,
        slot_bytes, slots, eager_bytes, ranks_per_host (as the simulator's flags)."""
        cmd = [str(self.binary), "--platform", platform, "--algorithm", algorithm, "--ranks", str(ranks)]
        cmd += ["--bytes", str(nbytes), *self.links.flags()]
        for k, v in settings.items():
            cmd += ["--" + k.replace("_", "-"), str(v)]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            err = [ln for ln in r.stderr.splitlines() if "xbt_cfg/INFO" not in ln]
            raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {' '.join(err)[-2000:]}")
        out = json.loads(r.stdout.strip().splitlines()[-1])
        out["wall_s"] = time.monotonic() - t0
        return out


def closed_forms(nbytes, ranks, model, hosts=1, local=None, segment_bytes=0) -> dict:
    """The selector's predicted seconds of every allreduce algorithm (rdmacoll._core.costs)."""
    from rdmacoll import _core

    return _core.costs(
        model, "allreduce", int(nbytes), int(ranks), hosts=hosts, local=local, segment_bytes=segment_bytes
    )


def selector_choice(nbytes, ranks, model, hosts, local, usable, core=(1, 0)) -> str:
    """What the selector picks; core: (RDMACOLL_NETWORK_OVERSUBSCRIPTION, _LEAF_RANKS)."""
    from rdmacoll import _core

    return _core.select(
        model,
        "allreduce",
        int(nbytes),
        int(ranks),
        usable,
        hosts=hosts,
        local=local,
        oversubscription=core[0],
        leaf_ranks=core[1],
    )


# The core settings a user of each platform would give (RDMACOLL_NETWORK_OVERSUBSCRIPTION,
# RDMACOLL_NETWORK_LEAF_RANKS): a 4:1 fat tree's spines; the dragonfly's one link between
# two groups of 64, which an exchange between them shares 64 ways.
CORE = {"fattree": (1, 16), "fattree4": (4, 16), "dragonfly": (64, 64), "hosts8": (1, 128), "star": (1, 0)}


# ---- agreement on uniform links
def agreement(sim: Simulator, ranks=64, sizes=(8, 64 * KIB, MIB, 16 * MIB), per_host=8) -> list[dict]:
    """Every network algorithm simulated on uniform links (star; hierarchical on star8,
    hosts of per_host ranks) against its closed form. One segment per message (segment and
    slot as large as the largest message, slots enough never to wait for a credit), which is
    what the closed forms assume. Rows {algorithm, bytes, simulated, closed_form, ratio}."""
    rows = []
    for nbytes in sizes:
        big = max(4096, 1 << int(nbytes - 1).bit_length())
        common = dict(segment_bytes=big, slot_bytes=big, slots=64, eager_bytes=max(EAGER_BYTES, nbytes))
        for algo in NETWORK_ALGOS:
            if algo == "eager" and nbytes > 64 * KIB:
                continue
            if algo == "hierarchical":
                platform = "star8"
                res = sim.run(platform, algo, ranks, nbytes, ranks_per_host=per_host, **common)
            else:
                platform = "star"
                res = sim.run(platform, algo, ranks, nbytes, **common)
            net, hosts, local = platform_models(sim.links, platform, ranks, per_host)
            want = closed_forms(nbytes, ranks, net, hosts=hosts, local=local, segment_bytes=big)[algo]
            rows.append(
                {
                    "algorithm": algo,
                    "bytes": nbytes,
                    "simulated": res["seconds"],
                    "closed_form": want,
                    "ratio": res["seconds"] / want,
                }
            )
    return rows


# ---- the sweep
def platform_models(links: Links, platform: str, ranks: int, per_host=8):
    """(network model, hosts, local model) the selector would see on a platform: its routes'
    latency and bandwidth between hosts (a fat tree crosses 4 links between leaves, a
    dragonfly up to 6: its typical route), ranks per host from the platform."""
    hops = {"fattree": 4, "fattree4": 4, "dragonfly": 6, "hosts8": 4, "star": 2, "star8": 2}[platform]
    net = {"alpha": hops * links.latency, "beta": 1 / links.bandwidth, "gamma": links.gamma}
    if platform in ("hosts8", "star8"):  # a route between hosts also crosses both hosts' inner links
        net["alpha"] += 2 * links.local_latency
        net["beta"] = 1 / min(links.bandwidth, links.local_bandwidth)
        local = {"alpha": 2 * links.local_latency, "beta": 1 / links.local_bandwidth, "gamma": links.gamma}
        return net, ranks // per_host, local
    return net, ranks, None


def usable(platform, nbytes, hosts) -> list[str]:
    out = ["ring_slots", "recursive_doubling", "halving_doubling", "tree"]
    if nbytes <= EAGER_BYTES:
        out.append("eager")
    if platform in ("hosts8", "star8") and hosts > 1:
        out.append("hierarchical")
    return out


def sweep(sim: Simulator, platforms=PLATFORMS, ranks=RANKS, sizes=SIZES, budget_s=60.0, jobs=2, log=print, done=()):
    """Every (platform, algorithm, size) at growing ranks, until a point takes longer than
    budget_s to simulate (the larger ones are then left out and say so). Points of one
    rank count run concurrently (jobs). done: records of an interrupted sweep (its log's
    lines), kept and not simulated again."""
    records, stopped = list(done), {}
    finished = {(r["platform"], r["algorithm"], r["bytes"], r["ranks"]) for r in records}
    for r in records:
        if "error" in r or r.get("wall_s", 0) > budget_s:
            stopped[(r["platform"], r["algorithm"], r["bytes"])] = r["ranks"]
    for p in ranks:
        todo = []
        for platform in platforms:
            if platform == "dragonfly" and (p < 128 or p % 64):
                continue
            if platform in ("fattree", "fattree4") and (p < 32 or p % 16):
                continue
            if platform == "hosts8" and (p < 256 or p % 128):
                continue
            net, hosts, local = platform_models(sim.links, platform, p)
            for nbytes in sizes:
                for algo in usable(platform, nbytes, hosts):
                    key = (platform, algo, nbytes)
                    if key in stopped or (*key, p) in finished:
                        continue
                    todo.append((platform, algo, nbytes, p))

        def one(t):
            platform, algo, nbytes, p = t
            try:
                return t, sim.run(platform, algo, p, nbytes, timeout=10 * budget_s), None
            except subprocess.TimeoutExpired:
                return t, None, f"over {10 * budget_s:.0f} s of simulation"
            except Exception as e:  # noqa: BLE001 - recorded with the point
                return t, None, str(e)

        with ThreadPoolExecutor(jobs) as pool:
            for (platform, algo, nbytes, p), res, err in pool.map(one, todo):
                rec = {"platform": platform, "algorithm": algo, "bytes": nbytes, "ranks": p}
                if res is None:
                    rec["error"] = err
                    stopped[(platform, algo, nbytes)] = p
                else:
                    rec.update(seconds=res["seconds"], steps=res["steps"], wall_s=res["wall_s"])
                    if res["wall_s"] > budget_s:
                        stopped[(platform, algo, nbytes)] = p
                records.append(rec)
                log(json.dumps(rec), flush=True)
    add_selections(sim.links, records)
    return {"records": records, "stopped": [list(k) + [v] for k, v in stopped.items()]}


def add_selections(links: Links, records) -> None:
    """Each record's "selected" and "selected_core": the selector's choice at its point
    with the shipped settings and with the platform's core settings (CORE)."""
    choices = {}
    for rec in records:
        key = (rec["platform"], rec["ranks"], rec["bytes"])
        if key not in choices:
            net, hosts, local = platform_models(links, *key[:2])
            ok = usable(key[0], key[2], hosts)
            choices[key] = (
                selector_choice(key[2], key[1], net, hosts, local, ok),
                selector_choice(key[2], key[1], net, hosts, local, ok, CORE[key[0]]),
            )
        rec["selected"], rec["selected_core"] = choices[key]


# ---- in-network aggregation, a what-if (simulate.cc: inNetworkSteps)
def innet(
    sim: Simulator,
    data: dict,
    platforms=("fattree", "fattree4"),
    ranks=(64, 512, 2048, 4096),
    sizes=(64 * KIB, MIB, 16 * MIB, 256 * MIB),
    log=print,
) -> list[dict]:
    """Switches that sum (leaf switches, then the spines) simulated at the sweep's points,
    against the sweep's algorithms there: rows {platform, ranks, bytes, innet, ring, hd,
    tree (seconds, None where the sweep has none), best, best_s (None where the best is not
    known: best_known)}."""
    recs = [r for r in data["records"] if "seconds" in r]
    rows = []
    for platform in platforms:
        for p in ranks:
            for nbytes in sizes:
                here = [r for r in recs if (r["platform"], r["ranks"], r["bytes"]) == (platform, p, nbytes)]
                if not here:
                    continue  # the sweep did not reach this point
                t = {r["algorithm"]: r["seconds"] for r in here}
                row = {"platform": platform, "ranks": p, "bytes": nbytes}
                row["innet"] = sim.run(platform, "innet", p, nbytes)["seconds"]
                row.update(ring=t.get("ring_slots"), hd=t.get("halving_doubling"), tree=t.get("tree"))
                best = best_known(recs, here)[0]
                row["best"], row["best_s"] = (best["algorithm"], best["seconds"]) if best else (None, None)
                rows.append(row)
                log(json.dumps(row))
    return rows


# ---- validation against rdmacoll on shaped links
def validate(sim_binary: Path, measured: dict, log=print) -> list[dict]:
    """Every record of benchmarks/scale/measure_veth.py's JSON (hosts in network namespaces
    on one bridge, each link shaped to the same rate) simulated on the same star: one link
    per host at the bandwidth and latency fitted from the two-host transfers (its
    calibration), hosts of ranks_per_host ranks joined by shared memory inside. Rows
    {hosts, ranks_per_host, algorithm, bytes, measured, simulated, ratio}."""
    fit = measured["link_fit"]["one_way"]["model"]
    bandwidth = 1 / fit["beta_s_per_byte"]  # the rate transfers of 1 MiB and more reach
    alpha = fit["alpha_s"]  # a small message's time between two hosts: two links
    links = Links(bandwidth=bandwidth, latency=alpha / 2, local_bandwidth=5e9, local_latency=1e-6, gamma=6e-12)
    sim = Simulator(sim_binary, links)
    rows = []
    for rec in measured["records"]:
        h, per = rec["hosts"], rec["ranks_per_host"]
        settings = {k: v for k, v in rec.get("settings", {}).items() if k in ("segment_bytes", "slot_bytes", "slots")}
        if per > 1:
            res = sim.run("star8", rec["algorithm"], h * per, rec["bytes"], ranks_per_host=per, **settings)
        else:
            res = sim.run("star", rec["algorithm"], h, rec["bytes"], **settings)
        row = {
            "hosts": h,
            "ranks_per_host": per,
            "algorithm": rec["algorithm"],
            "bytes": rec["bytes"],
            "measured": rec["seconds_median"],
            "simulated": res["seconds"],
        }
        row["ratio"] = row["simulated"] / row["measured"]
        rows.append(row)
        log(json.dumps(row))
    return rows


# ---- an end-to-end step: gradients reduced in buckets as backward produces them
# (gradient bytes, compute seconds per step on one accelerator): a ResNet-50-like model
# (25.6 M float32 parameters) and a BERT-large-like one (335 M), at compute times of the
# order a current GPU takes for a per-GPU batch of 64 images / 16 sequences of 512 tokens.
# Horovod's published runs' models beside them (ResNet-101, 44.5 M parameters, and VGG-16,
# 138 M) at P100-class compute for a batch of 64 (about 150 and 115 images/s): assumed, to
# set our model against its 90% and 68% at 512 GPUs over 25 Gb/s.
MODELS = {
    "resnet50-like": (25.6e6 * 4, 0.120),
    "bert-large-like": (335e6 * 4, 0.400),
    "resnet101-p100": (44.5e6 * 4, 64 / 150),
    "vgg16-p100": (138e6 * 4, 64 / 115),
}
BUCKET = 16 * MIB  # RDMACOLL_FUSION_THRESHOLD=16M: the sweep's 16 MiB points price a bucket


def step_time(grad_bytes, compute_s, bucket_s, backward_share=2 / 3) -> float:
    """One step as the DistributedOptimizer overlaps it: backward (backward_share of the
    compute, after the forward) produces the gradients evenly, every full bucket is reduced
    as soon as it is ready and after the one before it; the step ends with compute and the
    last bucket."""
    k = max(1, int(-(-grad_bytes // BUCKET)))
    forward = compute_s * (1 - backward_share)
    end = 0.0
    for i in range(k):
        ready = forward + compute_s * backward_share * (i + 1) / k
        end = max(ready, end) + bucket_s
    return max(compute_s, end)


def step_model(data: dict) -> list[dict]:
    """Scaling efficiency (compute / step) of each model per platform and rank count, the
    buckets reduced by the best simulated algorithm at 16 MiB and by the selector's choice
    (the platform's core settings)."""
    recs = [r for r in data["records"] if "seconds" in r and r["bytes"] == BUCKET]
    out = []
    for platform in sorted({r["platform"] for r in recs}):
        for p in sorted({r["ranks"] for r in recs if r["platform"] == platform}):
            rows = {r["algorithm"]: r for r in recs if r["platform"] == platform and r["ranks"] == p}
            best = best_known(recs, list(rows.values()))[0]
            if best is None:
                continue  # not every algorithm simulated here (nor the ring bounded): no best
            sel = rows.get(next(iter(rows.values()))["selected_core"])
            for model, (grad, compute) in MODELS.items():
                row = {"platform": platform, "ranks": p, "model": model, "best": best["algorithm"]}
                row["efficiency_best"] = compute / step_time(grad, compute, best["seconds"])
                # 25 Gb/s links (Horovod's published runs): a 16 MiB bucket is bandwidth-bound,
                # so its time scales with the links' (8x here)
                row["efficiency_best_25g"] = compute / step_time(grad, compute, 8 * best["seconds"])
                if sel is not None:
                    row["selected"] = sel["algorithm"]
                    row["efficiency_selected"] = compute / step_time(grad, compute, sel["seconds"])
                out.append(row)
    return out


def busbw(rec) -> float:
    """Bus bandwidth (nccl-tests): 2 (p-1)/p n / t, bytes per second."""
    p = rec["ranks"]
    return 2 * (p - 1) / p * rec["bytes"] / rec["seconds"]


def ring_bound(recs, platform, ranks, nbytes) -> float | None:
    """A lower bound of the ring's time at (platform, ranks, nbytes) where it was not
    simulated (its 2 (p-1) steps make the large rings the slowest points to simulate): its
    simulated time at the largest smaller rank count on that platform and size. A ring of
    more ranks is never faster: each of its 2 (p-1) dependent steps costs at least a hop's
    latency, and it moves 2 (p-1)/p of the bytes over every rank's link, both growing with
    p. None where no smaller ring was simulated."""
    smaller = [
        r
        for r in recs
        if r["algorithm"] == "ring_slots" and r["platform"] == platform and r["bytes"] == nbytes and r["ranks"] < ranks
    ]
    return max(smaller, key=lambda r: r["ranks"])["seconds"] if smaller else None


def best_known(recs, rows) -> tuple[dict | None, bool]:
    """The fastest of rows (the records of one platform, ranks and size) where it is known
    to be the best there: every usable algorithm was simulated, or every one but the ring
    and the ring's bound (ring_bound) is above the fastest of the others. (None, False)
    where not known; the flag says whether the ring's bound was used."""
    platform, p, nbytes = rows[0]["platform"], rows[0]["ranks"], rows[0]["bytes"]
    hosts = p // 8 if platform in ("hosts8", "star8") else p
    missing = set(usable(platform, nbytes, hosts)) - {r["algorithm"] for r in rows}
    best = min(rows, key=lambda r: r["seconds"])
    if missing == {"ring_slots"}:
        bound = ring_bound(recs, platform, p, nbytes)
        return (best, True) if bound is not None and bound >= best["seconds"] else (None, False)
    return (None, False) if missing else (best, False)


def selector_misses(recs, field="selected") -> dict:
    """Points (platform, ranks, bytes) where the best is known (best_known): how many had
    the selector (field: its choice with the shipped settings, or "selected_core" with the
    platform's core settings) within 5% of the best, and the others; "bounded": how many of
    the points are known by the ring's bound, with the selector choosing the ring at none
    of them (where it does, the point is left out: its time is not known)."""
    points = {}
    for r in recs:
        points.setdefault((r["platform"], r["ranks"], r["bytes"]), []).append(r)
    beyond, within, n, bounded = [], 0, 0, 0
    for key, rows in sorted(points.items()):
        sel = rows[0][field]
        chosen = [r for r in rows if r["algorithm"] == sel]
        if not chosen:
            continue  # the selector's choice was not simulated here
        best, by_bound = best_known(recs, rows)
        if best is None:
            continue  # no best to compare with
        bounded += by_bound
        n += 1
        ratio = chosen[0]["seconds"] / best["seconds"]
        if ratio <= 1.05:
            within += 1
        else:
            beyond.append((*key, sel, best["algorithm"], ratio))
    return {"points": n, "within": within, "beyond": beyond, "bounded": bounded}


def report(data: dict, out_dir: Path) -> str:
    """Markdown tables (busbw in GB/s per platform and size; the selector against the
    best simulated algorithm) and, where matplotlib is installed, plots in out_dir."""
    recs = [r for r in data["records"] if "seconds" in r]
    lines = []
    for platform in sorted({r["platform"] for r in recs}):
        for nbytes in sorted({r["bytes"] for r in recs}):
            sub = [r for r in recs if r["platform"] == platform and r["bytes"] == nbytes]
            if not sub:
                continue
            algos = [a for a in NETWORK_ALGOS if any(r["algorithm"] == a for r in sub)]
            ranks = sorted({r["ranks"] for r in sub})
            lines.append(
                f"\n**{platform}, {SIZE_NAMES.get(nbytes, nbytes)}**: busbw GB/s (* selected with the shipped "
                f"settings, + with the core's, RDMACOLL_NETWORK_OVERSUBSCRIPTION={CORE[platform][0]} "
                f"RDMACOLL_NETWORK_LEAF_RANKS={CORE[platform][1]})\n"
            )
            lines.append("| ranks | " + " | ".join(algos) + " | * / best | + / best |")
            lines.append("|---" * (len(algos) + 3) + "|")
            for p in ranks:
                row = {r["algorithm"]: r for r in sub if r["ranks"] == p}
                best = min(row.values(), key=lambda r: r["seconds"])
                first = next(iter(row.values()))
                sel, sel_core = first["selected"], first["selected_core"]
                cells = []
                for a in algos:
                    if a not in row:
                        cells.append("")
                        continue
                    mark = ("*" if a == sel else "") + ("+" if a == sel_core else "")
                    cells.append(f"{busbw(row[a]) / 1e9:.3g}{mark}")
                ratios = [f"{row[x]['seconds'] / best['seconds']:.2f}" if x in row else "-" for x in (sel, sel_core)]
                lines.append(f"| {p} | " + " | ".join(cells) + f" | {ratios[0]} | {ratios[1]} |")
    for field, what in (("selected", "the shipped settings"), ("selected_core", "the platform's core settings")):
        misses = selector_misses(recs, field)
        lines.append(
            f"\nThe selector with {what}: within 5% of the best simulated algorithm at {misses['within']} of "
            f"{misses['points']} points ({misses['bounded']} of them with the ring not simulated, its time bounded "
            "below by a smaller ring's, above the best); beyond it (platform, ranks, size: selected, its time / "
            "the best's, best):\n"
        )
        for m in misses["beyond"]:
            lines.append(f"- {m[0]}, {m[1]}, {SIZE_NAMES.get(m[2], m[2])}: {m[3]} {m[5]:.2f}x {m[4]}")
    text = "\n".join(lines) + "\n"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return text
    out_dir.mkdir(parents=True, exist_ok=True)
    for platform in sorted({r["platform"] for r in recs}):
        sizes = sorted({r["bytes"] for r in recs if r["platform"] == platform})
        fig, axes = plt.subplots(1, len(sizes), figsize=(4 * len(sizes), 3.4), squeeze=False)
        for ax, nbytes in zip(axes[0], sizes):
            for a in NETWORK_ALGOS:
                pts = sorted(
                    (r["ranks"], busbw(r) / 1e9)
                    for r in recs
                    if r["platform"] == platform and r["bytes"] == nbytes and r["algorithm"] == a
                )
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=a)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{platform}, {SIZE_NAMES.get(nbytes, nbytes)}")
            ax.set_xlabel("ranks")
        axes[0][0].set_ylabel("busbw GB/s")
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / f"busbw_{platform}.png", dpi=90)
        plt.close(fig)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["build", "agree", "sweep", "report", "validate", "steps", "innet", "add"])
    ap.add_argument("path", nargs="?", help="report, innet, add: the sweep's JSON; validate: measure_veth.py's")
    ap.add_argument(
        "--point",
        action="append",
        default=[],
        help="add: PLATFORM,ALGORITHM,RANKS,BYTES simulated beyond the sweep's budget and added to its JSON",
    )
    ap.add_argument("--build-dir", default=str(ROOT / "build" / "sim"))
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "docs" / "scale" / "sweep.json"))
    ap.add_argument("--budget-s", type=float, default=60.0, help="stop growing a series past this simulation time")
    ap.add_argument("--max-ranks", type=int, default=4096)
    ap.add_argument("--jobs", type=int, default=2, help="simulations at once")
    ap.add_argument("--resume", help="the log (stdout) of an interrupted sweep: its points are kept")
    ap.add_argument("--bandwidth", type=float, default=25e9, help="bytes/s per link (25e9: 200 Gb/s)")
    ap.add_argument("--latency", type=float, default=1e-6, help="seconds per link")
    a = ap.parse_args(argv)
    if a.command == "report":
        data = json.loads(Path(a.path).read_text())
        print(report(data, Path(a.path).parent))
        return
    if a.command == "steps":
        rows = step_model(json.loads(Path(a.path).read_text()))
        print("| platform | ranks | model | best at 16 MiB | efficiency | at 25 Gb/s | selected | efficiency |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            sel = f"{r['selected']} | {r['efficiency_selected']:.0%}" if "selected" in r else "- | -"
            print(
                f"| {r['platform']} | {r['ranks']} | {r['model']} | {r['best']} | {r['efficiency_best']:.0%} | "
                f"{r['efficiency_best_25g']:.0%} | {sel} |"
            )
        return
    sim = Simulator(build(Path(a.build_dir)), Links(bandwidth=a.bandwidth, latency=a.latency))
    if a.command == "build":
        print(sim.binary)
    elif a.command == "validate":
        rows = validate(sim.binary, json.loads(Path(a.path).read_text()), log=lambda _: None)
        print(
            f"{'hosts x ranks':>13} {'algorithm':20} {'bytes':>10} {'measured s':>11} {'simulated s':>12} {'sim/meas':>8}"
        )
        for r in rows:
            hr = f"{r['hosts']} x {r['ranks_per_host']}"
            print(
                f"{hr:>13} {r['algorithm']:20} {r['bytes']:>10} {r['measured']:11.4g} {r['simulated']:12.4g} "
                f"{r['ratio']:8.3f}"
            )
    elif a.command == "add":
        data = json.loads(Path(a.path).read_text())
        for point in a.point:
            platform, algo, p, nbytes = point.split(",")
            if platform not in PLATFORMS or algo not in NETWORK_ALGOS:
                sys.exit(f"add: {point}: the sweep's platforms are {PLATFORMS}, its algorithms {NETWORK_ALGOS}")
            res = sim.run(platform, algo, int(p), int(nbytes), timeout=6 * 3600)
            rec = {"platform": platform, "algorithm": algo, "bytes": int(nbytes), "ranks": int(p)}
            rec.update(seconds=res["seconds"], steps=res["steps"], wall_s=res["wall_s"], added=True)
            data["records"] = [r for r in data["records"] if not all(r[k] == rec[k] for k in list(rec)[:4])]
            data["records"].append(rec)
            add_selections(sim.links, data["records"])
            Path(a.path).write_text(json.dumps(data, indent=1))  # after each: a later point may take hours
            print(json.dumps(rec), flush=True)
    elif a.command == "innet":
        rows = innet(sim, json.loads(Path(a.path).read_text()), log=lambda _: None)
        print("| platform | ranks | size | innet us | ring | halving-doubling | tree | best | gain: ring | hd | best |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            us = [f"{r[k] * 1e6:.4g}" if r[k] else "-" for k in ("innet", "ring", "hd", "tree")]
            gain = [f"{r[k] / r['innet']:.1f}x" if r[k] else "-" for k in ("ring", "hd", "best_s")]
            size = SIZE_NAMES.get(r["bytes"], r["bytes"])
            print(
                f"| {r['platform']} | {r['ranks']} | {size} | "
                + " | ".join(us)
                + f" | {r['best'] or '-'} | "
                + " | ".join(gain)
                + " |"
            )
    elif a.command == "agree":
        rows = agreement(sim, ranks=a.ranks)
        print(f"{'algorithm':20} {'bytes':>10} {'simulated s':>12} {'closed form s':>14} {'ratio':>7}")
        for r in rows:
            print(
                f"{r['algorithm']:20} {r['bytes']:>10} {r['simulated']:12.4g} {r['closed_form']:14.4g} {r['ratio']:7.3f}"
            )
    else:
        t0 = time.monotonic()
        done = []
        if a.resume:
            done = [json.loads(ln) for ln in Path(a.resume).read_text().splitlines() if ln.startswith("{")]
        ranks = [p for p in RANKS if p <= a.max_ranks]  # (--max-ranks 0 with --resume: only the report)
        data = sweep(sim, ranks=ranks, budget_s=a.budget_s, jobs=a.jobs, done=done)
        data["links"] = vars(sim.links)
        data["wall_s"] = time.monotonic() - t0
        data["command"] = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(data, indent=1))
        print(report(data, Path(a.out).parent))


if __name__ == "__main__":
    main()
