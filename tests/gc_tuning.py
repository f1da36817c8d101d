"""Python's cyclic garbage collector, tuned for the tests' own processes (the pytest
process, tests/conftest.py, and every worker, tests/workers/common.py).

With the default thresholds (700, 10, 10) a process that imports torch or TensorFlow runs
full collections over their module graphs again and again while it allocates: measured
with `perf record -a` over the host suite, the collector was 10% of all CPU time, a fifth
of the TensorFlow and Horovod-rules launches' and an eighth of pytest's own. Young
collections now run every 100,000 allocations and full ones practically never (a test
process lives seconds to minutes; reference cycles wait for it to exit, or for a test's
own gc.collect()). The library itself never tunes the collector: a user's process keeps
Python's defaults."""

import gc

THRESHOLDS = (100_000, 50, 100)


def tune() -> None:
    gc.set_threshold(*THRESHOLDS)
