"""NumPy references for reductions, shared by the pytest process and the MPI workers.

Nothing here imports rdmacoll: the references are computed independently of the core.

Floating-point comparisons. The core folds in a different order per algorithm (eager:
rank order, one rounding; ring: chunk c starts at rank c+1 and goes around the ring,
rounding to the dtype after every step), so no single rounded fold reproduces every
algorithm bit for bit. Instead results are compared with the exact value (a float64
fold) within the classic bound for p-term sums: each of the p-1 steps plus the final
scale rounds once, each rounding is at most eps/2 of a partial result, and every partial
result is at most sum(|x|). Min and Max round nothing and must match exactly (NaN
included); integers must match exactly.
"""

from __future__ import annotations

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is in the test extras
    ml_dtypes = None

DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "int16"]
FLOATS = {"float16", "bfloat16", "float32", "float64"}
OPS = ["Sum", "Average", "Min", "Max", "Product"]
# What a transport sees of a dtype is its element width (byte counts, alignment): one dtype
# per width, for a transport's own runs where shm and tcp already ran the whole matrix
# (the Soft-RoCE guest, where each case costs ~10x under emulation).
ONE_PER_WIDTH = ["uint8", "float16", "float32", "float64"]
SIZES = [0, 1, 7, 1023, 2**20 + 3]


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        if ml_dtypes is None:
            raise RuntimeError("bfloat16 tests need ml_dtypes (pip install ml_dtypes)")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def finfo(name: str):
    return ml_dtypes.finfo(ml_dtypes.bfloat16) if name == "bfloat16" else np.finfo(name)


# --------------------------------------------------------------------------- inputs


class Inputs:
    """Deterministic per-rank inputs: every rank can rebuild every other rank's input.

    One random base per (rank, count) is drawn once; each dtype/op derives its input from
    it by cheap transforms, so a whole matrix costs two draws per rank.
    """

    def __init__(self, nranks: int, count: int):
        self.nranks, self.count = nranks, count
        self._bases = {}  # rank -> (normal, bits), drawn on first use
        i = np.arange(count)
        self._mod7, self._mod11, self._even = i % 7, i % 11, i % 2 == 0

    def _base(self, rank: int):
        if rank not in self._bases:
            rng = np.random.default_rng([20240611, rank, self.count])
            normal = rng.standard_normal(self.count)
            bits = rng.integers(
                np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=self.count, dtype=np.int64, endpoint=True
            )
            # the small integers too, once: every integer dtype and op of the rank takes them
            self._bases[rank] = (normal, bits, bits % 21 - 10, bits % 256)
        return self._bases[rank]

    def get(self, rank: int, dtype: str, op: str) -> np.ndarray:
        dt = np_dtype(dtype)
        normal, bits, signed_small, unsigned_small = self._base(rank)
        if dtype in FLOATS:
            if op == "Product":  # stay near 1: no overflow, no underflow after p factors
                return (1.0 + np.clip(normal, -2.0, 2.0) / 32.0).astype(dt)
            x = (normal * 8.0).astype(dt)
            if op in ("Min", "Max") and self.count:
                # NaN from every rank at its own positions, one position where all ranks
                # have NaN, and infinities: propagation must not depend on who has it.
                x[self._mod7 == rank + 1] = np.nan
                x[self._mod11 == rank + 2] = np.inf if rank % 2 else -np.inf
                x[0] = np.nan if self.count > 1 else x[0]
            return x
        # Integers: half small values (negative ones for signed types), half the full
        # range, so that sums and products wrap.
        small = signed_small if dt.kind == "i" else unsigned_small
        full = bits.astype(dt)  # keeps the low bits: any value of the type
        return np.where(self._even, small.astype(dt), full)

    def all(self, dtype: str, op: str) -> list:
        return [self.get(r, dtype, op) for r in range(self.nranks)]


# --------------------------------------------------------------------------- references


