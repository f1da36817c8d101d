"""The session (rdmacoll/_session.py) across shutdown() and init(): epochs, reset hooks,
layout, process sets, collectives. Reports records; tests/test_session.py checks them.

session.py        (any number of ranks >= 3)

  'layout'     rank/size/local/cross/is_homogeneous as the API reports them, the host name
  'first'      the first session: its epoch, collectives on a static and a dynamic set,
               the adapters' allreduce and one announced allgather (frameworks/_join.py)
  'closed'     after shutdown(): the hooks that ran (in order, with what they saw), what
               the API raises, whether the sets became unregistered, join's templates
               dropped (its reset hook); a second shutdown()
  'second'     after init() again: epoch, the sets registered again, the old dynamic set
               refused, the first session's hooks not run again, join's allreduce again
  'case'       one collective after re-init, checked here against a NumPy reference
  'final'      the hooks after the second shutdown()
  'beside'     a Session made directly (not the current one): its collective and its close
"""

import socket

import numpy as np
from common import emit, main, set_rank
from reference import compare, reference

import rdmacoll as rc
from rdmacoll import _session
from rdmacoll.bootstrap import bootstrap
from rdmacoll.frameworks import _join


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - reported as text
        return f"{type(e).__name__}: {e}"
    return None


def inputs(p, n, dtype, seed):
    """Every rank's input of a case (each rank computes all of them: the reference's)."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(n) * 4).astype(dtype) for _ in range(p)]


def cases_after_reinit(r, p, static):
    """Collectives on the second session, each against NumPy."""
    out = []
    for i, (dtype, op) in enumerate([("float32", "Sum"), ("float64", "Average"), ("float32", "Max"), ("int32", "Min")]):
        xs = inputs(p, 1000 + i, dtype, seed=10 + i)
        got = rc.allreduce(xs[r], op=getattr(rc, op))
        why = compare(np.asarray(got), *reference(xs, dtype, op))
        out.append((f"allreduce {dtype} {op}", why))
    xs = inputs(p, 257, "float32", seed=20)
    h = rc.allreduce_async(xs[r], op=rc.Sum)
    out.append(("allreduce_async", compare(np.asarray(rc.synchronize(h)), *reference(xs, "float32", "Sum"))))
    rows = [np.full((q + 1, 2), q, np.int64) for q in range(p)]
    got = rc.allgather(rows[r])
    out.append(("allgather", None if np.array_equal(got, np.concatenate(rows)) else f"got {got.tolist()}"))
    xs = inputs(p, 33, "float64", seed=30)
    got = rc.broadcast(xs[r], root_rank=p - 1)
    out.append(("broadcast", None if np.array_equal(got, xs[p - 1]) else "not the root's"))
    sends = [np.arange(p * 3, dtype=np.int32) + 100 * q for q in range(p)]
    got = rc.alltoall(sends[r])
    want = np.concatenate([sends[q][3 * r : 3 * r + 3] for q in range(p)])
    out.append(("alltoall", None if np.array_equal(got, want) else f"got {got.tolist()}"))
    xs = [np.arange(p * 4, dtype=np.float64).reshape(p, 4) * (q + 1) for q in range(p)]
    got = rc.reducescatter(xs[r], op=rc.Sum)
    out.append(("reducescatter", None if np.array_equal(got, sum(xs)[r : r + 1]) else f"got {got.tolist()}"))
    if static.included():
        xs = inputs(p, 64, "float32", seed=40)
        got = rc.allreduce(xs[r], op=rc.Sum, process_set=static)
        want = reference([xs[q] for q in static.ranks], "float32", "Sum")
        out.append(("static set allreduce", compare(np.asarray(got), *want)))
    return out


def run():
    static = rc.ProcessSet([0, 2])
    rc.init(config={"dynamic_process_sets": "1"}, process_sets=[static])
    r, p = rc.rank(), rc.size()
    set_rank(r)
    emit(
        "layout",
        host=socket.gethostname(),
        values=[rc.rank(), rc.size(), rc.local_rank(), rc.local_size(), rc.cross_rank(), rc.cross_size()],
        homogeneous=rc.is_homogeneous(),
    )
    first = _session.current()
    calls = []

    def hook(tag):
        def fn():
            calls.append([tag, rc.is_initialized(), first.closed, error_of(lambda: first.comm.rank)])

        return fn

    for tag in ("a", "b", "c"):
        first.on_reset(hook(tag))
    dynamic = rc.add_process_set([1, 2])
    x = np.full(5, r + 1, np.float32)
    emit(
        "first",
        epoch=first.epoch,
        static_id=static.process_set_id,
        dynamic_id=dynamic.process_set_id,
        static_sum=rc.allreduce(x, op=rc.Sum, process_set=static).tolist() if static.included() else None,
        dynamic_sum=rc.allreduce(x, op=rc.Sum, process_set=dynamic).tolist() if dynamic.included() else None,
        join_sum=_join.allreduce(x, op=rc.Sum).tolist(),  # (the adapters' allreduce)
        join_rows=len(_join.allgather(x)),  # (announced: a join template)
        join_templates=len(_join.STATE.templates),
        calls=list(calls),
    )

    rc.shutdown()
    after_first = list(calls)
    rc.shutdown()  # a second one: nothing runs again
    emit(
        "closed",
        calls=after_first,
        calls_again=list(calls),
        initialized=rc.is_initialized(),
        current_is_first=_session.current() is first,
        rank_error=error_of(rc.rank),
        allreduce_error=error_of(lambda: rc.allreduce(x)),
        ids=[static.process_set_id, dynamic.process_set_id],
        join_templates=len(_join.STATE.templates),
    )

    rc.init(process_sets=[static])
    second = _session.current()
    second.on_reset(hook("d"))
    emit(
        "second",
        epoch=second.epoch,
        same_object=second is first,
        first_closed=first.closed,
        static_id=static.process_set_id,
        static_rank=static.rank() if static.included() else None,
        dynamic_id=dynamic.process_set_id,
        dynamic_error=error_of(lambda: rc.allreduce(x, process_set=dynamic)),
        join_sum=_join.allreduce(x, op=rc.Sum).tolist(),
        calls=list(calls),
    )
    for name, why in cases_after_reinit(r, p, static):
        emit("case", name=name, ok=why is None, why=why)
    rc.shutdown()
    emit("final", calls=list(calls), epoch=_session.current().epoch, closed=_session.current().closed)

    # A session that is not the current one: made, used and closed beside rdmacoll's API.
    beside = _session.Session(bootstrap(), 1)
    ran = []
    beside.on_reset(lambda: ran.append(beside.closed))
    total = beside.comm.allreduce(np.array([r + 1], np.int64), None, rc.Sum, None)
    initialized = rc.is_initialized()
    beside.close()
    emit("beside", total=int(total[0]), initialized=initialized, hooks=ran)
    emit("done")


if __name__ == "__main__":
    main(run)
