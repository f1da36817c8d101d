"""Where the network transport listens and how peers are reached, then one allreduce per
size against NumPy (tests/test_ifname.py: RDMACOLL_SOCKET_IFNAME's rules end to end).

Records: "where" (transport, listen_address, peer_transports), "case" per size, "done".
"""

import numpy as np
from common import emit, init, main

SIZES = [1, 1023, (1 << 20) + 3]


def body():
    rc = init()
    r, p = rc.rank(), rc.size()
    emit(
        "where",
        transport=rc._session.current().comm.transport,
        listen=rc._session.current().comm.listen_address,
        peers=rc._session.current().comm.peer_transports(),
    )
    for n in SIZES:
        x = (np.arange(n) % 7 + r).astype(np.float32)
        want = sum((np.arange(n) % 7 + q).astype(np.float64) for q in range(p))
        emit("case", n=n, ok=bool(np.array_equal(rc.allreduce(x, op=rc.Sum).astype(np.float64), want)))
    rc.shutdown()
    emit("done")


if __name__ == "__main__":
    main(body)
