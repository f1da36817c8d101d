"""Runs a few collectives of each kind with RDMACOLL_TIMELINE set (by the test), then
shuts down so that every rank closes its trace. Records: "done" with the trace path and
the calls it made, per rank."""

import numpy as np

from common import emit, init, main


def body():
    rc = init()
    r, p = rc.rank(), rc.size()
    calls = []
    small = rc.allreduce(np.full(100, r, np.float32), op=rc.Sum, name="small")
    large = rc.allreduce(np.full(1 << 20, r, np.float32), op=rc.Sum, name="large")
    calls += ["allreduce", "allreduce"]
    rc.allgather(np.full((2, 3), r, np.int32))
    rc.broadcast(np.arange(1000, dtype=np.float64), root_rank=0)
    rc.barrier()
    calls += ["allgather", "broadcast", "barrier"]
    # Asynchronous work queues behind itself: these show a queue phase.
    hs = [rc.allreduce_async(np.full(1 << 18, i, np.float32), op=rc.Sum, name=f"async.{i}") for i in range(4)]
    outs = [rc.synchronize(h) for h in hs]
    calls += ["allreduce"] * 4
    ok = (
        np.all(small == p * (p - 1) / 2)
        and np.all(large == p * (p - 1) / 2)
        and all(np.all(o == i * p) for i, o in enumerate(outs))
    )
    rc.shutdown()
    emit("done", ok=bool(ok), calls=calls)


main(body)
