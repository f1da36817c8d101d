"""Pure functions of the core, without any transport: the ring's chunk arithmetic
(csrc/algorithms/partition.h), the reduction kernels (csrc/reduce/reduce.h) and the call
descriptor hash."""

import itertools

import numpy as np
import pytest

from rdmacoll import _core
import _rdmacoll_testing as _testing
from reference import DTYPES, FLOATS, OPS, fold, np_dtype

RANKS = range(1, 65)
COUNTS = [0, 1, 2, 3, 7, 63, 64, 65, 1023, 4096, 2**20 + 3, 10**12 + 7]


# --------------------------------------------------------------------------- chunks


@pytest.mark.parametrize("p", RANKS)
def test_chunks_tile_the_count(p):
    for count in COUNTS + [p - 1, p, p + 1, 3 * p - 1]:
        begins = [_testing.chunk_begin(count, p, c) for c in range(p + 1)]
        assert begins[0] == 0 and begins[p] == count, (count, p, begins)
        sizes = [b - a for a, b in zip(begins, begins[1:])]
        assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1, (count, p, sizes)
        # the first count % p chunks are the larger ones
        assert sizes == sorted(sizes, reverse=True), (count, p, sizes)
        assert sum(s == count // p + 1 for s in sizes) == (count % p if count % p else 0)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 63, 64])
@pytest.mark.parametrize("seg_elems", [1, 3, 1024, 262144])
def test_segments_per_chunk(p, seg_elems):
    for count in COUNTS:
        largest = _testing.chunk_begin(count, p, 1) - _testing.chunk_begin(count, p, 0)
        nseg = _testing.segments_per_chunk(count, p, seg_elems)
        if largest == 0:
            assert nseg == 1, (count, p, seg_elems, nseg)
        else:
            assert (nseg - 1) * seg_elems < largest <= nseg * seg_elems, (count, p, seg_elems, nseg)


# --------------------------------------------------------------------------- ring schedule


@pytest.mark.parametrize("p", RANKS)
def test_ring_schedule(p):
    steps = 2 * (p - 1)
    chunk = [[_testing.ring_chunk(r, j, p) for j in range(steps)] for r in range(p)]
    prev = [(r - 1) % p for r in range(p)]
    for r in range(p):
        for j in range(p - 1):  # reduce-scatter: step j handles chunk r-j-1
            assert chunk[r][j] == (r - j - 1) % p, (p, r, j)
        for j in range(1, steps):  # each step consumes what prev produced the step before
            assert chunk[r][j] == chunk[prev[r]][j - 1], (p, r, j)
        owned = (r + 1) % p
        if p > 1:
            assert chunk[r][p - 2] == owned  # the chunk r owns after reduce-scatter
        # reduce-scatter touches every chunk but r's own input chunk once; allgather
        # receives every chunk but the owned one once
        assert sorted(chunk[r][: p - 1]) == [c for c in range(p) if c != r], (p, r)
        assert sorted(chunk[r][p - 1 :]) == [c for c in range(p) if c != owned], (p, r)

    # Simulate the data flow: have[r][c] is the set of ranks whose inputs rank r's copy
    # of chunk c holds (a bit mask).
    everyone = (1 << p) - 1
    have = [[1 << r] * p for r in range(p)]
    for j in range(steps):
        sent = [list(h) for h in have]  # everyone's state at the end of step j-1
        for r in range(p):
            c, theirs = chunk[r][j], sent[prev[r]][chunk[r][j]]
            if j < p - 1:
                assert not theirs & (1 << r), f"rank {r}'s input would be reduced twice (p={p})"
                have[r][c] |= theirs
            else:
                assert have[r][c] != everyone, f"rank {r} receives chunk {c} twice (p={p})"
                have[r][c] = theirs
        if j == p - 2:
            for r in range(p):
                assert have[r][(r + 1) % p] == everyone, f"owned chunk incomplete (p={p}, rank {r})"
    for r in range(p):
        assert all(h == everyone for h in have[r]), f"rank {r} ends without every chunk (p={p})"


# --------------------------------------------------------------------------- kernels


def _inputs(dtype, nin, count, seed):
    rng = np.random.default_rng([seed, nin, count, DTYPES.index(dtype)])
    dt = np_dtype(dtype)
    if dtype not in FLOATS:
        info = np.iinfo(dt)
        return [rng.integers(info.min, info.max, count, dtype=dt, endpoint=True) for _ in range(nin)]
    xs = []
    for k in range(nin):
        x = rng.standard_normal(count) * 4
        if count >= 16:
            # specials at positions that differ per input: NaN, infinities, signed zero,
            # values that overflow float16 when added, subnormals
            x[(k + 1) :: 17] = np.nan
            x[(k + 5) :: 19] = np.inf
            x[(k + 9) :: 23] = -np.inf
            x[(k + 3) :: 29] = -0.0
            x[(k + 7) :: 31] = 6.0e4
            x[(k + 2) :: 37] = 3.0e-6
            x[(k + 4) :: 41] = 1.0e-40
        xs.append(x.astype(dt))
    return xs


def _expected(dtype, op, xs, scale):
    """What reduce.h promises: left to right; floats (16-bit widened to float32) computed
    in float32/float64 and rounded once; scale multiplied in float32 (float64 for float64)."""
    dt = np_dtype(dtype)
    if dtype not in FLOATS:
        acc = fold(xs, op, dt)
        if scale != 1.0:  # Horovod's ScaleBuffer: in float64, truncated toward zero
            acc = np.trunc(acc.astype(np.float64) * scale).astype(np.int64).astype(dt)
        return acc
    acc_t = np.float64 if dtype == "float64" else np.float32
    with np.errstate(all="ignore"):
        acc = fold([x.astype(acc_t) for x in xs], op, acc_t)
        if scale != 1.0:
            acc = acc * acc_t(scale)
        return acc.astype(dt)


def _same(got, want):
    if got.dtype.kind in "iu":
        return np.array_equal(got, want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    return np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(g[~np.isnan(g)], w[~np.isnan(w)])


KERNEL_COUNTS = [0, 1, 7, 33, 4097, 10007]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_local(dtype, op):
    code, opcode = _core.DTYPES[dtype], _core.OPS[op]
    scales = [0.25, 1 / 3] if op == "Average" else [1.0, 1 / 3]
    for count, nin, scale in itertools.product(KERNEL_COUNTS, [1, 2, 3, 4], scales):
        xs = _inputs(dtype, nin, count, 1)
        want = _expected(dtype, op, xs, scale)
        out = np.empty_like(xs[0])
        _core.reduce_local(code, opcode, out, xs, scale)
        assert _same(out, want), f"{dtype} {op} count={count} inputs={nin} scale={scale}"
        # in place: out aliases the first or the last input
        for alias in {0, nin - 1}:
            ys = [x.copy() for x in xs]
            _core.reduce_local(code, opcode, ys[alias], ys, scale)
            assert _same(ys[alias], want), f"{dtype} {op} count={count} inputs={nin} in place on input {alias}"


def test_integer_scale_truncates_toward_zero_like_horovod():
    # Horovod's ScaleBuffer: T(scale * v) in float64: -7 * 0.5 = -3.5 -> -3, not floor's -4
    for dtype in ("int8", "int16", "int32", "int64"):
        x = np.array([-7, 7, -1, 5], np_dtype(dtype))
        out = np.empty_like(x)
        _core.reduce_local(_core.DTYPES[dtype], _core.OPS["Average"], out, [x], 0.5)
        assert out.tolist() == [-3, 3, 0, 2], (dtype, out)


def test_bool_is_not_reduced():
    x = np.array([True, False])
    with pytest.raises(_core.RdmacollError, match="cannot be reduced"):
        _core.reduce_local(_core.DTYPES["bool"], _core.OPS["Sum"], np.empty_like(x), [x, x], 1.0)


@pytest.mark.parametrize("dtype", sorted(FLOATS))
@pytest.mark.parametrize("op", ["Min", "Max"])
def test_nan_propagates(dtype, op):
    dt = np_dtype(dtype)
    a = np.array([np.nan, 1, np.nan, -2, np.inf], dt)
    b = np.array([0, np.nan, np.nan, np.nan, np.nan], dt)
    for xs in ([a, b], [b, a], [a, a[::-1].copy(), b]):
        out = np.empty_like(a)
        _core.reduce_local(_core.DTYPES[dtype], _core.OPS[op], out, xs, 1.0)
        assert np.isnan(out.astype(np.float64)).all(), f"{dtype} {op}: {out}"


def test_integer_wrap():
    i32 = np.iinfo(np.int32)
    cases = [
        ("int32", "Sum", [i32.max, 1], i32.min),
        ("int32", "Product", [65536, 65536], 0),
        ("int32", "Product", [i32.min, -1], i32.min),
        ("int64", "Sum", [np.iinfo(np.int64).max, 2], np.iinfo(np.int64).min + 1),
        ("uint8", "Sum", [200, 100], 44),
        ("uint8", "Product", [16, 17], 16),
    ]
    for dtype, op, values, want in cases:
        dt = np_dtype(dtype)
        xs = [np.array([v], dt) for v in values]
        out = np.empty(1, dt)
        _core.reduce_local(_core.DTYPES[dtype], _core.OPS[op], out, xs, 1.0)
        assert out[0] == np.array(want).astype(dt), (dtype, op, values, out[0])


def test_half_precision_rounds_once_to_nearest_even():
    # 1 + 2**-11 is halfway between two float16 values: ties go to even (1.0);
    # summed in float32 first, 1 + 2**-11 + 2**-11 = 1 + 2**-10 is exact.
    f16 = np.float16
    tie = np.array([1.0], f16), np.array([2.0**-11], np.float32).astype(f16)
    out = np.empty(1, f16)
    _core.reduce_local(_core.DTYPES["float16"], _core.OPS["Sum"], out, list(tie), 1.0)
    assert out[0] == f16(1.0)
    _core.reduce_local(_core.DTYPES["float16"], _core.OPS["Sum"], out, [tie[0], tie[1], tie[1]], 1.0)
    assert out[0] == f16(1.0 + 2.0**-10), "partial sums must not be rounded to float16 in between"
    bf = np_dtype("bfloat16")
    one, half_ulp = np.array([1.0], np.float32).astype(bf), np.array([2.0**-8], np.float32).astype(bf)
    out = np.empty(1, bf)
    _core.reduce_local(_core.DTYPES["bfloat16"], _core.OPS["Sum"], out, [one, half_ulp], 1.0)
    assert float(out[0]) == 1.0
    _core.reduce_local(_core.DTYPES["bfloat16"], _core.OPS["Sum"], out, [one, half_ulp, half_ulp], 1.0)
    assert float(out[0]) == 1.0 + 2.0**-7
    big = np.array([6.0e4], f16)
    out16 = np.empty(1, f16)
    _core.reduce_local(_core.DTYPES["float16"], _core.OPS["Sum"], out16, [big, big], 1.0)
    assert np.isinf(out16[0]), "float16 overflow rounds to inf"


# --------------------------------------------------------------------------- descriptor hash


def test_descriptor_hash_sees_every_field():
    base = dict(coll=1, seq=5, dtype=2, count=1000, op=0, root=-1, name_hash=0, algo=2, seg=1 << 20, shape_hash=0)
    h0 = _testing.hash_descriptor(*base.values())
    assert h0 == _testing.hash_descriptor(*base.values())
    for field, other in [
        ("coll", 2),
        ("seq", 6),
        ("dtype", 3),
        ("count", 1001),
        ("op", 1),
        ("root", 0),
        ("name_hash", 12345),
        ("algo", 3),
        ("seg", 1 << 19),
        ("shape_hash", 7),
    ]:
        changed = dict(base, **{field: other})
        assert _testing.hash_descriptor(*changed.values()) != h0, f"{field} does not change the hash"
