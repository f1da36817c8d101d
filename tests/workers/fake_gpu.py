"""Every GPU code path of rdmacoll in real processes, over the fake CUDA runtime
(csrc/python/testing/fake_cuda/: "device memory" is host memory the runtime hands out and
reports as device memory; copies run at once). The launch sets RDMACOLL_CUDA_RUNTIME to
it and small chunks (RDMACOLL_CUDA_CHUNK_BYTES=4K, RDMACOLL_CUDA_STAGING_BYTES=16K: 4
slots), so messages of a few chunks wrap the ring.

Parts: `ops` (every collective on fake GPU arrays against NumPy references, the copies
the pipeline makes, async forms, out=, refusals), `join` (the last rank joins at once; the
others allreduce GPU arrays of several chunks through the join wrappers, then join: the
joined rank stands in chunk by chunk), `fail` (a copy fails on rank 0 in the middle of a
message: every rank raises, none hangs).
"""

import ctypes
import os
import sys

import numpy as np
from common import emit, init, main

CHUNK = 4096


class FakeGpuArray:
    """An array in the fake runtime's device memory, described by
    __cuda_array_interface__ (version 3, the legacy default stream); `host` views the same
    bytes (the fake's device memory is host memory) to fill and to check."""

    lib = None

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        n = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = FakeGpuArray.lib.fakeCudaMalloc(n)
        buf = (ctypes.c_char * max(n, 1)).from_address(self.ptr)
        self.host = np.frombuffer(buf, np.uint8)[:n].view(self.dtype).reshape(self.shape)

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "stream": 1,
        }

    @staticmethod
    def of(values):
        a = FakeGpuArray(values.shape, values.dtype)
        a.host[...] = values
        return a


def device_array(rc, a):
    """a as an rdmacoll.DeviceArray whose results are FakeGpuArrays (new=)."""
    return rc.DeviceArray(
        a.ptr, a.shape, a.dtype, 0, 0, owner=a, new=lambda shape: device_array(rc, FakeGpuArray(shape, a.dtype))
    )


def load():
    lib = ctypes.CDLL(os.environ["RDMACOLL_CUDA_RUNTIME"])
    lib.fakeCudaMalloc.restype = ctypes.c_void_p
    lib.fakeCudaMalloc.argtypes = [ctypes.c_size_t]
    lib.fakeCudaCopies.restype = ctypes.c_long
    lib.fakeCudaCopies.argtypes = [ctypes.c_int]
    lib.fakeCudaFailAfter.argtypes = [ctypes.c_long]
    FakeGpuArray.lib = lib
    return lib


def data(q, n, dtype, seed=0):
    g = np.random.default_rng(1000 * seed + q)
    return g.integers(-4, 5, size=n).astype(dtype)


