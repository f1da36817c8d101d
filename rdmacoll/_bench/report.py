"""The table on stdout (nccl-tests' columns, out of place and in place side by side, then
algo and transport, plus time ratios per comparison peer), nccl-tests' closing lines, the
JSON rows, and progress on stderr."""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass

from .options import NCCL_OPS, NCCL_TYPES, human_bytes

JSON_KEYS = (
    "impl",
    "collective",
    "placement",
    "bytes",
    "count",
    "dtype",
    "op",
    "root",
    "algo",
    "transport",
    "time_us",
    "min_us",
    "q1_us",
    "median_us",
    "q3_us",
    "max_us",
    "algbw",
    "busbw",
    "wrong",
    "ranks",
    "hosts",
    "version",
    "timing",
)
PLACEMENTS = ("out-of-place", "in-place")
SHORT = {"out-of-place": "oop", "in-place": "ip"}


@dataclass
class Row:
    impl: str
    collective: str
    placement: str  # out-of-place, in-place
    bytes: int
    count: int
    dtype: str  # NumPy's name (float32); the table prints nccl-tests' (float)
    op: str  # rdmacoll's name (Sum), "none" where the collective does not reduce
    root: int  # broadcast's root, -1 elsewhere (as nccl-tests prints it)
    algo: str
    transport: str
    time_us: float  # the reported time: the median per call, or back to back the -a combination
    min_us: float  # spread over calls (per call) or over ranks (back to back)
    q1_us: float  # quartiles
    median_us: float
    q3_us: float
    max_us: float
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None  # None: not checked
    ranks: int
    hosts: int
    version: str
    timing: str  # "per call, -a 3" or "back to back, -a 1"

    def json(self) -> dict:
        return {k: getattr(self, k) for k in JSON_KEYS}


def make_row(
    impl, collective, placement, nbytes, count, dtype, op, root, algo, transport, times, factor, wrong, job: dict
) -> Row:
    """job: ranks, hosts, version, timing (the same for every row of a run)."""
    t = times.time
    algbw = nbytes / t / 1e9 if t > 0 else 0.0
    return Row(
        impl,
        collective,
        placement,
        nbytes,
        count,
        dtype,
        op,
        root,
        algo,
        transport,
        t * 1e6,
        times.min * 1e6,
        times.q1 * 1e6,
        times.median * 1e6,
        times.q3 * 1e6,
        times.max * 1e6,
        algbw,
        algbw * factor,
        wrong,
        **job,
    )


# Signs that a machine's timings are not worth quoting (instability_warning):
# - spread: per call, the middle half of the calls spreads over more than this share of
#   the median (a 2-rank shm allreduce on a quiet 2-core machine here: (q3 - q1) / median
#   0.02-0.25 from 8 B to 2 MiB, up to 0.63 at 16 MiB, where memory bandwidth drifts);
#   a burst of other work puts some calls a scheduler quantum behind the rest (2.6 seen);
# - inversion: a size slower than INVERSION times a larger size of the same series (and by
#   more than INVERSION_US): a steady load makes ranks sleep and wake through the kernel,
#   and a whole size's calls then cost hundreds of microseconds (8 B at 180 us beside
#   512 B at 2 us, seen here with the test suite running on the same 2 cores).
# (The load average is no sign by itself: it still counts the minute before, a previous
# run's ranks included.)
UNSTABLE_SPREAD = 1.0
INVERSION = 2.0
INVERSION_US = 20.0


def unstable(rows: list[Row]) -> list[tuple[Row, str]]:
    """The rows whose times are not worth quoting, each with why. Spread is judged per
    call only (back to back, it is over ranks: imbalance, not noise)."""
    bad = {}
    for r in rows:
        if r.timing.startswith("per call") and r.median_us > 0 and (r.q3_us - r.q1_us) / r.median_us > UNSTABLE_SPREAD:
            bad[id(r)] = (
                r,
                f"quartiles {r.q1_us:.1f}-{r.q3_us:.1f} us around a median of {r.median_us:.1f} us",
            )
    series = {}
    for r in rows:
        series.setdefault((r.impl, r.collective, r.placement, r.dtype, r.op), []).append(r)
    for same in series.values():
        same.sort(key=lambda r: r.bytes)
        fastest_above = float("inf")
        for r in reversed(same):
            if r.time_us > INVERSION * fastest_above and r.time_us - fastest_above > INVERSION_US and id(r) not in bad:
                bad[id(r)] = (r, f"{r.time_us:.1f} us, slower than a larger size at {fastest_above:.1f} us")
            fastest_above = min(fastest_above, r.time_us)
    return list(bad.values())


