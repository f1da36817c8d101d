"""The sweep: for every collective and size, every implementation in turn (rdmacoll, then
the --compare peers) in the same processes on the same inputs, timed, checked, printed."""

from __future__ import annotations

import os
import socket
import sys

import numpy as np

import rdmacoll as rc

from . import collectives as C
from . import peers as peer_libs
from .impl import Rdmacoll
from .options import AVERAGE, algo_rules, human_bytes, launcher_rank, pairs_skipped
from .plot import plot
from .report import Progress, Table, instability_warning, make_row, write_json
from .timing import measure, total


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _load() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def too_big(
    maxbytes: int, peers: int, check: bool, local_ranks: int, available: int | None, placements: int = 1
) -> str | None:
    """Why the largest size cannot fit in this host's memory, or None."""
    # per rank: send and receive buffers of every implementation and placement (all
    # prepared at once), the input pattern and the reference (at most maxbytes each)
    need = maxbytes * (2 * (1 + peers) * placements + 2 + 2 * int(check)) * local_ranks
    if available is not None and need > 0.9 * available:
        return (
            f"-e {human_bytes(maxbytes)} does not fit in memory: about {need / 2**30:.1f} GiB for "
            f"{local_ranks} ranks on this host, {available / 2**30:.1f} GiB available (lower --maxbytes)"
        )
    return None


def _peers(names: list[str], say) -> tuple[list, list[str]]:
    """The comparison peers every rank can run, and a line for each one left out."""
    if not names:
        return [], []
    made, notes = [], []
    for name in names:
        why = next((w for w in rc.allgather_object(peer_libs.missing(name)) if w), None)
        peer = None
        if why is None:
            try:
                peer = peer_libs.create(name)
            except Exception as e:  # noqa: BLE001 - reported, then the peer is left out everywhere
                why = f"could not start: {type(e).__name__}: {e}"
            why = next((w for w in rc.allgather_object(why) if w), None)
        if why is None:
            made.append(peer)
        else:
            if peer is not None:
                peer.close()
            notes.append(f"# {name}: skipped: {why}")
            say(f"rdmacoll-bench: --compare {name} skipped: {why}")
    return made, notes


def _job(args, lead: bool) -> dict:
    """What every JSON row carries about the run, and the ranks' lines of the preamble."""
    where = rc.allgather_object((os.getpid(), socket.gethostname()))
    version = rc.__version__
    how = "back to back" if args.back_to_back else "per call"
    job = dict(ranks=rc.size(), hosts=len({h for _, h in where}), version=version, timing=f"{how}, -a {args.average}")
    if lead:
        step = f"{args.stepfactor}(factor)" if args.stepfactor > 1 else f"{args.stepbytes}(bytes)"
        print(
            f"# rdmacoll-bench {version}: {job['ranks']} ranks on {job['hosts']} host"
            f"{'s' if job['hosts'] > 1 else ''}, transport {rc._session.current().comm.transport}"
        )
        print(
            f"# minBytes {args.minbytes} maxBytes {args.maxbytes} step: {step} warmup iters: {args.warmup} "
            f"iters: {args.iters} validation: {args.check}"
        )
        print(f"# timing: {timing_note(args)}")
        print("#\n# Using ranks")
        for r, (pid, host) in enumerate(where):
            print(f"#  Rank {r:2d} Pid {pid:6d} on {host:>10}")
        print("#")
    return job


def timing_note(args) -> str:
    """One line on how times were taken, and how that differs from nccl-tests."""
    who = AVERAGE[args.average]
    if args.back_to_back:
        return (
            f"{args.iters} calls back to back{', a barrier after each (-z 1)' if args.blocking else ''}, "
            f"each rank's mean per call, then {who} (-a {args.average}): as nccl-tests"
        )
    return (
        f"a barrier before every call, {who} time per call (-a {args.average}), the median over "
        f"{args.iters} calls (nccl-tests: calls back to back, the mean over ranks: --back-to-back)"
    )


def placements(args, coll: str) -> list[str]:
    """Out of place and in place (nccl-tests' two column groups); --inplace 0/1 keeps one.
    allgather, reducescatter and alltoall return new arrays: out of place only."""
    if coll not in C.INPLACE:
        return ["out-of-place"]
    return {None: ["out-of-place", "in-place"], 0: ["out-of-place"], 1: ["in-place"]}[args.inplace]


def _one_size(args, coll, impls, where, dtype_name, op, step, job) -> list:
    """Every implementation's rows at one size, both placements (rdmacoll's first)."""
    nbytes, count_all, count = step
    rank, p = rc.rank(), rc.size()
    dtype = numpy_dtype(dtype_name)
    send = C.send_buffer(coll, rank, count_all, count, dtype)
    want = C.expected(coll, rank, p, count_all, count, dtype, op, args.root) if args.check else None
    cases = [(impl, pl) for impl in impls for pl in where]
    extra = {"root": args.root} if args.root else {}
    prepared = [impl.prepare(coll, send, op, pl == "in-place", **extra) for impl, pl in cases]
    timed = measure(
        [(pr, lambda impl=impl: impl.algo) for pr, (impl, _) in zip(prepared, cases)],
        args.iters,
        args.warmup,
        args.average,
        args.back_to_back,
        bool(args.blocking),
    )
    shown_op = op if coll in C.REDUCING else "none"
    root = args.root if coll == "broadcast" else -1
    rows = []
    for (impl, pl), pr, times in zip(cases, prepared, timed):
        wrong = total(C.count_wrong(pr.result(), want)) if args.check else None
        rows.append(
            make_row(
                impl.name,
                coll,
                pl,
                nbytes,
                count,
                dtype.name,
                shown_op,
                root,
                times.algo,
                impl.transport,
                times,
                C.bus_factor(coll, p),
                wrong,
                job,
            )
        )
    return rows


