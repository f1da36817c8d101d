"""The memory pool at its limits (issue 36, weak cases), 2 ranks.

1. Descriptors: with the soft limit at 1,024 open files, keep 1,500 out-of-place results
   of three sizes alive (before: one memfd each, and "memfd_create: Too many open files"
   near 1,100). Record "fds" {ok, grew: descriptors opened by the 1,500, exact}.
2. Memory given back: RDMACOLL_POOL_FREE_BYTES (the launch sets 64M); a 256 MiB result is
   made, checked and dropped; the process's resident memory must fall by most of it (before:
   it stayed), and the pool's next 256 MiB result (the block given back, faulted in again)
   is exact. Record "memory" {rss_mib: [before the result, with it, after dropping it],
   exact}. Then "done".
"""

import os
import resource

import numpy as np

from common import emit, main, set_rank
import rdmacoll as rc

BIG = 64 << 20  # float32 elements: 256 MiB


def fds():
    return len(os.listdir("/proc/self/fd"))


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def body():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    rc.init()
    set_rank(rc.rank())
    n = rc.size()
    total = n * (n + 1) / 2

    kept, ok = [], True
    before = fds()
    for i in range(1500):
        count = (1000, 5000, 20000)[i % 3]
        kept.append((rc.allreduce(np.full(count, rc.rank() + 1, np.float32), op=rc.Sum), count))
    grew = fds() - before
    ok = all(r.shape == (c,) and bool((r == total).all()) for r, c in kept)
    del kept
    emit("fds", ok=ok, grew=grew)

    x = np.full(BIG, rc.rank() + 1, np.float32)
    rc.allreduce(np.ones(1 << 20, np.float32), op=rc.Sum)  # (the pool's small classes made)
    rss = [rss_mib()]
    r = rc.allreduce(x, op=rc.Sum)
    exact = bool((r == total).all())
    rss.append(rss_mib())
    del r
    rc.barrier()
    rss.append(rss_mib())
    again = rc.allreduce(x, op=rc.Sum)
    exact = exact and bool((again == total).all())
    emit("memory", rss_mib=rss, exact=exact)
    del again
    rc.shutdown()
    emit("done")


main(body)
