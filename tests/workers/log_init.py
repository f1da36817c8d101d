"""init() and a few allreduces with logging as a user would leave it: argv[1] is "none"
(no logging set-up), "user" (logging.basicConfig with the user's own format on stderr,
before init) or "logger-debug" (the rdmacoll logger set to DEBUG by the user, no
handler). Records: "result" {ok}."""

import logging
import sys

import numpy as np

import rdmacoll as rc
from common import emit, main, set_rank


def run():
    how = sys.argv[1]
    if how == "user":
        logging.basicConfig(level=logging.INFO, format="USER %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    elif how == "logger-debug":
        logging.getLogger("rdmacoll").setLevel(logging.DEBUG)
    rc.init()
    set_rank(rc.rank())
    x = np.arange(1000, dtype=np.float32)
    ok = all(np.array_equal(rc.allreduce(x, op=rc.Sum), x * rc.size()) for _ in range(3))
    ok &= np.array_equal(rc.allreduce(np.ones(1 << 20, np.float32), op=rc.Sum), np.full(1 << 20, rc.size(), np.float32))
    sys.stderr.flush()
    emit("result", ok=bool(ok))
    rc.shutdown()


if __name__ == "__main__":
    main(run)
