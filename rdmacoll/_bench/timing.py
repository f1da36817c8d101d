"""Timing as nccl-tests does it, made robust for shared machines: warm-up calls, then
iterations that each start at a barrier (rdmacoll's, for every implementation alike) and
count the slowest rank's time; the table reports the median, minimum and maximum over
iterations."""
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


def measure(prepared, iters: int, warmup: int, algo=lambda: "-") -> Times:
    """Seconds per call of prepared.run(), the slowest rank's per iteration, and algo()
    read right after the last call (before the reduction of the times runs one of its own)."""
    run, reset = prepared.run, prepared.reset
    for _ in range(warmup):
        reset()
        run()
    times = np.empty(iters)
    barrier, clock = rc.barrier, time.perf_counter
    for i in range(iters):
        reset()  # restores what an in-place call overwrote; not timed
        barrier()
        t0 = clock()
        run()
        times[i] = clock() - t0
    ran = algo()
    times = slowest(times)
    return Times(statistics.median(times), float(times.min()), float(times.max()), ran)
