"""Timing as nccl-tests does it, made robust for shared machines: warm-up calls, then
iterations that each start at a barrier (rdmacoll's, for every implementation alike) and
count the slowest rank's time; the table reports the median, minimum and maximum over
iterations. Implementations compared at one size take turns in rounds."""
from __future__ import annotations

import statistics
import time
from typing import NamedTuple

import numpy as np

import rdmacoll as rc


def slowest(seconds):
    """The largest of every rank's value(s): a float, or an array element-wise."""
    v = np.atleast_1d(np.asarray(seconds, np.float64))
    out = rc.allreduce(v, op=rc.Max)
    return out if np.ndim(seconds) else float(out[0])


def total(value: int) -> int:
    """The sum over ranks of an integer."""
    return int(rc.allreduce(np.array([value], np.int64), op=rc.Sum)[0])


class Times(NamedTuple):
    median: float
    min: float
    max: float
    algo: str


ROUNDS = 4


def measure(cases, iters: int, warmup: int) -> list[Times]:
    """Seconds per call of every case's prepared.run(), the slowest rank's per iteration.

    cases: [(prepared, algo)], one per implementation. They take turns in rounds: each
    round runs one untimed call, then a share of the timed iterations, of every case in
    turn. Rounds spread bursts of load from other processes over all implementations;
    the untimed call lets ranks that slept in the previous implementation's waits get
    back on their cores. algo() is read right after the case's last timed call (before
    anything else runs an allreduce)."""
    for prepared, _ in cases:
        for _ in range(warmup):
            prepared.reset()
            prepared.run()
    times = np.empty((len(cases), iters))
    ran = ["-"] * len(cases)
    barrier, clock = rc.barrier, time.perf_counter
    rounds = min(ROUNDS, iters) if len(cases) > 1 else 1
    bounds = [iters * k // rounds for k in range(rounds + 1)]
    for k in range(rounds):
        for c, (prepared, algo) in enumerate(cases):
            if k > 0:
                prepared.reset()
                prepared.run()
            for i in range(bounds[k], bounds[k + 1]):
                prepared.reset()  # restores what an in-place call overwrote; not timed
                barrier()
                t0 = clock()
                prepared.run()
                times[c, i] = clock() - t0
            if k == rounds - 1:
                ran[c] = algo()
    times = slowest(times)
    return [Times(statistics.median(t), float(t.min()), float(t.max()), a) for t, a in zip(times, ran)]
