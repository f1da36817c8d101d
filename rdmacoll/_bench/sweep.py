"""The sweep: for every collective and size, every implementation in turn (rdmacoll, then
the --compare peers) in the same processes on the same inputs, timed, checked, printed."""
from __future__ import annotations

import sys

import numpy as np

import rdmacoll as rc

from . import collectives as C
from .impl import Rdmacoll
from .options import algo_rules, human_bytes, launcher_rank
from .report import Progress, Table, make_row, write_json
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


def too_big(maxbytes: int, peers: int, check: bool, local_ranks: int, available: int | None) -> str | None:
    """Why the largest size cannot fit in this host's memory, or None."""
    # per rank: send and receive buffers of every implementation (all prepared at once),
    # the input pattern and the reference (allgather's output, at most maxbytes)
    need = maxbytes * (4 + 2 * peers + 2 * int(check)) * local_ranks
    if available is not None and need > 0.9 * available:
        return (f"-e {human_bytes(maxbytes)} does not fit in memory: about {need / 2**30:.1f} GiB for "
                f"{local_ranks} ranks on this host, {available / 2**30:.1f} GiB available (lower --maxbytes)")
    return None


def _peers(names: list[str], say) -> tuple[list, list[str]]:
    """The comparison peers every rank can run, and a line for each one left out."""
    if not names:
        return [], []
    from rdmacoll.frameworks import peers

    made, notes = [], []
    for name in names:
        why = next((w for w in rc.allgather_object(peers.missing(name)) if w), None)
        peer = None
        if why is None:
            try:
                peer = peers.create(name)
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


def _title(args, coll: str, p: int) -> str:
    reducing = coll in C.REDUCING
    inplace = "in place" if args.inplace else "out of place"
    where = f", {inplace}" if coll in ("allreduce", "broadcast") else ""
    return (f"# rdmacoll-bench {coll}: {p} ranks, dtype {args.dtype}"
            f"{', op ' + args.op if reducing else ''}{', root 0' if coll == 'broadcast' else ''}, "
            f"memory {args.memory}{where}, {args.iters} iters, {args.warmup} warm-up")


def _one_size(args, coll, impls, dtype, nbytes, count_all, count, rank, p) -> list:
    """Every implementation's row at one size (rdmacoll's first)."""
    send = C.send_buffer(coll, rank, count_all, count, dtype)
    want = C.expected(coll, rank, p, count_all, count, dtype, args.op) if args.check else None
    prepared = [impl.prepare(coll, send, args.op, bool(args.inplace)) for impl in impls]
    timed = measure([(pr, lambda impl=impl: impl.algo) for pr, impl in zip(prepared, impls)],
                    args.iters, args.warmup)
    op = args.op if coll in C.REDUCING else "none"
    rows = []
    for impl, pr, times in zip(impls, prepared, timed):
        wrong = total(C.count_wrong(pr.result(), want)) if args.check else None
        rows.append(make_row(impl.name, coll, nbytes, count, args.dtype, op, times.algo, impl.transport,
                             times, C.bus_factor(coll, p), wrong))
    return rows


def _sweep(args, plan, impls, notes, progress, lead) -> list:
    """Every collective's table; returns all rows."""
    rank, p = rc.rank(), rc.size()
    dtype = numpy_dtype(args.dtype)
    rows = []
    for coll, steps in plan:
        runs, coll_notes = [], list(notes)
        for impl in impls:
            why = impl.supports(coll, dtype, args.op)
            if why:
                coll_notes.append(f"# {impl.name}: {coll} skipped: {why}")
            else:
                runs.append(impl)
        table = Table([i.name for i in impls[1:]])
        if lead:
            print(_title(args, coll, p))
            for line in coll_notes:
                print(line)
            table.header()
        mine = []
        for nbytes, count_all, count in steps:
            progress.step()
            at_size = _one_size(args, coll, runs, dtype, nbytes, count_all, count, rank, p)
            mine += at_size
            if lead:
                table.rows(at_size)
        if lead:
            table.summary(mine, [i.name for i in runs])
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

    why = too_big(args.maxbytes, len(args.compare), args.check, rc.local_size(), _available_memory()) if lead else None
    why = rc.broadcast_object(why)  # rank 0 decides for all: they must sweep alike
    if why:
        say(f"rdmacoll-bench: error: {why}")
        rc.shutdown()
        return 2
    peers, notes = _peers(args.compare, say)
    impls = [Rdmacoll(args.memory)] + peers
    itemsize = numpy_dtype(args.dtype).itemsize
    plan = [(coll, C.sizes(args.minbytes, args.maxbytes, args.stepfactor, coll, itemsize, rc.size()))
            for coll in args.collectives]
    progress = Progress([(coll, n) for coll, steps in plan for n, _, _ in steps], lead and not args.quiet)
    try:
        rows = _sweep(args, plan, impls, notes, progress, lead)
    finally:
        progress.finish()
        for impl in reversed(impls):
            impl.close()
    if lead and args.json:
        write_json(args.json, rows)
        say(f"rdmacoll-bench: wrote {len(rows)} rows to {args.json}")
    if lead and args.plot:
        from .plot import plot

        reducing = any(c in C.REDUCING for c in args.collectives)
        plot(args.plot, rows, f"rdmacoll-bench {', '.join(args.collectives)}: {rc.size()} ranks, {args.dtype}"
                              f"{', ' + args.op if reducing else ''}")
        say(f"rdmacoll-bench: wrote {args.plot}")
    rc.shutdown()
    failed = sum(r.wrong or 0 for r in rows if r.impl == impls[0].name)
    return 1 if failed else 0
