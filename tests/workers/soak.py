"""Soak: many collectives of random kind, size, dtype and op, each checked exactly against
a NumPy reference, while file descriptors, rdmacoll mappings, pool memory and RSS are
sampled. Every rank draws the same sequence (seed) and builds every rank's input itself,
so each can compute the exact expected result locally.

Values are small integers in every dtype (exact in float16/bfloat16 too); Average is
left out (its 1/size scaling is not exact). Integer Sum/Product wrap like NumPy.
The sequence runs twice (same seed): the first pass brings the pool to its working set
(every size class the sequence needs, with as many blocks live at once); the second,
identical pass must then need nothing new. A leak per operation (a descriptor, a
mapping, a pool block, memory) shows as growth between the two samples.
Records: "soak" per rank: ops run (per pass), wrong results (first few described),
resource samples after each pass.
"""

import argparse
import os
import random
import time

import numpy as np

from common import emit, init, main

DTYPES = ["int32", "int64", "uint8", "float32", "float64", "float16", "bfloat16"]
COLLECTIVES = [
    "allreduce",
    "allreduce",
    "allreduce",
    "allreduce_async",
    "allgather",
    "broadcast",
    "reducescatter",
    "alltoall",
    "barrier",
]
OPS = ["Sum", "Min", "Max", "Product"]


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def resources(rc):
    fds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/maps") as f:
        maps = sum(1 for ln in f if "rdmacoll." in ln)
    with open("/proc/self/status") as f:
        rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) * 1024
    return {"fds": fds, "maps": maps, "rss": rss, "pool": rc._session.current().comm.pool_bytes}


def inputs(rng_seed, p, shape, dtype, op):
    """Every rank's input for one operation (small values so that results are exact)."""
    g = np.random.default_rng(rng_seed)
    hi = 3 if op == "Product" else 40
    lo = 0 if dtype == "uint8" else (-2 if op == "Product" else -20)
    if dtype == "uint8" and op == "Sum":
        hi = 80
    return [g.integers(lo, hi, size=shape).astype(np_dtype(dtype)) for _ in range(p)]


def reduce_ref(xs, op):
    acc = (
        xs[0].astype(np.float64)
        if xs[0].dtype.kind == "V" or xs[0].dtype.name in ("float16", "bfloat16")
        else xs[0].copy()
    )
    for x in xs[1:]:
        y = x.astype(acc.dtype)
        if op == "Sum":
            acc = acc + y
        elif op == "Min":
            acc = np.minimum(acc, y)
        elif op == "Max":
            acc = np.maximum(acc, y)
        else:
            acc = acc * y
    return acc.astype(xs[0].dtype)


def body():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-elems", type=int, default=1 << 18)
    a = ap.parse_args()
    rc = init()
    p, r = rc.size(), rc.rank()
    wrong, kinds, samples = [], {}, {}
    t0 = time.monotonic()
    for pass_ in ("warm", "end"):
        run_pass(rc, a, p, r, wrong, kinds)
        samples[pass_] = resources(rc)
    emit(
        "soak",
        ops=a.ops,
        wrong=len(wrong),
        first_wrong=wrong[:5],
        kinds=kinds,
        samples=samples,
        seconds=time.monotonic() - t0,
        algorithm=os.environ.get("RDMACOLL_ALGO", "default"),
    )
    rc.shutdown()


def run_pass(rc, a, p, r, wrong, kinds):
    rng = random.Random(a.seed)
    pending = []  # (handle, expected, description)
    for i in range(a.ops):
        coll = rng.choice(COLLECTIVES)
        dtype = rng.choice(DTYPES)
        op = rng.choice(OPS)
        n = int(round(2 ** rng.uniform(0, np.log2(a.max_elems)))) if rng.random() > 0.05 else 0
        seed = a.seed * 1_000_003 + i
        desc = f"#{i} {coll} n={n} {dtype} {op}"
        kinds[coll] = kinds.get(coll, 0) + 1
        try:
            if coll in ("allreduce", "allreduce_async"):
                xs = inputs(seed, p, n, dtype, op)
                want = reduce_ref(xs, op)
                if coll == "allreduce":
                    got = rc.allreduce(xs[r], op=getattr(rc, op), name=f"s{i % 7}")
                else:
                    pending.append((rc.allreduce_async(xs[r], op=getattr(rc, op)), want, desc))
                    got = want
                    if len(pending) >= rng.randint(1, 4) or i == a.ops - 1:
                        for h, w, d in pending:
                            if not np.array_equal(rc.synchronize(h), w):
                                wrong.append(d)
                        pending = []
            elif coll == "allgather":
                rows = [rng.randint(0, max(1, n // 8)) for _ in range(p)]
                xs = [inputs(seed + q, 1, (rows[q], 3), dtype, "Sum")[0] for q in range(p)]
                want = np.concatenate(xs)
                got = rc.allgather(xs[r])
            elif coll == "broadcast":
                root = rng.randrange(p)
                xs = inputs(seed, p, n, dtype, "Sum")
                want = xs[root]
                got = rc.broadcast(xs[r], root_rank=root)
            elif coll == "reducescatter":
                rows = rng.randint(0, max(1, n // 4))
                xs = inputs(seed, p, (rows, 4), dtype, op)
                full = reduce_ref(xs, op)
                counts = [rows // p + (1 if q < rows % p else 0) for q in range(p)]
                start = sum(counts[:r])
                want = full[start : start + counts[r]]
                got = rc.reducescatter(xs[r], op=getattr(rc, op))
            elif coll == "alltoall":
                splits = [[rng.randint(0, max(1, n // 16)) for _ in range(p)] for _ in range(p)]
                xs = [inputs(seed + q, 1, (sum(splits[q]), 2), dtype, "Sum")[0] for q in range(p)]
                parts = []
                for q in range(p):  # rows rank q sends to me
                    off = sum(splits[q][:r])
                    parts.append(xs[q][off : off + splits[q][r]])
                want = np.concatenate(parts)
                got = rc.alltoall(xs[r], splits=splits[r])
            else:
                rc.barrier()
                got = want = np.zeros(1)
            if (
                not np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))
                or np.asarray(got).shape != np.asarray(want).shape
            ):
                wrong.append(desc)
        except Exception as e:  # noqa: BLE001 - reported
            wrong.append(f"{desc}: {type(e).__name__}: {e}")
            break
    for h, w, d in pending:
        if not np.array_equal(rc.synchronize(h), w):
            wrong.append(d)


main(body)
