"""Waiting behaviour: Ctrl-C, the GIL during long waits, two communicators at once.

waiting.py sigint      rank 0 waits in an allreduce for rank 1, which joins late; the
                       test sends SIGINT to rank 0
waiting.py gil         rank 0 waits for a late rank 1 while a Python thread counts
waiting.py two         every rank bootstraps two communicators and interleaves them
waiting.py fork        every rank forks after init(): the child's copy refuses to run,
                       the parent goes on with its peers
waiting.py threads     two Python threads make synchronous allreduces at once, all alike
                       (same name, size and op: any interleaving pairs them correctly)
waiting.py unnamed     two Python threads make unnamed synchronous allreduces at once, each
                       of its own values: an order that differs between ranks would pair
                       one thread's tensor with the other's
"""

import os
import sys
import threading
import time

import numpy as np
from common import emit, init, main, set_rank


def sigint() -> None:
    rc = init()
    x = np.ones(1 << 16, np.float32)
    if rc.rank() == 0:
        emit("waiting")
        t0 = time.monotonic()
        try:
            rc.allreduce(x, op=rc.Sum, out=x)
            emit("result", outcome="returned", seconds=time.monotonic() - t0)
        except KeyboardInterrupt:
            emit("result", outcome="KeyboardInterrupt", seconds=time.monotonic() - t0)
    else:
        time.sleep(5)  # rank 0 is interrupted meanwhile
        try:
            rc.allreduce(x, op=rc.Sum, out=x)
            emit("result", outcome="returned")
        except rc.RdmacollError as e:
            emit("result", outcome="RdmacollError", message=str(e))


def gil() -> None:
    rc = init()
    x = np.ones(1024, np.float32)
    if rc.rank() == 0:
        count = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                count[0] += 1

        t = threading.Thread(target=spin)
        t.start()
        time.sleep(0.1)
        before = count[0]
        rc.allreduce(x, op=rc.Sum, out=x)  # rank 1 arrives ~2 s later
        during = count[0] - before
        stop.set()
        t.join()
        emit("result", thread_iterations=during, value=float(x[0]))
    else:
        time.sleep(2)
        rc.allreduce(x, op=rc.Sum, out=x)
        emit("result", value=float(x[0]))


def two() -> None:
    import rdmacoll as rc
    from rdmacoll.bootstrap import bootstrap

    a, b = bootstrap(), bootstrap()
    set_rank(a.rank)
    n = 3 * (1 << 18) + 5
    ok = True
    for i in range(20):
        xa = np.full(n, a.rank + i, np.int64)
        xb = np.full(n, 10 * (b.rank + 1), np.int64)
        ya = a.core.allreduce(xa, None, rc.Sum, None)
        yb = b.core.allreduce(xb, xb, rc.Max, None)
        ok &= bool((ya == sum(r + i for r in range(a.size))).all())
        ok &= bool((yb == 10 * b.size).all())
    emit("result", ok=ok, algorithms=[a.core.last_algorithm, b.core.last_algorithm])
    a.core.close()
    b.core.close()


def fork() -> None:
    rc = init()
    x = np.ones(4096, np.float32)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child, like a DataLoader worker that touches the library
        try:
            rc.allreduce(x, op=rc.Sum, out=x)
            msg = "returned"
        except rc.RdmacollError as e:
            msg = str(e)
        os.write(w, msg.encode()[:4000])
        os._exit(0)
    os.close(w)
    child = os.read(r, 4096).decode()
    os.waitpid(pid, 0)
    rc.allreduce(x, op=rc.Sum, out=x)  # the parent still works with its peers
    emit("result", child=child, parent_ok=bool((x == rc.size()).all()))


def threads() -> None:
    """Each thread waits long enough (1 MiB, 3 ranks on 2 cores) to release the GIL in its
    wait, and to find the other thread executing when it asks for its turn."""
    rc = init()
    r, p = rc.rank(), rc.size()
    want = p * (p + 1) / 2
    wrong, errors = [0], []

    def work():
        try:
            for _ in range(THREAD_CALLS):
                x = np.full(1 << 18, r + 1, np.float32)
                rc.allreduce(x, op=rc.Sum, name="threads", out=x)
                wrong[0] += int(np.count_nonzero(x != want))
        except Exception as e:  # noqa: BLE001 - reported, the test fails on it
            errors.append(repr(e))

    ts = [threading.Thread(target=work) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    emit("done", wrong=wrong[0], errors=errors, calls=2 * THREAD_CALLS)


THREAD_CALLS = 40


def unnamed() -> None:
    """Thread t of rank r contributes 10 t + r + 1: a sum made of both threads' tensors is
    wrong. Each thread stops at its first error."""
    rc = init()
    r, p = rc.rank(), rc.size()
    wrong, right, errors = [0], [0], []

    def work(t):
        want = 10 * t * p + p * (p + 1) / 2
        try:
            for _ in range(THREAD_CALLS):
                x = np.full(1 << 18, 10 * t + r + 1, np.float32)
                rc.allreduce(x, op=rc.Sum, out=x)
                bad = int(np.count_nonzero(x != want))
                wrong[0] += bad
                right[0] += bad == 0
        except rc.RdmacollError as e:
            errors.append(str(e))
        except Exception as e:  # noqa: BLE001 - reported, the test fails on it
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    emit("done", wrong=wrong[0], right=right[0], errors=errors)


if __name__ == "__main__":
    main({"sigint": sigint, "gil": gil, "two": two, "fork": fork, "threads": threads, "unnamed": unnamed}[sys.argv[1]])
