"""What hvd.join() support costs a collective when nobody joins: the torch adapter's
allreduce of 8 bytes (2 float32) as shipped, against the plain rdmacoll.allreduce and
against the form the adapter shipped before (each allreduce announced to joined ranks by a
queued CONTROL round: rdmacoll/frameworks/_join.py), in the same processes, interleaved.

    mpiexec -n 2 python benchmarks/join_overhead.py [--calls 100] [--blocks 40]

Blocks of `calls` synchronous hvd.allreduce calls rotate through the forms (the order
shifts every block, both ranks switch together); the table shows each form's median block
time per call, its ratio to the plain API's, and the median of the paired block
differences against it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import rdmacoll as rc
import rdmacoll.frameworks.torch as hvd
from rdmacoll.frameworks import _join


def plain(x, op=rc.Average, name=None, out=None, process_set=None):
    """rdmacoll.allreduce_async in place of the adapter's."""
    return rc.allreduce_async(x, op, name, out, process_set)


def announced(x, op=rc.Average, name=None, out=None, process_set=None):
    """The adapter's allreduce before joined ranks learned calls from the calls
    themselves: a CONTROL round queued ahead of each one (descriptor built once)."""
    a = x if isinstance(x, np.ndarray) else rc._core._view(x)
    key = (_join.ALLREDUCE, a.dtype.num, a.shape, op, name)
    words = None
    if key not in _join.STATE.templates:
        words = [_join.ALLREDUCE, op, _join._DTYPE_CODE[a.dtype.name]] + _join._elements(a.size)
        words += [rc.shape_key(a.shape)] + _join._name_words(name)
    _join.STATE.announce(key, words)
    return rc.allreduce_async(x, op, name, out, process_set)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--blocks", type=int, default=40)
    args = ap.parse_args()
    hvd.init()
    forms = {"shipped": _join.allreduce_async, "plain": plain, "announced (before)": announced}
    names = list(forms)
    t = torch.ones(2)
    per_call = {form: [] for form in forms}
    try:
        for b in range(args.blocks + 2):  # the first two blocks warm up
            for form in names[b % 3 :] + names[: b % 3]:
                _join.allreduce_async = forms[form]
                hvd.allreduce(t, op=hvd.Sum)
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    hvd.allreduce(t, op=hvd.Sum)
                if b >= 2:
                    per_call[form].append((time.perf_counter() - t0) / args.calls * 1e6)
    finally:
        _join.allreduce_async = forms["shipped"]
    if hvd.rank() == 0:
        base = statistics.median(per_call["plain"])
        print(f"{hvd.size()} ranks, 8-byte hvd.allreduce, {args.blocks} blocks of {args.calls} calls")
        print(f"  {'form':20s} {'us/call':>8s} {'x plain':>8s} {'paired diff us':>15s}")
        for form, values in per_call.items():
            diff = statistics.median(a - p for a, p in zip(values, per_call["plain"]))
            print(f"  {form:20s} {statistics.median(values):8.2f} {statistics.median(values) / base:8.3f} {diff:15.2f}")


if __name__ == "__main__":
    main()