_UFUNC = {"Sum": np.add, "Average": np.add, "Product": np.multiply, "Min": np.minimum, "Max": np.maximum}


def fold(inputs, op: str, dtype: np.dtype) -> np.ndarray:
    """Fold in rank order with NumPy ufuncs computed in `dtype` (integers wrap)."""
    acc = inputs[0].astype(dtype, copy=True)
    for x in inputs[1:]:
        with np.errstate(all="ignore"):
            _UFUNC[op](acc, x.astype(dtype, copy=False), out=acc)
    return acc


def reference(inputs, dtype: str, op: str):
    """(expected, tolerance): tolerance is None where the result must match exactly."""
    p = len(inputs)
    if dtype not in FLOATS:
        acc = fold(inputs, op, np_dtype(dtype))
        if op == "Average" and p > 1:  # Horovod's: the wrapped sum times 1/p in float64, truncated
            acc = np.trunc(acc.astype(np.float64) * (1.0 / p)).astype(np.int64).astype(acc.dtype)
        return acc, None
    wide = [x.astype(np.float64) for x in inputs]
    if op in ("Min", "Max"):
        return fold(wide, op, np.float64), None
    with np.errstate(all="ignore"):
        exact = fold(wide, op, np.float64)
        eps = float(finfo(dtype).eps)
        tiny = float(finfo(dtype).smallest_subnormal)
        if op == "Product":
            scale_of_error = np.abs(exact)
        else:
            scale_of_error = fold([np.abs(w) for w in wide], "Sum", np.float64)
        if op == "Average":
            exact = exact / p
            scale_of_error = scale_of_error / p
        tol = p * eps * scale_of_error + p * tiny
    return exact, tol


def compare(result: np.ndarray, expected: np.ndarray, tol) -> str | None:
    """None when result matches, else a short description of the first differences."""
    if result.shape != expected.shape:
        return f"shape {result.shape}, expected {expected.shape}"
    if tol is None and result.dtype.kind in "iu":
        bad = result != expected
    else:
        got = result.astype(np.float64)
        with np.errstate(all="ignore"):
            nan_got, nan_exp = np.isnan(got), np.isnan(expected)
            if tol is None:
                bad = (got != expected) & ~(nan_got & nan_exp)
            else:
                bad = ~(np.abs(got - expected) <= tol) & ~(nan_got & nan_exp)
            bad |= nan_got != nan_exp
    nbad = int(np.count_nonzero(bad))
    if nbad == 0:
        return None
    idx = np.flatnonzero(bad)[:5]
    shown = ", ".join(
        f"[{i}] got {result.flat[i]!r} expected {expected.flat[i]!r}"
        + (f" (tol {tol.flat[i]:.3g})" if tol is not None else "")
        for i in idx
    )
    return f"{nbad} of {result.size} elements differ: {shown}"


# --------------------------------------------------------------------------- Adasum

ADASUM_TINY = np.sqrt(np.finfo(np.float64).tiny)  # Horovod's sqrt(DBL_MIN)


def adasum_pair(a, b, dtype):
    """Horovod's adasum.h: a' = (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b, in float64,
    rounded to dtype (a coefficient is 1 where its |.|^2 is below sqrt(DBL_MIN))."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    dot, na, nb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 - dot / na * 0.5 if na >= ADASUM_TINY else 1.0
    cb = 1.0 - dot / nb * 0.5 if nb >= ADASUM_TINY else 1.0
    return (ca * a + cb * b).astype(dtype)


def adasum_tree(vectors, dtype):
    """Every rank's vector combined as Horovod's Adasum tree: level 1 combines ranks 2k and
    2k+1, level 2 those results pairwise, and so on (a power-of-two number of vectors)."""
    vs = [np.asarray(v, dtype).reshape(-1) for v in vectors]
    while len(vs) > 1:
        vs = [adasum_pair(vs[i], vs[i + 1], dtype) for i in range(0, len(vs), 2)]
    return vs[0]
