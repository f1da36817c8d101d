"""Inputs that are not NumPy arrays: DLPack producers and buffer-protocol objects,
reduced without copies (in place through them)."""

import array

import numpy as np
from common import emit, init, main


class DLPackOnly:
    """Exposes nothing but DLPack, like a CPU framework tensor."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def body() -> None:
    rc = init()
    r, p = rc.rank(), rc.size()
    results = {}

    base = np.arange(1000, dtype=np.float32) + r
    want = sum(np.arange(1000, dtype=np.float32) + q for q in range(p))
    t = DLPackOnly(base)
    y = rc.allreduce(t, op=rc.Sum)
    results["dlpack out-of-place"] = bool(np.array_equal(y, want))
    rc.allreduce(t, op=rc.Sum, out=t)  # in place through the DLPack view
    results["dlpack in place"] = bool(np.array_equal(base, want))

    buf = bytearray(np.full(4096, r + 1, np.uint8).tobytes())
    rc.allreduce(buf, op=rc.Sum, out=buf)  # bytearray: buffer protocol, uint8
    results["bytearray in place"] = bool((np.frombuffer(buf, np.uint8) == sum(q + 1 for q in range(p))).all())

    arr = array.array("d", [float(r)] * 333)
    y = rc.allreduce(arr, op=rc.Max)
    results["array.array"] = bool((np.asarray(y) == p - 1).all())

    mv = memoryview(np.full(77, r, np.int64))
    y = rc.allreduce(mv, op=rc.Sum)
    results["memoryview"] = bool((y == sum(range(p))).all())

    try:
        rc.allreduce([1.0, 2.0])
        results["list rejected"] = False
    except rc.RdmacollError as e:
        results["list rejected"] = "buffer protocol" in str(e)
    emit("result", results=results)


if __name__ == "__main__":
    main(body)
