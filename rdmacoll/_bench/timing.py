"""Timing. Two ways, both after warm-up calls:

- per call (the default): every timed call starts at a barrier (rdmacoll's, for every
  implementation alike), each rank times its own call, and the ranks' times combine per
  call by -a (default 3: the slowest rank's, what a job waits for); the table shows the
  median over calls, and JSON also the minimum and maximum.
- back to back (--back-to-back, nccl-tests' way): one barrier, then the calls follow each
  other (-z 1: a barrier after each, inside the timed loop, as nccl-tests' blocking mode);
  each rank's time is its elapsed time divided by the calls, and the ranks' times combine
  by -a (default 1: the mean, nccl-tests' default). min/median/max are then over ranks.

Implementations compared at one size take turns in rounds."""

from __future__ import annotations

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


def combine(per_rank: np.ndarray, average: int) -> np.ndarray:
    """Every rank's values (axis 0: ranks) as one, by nccl-tests' -a: 0 rank 0's, 1 the
    mean, 2 the minimum, 3 the maximum."""
    return {0: lambda a: a[0], 1: lambda a: a.mean(axis=0), 2: lambda a: a.min(axis=0), 3: lambda a: a.max(axis=0)}[
        average
    ](per_rank)


class Times(NamedTuple):
    time: float  # the reported time (seconds per call)
    min: float
    q1: float  # quartiles (report.unstable)
    median: float
    q3: float
    max: float
    algo: str


ROUNDS = 4


def _spread(values: np.ndarray, reported: float, algo: str) -> Times:
    q1, median, q3 = (float(q) for q in np.quantile(values, [0.25, 0.5, 0.75]))
    return Times(float(reported), float(values.min()), q1, median, q3, float(values.max()), algo)


def measure(
    cases, iters: int, warmup: int, average: int = 3, back_to_back: bool = False, blocking: bool = False
) -> list[Times]:
    """Seconds per call of every case's prepared.run(), timed per call or back to back
    (module docstring), ranks combined by `average` (-a).

    cases: [(prepared, algo)], one per implementation and placement. They take turns in
    rounds: each round runs one untimed call, then a share of the timed iterations, of
    every case in turn. Rounds spread bursts of load from other processes over all
    implementations; the untimed call lets ranks that slept in the previous
    implementation's waits get back on their cores. Back to back, a last untimed call
    after a reset leaves each case's result checkable. algo() is read right after the
    case's last call (before anything else runs a collective)."""
    for prepared, _ in cases:
        for _ in range(warmup):
            prepared.reset()
            prepared.run()
    times = np.zeros((len(cases), iters))
    ran = ["-"] * len(cases)
    barrier, clock = rc.barrier, time.perf_counter
    rounds = min(ROUNDS, iters) if len(cases) > 1 else 1
    bounds = [iters * k // rounds for k in range(rounds + 1)]
    for k in range(rounds):
        for c, (prepared, algo) in enumerate(cases):
            if k > 0:
                prepared.reset()
                prepared.run()
            if back_to_back:
                prepared.reset()
                barrier()
                t0 = clock()
                for _ in range(bounds[k], bounds[k + 1]):
                    prepared.run()
                    if blocking:
                        barrier()
                times[c, bounds[k]] = clock() - t0
            else:
                for i in range(bounds[k], bounds[k + 1]):
                    prepared.reset()  # restores what an in-place call overwrote; not timed
                    barrier()
                    t0 = clock()
                    prepared.run()
                    times[c, i] = clock() - t0
            if k == rounds - 1:
                if back_to_back:
                    prepared.reset()
                    prepared.run()
                ran[c] = algo()
    every = rc.allgather(times[np.newaxis])  # (ranks, cases, iters)
    if back_to_back:
        per_rank = every.sum(axis=2) / iters  # (ranks, cases)
        reported = combine(per_rank, average)
        return [_spread(per_rank[:, c], reported[c], ran[c]) for c in range(len(cases))]
    per_call = combine(every, average)  # (cases, iters)
    return [_spread(t, np.median(t), a) for t, a in zip(per_call, ran)]
