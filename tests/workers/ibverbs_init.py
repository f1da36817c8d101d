"""rc.init() with RDMACOLL_TRANSPORT=ibverbs.

Records "init": the error text (None when init() succeeded) and whether rdmacoll claims to
be initialised. Where init() succeeds (a host with a usable RDMA port), also "allreduce":
float32 Sum results of several sizes compared with the exact expected values, so that the
same test checks the data path on RDMA hardware instead of only the refusal.

    RC_TEST_MEMLOCK=N   before init(): lower RLIMIT_MEMLOCK to N bytes and drop
                        CAP_IPC_LOCK (which lets root pin past the limit)
    RC_TEST_FORK=1      after the allreduces: fork a child that scribbles over the rank's
                        registered arrays and exits while the parent keeps reducing from
                        them; records "fork" (the parent's results, the child's status),
                        then keeps those arrays past shutdown() and writes them
"""

import ctypes
import os
import resource

import numpy as np

from common import emit, main, raises, set_rank


CAP_IPC_LOCK = 14


def limit_memlock(nbytes: int) -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    hdr, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[0].effective &= ~(1 << CAP_IPC_LOCK)
    data[0].permitted &= ~(1 << CAP_IPC_LOCK)
    if libc.capset(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (nbytes, nbytes))


def expected(count, n):
    return (np.arange(count, dtype=np.float32) % 251) * n + n * (n - 1) / 2


def fork_while_reducing(rc):
    """The child writes -1 over every registered array the parent reduces from, then exits;
    the parent's allreduces (before, during and after) must not see it."""
    n, r = rc.size(), rc.rank()
    count = (1 << 20) + 3
    src = rc.empty(count, "float32")
    src[:] = (np.arange(count, dtype=np.float32) % 251) + r
    out = rc.empty(count, "float32")
    rc.allreduce(src, op=rc.Sum, out=out)
    child = os.fork()
    if child == 0:
        src[:] = -1
        out[:] = -1
        os._exit(0)
    wrong, want = 0, expected(count, n)
    for _ in range(20):
        rc.allreduce(src, op=rc.Sum, out=out)
        wrong += not np.array_equal(out, want)
    _, status = os.waitpid(child, 0)
    rc.allreduce(src, op=rc.Sum, out=out)
    wrong += not np.array_equal(out, want)
    emit("fork", wrong=wrong, child_status=os.waitstatus_to_exitcode(status))
    return src, out


def body():
    import rdmacoll as rc

    if os.environ.get("RC_TEST_MEMLOCK"):
        limit_memlock(int(os.environ["RC_TEST_MEMLOCK"]))
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
        if not np.array_equal(got, expected(count, n)):
            wrong.append(count)
    emit("allreduce", transport=rc._session.current().comm.transport, wrong=wrong)
    kept = fork_while_reducing(rc) if os.environ.get("RC_TEST_FORK") else ()
    rc.shutdown()
    for a in kept:  # registered arrays outlive the device: still mapped, no longer registered
        a[:] = 2
    emit("after shutdown", arrays=len(kept), sum=float(sum(a.sum() for a in kept)))


main(body)
