"""The table on stdout (nccl-tests' columns, plus algo and transport, plus a time ratio
per comparison peer), the summary lines, the JSON rows, and progress on stderr."""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass

from .options import human_bytes

JSON_KEYS = ("impl", "collective", "bytes", "count", "dtype", "op", "algo", "transport",
             "time_us", "algbw", "busbw", "wrong")


@dataclass
class Row:
    impl: str
    collective: str
    bytes: int
    count: int
    dtype: str
    op: str
    algo: str
    transport: str
    time_us: float
    min_us: float
    max_us: float
    algbw: float   # GB/s
    busbw: float   # GB/s
    wrong: int | None  # None: not checked

    def json(self) -> dict:
        return {k: getattr(self, k) for k in JSON_KEYS}


def make_row(impl, collective, nbytes, count, dtype, op, algo, transport, times, factor, wrong) -> Row:
    t = times.median
    algbw = nbytes / t / 1e9 if t > 0 else 0.0
    return Row(impl, collective, nbytes, count, dtype, op, algo, transport, t * 1e6, times.min * 1e6,
               times.max * 1e6, algbw, algbw * factor, wrong)


class Table:
    """One collective's table, printed row by row as sizes finish (rank 0 only)."""

    def __init__(self, peers: list[str], out=sys.stdout):
        self.peers = peers
        self.out = out

    def _impl(self, text: str) -> str:
        return f" {text:>8}" if self.peers else ""

    def header(self) -> None:
        ratios = "".join(f" {'x ' + p:>7}" for p in self.peers)
        print(f"# {self._impl('impl')}{'size':>10} {'count':>12} {'type':>9} {'redop':>7} {'algo':>18}"
              f" {'transport':>9} {'time(us)':>10} {'min(us)':>9} {'max(us)':>9} {'algbw':>7} {'busbw':>7}"
              f" {'#wrong':>6}{ratios}", file=self.out)
        print(f"# {self._impl('')}{'':>10} {'':>12} {'':>9} {'':>7} {'':>18} {'':>9} {'':>10} {'':>9} {'':>9}"
              f" {'(GB/s)':>7} {'(GB/s)':>7}", file=self.out)

    def rows(self, rows: list[Row]) -> None:
        """Every implementation's row at one size; the first is rdmacoll's, which carries
        each peer's time divided by its own (above 1: rdmacoll is faster)."""
        base = rows[0]
        times = {r.impl: r.time_us for r in rows}
        for r in rows:
            cells = ""
            if r is base:
                for p in self.peers:
                    t = times.get(p)
                    cells += f" {t / base.time_us:7.2f}" if t and base.time_us > 0 else f" {'-':>7}"
            wrong = "N/A" if r.wrong is None else str(r.wrong)
            print(f"  {self._impl(r.impl)}{r.bytes:>10} {r.count:>12} {r.dtype:>9} {r.op:>7} {r.algo:>18}"
                  f" {r.transport:>9} {r.time_us:10.2f} {r.min_us:9.2f} {r.max_us:9.2f} {r.algbw:7.2f}"
                  f" {r.busbw:7.2f} {wrong:>6}{cells}", file=self.out)
        self.out.flush()

    def summary(self, rows: list[Row], impls: list[str]) -> None:
        mine = [r for r in rows if r.impl == impls[0]]
        if not mine:
            return
        wrong = sum(r.wrong or 0 for r in rows)
        print(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}", file=self.out)
        for impl in impls:
            bus = [r.busbw for r in rows if r.impl == impl]
            if bus:
                label = "" if impl == impls[0] else f" ({impl})"
                print(f"# Avg bus bandwidth    : {statistics.mean(bus):.3f} GB/s{label}", file=self.out)
        for peer in impls[1:]:
            theirs = {r.bytes: r.time_us for r in rows if r.impl == peer}
            ratios = [theirs[r.bytes] / r.time_us for r in mine if r.bytes in theirs and r.time_us > 0]
            if ratios:
                geo = math.exp(statistics.mean(math.log(x) for x in ratios))
                print(f"# {peer} time / {impls[0]} time: {geo:.2f} (geometric mean over {len(ratios)} sizes;"
                      f" range {min(ratios):.2f}-{max(ratios):.2f})", file=self.out)
        self.out.flush()


def write_json(path: str, rows: list[Row]) -> None:
    with open(path, "w") as f:
        json.dump([r.json() for r in rows], f, indent=1)
        f.write("\n")


class Progress:
    """Current size and an estimate of the time left, on stderr. Work is counted as bytes
    moved plus a fixed cost per size (small sizes are latency bound)."""

    FIXED = 256 << 10

    def __init__(self, steps: list[tuple[str, int]], enabled: bool, err=sys.stderr):
        self.steps = steps  # (collective, bytes) in sweep order
        self.enabled = enabled
        self.err = err
        self.start = time.monotonic()
        self.done = 0.0
        self.total = sum(self._weight(n) for _, n in steps) or 1.0
        self.tty = enabled and getattr(err, "isatty", lambda: False)()
        self.index = 0

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
        left = f"~{elapsed * (self.total - self.done) / self.done:.0f} s left" if self.done else "estimating"
        text = f"rdmacoll-bench: {coll} {human_bytes(nbytes)} ({self.index + 1}/{len(self.steps)}), {left}"
        if self.tty:
            self.err.write("\r\033[K" + text)
        else:
            self.err.write(text + "\n")
        self.err.flush()
        self.index += 1

    def finish(self) -> None:
        if self.enabled:
            elapsed = time.monotonic() - self.start
            text = f"rdmacoll-bench: done in {elapsed:.1f} s"
            self.err.write(("\r\033[K" + text + "\n") if self.tty else text + "\n")
            self.err.flush()
