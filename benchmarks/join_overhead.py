"""What hvd.join() support costs a collective when nobody joins: the torch adapter's
allreduce of 8 bytes (2 float32) with its join announcement (as shipped) and without it
(the announced function swapped for the plain one), in the same processes, interleaved.

    mpiexec -n 2 python benchmarks/join_overhead.py [--calls 100] [--blocks 40]

Blocks of `calls` synchronous hvd.allreduce calls alternate between the two forms (the
order flips every block, both ranks switch together); the table shows each form's median
block time per call and the median of the paired block differences.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import rdmacoll as rc
import rdmacoll.frameworks.torch as hvd
from rdmacoll.frameworks import _join


def plain(x, op=rc.Average, name=None, out=None, process_set=None):
    """rdmacoll.allreduce_async in place of the announced form (what the adapter issued
    before join served every collective)."""
    return rc.allreduce_async(x, op, name, out, process_set)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--blocks", type=int, default=40)
    args = ap.parse_args()
    hvd.init()
    forms = {"announced": _join.allreduce_async, "plain": plain}
    t = torch.ones(2)
    per_call = {form: [] for form in forms}
    try:
        for b in range(args.blocks + 2):  # the first two blocks warm up
            for form in forms if b % 2 == 0 else reversed(list(forms)):
                _join.allreduce_async = forms[form]
                hvd.allreduce(t, op=hvd.Sum)
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    hvd.allreduce(t, op=hvd.Sum)
                if b >= 2:
                    per_call[form].append((time.perf_counter() - t0) / args.calls * 1e6)
    finally:
        _join.allreduce_async = forms["announced"]
    if hvd.rank() == 0:
        diffs = [a - p for a, p in zip(per_call["announced"], per_call["plain"])]
        print(f"{hvd.size()} ranks, 8-byte hvd.allreduce, {args.blocks} blocks of {args.calls} calls")
        for form, values in per_call.items():
            print(f"  {form:10s} median {statistics.median(values):8.2f} us/call")
        print(f"  added by the announcement: median paired difference {statistics.median(diffs):.2f} us/call")


if __name__ == "__main__":
    main()
