"""init() again while initialised: with the running settings it does nothing (Horovod's
init is idempotent); with other ones it raises RdmacollValueError (before: ignored).

Records: "reinit" with what each second init() raised (None: returned).
"""

import numpy as np
from common import emit, main, raises


def body():
    import rdmacoll as rc
    from rdmacoll import _session

    rc.init(config={"algo": "ring"})
    running = _session.current().settings
    same = raises(rc.init, config={"algo": "ring", "timeout": str(running["timeout"])})
    again = raises(rc.init)
    try:
        rc.init(config={"algo": "tree"})
        other, value_error = None, None
    except rc.RdmacollError as e:
        other, value_error = str(e), isinstance(e, ValueError)
    x = rc.allreduce(np.ones(4, np.float32), op=rc.Sum)  # the session goes on
    emit("reinit", same=same, again=again, other=other, value_error=value_error, sum=float(x[0]))


main(body)
