"""rc.init() with an invalid RDMACOLL_* setting: every rank raises, none hangs.

Records: "init" with the error text (None when init() succeeded), whether rdmacoll then
claims to be initialised, and what a later allreduce raises. RDMACOLL_TEST_CGROUP: a
memory cgroup's directory, which the rank joins first (mpi_util.memory_cgroup).
RDMACOLL_TEST_RANK1_SETTING="NAME=value": a setting only rank 1 has (set before init()).
"""

import os

import numpy as np

from common import emit, launcher_rank, main, raises


def body():
    cgroup = os.environ.get("RDMACOLL_TEST_CGROUP")
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    one = os.environ.get("RDMACOLL_TEST_RANK1_SETTING")
    if one and launcher_rank() == 1:
        name, value = one.split("=", 1)
        os.environ[name] = value
    import rdmacoll as rc

    error = raises(rc.init)
    emit("init", error=error, initialized=rc.is_initialized(), later=raises(rc.allreduce, np.ones(4, np.float32)))


main(body)
