"""Sub-communicators of the core (Communicator.split), under mpiexec: overlapping subsets
of the ranks on the world's connections, their collectives interleaved with the world's
(synchronous and in flight together), checked against NumPy references computed here
from every rank's deterministic input. Records: "check" {name, ok, detail}; "done"."""

import numpy as np

import rdmacoll as rc
from rdmacoll import RdmacollError
from common import emit, main, set_rank


def data(rank, n, salt=0):
    return ((np.arange(n, dtype=np.int64) * 7 + rank * 13 + salt) % 11 - 5).astype(np.float32)


def run():
    rc.init()
    r, p = rc.rank(), rc.size()
    set_rank(r)
    world = rc._session.current().comm
    subsets = [[0, p - 1], list(range(1, p)), [q for q in range(p) if q % 2 == 0]]
    subs = {}
    for i, s in enumerate(subsets):
        sub = world.split(s) if r in s else None
        blobs = rc.allgather_object(sub.address() if sub is not None else None)
        if sub is not None:
            sub.connect([blobs[q] for q in s])
            subs[i] = sub

    try:
        world.split([q for q in range(p) if q != r])
        emit("check", name="split without this rank raises", ok=False, detail="it returned")
    except RdmacollError as e:
        emit("check", name="split without this rank raises", ok="member" in str(e) or "among" in str(e), detail=str(e))

    def check(name, got, want):
        ok = got.shape == want.shape and np.array_equal(got, want)
        emit("check", name=name, ok=bool(ok), detail="" if ok else f"got {got[:6]} want {want[:6]}")

    for n in (1, 1000, 300001):
        for i, s in enumerate(subsets):
            if i in subs:
                c = subs[i]
                check(f"sub {s} size", np.array([c.size, c.rank]), np.array([len(s), s.index(r)]))
                check(f"sub {s} world_ranks", np.array(c.world_ranks), np.array(s))
                x = data(r, n, i)
                check(f"sub {s} allreduce {n}", c.allreduce(x, None, int(rc.Sum), None), sum(data(q, n, i) for q in s))
                check(
                    f"sub {s} allgather {n}",
                    c.allgather(data(r, n, i), None),
                    np.concatenate([data(q, n, i) for q in s]),
                )
                y = data(r, n, i)
                c.broadcast(y, len(s) - 1, y, None)
                check(f"sub {s} broadcast {n}", y, data(s[-1], n, i))
            # the world between its groups' calls
            check(
                f"world allreduce {n} after {s}", rc.allreduce(data(r, n), op=rc.Sum), sum(data(q, n) for q in range(p))
            )
        # in flight together: every group's and the world's, waited in reverse order
        hs = [(i, subs[i].allreduce_async(data(r, n, 50 + i), None, int(rc.Sum), None)) for i in sorted(subs)]
        hw = rc.allreduce_async(data(r, n, 99), op=rc.Sum)
        check(f"world async {n}", rc.synchronize(hw), sum(data(q, n, 99) for q in range(p)))
        for i, h in reversed(hs):
            check(f"sub {subsets[i]} async {n}", h.wait(), sum(data(q, n, 50 + i) for q in subsets[i]))
    for c in subs.values():
        c.close()
    check("world after closing the groups", rc.allreduce(data(r, 10), op=rc.Sum), sum(data(q, 10) for q in range(p)))
    emit("done")


if __name__ == "__main__":
    main(run)
