"""rc.init() with an invalid RDMACOLL_* setting: every rank raises, none hangs.

Records: "init" with the error text (None when init() succeeded), whether rdmacoll then
claims to be initialised, and what a later allreduce raises. RDMACOLL_TEST_CGROUP: a
memory cgroup's directory, which the rank joins first (mpi_util.memory_cgroup).
"""

import os

import numpy as np

from common import emit, main, raises


def body():
    cgroup = os.environ.get("RDMACOLL_TEST_CGROUP")
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    import rdmacoll as rc

    error = raises(rc.init)
    emit("init", error=error, initialized=rc.is_initialized(), later=raises(rc.allreduce, np.ones(4, np.float32)))


main(body)
