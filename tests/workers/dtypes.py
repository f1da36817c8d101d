"""Every dtype through every collective that takes it, against NumPy, at two sizes
(small: the eager/direct paths; 300k elements: the segmented ones). Integer Sum and
Product wrap as NumPy's; integer Average is Horovod's (the wrapped sum times 1/size in
float64, truncated toward zero); bool, uint16, uint32 and uint64 move (allgather, broadcast,
alltoall) and are refused by reductions on every rank before communicating. Records:
"dtypes" {results}."""

import numpy as np
import ml_dtypes
from common import emit, init, main

MOVED_ONLY = ("bool", "uint16", "uint32", "uint64")


def body():
    rc = init()
    r, p = rc.rank(), rc.size()
    out = {}
    for name in ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", *MOVED_ONLY):
        dt = ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)
        for n in (7 * p, 300_000 // p * p):

            def mine(q):
                v = np.arange(n, dtype=np.int64) * (37 + q) + 100 * q - 1000
                if name == "bool":
                    return v % 3 == 0
                if name.startswith("float") or name == "bfloat16":
                    return ((v % 201) / 4.0).astype(dt)
                return v.astype(dt)  # wraps into the narrow types

            ins = [mine(q) for q in range(p)]
            key = f"{name} n={n}"
            floating = name.startswith("float") or name == "bfloat16"
            if name in MOVED_ONLY:
                try:
                    rc.allreduce(mine(r), op=rc.Sum)
                    out[key + " allreduce refused"] = False
                except rc.RdmacollError as e:
                    out[key + " allreduce refused"] = "cannot be reduced" in str(e)
            else:
                ops = [
                    ("Sum", rc.Sum, np.add),
                    ("Min", rc.Min, np.minimum),
                    ("Max", rc.Max, np.maximum),
                    ("Average", rc.Average, np.add),
                ]
                if not floating:  # (integer products wrap as NumPy's do)
                    ops.append(("Product", rc.Product, np.multiply))
                for opname, op, fn in ops:
                    if floating:
                        acc = ins[0].astype(np.float64)
                        for x in ins[1:]:
                            acc = fn(acc, x.astype(np.float64))
                        want = acc / p if opname == "Average" else acc
                    else:
                        acc = ins[0]
                        for x in ins[1:]:
                            acc = fn(acc, x)  # wraps in the dtype
                        want = (
                            np.trunc(acc.astype(np.float64) * (1.0 / p)).astype(np.int64).astype(dt)
                            if opname == "Average"
                            else acc
                        )
                    got = rc.allreduce(mine(r), op=op)
                    ok = got.dtype == dt and got.shape == want.shape
                    if floating:
                        ok = ok and np.allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2)
                    else:
                        ok = ok and np.array_equal(got, want)
                    out[key + " allreduce " + opname] = bool(ok)
                    if opname in ("Sum", "Average"):
                        part = np.array_split(want, p)[r]
                        rs = rc.reducescatter(mine(r), op=op)
                        ok = rs.dtype == dt and rs.shape == part.shape
                        ok = ok and (
                            np.allclose(rs.astype(np.float64), part.astype(np.float64), rtol=1e-2, atol=1e-2)
                            if floating
                            else np.array_equal(rs, part)
                        )
                        out[key + " reducescatter " + opname] = bool(ok)
            got = rc.allgather(mine(r))
            out[key + " allgather"] = bool(got.dtype == dt and np.array_equal(got, np.concatenate(ins)))
            x = mine(r)
            rc.broadcast(x, p - 1, out=x)
            out[key + " broadcast"] = bool(np.array_equal(x, ins[p - 1]))
            got = rc.alltoall(mine(r))
            want = np.concatenate([np.array_split(ins[q], p)[r] for q in range(p)])
            out[key + " alltoall"] = bool(got.dtype == dt and np.array_equal(got, want))
    emit("dtypes", results=out)


main(body)
