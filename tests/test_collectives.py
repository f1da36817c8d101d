"""allgather, broadcast, reducescatter, alltoall, barrier, grouped_allreduce under the
real mpiexec, 1-5 ranks, against NumPy; mismatched calls raise on every rank."""
import pytest

from mpi_util import rank_records, run_mpi

SMALL = {"RDMACOLL_SEGMENT_BYTES": 4096}  # multi-piece reducescatter from small inputs


# The transport-generic algorithms, forced, with small and few slots so that parts span
# several slot messages and senders wait for credits.
SLOTS = SMALL | {"RDMACOLL_ALGO": "allgather:ring;broadcast:chain;reducescatter:ring;alltoall:pairwise",
                 "RDMACOLL_SLOT_BYTES": 4096, "RDMACOLL_SLOTS": 2}


# The same over the tcp transport (sockets even between ranks of one host).
TCP = {"RDMACOLL_TRANSPORT": "tcp"}


@pytest.mark.parametrize("nranks,env", [pytest.param(n, SMALL, id=str(n)) for n in (1, 2, 3, 4, 5, 8)] +
                         [pytest.param(n, SLOTS, id=f"{n}-slots") for n in (2, 3, 4, 5, 8)] +
                         [pytest.param(4, SMALL | TCP, id="4-tcp"), pytest.param(3, SLOTS | TCP, id="3-slots-tcp")])
def test_collectives_match_numpy(nranks, env):
    res = run_mpi(nranks, "collectives.py", ["check"], env=env, timeout=300)
    done = rank_records(res, nranks, "done")
    fails = res.select(kind="fail")
    res.check(not fails, f"{len(fails)} wrong, first: " + "; ".join(
        f"rank {f['rank']} {f['case']}: got {f['got']} {f['got_shape']} want {f['want']} {f['want_shape']}"
        for f in fails[:5]))
    res.check(len({d["cases"] for d in done.values()}) == 1, "ranks ran different numbers of cases")
    res.check(res.returncode == 0, "the launch failed")


@pytest.mark.parametrize("case", ["root", "dtype", "row shape", "collective"])
@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("env", [pytest.param({}, id="default"), pytest.param(SLOTS, id="slots")])
def test_collective_mismatch_raises_everywhere(nranks, case, env):
    res = run_mpi(nranks, "collectives.py", ["mismatch", case], env=env, timeout=60)
    for r, rec in rank_records(res, nranks, "mismatch").items():
        res.check(rec["error"] is not None and "mismatch" in rec["error"],
                  f"rank {r}: {case} mismatch gave {rec['error']!r}")
        res.check(rec["seconds"] < 30, f"rank {r} took {rec['seconds']:.1f} s")


@pytest.mark.parametrize("env, want", [
    pytest.param({}, {"allgather": "direct", "broadcast": "direct", "reducescatter": "direct", "alltoall": "direct"},
                 id="model"),
    pytest.param(SLOTS, {"allgather": "ring", "broadcast": "chain", "reducescatter": "ring", "alltoall": "pairwise"},
                 id="forced"),
    # allgather/alltoall choose by row size (the same everywhere), never by the rows a rank
    # sends: with rows that differ per rank, ranks still agree.
    pytest.param({"RDMACOLL_ALGO": "allgather:0-32:direct,32-inf:ring;alltoall:0-16:direct,16-inf:pairwise"},
                 {"allgather": "ring", "broadcast": "direct", "reducescatter": "direct", "alltoall": "pairwise"},
                 id="ranges"),
])
def test_each_collective_runs_the_algorithm_selection_chose(env, want):
    res = run_mpi(3, "collectives.py", ["chosen"], env=env, timeout=120)
    recs = res.select(kind="chosen")
    res.check(len(recs) == 3 * len(want), f"expected {3 * len(want)} records, got {len(recs)}")
    for rec in recs:
        res.check(rec["error"] is None and rec["ok"], f"rank {rec['rank']} {rec['collective']}: {rec}")
        res.check(rec["algo"] == want[rec["collective"]],
                  f"rank {rec['rank']} {rec['collective']} ran {rec['algo']}, expected {want[rec['collective']]}")