def instability_warning(rows: list[Row], cores: int, load: float | None) -> str | None:
    """One warning naming how many rows are unstable and the first, or None (load: the
    1-minute load average before the sweep, shown; None: unknown)."""
    bad = unstable(rows)
    if not bad:
        return None
    r, why = min(bad, key=lambda b: (b[0].bytes, b[0].impl))
    where = f"; load average {load:.1f} on {cores} cores before the sweep" if load is not None else ""
    return (
        f"warning: timings unstable in {len(bad)} of {len(rows)} rows (e.g. {r.impl} {r.collective} "
        f"{human_bytes(r.bytes)} {r.placement}: {why}{where}). Something else runs on these cores, or "
        f"there are more ranks than cores: quote the median of several runs on a quiet machine"
    )


def nccl_time(us: float) -> str:
    """A time in us as nccl-tests prints it: fewer decimals as it grows."""
    return f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


class Table:
    """One collective's table, printed row by row as sizes finish (rank 0 only): nccl-tests'
    columns (size count type redop root, then time algbw busbw #wrong out of place and in
    place), then rdmacoll's: the algorithm(s) and transport, and with --compare the
    implementation and, on rdmacoll's line, each peer's time divided by rdmacoll's per
    placement (above 1: rdmacoll is faster)."""

    def __init__(self, peers: list[str], placements=PLACEMENTS, out=sys.stdout):
        self.peers = peers
        self.placements = [p for p in PLACEMENTS if p in placements]
        self.out = out

    def _extra_names(self) -> str:
        text = f"  {'algo':<18} {'transport':<9}"
        if self.peers:
            text += f" {'impl':<8}" + "".join(
                f" {p + ':' + SHORT[pl]:>9}" for p in self.peers for pl in self.placements
            )
        return text

    def header(self) -> None:
        ratios = "   peer time / rdmacoll time" if self.peers else ""
        print(
            f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       "
            f"in-place{ratios and ' ' * 38 + ratios}",
            file=self.out,
        )
        print(
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
            + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}" * 2
            + self._extra_names(),
            file=self.out,
        )
        print(
            f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
            + (f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}" * 2).rstrip(),
            file=self.out,
        )

    @staticmethod
    def _cells(r: Row | None) -> str:
        if r is None:
            return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>5}"
        wrong = "N/A" if r.wrong is None else str(r.wrong)
        return f"  {nccl_time(r.time_us)}  {r.algbw:6.2f}  {r.busbw:6.2f}  {wrong:>5}"

    def rows(self, rows: list[Row]) -> None:
        """Every implementation's rows at one size (rdmacoll's first), one line each."""
        impls = list(dict.fromkeys(r.impl for r in rows))
        by = {(r.impl, r.placement): r for r in rows}
        for impl in impls:
            mine = [by.get((impl, pl)) for pl in PLACEMENTS]
            first = next(r for r in mine if r is not None)
            algos = list(dict.fromkeys(r.algo for r in mine if r is not None))
            line = (
                f"{first.bytes:12d}  {first.count:12d}  {NCCL_TYPES.get(first.dtype, first.dtype):>8}  "
                f"{NCCL_OPS.get(first.op, first.op):>6}  {first.root:6d}"
                + "".join(self._cells(r) for r in mine)
                + f"  {'/'.join(algos):<18} {first.transport:<9}"
            )
            if self.peers:
                line += f" {impl:<8}"
                if impl == impls[0]:
                    for p in self.peers:
                        for pl in self.placements:
                            base, theirs = by.get((impl, pl)), by.get((p, pl))
                            ok = base is not None and theirs is not None and base.time_us > 0
                            line += f" {theirs.time_us / base.time_us:9.2f}" if ok else f" {'-':>9}"
            print(line.rstrip(), file=self.out)
        self.out.flush()

    def summary(self, rows: list[Row], impls: list[str]) -> None:
        """nccl-tests' closing lines (over both placements, as nccl-tests averages them),
        then per peer its average busbw and its time relative to rdmacoll's."""
        mine = [r for r in rows if r.impl == impls[0]]
        if not mine:
            return
        wrong = sum(r.wrong or 0 for r in rows)
        print(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}", file=self.out)
        for impl in impls:
            bus = [r.busbw for r in rows if r.impl == impl]
            if bus:
                label = "" if impl == impls[0] else f" ({impl})"
                print(f"# Avg bus bandwidth    : {statistics.mean(bus):g}{label}", file=self.out)
        for peer in impls[1:]:
            theirs = {(r.bytes, r.placement, r.dtype, r.op): r.time_us for r in rows if r.impl == peer}
            ratios = [
                theirs[k] / r.time_us
                for r in mine
                if (k := (r.bytes, r.placement, r.dtype, r.op)) in theirs and r.time_us > 0
            ]
            if ratios:
                geo = math.exp(statistics.mean(math.log(x) for x in ratios))
                print(
                    f"# {peer} time / {impls[0]} time: {geo:.2f} (geometric mean over {len(ratios)} sizes and "
                    f"placements; range {min(ratios):.2f}-{max(ratios):.2f})",
                    file=self.out,
                )
        print("#", file=self.out)
        self.out.flush()


