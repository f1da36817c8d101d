"""rdmacoll-bench --tune: time every registered allreduce algorithm over one transport on
one host, fit the cost model's alpha-beta-gamma constants to the times (fit.py), and rank 0
writes them into the tuning file as this host's entry for that transport and rank count."""

from __future__ import annotations

import sys
import time

import numpy as np

import rdmacoll as rc
from rdmacoll import _settings

from .fit import fit_cost_model
from .options import human, parse_size
from .report import Progress
from .timing import slowest


def _time_allreduce(x: np.ndarray, target_s: float, rounds: int) -> tuple[float, str]:
    """Seconds per call and the algorithm that ran: the fastest of `rounds` batches, each
    timed as its slowest rank (the minimum: on a shared machine noise only ever adds time)."""
    for _ in range(3):
        rc.allreduce(x, op=rc.Sum, out=x)
    rc.barrier()
    t0 = time.perf_counter()
    for _ in range(3):
        rc.allreduce(x, op=rc.Sum, out=x)
    probe = slowest((time.perf_counter() - t0) / 3)
    iters = int(max(3, min(20000, target_s / max(probe, 1e-7))))
    samples = []
    for _ in range(rounds):
        rc.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            rc.allreduce(x, op=rc.Sum, out=x)
        elapsed = time.perf_counter() - t0
        algo = rc._session.current().comm.last_algorithm
        samples.append(slowest(elapsed / iters))
    return min(samples), algo


def _coefficients(nbytes: int, p: int) -> dict[str, np.ndarray]:
    """Each algorithm's cost as (steps, bytes moved, bytes reduced): its cost function
    evaluated at the unit models. Costs are linear in the constants but for the pairwise
    exchanges', which overlap the link with the reduction where a NIC moves the bytes (the
    longer of the two); at a unit model that is the sum. Over shm and tcp, what --tune
    times, the exchanges send one piece at a time (prim::writesAhead) and the two do add;
    over ibverbs the fit charges them a little more than they take."""
    units = [
        dict(alpha=1.0, beta=0.0, gamma=0.0),
        dict(alpha=0.0, beta=1.0, gamma=0.0),
        dict(alpha=0.0, beta=0.0, gamma=1.0),
    ]
    per_unit = [rc._core.costs(u, "allreduce", nbytes, p) for u in units]
    return {name: np.array([c[name] for c in per_unit]) for name in per_unit[0]}


def measure_gamma(count: int = 1 << 20) -> float:
    """Seconds per byte of reduction input of the local kernel (float32 Sum, 2 inputs)."""
    a = np.ones(count, np.float32)
    b = np.ones(count, np.float32)
    out = np.empty(count, np.float32)
    best = float("inf")
    for _ in range(15):
        t0 = time.perf_counter()
        rc._core.reduce_local(rc._core.DTYPES["float32"], rc.Sum, out, [a, b], 1.0)
        best = min(best, time.perf_counter() - t0)
    return best / (2 * a.nbytes)


