"""Runs rdmacoll-bench's main() with this script's arguments (as the console script would
under mpiexec), then reports its exit status and which optional modules it imported."""

import sys

from common import emit, main

status = []


def body():
    from rdmacoll.bench import main as bench_main

    try:
        code = bench_main(sys.argv[1:])
    except SystemExit as e:  # option errors exit from argparse
        code = e.code
    emit("bench", code=code, matplotlib="matplotlib" in sys.modules, torch="torch" in sys.modules)
    status.append(code)


main(body)
sys.exit(status[0])
