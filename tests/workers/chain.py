"""Several workers, one after another, in one launch: each rank's start (Python, NumPy,
the core, MPI's init) is paid once instead of once per worker. For the Soft-RoCE guest,
where every process runs under emulation and a rank's start costs ~5 s (tests/test_rdma.py).

argv[1]: a JSON list of parts {"script": a worker of this folder, "args": [...], "env":
{...}}. For each part in order: its env set on top of the launch's (the previous part's
taken away), sys.argv set, the worker run as __main__, rdmacoll shut down if the worker
left it initialised, then a record "part_end" {rank: the launcher's, size: its number of
ranks}. Every record a part emits carries "part": its index (mpi_util's Result.part(i) reads
one part as if it had been a launch of its own, ended cleanly where every rank ended it). A part that raises
ends the launch: the parts after it report nothing, which their tests name.
"""

import json
import os
import runpy
import sys

import common

HERE = os.path.dirname(os.path.abspath(__file__))


def run_parts(parts):
    launch_env = dict(os.environ)
    for i, part in enumerate(parts):
        os.environ.clear()
        os.environ.update(launch_env)
        os.environ.update({k: str(v) for k, v in part.get("env", {}).items()})
        sys.argv = [part["script"], *(str(a) for a in part.get("args", []))]
        common.set_part(i)
        try:
            runpy.run_path(os.path.join(HERE, part["script"]), run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                raise
        import rdmacoll

        if rdmacoll.is_initialized():
            rdmacoll.shutdown()
        common.emit("part_end", rank=common.launcher_rank(), size=common.launcher_size())
    common.set_part(None)


run_parts(json.loads(sys.argv[1]))