# int8 (nccl-tests' ncclInt8) at 2 ranks: values chosen so that Sum and Product overflow
# and wrap as NumPy's int8 does, Min/Max see negatives; allgather and broadcast move them.
INT8_WORKER = '''
import sys
sys.path.insert(0, {workers!r})
import numpy as np
from common import emit, init, main

def body():
    rc = init()
    r, p = rc.rank(), rc.size()
    def mine(q):
        return (np.arange(257, dtype=np.int64) * (37 + q) + 100 * q - 128).astype(np.int8)
    inputs = [mine(q) for q in range(p)]
    out = {{}}
    for name, op, fn in (("Sum", rc.Sum, np.add), ("Product", rc.Product, np.multiply),
                         ("Min", rc.Min, np.minimum), ("Max", rc.Max, np.maximum)):
        want = inputs[0]
        for x in inputs[1:]:
            want = fn(want, x)  # int8 arithmetic: wraps
        got = rc.allreduce(mine(r), op=op)
        out["allreduce " + name] = bool(got.dtype == np.int8 and np.array_equal(got, want))
    got = rc.allgather(mine(r))
    out["allgather"] = bool(got.dtype == np.int8 and np.array_equal(got, np.concatenate(inputs)))
    x = mine(r)
    rc.broadcast(x, 1, out=x)
    out["broadcast"] = bool(np.array_equal(x, inputs[1]))
    emit("int8", results=out)

main(body)
'''


def test_int8_collectives_match_numpy(tmp_path):
    from mpi_util import WORKERS_DIR

    script = tmp_path / "int8_worker.py"
    script.write_text(INT8_WORKER.format(workers=str(WORKERS_DIR)))
    res = run_mpi(2, script, timeout=120)
    for r, rec in rank_records(res, 2, "int8").items():
        res.check(len(rec["results"]) == 6, f"rank {r}: {rec['results']}")
        for case, ok in rec["results"].items():
            res.check(ok, f"rank {r}: int8 {case} differs from NumPy")
    res.check(res.returncode == 0, "the launch failed")


# Every dtype of issue 14 (int16 and bool new) through every collective that takes it, at
# 2 and 3 ranks and two sizes (small: the eager/direct paths; 300k elements: the
# segmented ones), against NumPy. Integer Average is Horovod's: the wrapped sum times 1/size
# in float64, truncated toward zero. bool moves (allgather, broadcast, alltoall) and is
# refused by reductions on every rank, before communicating.
DTYPES_WORKER = '''
import sys
sys.path.insert(0, {workers!r})
import numpy as np
import ml_dtypes
from common import emit, init, main

def body():
    rc = init()
    r, p = rc.rank(), rc.size()
    out = {{}}
    for name in ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                 "float32", "float64", "bool"):
        dt = ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)
        for n in (7 * p, 300_000 // p * p):
            def mine(q):
                v = np.arange(n, dtype=np.int64) * (37 + q) + 100 * q - 1000
                if name == "bool":
                    return (v % 3 == 0)
                if name.startswith("float") or name == "bfloat16":
                    return ((v % 201) / 4.0).astype(dt)
                return v.astype(dt)   # wraps into the narrow types
            ins = [mine(q) for q in range(p)]
            key = f"{{name}} n={{n}}"
            if name == "bool":
                try:
                    rc.allreduce(mine(r), op=rc.Sum)
                    out[key + " allreduce refused"] = False
                except rc.RdmacollError as e:
                    out[key + " allreduce refused"] = "cannot be reduced" in str(e)
            else:
                floating = name.startswith("float") or name == "bfloat16"
                for opname, op, fn in (("Sum", rc.Sum, np.add), ("Min", rc.Min, np.minimum),
                                       ("Max", rc.Max, np.maximum), ("Average", rc.Average, np.add)):
                    if floating:
                        acc = ins[0].astype(np.float64)
                        for x in ins[1:]:
                            acc = fn(acc, x.astype(np.float64))
                        want = acc / p if opname == "Average" else acc
                    else:
                        acc = ins[0]
                        for x in ins[1:]:
                            acc = fn(acc, x)  # wraps in the dtype
                        want = (np.trunc(acc.astype(np.float64) * (1.0 / p)).astype(np.int64).astype(dt)
                                if opname == "Average" else acc)
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
                        ok = ok and (np.allclose(rs.astype(np.float64), part.astype(np.float64), rtol=1e-2, atol=1e-2)
                                     if floating else np.array_equal(rs, part))
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
'''


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_dtype_matches_numpy(tmp_path, nranks):
    from mpi_util import WORKERS_DIR

    script = tmp_path / "dtypes_worker.py"
    script.write_text(DTYPES_WORKER.format(workers=str(WORKERS_DIR)))
    res = run_mpi(nranks, script, timeout=240)
    for r, rec in rank_records(res, nranks, "dtypes").items():
        bad = [case for case, ok in rec["results"].items() if not ok]
        res.check(len(rec["results"]) == 2 * (9 * 9 + 4), f"rank {r}: {len(rec['results'])} cases")
        res.check(not bad, f"rank {r}: {len(bad)} differ from NumPy, first: {bad[:6]}")
    res.check(res.returncode == 0, "the launch failed")
