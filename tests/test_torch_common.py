"""rdmacoll.frameworks._common (framework-neutral: no torch needed), in process."""

import pytest

from rdmacoll import RdmacollError
from rdmacoll.frameworks import _common as c


def test_parse_bytes():
    assert c.parse_bytes("1048576") == 1 << 20
    assert c.parse_bytes("64K") == c.parse_bytes("64KiB") == c.parse_bytes("64kb") == 65536
    assert c.parse_bytes(" 1.5M ") == 3 << 19
    assert c.parse_bytes("0") == 0
    for bad in ("", "M", "12X", "-3", "1.2.3"):
        with pytest.raises(ValueError):
            c.parse_bytes(bad)


def test_fusion_threshold(monkeypatch):
    monkeypatch.delenv("RDMACOLL_FUSION_THRESHOLD", raising=False)
    monkeypatch.delenv("HOROVOD_FUSION_THRESHOLD", raising=False)
    assert c.fusion_threshold() == c.DEFAULT_FUSION_THRESHOLD
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "1M")
    assert c.fusion_threshold() == 1 << 20
    monkeypatch.setenv("RDMACOLL_FUSION_THRESHOLD", "4K")
    assert c.fusion_threshold() == 4096
    monkeypatch.setenv("RDMACOLL_FUSION_THRESHOLD", "lots")
    with pytest.raises(RdmacollError, match="RDMACOLL_FUSION_THRESHOLD"):
        c.fusion_threshold()


def test_plan_buckets():
    f, d = "float32", "float64"
    assert c.plan_buckets([], 100) == []
    assert c.plan_buckets([(f, 40), (f, 40), (f, 40)], 100) == [[0, 1], [2]]
    assert c.plan_buckets([(f, 400), (f, 4)], 100) == [[0], [1]]  # too big: alone
    assert c.plan_buckets([(f, 4), (d, 8), (d, 8), (f, 4)], 100) == [[0], [1, 2], [3]]
    assert c.plan_buckets([(f, 4)] * 3, 0) == [[0], [1], [2]]


def test_dense_span_and_align():
    assert c.dense_span((2, 3), (3, 1)) == 6
    assert c.dense_span((2, 3, 4, 5), (60, 1, 15, 3)) == 120  # channels_last
    assert c.dense_span((3, 2), (1, 3)) == 6  # transposed
    assert c.dense_span((0, 5), (5, 1)) == 0
    assert c.dense_span((), ()) == 1
    assert c.align_up(0, 64) == 0 and c.align_up(1, 64) == 64 and c.align_up(128, 64) == 128


def test_signature_and_first_difference():
    a = [("w", (2, 3), "float32", True), ("b", (3,), "float32", True)]
    b = [("w", (2, 3), "float32", True), ("b", (4,), "float32", True)]
    assert c.signature_digest(a) == c.signature_digest(list(a)) != c.signature_digest(b)
    assert c.first_difference([a, a]) is None
    assert c.first_difference([a, b, a]) == (1, {0: a[1], 1: b[1], 2: a[1]})
    assert c.first_difference([a, a[:1]]) == (1, {0: a[1], 1: None})


def test_none_compressor():
    x = object()
    assert c.NoneCompressor.compress(x) == (x, None)
    assert c.NoneCompressor.decompress(x, None) is x