def _runnable(args, coll, impls, dtype_name, op, notes) -> list:
    runs = []
    for impl in impls:
        why = impl.supports(coll, numpy_dtype(dtype_name), op)
        if not why and impl is not impls[0] and coll == "broadcast" and args.root:
            why = f"times root 0 only, not -r {args.root}"
        if why:
            notes.append(f"# {impl.name}: {coll} {dtype_name} skipped: {why}")
        else:
            runs.append(impl)
    return runs


def _sweep(args, plan, impls, notes, progress, lead, job) -> list:
    """Every collective's table; returns all rows."""
    rows = []
    for coll, combos in plan:
        where = placements(args, coll)
        coll_notes = list(notes)
        runs = {(d, o): _runnable(args, coll, impls, d, o, coll_notes) for d, o, _ in combos}
        table = Table([i.name for i in impls[1:]], where)
        if lead:
            print(
                f"# rdmacoll-bench {coll}: {rc.size()} ranks, memory {args.memory}, {args.iters} iters, "
                f"{args.warmup} warm-up"
            )
            for line in dict.fromkeys(coll_notes):
                print(line)
            table.header()
        mine = []
        for dtype_name, op, steps in combos:
            for step in steps:
                progress.step()
                at_size = _one_size(args, coll, runs[(dtype_name, op)], where, dtype_name, op, step, job)
                mine += at_size
                if lead:
                    table.rows(at_size)
        if lead:
            table.summary(mine, [i.name for i in impls])
            print(flush=True)
        rows += mine
    return rows


def run(args) -> int:
    config = {}
    if args.algo:
        config["algo"] = algo_rules(args.algo, args.collectives)
    if args.transport:
        config["transport"] = args.transport.strip()
    try:
        rc.init(config=config)
    except rc.RdmacollError as e:
        if launcher_rank() == 0:
            print(f"rdmacoll-bench: {e}", file=sys.stderr)
        return 2
    lead = rc.rank() == 0

    def say(text: str) -> None:
        if lead:
            print(text, file=sys.stderr, flush=True)

    why = (
        too_big(
            args.maxbytes,
            len(args.compare),
            args.check,
            rc.local_size(),
            _available_memory(),
            max(len(placements(args, c)) for c in args.collectives),
        )
        if lead
        else None
    )
    if args.root >= rc.size() and "broadcast" in args.collectives:
        why = f"-r {args.root}: the root must be a rank, 0 to {rc.size() - 1}"
    why = rc.broadcast_object(why)  # rank 0 decides for all: they must sweep alike
    if why:
        say(f"rdmacoll-bench: error: {why}")
        rc.shutdown()
        return 2
    job = _job(args, lead)
    peers, notes = _peers(args.compare, say)
    notes += [f"# -o avg on integers: not run ({', '.join(pairs_skipped(args))})"] if pairs_skipped(args) else []
    impls = [Rdmacoll(args.memory)] + peers
    plan = []
    for coll in args.collectives:
        combos = args.pairs if coll in C.REDUCING else [(d, "Sum") for d in args.dtype]
        plan.append(
            (
                coll,
                [
                    (
                        d,
                        o,
                        C.sizes(
                            args.minbytes,
                            args.maxbytes,
                            args.stepfactor,
                            coll,
                            numpy_dtype(d).itemsize,
                            rc.size(),
                            args.stepbytes,
                        ),
                    )
                    for d, o in combos
                ],
            )
        )
    load = _load()  # before the sweep (shown in the warning)
    progress = Progress(
        [(coll, n) for coll, combos in plan for _, _, steps in combos for n, _, _ in steps],
        lead and not args.quiet,
        every_s=args.progress_every,
    )
    try:
        rows = _sweep(args, plan, impls, notes, progress, lead, job)
    finally:
        progress.finish()
        for impl in reversed(impls):
            impl.close()
    warning = instability_warning(rows, len(os.sched_getaffinity(0)), load)
    if lead and warning:
        say(f"rdmacoll-bench: {warning}")
    if lead and args.json:
        write_json(args.json, rows)
        say(f"rdmacoll-bench: wrote {len(rows)} rows to {args.json}")
    if lead and args.plot:
        plot(args.plot, [r.json() for r in rows])
        say(f"rdmacoll-bench: wrote {args.plot}")
    rc.shutdown()
    failed = sum(r.wrong or 0 for r in rows if r.impl == impls[0].name)
    return 1 if failed else 0