def ops():
    lib = load()
    rc = init()
    r, p = rc.rank(), rc.size()
    bad = []

    def expect(name, ok, detail=""):
        if not ok:
            bad.append(f"{name} {detail}".strip())

    # allreduce: sizes of 0, 1, part of a chunk, several chunks, more than the ring
    for n in (0, 1, 1000, 3 * CHUNK // 4 + 5, 5 * CHUNK + 3):
        for dtype, op, ref in (
            (np.float32, rc.Sum, lambda xs: np.sum(xs, axis=0)),
            (np.int32, rc.Max, lambda xs: np.max(xs, axis=0)),
            (np.float64, rc.Average, lambda xs: np.mean(xs, axis=0)),
        ):
            xs = [data(q, n, dtype) for q in range(p)]
            x = FakeGpuArray.of(xs[r])
            down, up = lib.fakeCudaCopies(2), lib.fakeCudaCopies(1)
            y = rc.allreduce(device_array(rc, x), op=op, name=f"ar.{n}.{np.dtype(dtype).name}")
            got = y.host if isinstance(y, FakeGpuArray) else None
            expect(f"allreduce n={n} {np.dtype(dtype).name} result type", isinstance(y, FakeGpuArray), type(y).__name__)
            expect(f"allreduce n={n} {np.dtype(dtype).name}", got is not None and np.allclose(got, ref(np.stack(xs))))
            chunks = max(1, -(-n * np.dtype(dtype).itemsize // CHUNK))
            copies = (lib.fakeCudaCopies(2) - down, lib.fakeCudaCopies(1) - up)
            expect(f"allreduce n={n} copies", copies == ((chunks, chunks) if n else (0, 0)), f"{copies} for {chunks}")
    # in place, out= elsewhere, and the async form
    xs = [data(q, 3 * CHUNK, np.float32, 1) for q in range(p)]
    x = FakeGpuArray.of(xs[r])
    out = rc.allreduce(x, op=rc.Sum, out=x, name="inplace")
    expect("allreduce in place", out is x and np.array_equal(x.host, np.sum(xs, axis=0)))
    x, o = FakeGpuArray.of(xs[r]), FakeGpuArray(xs[r].shape, np.float32)
    out = rc.allreduce(x, op=rc.Sum, out=o, name="out")
    expect("allreduce out=", out is o and np.array_equal(o.host, np.sum(xs, axis=0)) and np.array_equal(x.host, xs[r]))
    h = rc.allreduce_async(device_array(rc, FakeGpuArray.of(xs[r])), op=rc.Sum, name="async")
    expect("allreduce_async", np.array_equal(rc.synchronize(h).host, np.sum(xs, axis=0)))
    # broadcast from every root, in place and not, more chunks than the ring holds
    for n in (7, 9 * CHUNK // 4):
        for root in range(p):
            xs = [data(q, n, np.float32, 2) for q in range(p)]
            y = rc.broadcast(device_array(rc, FakeGpuArray.of(xs[r])), root, name=f"bc.{n}.{root}")
            expect(f"broadcast n={n} root {root}", np.array_equal(y.host, xs[root]))
            x = FakeGpuArray.of(xs[r])
            rc.broadcast(x, root, out=x, name=f"bci.{n}.{root}")
            expect(f"broadcast in place n={n} root {root}", np.array_equal(x.host, xs[root]))
    # the collectives staged whole, through a DeviceArray with new=
    rows = [q + 1 for q in range(p)]
    xs = [data(q, rows[q] * 3, np.float32, 3).reshape(rows[q], 3) for q in range(p)]
    g = rc.allgather(device_array(rc, FakeGpuArray.of(xs[r])), name="ag")
    expect("allgather", isinstance(g, FakeGpuArray) and np.array_equal(g.host, np.concatenate(xs)))
    m = [data(q, 4 * p * 5, np.float32, 4).reshape(4 * p, 5) for q in range(p)]
    s = rc.reducescatter(device_array(rc, FakeGpuArray.of(m[r])), op=rc.Sum, name="rs")
    expect("reducescatter", np.array_equal(s.host, np.sum(m, axis=0)[4 * r : 4 * r + 4]))
    a = [np.arange(2 * p, dtype=np.float32) + 100 * q for q in range(p)]
    t = rc.alltoall(device_array(rc, FakeGpuArray.of(a[r])), name="a2a")
    expect("alltoall", np.array_equal(t.host, np.concatenate([a[q][2 * r : 2 * r + 2] for q in range(p)])))
    # refusals: an address no GPU owns (before anything is sent), a result nobody can make
    stranger = rc.DeviceArray(0x10000, (4,), np.float32, -1, 0)
    try:
        rc.allreduce(stranger, name="stranger")
        expect("an address no GPU owns is refused", False)
    except rc.RdmacollError as e:
        expect("an address no GPU owns is refused", "not CUDA device memory" in str(e), str(e))
    try:
        rc.allgather(FakeGpuArray.of(np.ones(3, np.float32)), name="no result")
        expect("a result nobody can make is refused", False)
    except rc.RdmacollError as e:
        expect("a result nobody can make is refused", "cannot make a result" in str(e), str(e))
    rc.barrier()  # (every rank is still in step after the refusals)
    emit("done", bad=bad, pinned=bool(rc._session.current().comm.device.pinned))
    rc.shutdown()


def join():
    load()
    rc = init()
    from rdmacoll.frameworks import _join

    r, p = rc.rank(), rc.size()
    bad = []
    if r == p - 1:
        last = _join.join()
    else:
        for i, n in enumerate((5, 3 * CHUNK + 7, 5)):  # (several chunks in the middle)
            xs = [data(q, n, np.float32, 5 + i) for q in range(p - 1)]
            x = FakeGpuArray.of(xs[r])
            d = device_array(rc, x)
            _join.allreduce(d, op=rc.Sum, name=f"joined.{i}", out=d)
            if not np.array_equal(x.host, np.sum(xs, axis=0)):
                bad.append(f"allreduce {i} with rank {p - 1} joined")
        last = _join.join()
    emit("done", bad=bad, last=int(last))
    rc.shutdown()


def fail():
    lib = load()
    rc = init()
    r = rc.rank()
    if r == 0:
        lib.fakeCudaFailAfter(3)  # the 4th copy of the next call fails
    error = None
    try:
        x = FakeGpuArray.of(np.ones(8 * CHUNK // 4, np.float32))
        rc.allreduce(x, op=rc.Sum, name="fails", out=x)
    except rc.RdmacollError as e:
        error = str(e)
    emit("done", error=error)


if __name__ == "__main__":
    main({"ops": ops, "join": join, "fail": fail}[sys.argv[1]])