def write_json(path: str, rows: list[Row]) -> None:
    with open(path, "w") as f:
        json.dump([r.json() for r in rows], f, indent=1)
        f.write("\n")


class Progress:
    """Current size and an estimate of the time left, on stderr. Work is counted as bytes
    moved plus a fixed cost per size (small sizes are latency bound). On a terminal one
    line redrawn in place; elsewhere (under mpiexec, whose merged streams would put it
    between the rows, or redirected) a line at most every every_s seconds (--progress-every),
    none in a sweep shorter than that, and the first once the estimate rests on that much (the
    first sizes, warm-up included, once made it ~91 s for a 15 s sweep)."""

    FIXED = 256 << 10
    EVERY_S = 10.0

    def __init__(self, steps: list[tuple[str, int]], enabled: bool, err=sys.stderr, every_s: float = EVERY_S):
        self.steps = steps  # (collective, bytes) in sweep order
        self.enabled = enabled
        self.err = err
        self.start = time.monotonic()
        self.done = 0.0
        self.total = sum(self._weight(n) for _, n in steps) or 1.0
        self.tty = enabled and getattr(err, "isatty", lambda: False)()
        self.index = 0
        self.shown = 0.0  # (not a terminal) when the last line was written
        self.every_s = every_s

    def _weight(self, nbytes: int) -> float:
        return float(nbytes + self.FIXED)

    def step(self) -> None:
        """Announce the next step of the sweep (called before it runs)."""
        if self.index > 0:
            self.done += self._weight(self.steps[self.index - 1][1])
        if not self.enabled or self.index >= len(self.steps):
            self.index += 1
            return
        coll, nbytes = self.steps[self.index]
        elapsed = time.monotonic() - self.start
        if not self.tty:
            if elapsed < self.every_s or (self.shown and elapsed - self.shown < self.every_s):
                self.index += 1
                return
            self.shown = elapsed
        left = f"~{elapsed * (self.total - self.done) / self.done:.0f} s left" if self.done else "estimating"
        text = f"rdmacoll-bench: {coll} {human_bytes(nbytes)} ({self.index + 1}/{len(self.steps)}), {left}"
        if self.tty:
            self.err.write("\r\033[K" + text)
        else:
            self.err.write(text + "\n")
        self.err.flush()
        self.index += 1

    def finish(self) -> None:
        elapsed = time.monotonic() - self.start
        if self.enabled and (self.tty or elapsed >= self.every_s):
            text = f"rdmacoll-bench: done in {elapsed:.1f} s"
            self.err.write(("\r\033[K" + text + "\n") if self.tty else text + "\n")
            self.err.flush()
