"""What a job leaves behind when it ends in different ways (the test checks the host).

teardown.py normal            collectives, then shutdown(): reports the core's
                              descriptors and mappings after init and after shutdown,
                              then init() again and one more collective
teardown.py exception VICTIM  the victim raises an uncaught exception mid-job
teardown.py loop              allreduce in a loop until the test signals a rank;
                              survivors report "error", the victim "interrupted" (SIGINT)
teardown.py fork VICTIM       like loop, but the victim first forks a child that stays
                              alive (a DataLoader worker): the child reports its
                              descriptors and what touching rdmacoll raises
"""

import os
import sys
import time

import numpy as np

from common import emit, ignore_launcher_notifications, init, main, outlive_launcher_cleanup


def core_resources():
    """The core's descriptors (memfd segments, pidfds) and rdmacoll mappings of this process."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "rdmacoll" in target or "pidfd" in target:
            fds.append(target)
    with open("/proc/self/maps") as f:
        maps = [ln.split()[-1] for ln in f if "rdmacoll." in ln]
    return sorted(fds), sorted(set(maps))


def normal():
    rc = init()
    x = np.arange(1 << 20, dtype=np.int64)
    y = rc.allreduce(x, op=rc.Sum)
    e = rc.empty(1000, "float32")
    rc.allgather(e)
    fds_up, maps_up = core_resources()
    del y, e
    rc.shutdown()
    fds_down, maps_down = core_resources()
    rc = init()
    again = rc.allreduce(np.ones(10, np.int32), op=rc.Sum)
    ok = bool(np.all(again == rc.size()))
    emit("normal", fds_up=fds_up, maps_up=len(maps_up), fds_down=fds_down, maps_down=maps_down, reinit_ok=ok)
    # atexit's shutdown() tears down the second communicator


def exception():
    rc = init()
    victim = int(sys.argv[2])
    rc.allreduce(np.ones(1000, np.float32), op=rc.Sum)
    emit("started")
    if rc.rank() == victim:
        raise ValueError("a user error in the training script")
    try:
        rc.allreduce(np.ones(1 << 20, np.float32), op=rc.Sum)
        emit("survivor", error=None)
    except rc.RdmacollError as e:
        emit("survivor", error=str(e))


def loop(fork_victim=None):
    outlive_launcher_cleanup()
    rc = init()
    ignore_launcher_notifications()
    if fork_victim is not None and rc.rank() == fork_victim:
        child = os.fork()
        if child == 0:  # the worker: stays alive while its parent dies
            fds, _ = core_resources()
            try:
                rc.allreduce(np.ones(4, np.float32), op=rc.Sum)
                error = None
            except rc.RdmacollError as e:
                error = str(e)
            emit("child", fds=fds, error=error)
            time.sleep(120)
            os._exit(0)
    x = np.ones(4 << 20, np.float32)
    out = np.empty_like(x)
    iterations = 0
    try:
        while True:
            rc.allreduce(x, op=rc.Sum, out=out)
            iterations += 1
            if iterations == 2:
                emit("looping")
    except rc.RdmacollError as e:
        emit("error", message=str(e), time=time.time())
    except KeyboardInterrupt:
        emit("interrupted", time=time.time())
    rc.shutdown()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    mode = sys.argv[1]
    main({"normal": normal, "exception": exception, "loop": loop, "fork": lambda: loop(int(sys.argv[2]))}[mode])