def tune(args) -> int:
    # (no tuning file: the constants being measured must not steer anything)
    config = {"tuning_file": "none"}
    if args.transport:
        config["transport"] = args.transport.strip()
    rc.init(config=config)
    rank, p = rc.rank(), rc.size()
    per_cpu = rc._session.current().comm.ranks_per_cpu
    transport, one_host = rc._session.current().comm.transport, rc.local_size() == p
    rc.shutdown()
    if p < 2 or not one_host:
        if rank == 0:
            print(
                "rdmacoll-bench --tune measures one transport on one host with at least 2 ranks "
                f"(this job: {p} rank{'s' if p > 1 else ''}, transport {transport}): mpiexec -n 4 rdmacoll-bench "
                "--tune, RDMACOLL_TRANSPORT=tcp for the network's constants",
                file=sys.stderr,
            )
        return 2
    # --tune-file, else the tuning_file setting (RDMACOLL_TUNING_FILE), else the default place
    chosen = _settings.resolve(scope="job")[0]["tuning_file"]
    path = args.tune_file or (chosen if chosen.lower() not in ("", "none") else _settings.default_tuning_path())
    sizes = [parse_size(s) for s in args.tune_sizes.split(",") if s.strip()]
    names = [name for name, _ in rc.algorithms()]
    progress = Progress(
        [(f"--tune {name}", n) for name in names for n in sizes],
        rank == 0 and not args.quiet,
        every_s=args.progress_every,
    )
    gamma_kernel = measure_gamma()
    times: dict[tuple[str, int], float] = {}
    for name in names:
        rc.init(config=dict(config, algo=name))
        for nbytes in sizes:
            progress.step()
            # direct's cost is that of memory peers map (its model, algorithms/table.cc): on
            # rc.empty arrays; NumPy arrays it stages, reaches by cross-memory calls or (at
            # 12 ranks and more) continues as the slot ring
            x = np.ones(max(1, nbytes // 4), np.float32)
            if name == "direct":
                x = rc.empty(x.size, np.float32)
                x[:] = 1
            t, ran = _time_allreduce(x, target_s=0.05, rounds=3)
            # Skipped: not usable at this size (eager), or continued as another algorithm
            # after its headers: the times are not its own.
            if ran == name:
                times[(name, x.nbytes)] = t
        rc.shutdown()
    progress.finish()
    rows = []
    for (name, nbytes), t in times.items():
        rows.append((_coefficients(nbytes, p)[name], t))
    x, left_out = fit_cost_model(rows)
    alpha, beta, gamma = (float(v) for v in x)
    model = dict(alpha=alpha, beta=beta, gamma=gamma)  # as measured, ranks_per_cpu ranks per CPU
    # The file holds constants for one rank per CPU; init() scales them back (cost_model.h).
    scale = rc._core.cost_model_for(dict(alpha=1.0, beta=1.0, gamma=1.0), per_cpu)
    unscaled = {k: v / scale[k] for k, v in model.items()}
    keys = list(times)
    if rank == 0:
        print(
            f"# rdmacoll-bench --tune: {p} ranks on host {_settings.this_host()['host']}, transport {transport}, "
            "float32 Sum on NumPy arrays"
        )
        # what the core falls back to for this backend: shared memory's constants, or the network's
        default = rc._core.DEFAULT_COST_MODELS["local" if transport == "shm" else "network"]
        shipped_here = rc._core.cost_model_for(default, per_cpu)
        print(
            f"# {'size':>8} "
            + " ".join(f"{n[:12]:>12}" for n in names)
            + f" {'fastest':>18} {'tuned picks':>18} {'shipped picks':>18}"
        )
        ok = ok_default = 0
        used_sizes = sorted({n for _, n in times})
        for nbytes in used_sizes:
            measured = {n: times.get((n, nbytes)) for n in names}
            usable = [n for n in names if measured[n] is not None]
            pick = rc._core.select(model, "allreduce", nbytes, p, usable)
            shipped = rc._core.select(shipped_here, "allreduce", nbytes, p, usable)
            fastest = min(usable, key=lambda n: measured[n])
            ok += measured[pick] <= 1.15 * measured[fastest]
            ok_default += measured[shipped] <= 1.15 * measured[fastest]
            cells = " ".join(f"{measured[n] * 1e6:12.2f}" if measured[n] is not None else f"{'-':>12}" for n in names)
            print(
                f"  {human(nbytes):>8} {cells} {fastest:>18} {pick:>18}{'' if measured[pick] <= 1.15 * measured[fastest] else '*'}"
                f" {shipped:>18}{'' if measured[shipped] <= 1.15 * measured[fastest] else '*'}"
            )
        print(
            f"# times in us (fastest of 3 batches); a pick within 15% of the fastest: tuned {ok}, shipped "
            f"{ok_default} of {len(used_sizes)} sizes (* marks the others)"
        )
        if left_out:
            print(
                "# left out of the fit (model off by more than 3x): "
                + ", ".join(f"{keys[i][0]}@{human(keys[i][1])}" for i in left_out)
            )
        print(
            f"# measured: alpha = {alpha:.3e} s/step, beta = {beta:.3e} s/B ({1 / beta / 1e9 if beta else float('inf'):.2f} GB/s), "
            f"gamma = {gamma:.3e} s/B ({1 / gamma / 1e9 if gamma else float('inf'):.2f} GB/s)"
        )
        if per_cpu > 1:
            print(
                f"# {per_cpu:g} ranks per CPU: written unscaled (alpha / {scale['alpha']:g}, beta and gamma / "
                f"{scale['beta']:g}): alpha = {unscaled['alpha']:.3e}, beta = {unscaled['beta']:.3e}, "
                f"gamma = {unscaled['gamma']:.3e}"
            )
        print(
            f"# shipped:  alpha = {default['alpha']:.3e}, beta = {default['beta']:.3e}, gamma = {default['gamma']:.3e}"
            + (
                f" (scaled here: alpha = {shipped_here['alpha']:.3e}, beta = {shipped_here['beta']:.3e}, "
                f"gamma = {shipped_here['gamma']:.3e})"
                if per_cpu > 1
                else ""
            )
        )
        print(f"# local reduction kernel alone: gamma = {gamma_kernel:.3e} s/B ({1 / gamma_kernel / 1e9:.2f} GB/s)")
        entry = _settings.tuning_entry(
            transport,
            p,
            unscaled,
            measured={
                "ranks": p,
                "ranks_per_cpu": per_cpu,
                "fitted": model,
                "sizes": used_sizes,
                "gamma_kernel": gamma_kernel,
                "times": {f"{n}@{b}": t for (n, b), t in sorted(times.items())},
            },
        )
        note = _settings.add_tuning_entry(path, entry)
        print(
            f"# wrote {path}: the entry for {transport} at {p} ranks per host on {entry['host']} "
            f"({entry['cpu']}, {entry['cores']} cores, rdmacoll {entry['rdmacoll']}); {note}"
        )
        print(
            "# init() on rank 0 uses it when host, CPU, cores, rdmacoll version, transport and ranks per host "
            "all match (RDMACOLL_TUNING_FILE chooses another file, RDMACOLL_TUNING_FILE=none ignores it)"
        )
    return 0
