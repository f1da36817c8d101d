"""Settings under mpiexec: what every rank runs with after init(), and where it came from.

argv[1]: "report" (init(), report the settings), "config" (init(config=...) overriding the
environment), "mismatch" (ranks pass different init(config=...): every rank must raise).
Records: "settings" {values, sources} or "init" {error}; then "done".
"""

import sys

from common import emit, launcher_rank, main


def body():
    import rdmacoll as rc

    mode = sys.argv[1]
    config = {
        "report": None,
        "config": {"eager_bytes": "64K", "RDMACOLL_SLOTS": 3},
        "mismatch": {"slots": 2 + launcher_rank()},
    }[mode]
    try:
        rc.init(config=config)
    except rc.RdmacollError as e:
        emit("init", error=str(e))
        emit("done")
        return
    w = rc._session.current().world
    emit("settings", values=w.settings, sources=w.sources)
    rc.shutdown()
    emit("done")


main(body)
