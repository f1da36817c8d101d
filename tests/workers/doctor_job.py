"""`rdmacoll doctor` as the job's ranks run it (the `rdmacoll` command's main), with
argv[1] naming a rank that gets a network interface that does not exist ("-1": none),
so that it cannot connect. Prints the report; the exit status is doctor's."""

import os
import sys

from common import launcher_rank

if int(sys.argv[1]) == launcher_rank():
    os.environ["RDMACOLL_SOCKET_IFNAME"] = "=nosuchif0"

from rdmacoll.cli import main  # noqa: E402

sys.exit(main(["doctor"]))
