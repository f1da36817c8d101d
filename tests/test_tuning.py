"""Honest tuning: the fit of the cost model's constants (a true non-negative least squares,
checked against synthetic timings made from known constants)."""
import numpy as np
import pytest

from rdmacoll import _core
from rdmacoll._bench import fit
from rdmacoll._bench.tune import _coefficients

K, M = 1 << 10, 1 << 20
ALLREDUCE = [name for name, _ in _core.algorithms()]
try:
    import scipy.optimize  # noqa: F401

    SOLVERS = [False, True]
except ImportError:
    SOLVERS = [False]


# --------------------------------------------------------------------------- the fit


def _greedy(A, b):
    """The fit before issue 17: least squares, drop every negative coefficient for good,
    refit on the rest."""
    free, x = [0, 1, 2], np.zeros(3)
    while free:
        sol, *_ = np.linalg.lstsq(A[:, free], b, rcond=None)
        if (sol > 0).all():
            x[free] = sol
            break
        free = [f for f, v in zip(free, sol) if v > 0]
    return x


def _check_kkt(A, b, x, tol=1e-9):
    """x is the NNLS optimum iff x >= 0 and the gradient g = A'(Ax - b) is 0 where x > 0
    and >= 0 where x = 0 (the problem is convex: these conditions are sufficient)."""
    g = A.T @ (A @ x - b)
    scale = np.linalg.norm(A, axis=0) * np.linalg.norm(b)
    assert (x >= 0).all()
    for i in range(len(x)):
        if x[i] > 0:
            assert abs(g[i]) <= tol * scale[i], (i, x, g)
        else:
            assert g[i] >= -tol * scale[i], (i, x, g)


@pytest.mark.parametrize("use_scipy", SOLVERS)
def test_nnls_is_the_optimum_on_random_problems(use_scipy):
    rng = np.random.default_rng(17)
    zeros = 0
    for _ in range(300):
        A = rng.normal(size=(rng.integers(3, 9), 3))
        b = rng.normal(size=A.shape[0])
        x = fit.nnls(A, b, use_scipy=use_scipy)
        _check_kkt(A, b, x)
        zeros += (x == 0).any()
    assert 50 < zeros < 300, "the problems must exercise both bound and free constants"


def test_nnls_where_dropping_negatives_greedily_is_wrong():
    # Unconstrained, x = (2, -1e-15, -2): the greedy fit drops x1 and x2 for good and ends at
    # (0.857, 0, 0), residual 6.86; the optimum brings x1 back: (0.105, 1.053, 0), 0.84.
    A = np.array([[2.0, 0.0, 2.0], [1.0, 2.0, 0.0], [1.0, 2.0, 0.0], [1.0, 1.0, 0.0]])
    b = np.array([0.0, 2.0, 2.0, 2.0])
    greedy = _greedy(A, b)
    x = fit.nnls(A, b, use_scipy=False)
    _check_kkt(A, b, x)
    res = lambda v: float(np.sum((A @ v - b) ** 2))  # noqa: E731
    assert res(greedy) == pytest.approx(48 / 7) and greedy[1] == greedy[2] == 0
    assert x == pytest.approx([2 / 19, 20 / 19, 0]) and res(x) == pytest.approx(16 / 19)
    with pytest.raises(AssertionError):
        _check_kkt(A, b, greedy)


def _synthetic(alpha, beta, gamma, p=4, sizes=(8, 1 * K, 4 * K, 16 * K, 64 * K, 256 * K, M), noise=None):
    """(coefficients, time) of every allreduce algorithm at each size: the times the cost
    formulas give for the constants, times (1 + noise) per row."""
    rows = []
    for n in sizes:
        for name, a in _coefficients(n, p).items():
            rows.append((a, float(a @ np.array([alpha, beta, gamma]))))
    if noise is not None:
        rows = [(a, t * (1 + e)) for (a, t), e in zip(rows, noise(len(rows)))]
    return rows


@pytest.mark.parametrize("use_scipy", SOLVERS)
@pytest.mark.parametrize("true", [(2e-6, 1e-10, 5e-11), (7e-7, 3e-10, 2e-10), (4e-6, 2.5e-10, 0.0)])
def test_fit_recovers_known_constants(true, use_scipy):
    x, left_out = fit.fit_cost_model(_synthetic(*true), use_scipy=use_scipy)
    assert left_out == []
    for got, want in zip(x, true):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-18)


@pytest.mark.parametrize("use_scipy", SOLVERS)
def test_fit_recovers_a_true_zero_under_noise(use_scipy):
    """gamma is truly 0 and every time is off by up to 2%: the fit finds gamma exactly 0
    (not a small negative number cut off, nor a positive one compensating another
    constant) and the others within the noise."""
    rng = np.random.default_rng(3)
    true = (3e-6, 2e-10, 0.0)
    exact_zero = 0
    for trial in range(20):
        rows = _synthetic(*true, noise=lambda n: rng.uniform(-0.02, 0.02, n))
        x, left_out = fit.fit_cost_model(rows, use_scipy=use_scipy)
        assert left_out == []
        assert x[0] == pytest.approx(true[0], rel=0.05) and x[1] == pytest.approx(true[1], rel=0.05)
        assert x[2] <= 0.02 * true[1], x  # at most noise-sized against beta
        exact_zero += x[2] == 0.0
    assert exact_zero >= 5, f"gamma came out exactly 0 in only {exact_zero} of 20 noisy fits"


def test_fit_leaves_out_a_time_far_off_and_refits():
    rows = _synthetic(2e-6, 1e-10, 5e-11)
    rows[3] = (rows[3][0], rows[3][1] * 20)  # another process took the CPU during this one
    x, left_out = fit.fit_cost_model(rows)
    assert left_out == [3]
    assert x == pytest.approx([2e-6, 1e-10, 5e-11], rel=1e-6)


def test_nnls_with_scipy_asked_for_but_missing(monkeypatch):
    monkeypatch.setattr(fit, "_scipy_nnls", lambda: None)
    with pytest.raises(ImportError):
        fit.nnls(np.eye(3), np.ones(3), use_scipy=True)
    assert fit.nnls(np.eye(3), np.ones(3)) == pytest.approx([1, 1, 1])
