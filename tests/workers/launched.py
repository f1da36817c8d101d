"""Whatever launcher started this process: rc.init(), then one allreduce checked against
the reference, or the error init() raised.

Records: "init" {size, bootstrap, mpi4py (whether mpi4py was imported), ok, error}; "done".
"""

import sys

import numpy as np

from common import emit, main


def body():
    import rdmacoll as rc

    try:
        rc.init()
    except rc.RdmacollError as e:
        emit("init", size=None, bootstrap=None, mpi4py="mpi4py" in sys.modules, ok=False, error=str(e))
        emit("done")
        return
    p, r = rc.size(), rc.rank()
    x = np.arange(1000, dtype=np.float32) + r
    y = rc.allreduce(x, op=rc.Sum)
    ok = bool(np.array_equal(y, sum(np.arange(1000, dtype=np.float32) + q for q in range(p))))
    emit(
        "init",
        size=p,
        bootstrap=rc._session.current().world.exchange.name,
        mpi4py="mpi4py" in sys.modules,
        ok=ok,
        error=None,
    )
    rc.shutdown()
    emit("done")


main(body)
