"""rc.init() with RDMACOLL_TRANSPORT=ibverbs.

Records "init": the error text (None when init() succeeded) and whether rdmacoll claims to
be initialised. Where init() succeeds (a host with a usable RDMA port), also "allreduce":
float32 Sum results of several sizes compared with the exact expected values, so that the
same test checks the data path on RDMA hardware instead of only the refusal.
"""
import numpy as np

from common import emit, main, raises, set_rank


def body():
    import rdmacoll as rc

    error = raises(rc.init)
    emit("init", error=error, initialized=rc.is_initialized())
    if error is not None:
        return
    set_rank(rc.rank())
    n, r = rc.size(), rc.rank()
    wrong = []
    for count in (0, 1, 7, 1000, 65536, 1 << 20, (4 << 20) + 3):
        x = (np.arange(count, dtype=np.float32) % 251) + r
        got = rc.allreduce(x, op=rc.Sum)
        want = (np.arange(count, dtype=np.float32) % 251) * n + n * (n - 1) / 2
        if not np.array_equal(got, want):
            wrong.append(count)
    emit("allreduce", transport=rc._comm.transport, wrong=wrong)
    rc.shutdown()


main(body)
