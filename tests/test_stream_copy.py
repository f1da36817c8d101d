"""The core's streaming copy (common/stream_copy.h), in process: bytes equal to the source
for every size around the threshold and every alignment (and at every size with
always=True: streamStore, which the same-host transport uses for writes into a peer's
mapping when plain ones measure slow), overlapping views, and the
errors of a bad destination; and the torch adapter's copy_into that uses it."""

import numpy as np
import pytest

from rdmacoll import RdmacollError, _core

MIN = _core.STREAM_COPY_MIN_BYTES


@pytest.mark.parametrize("nbytes", [0, 1, 63, 64, 4097, MIN - 1, MIN, MIN + 1, MIN + 63, 3 * MIN + 17])
@pytest.mark.parametrize("dst_off,src_off", [(0, 0), (1, 0), (0, 5), (33, 7), (63, 63)])
@pytest.mark.parametrize("always", [False, True])
def test_bytes_equal_source(nbytes, dst_off, src_off, always):
    rng = np.random.default_rng(nbytes + dst_off)
    src_buf = rng.integers(0, 256, nbytes + src_off, dtype=np.uint8)
    dst_buf = np.full(nbytes + dst_off + 64, 0xAB, np.uint8)
    src = src_buf[src_off:]
    dst = dst_buf[dst_off : dst_off + nbytes]
    _core.stream_copy(dst, src, always=always)
    assert np.array_equal(dst, src)
    # nothing written before or after the destination
    assert (dst_buf[:dst_off] == 0xAB).all() and (dst_buf[dst_off + nbytes :] == 0xAB).all()


def test_dtypes_and_shapes():
    for dtype in (np.float32, np.float64, np.int64, np.float16):
        src = np.arange(MIN // 2, dtype=dtype).reshape(8, -1)
        dst = np.zeros_like(src)
        _core.stream_copy(dst, src)
        assert np.array_equal(dst, src)


def test_overlapping_views_of_one_buffer():
    for n in (1000, MIN):
        x = np.arange(n + 10, dtype=np.uint8)
        want = x[10:].copy()
        _core.stream_copy(x[:n], x[10:])
        assert np.array_equal(x[:n], want)


def test_bad_destinations():
    src = np.zeros(16, np.float32)
    with pytest.raises(RdmacollError, match="shape"):
        _core.stream_copy(np.zeros(15, np.float32), src)
    with pytest.raises(RdmacollError, match="dtype"):
        _core.stream_copy(np.zeros(16, np.float64), src)
    ro = np.zeros(16, np.float32)
    ro.flags.writeable = False
    with pytest.raises(RdmacollError, match="read-only"):
        _core.stream_copy(ro, src)
    with pytest.raises(RdmacollError, match="contiguous"):
        _core.stream_copy(np.zeros((16, 2), np.float32)[:, 0], src)


def test_torch_copy_into():
    torch = pytest.importorskip("torch")
    from rdmacoll.frameworks.torch._tensors import copy_into

    big = torch.randn(MIN // 4 + 3)  # streamed
    dst = torch.zeros_like(big)
    copy_into(dst, big)
    assert torch.equal(dst, big)
    cl = torch.randn(4, 64, 32, 32).contiguous(memory_format=torch.channels_last)
    dst = torch.zeros(4, 64, 32, 32).contiguous(memory_format=torch.channels_last)
    copy_into(dst, cl.contiguous())  # strides differ: torch's copy
    assert torch.equal(dst, cl)
    half = torch.randn(MIN // 2).half()
    dst = torch.zeros(MIN // 2)
    copy_into(dst, half)  # dtypes differ: torch's copy
    assert torch.equal(dst, half.float())
