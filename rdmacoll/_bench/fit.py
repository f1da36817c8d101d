"""The cost model's fit: alpha, beta, gamma >= 0 from measured times, by a true
non-negative least squares on relative error (rdmacoll-bench --tune).

Each time t of an algorithm at a size is modelled as a . x, where a holds the algorithm's
steps, bytes moved and bytes reduced (its cost formula at the unit constants) and
x = (alpha, beta, gamma). Relative error weighs a 10 us time as much as a 10 ms one:
minimise sum(((a . x - t) / t)^2) subject to x >= 0.

With three unknowns the problem is solved exactly: the optimum is the unconstrained
least-squares solution on its own support, so solving on each of the 8 subsets of the
unknowns and keeping the best non-negative one finds it. scipy.optimize.nnls (an active
set method) solves the same problem when SciPy is installed; SciPy is not a dependency.
"""

from __future__ import annotations

import itertools

import numpy as np


def _scipy_nnls():
    try:
        from scipy.optimize import nnls
    except ImportError:
        return None
    return nnls


def nnls_exact(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ||A x - b|| over x >= 0, by least squares on every subset of the columns
    (exact; meant for a few columns: 2^n subsets)."""
    n = A.shape[1]
    best, best_res = np.zeros(n), float(b @ b)  # the empty subset: x = 0
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sol, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
            if (sol < 0).any():
                continue  # not feasible; the optimum on this support has a zero elsewhere
            x = np.zeros(n)
            x[list(cols)] = sol
            r = A @ x - b
            res = float(r @ r)
            if res < best_res:
                best, best_res = x, res
    return best


def nnls(A: np.ndarray, b: np.ndarray, use_scipy: bool | None = None) -> np.ndarray:
    """argmin ||A x - b|| over x >= 0: scipy.optimize.nnls when SciPy is installed (or
    use_scipy=True), else nnls_exact. Columns are scaled to unit norm first (steps and
    bytes differ by orders of magnitude) and the solution scaled back."""
    A = np.asarray(A, dtype=float)
    b = np.asarray(b, dtype=float)
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    scaled = A / norms
    solver = _scipy_nnls() if use_scipy is not False else None
    if use_scipy and solver is None:
        raise ImportError("scipy.optimize.nnls is not installed")
    x = solver(scaled, b)[0] if solver is not None else nnls_exact(scaled, b)
    return np.maximum(x, 0.0) / norms


def _nnls_relative(rows, use_scipy: bool | None = None) -> np.ndarray:
    A = np.array([r[0] / r[1] for r in rows])
    return nnls(A, np.ones(len(rows)), use_scipy)


def fit_cost_model(rows: list[tuple[np.ndarray, float]], use_scipy: bool | None = None) -> tuple[np.ndarray, list[int]]:
    """x = (alpha, beta, gamma) >= 0 minimising sum(((a . x - t) / t)^2) over rows (a, t);
    a constant the data cannot support comes out 0. Times the fit misses by more than 3x
    either way (noise from other processes, or an algorithm far from its formula) are left
    out and the rest refitted. Returns x and the indices of the rows left out."""
    keep = list(range(len(rows)))
    x = _nnls_relative(rows, use_scipy)
    for _ in range(5):
        ratio = [float(rows[i][0] @ x) / rows[i][1] for i in range(len(rows))]
        new = [i for i in range(len(rows)) if 1 / 3 <= ratio[i] <= 3]
        if new == keep or len(new) < 3:
            break
        keep = new
        x = _nnls_relative([rows[i] for i in keep], use_scipy)
    return x, [i for i in range(len(rows)) if i not in keep]
