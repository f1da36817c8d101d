"""Honest tuning: the fit of the cost model's constants (a true non-negative least squares,
checked against synthetic timings made from known constants) and the tuning file (tied to
host, CPU, cores, rdmacoll version, transport and ranks per host; used only where all
match, else ignored with a log line saying why)."""

import json
import os
import logging
import socket

import numpy as np
import pytest

from rdmacoll import _core, _settings
from rdmacoll._bench import fit
from rdmacoll._bench.tune import _coefficients
from mpi_util import rank_records, run_mpi

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
        for a in _coefficients(n, p).values():
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
    for _trial in range(20):
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


# --------------------------------------------------------------------------- the tuning file

CONSTS = {"alpha": 3e-6, "beta": 2e-10, "gamma": 1e-10}


def _file(tmp_path, *entries, name="tuning.json"):
    path = tmp_path / name
    _settings.write_tuning_file(str(path), list(entries))
    return str(path)


def _job(path):
    return _settings.job({"RDMACOLL_TUNING_FILE": path})


def test_entry_records_host_cpu_cores_transport_layout_version_date():
    e = _settings.tuning_entry("tcp", 4, CONSTS, measured={"ranks": 4})
    here = _settings.this_host()
    assert e["host"] == socket.gethostname() and e["cpu"] == here["cpu"] and e["cores"] == here["cores"] > 0
    assert (e["transport"], e["ranks_per_host"], e["cost_model"]) == ("tcp", 4, CONSTS)
    assert e["rdmacoll"] == _settings.rdmacoll_version() and e["date"][:2] == "20" and e["measured"] == {"ranks": 4}
    assert e["cpu"] not in ("", "unknown")


def test_matching_file_is_used(tmp_path):
    path = _file(tmp_path, _settings.tuning_entry("shm", 2, CONSTS))
    job = _job(path)
    assert job["tuning_file"] == path
    assert _settings.tuning_for(job, 2) == {"shm": CONSTS}
    level, line = _settings.tuning_verdict(job["tuning"], 2, "shm")
    assert level == logging.INFO and path in line and "constants for shm" in line and "2 ranks per host" in line


def test_default_location_and_none(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert _settings.tuning_path("", env) is None and _settings.job(env)["tuning"] is None
    assert _settings.tuning_for(_settings.job(env), 2) == {}
    path = _settings.default_tuning_path(env)
    assert path == str(tmp_path / "rdmacoll" / "tuning.json")
    _settings.write_tuning_file(path, [_settings.tuning_entry("shm", 2, CONSTS)])
    assert _settings.tuning_for(_settings.job(env), 2) == {"shm": CONSTS}
    assert _settings.job(dict(env, RDMACOLL_TUNING_FILE="none"))["tuning"] is None
    assert _settings.tuning_verdict(None, 2, "shm") == (
        logging.INFO,
        "no tuning file: using the shipped cost-model constants",
    )


def _other(**changes):
    return dict(_settings.tuning_entry("shm", 2, CONSTS), **changes)


@pytest.mark.parametrize(
    "entry, ranks_per_host, transport, words",
    [
        (
            _other(host="elsewhere", cpu="Other CPU 9000", cores=64),
            2,
            "shm",
            ["was measured on host elsewhere (CPU Other CPU 9000, 64 cores), this is host " + socket.gethostname()],
        ),
        (_other(cpu="Other CPU 9000"), 2, "shm", ["was measured on host", "CPU Other CPU 9000", "this is host"]),
        (_other(cores=_settings.this_host()["cores"] + 1), 2, "shm", ["was measured on host", "this is host"]),
        (_other(rdmacoll="0.0.1"), 2, "shm", ["measured here with rdmacoll 0.0.1, this is rdmacoll"]),
        (_other(), 4, "shm", ["no entry for 4 ranks per host on this host (it holds shm at 2 ranks per host)"]),
        (_other(), 2, "tcp", ["no entry for transport tcp at 2 ranks per host", "RDMACOLL_TRANSPORT=tcp mpiexec -n 2"]),
    ],
)
def test_file_that_does_not_match_is_ignored_saying_why(tmp_path, caplog, entry, ranks_per_host, transport, words):
    path = _file(tmp_path, entry)
    job = _job(path)
    if transport == "shm":
        assert _settings.tuning_for(job, ranks_per_host) == {}
    with caplog.at_level(logging.INFO, logger="rdmacoll"):
        _settings.log_tuning(job, ranks_per_host, transport)
    [rec] = caplog.records
    assert rec.name == "rdmacoll" and rec.levelno == logging.WARNING
    line = rec.getMessage()
    assert line.startswith(f"[rank 0] tuning file {path!r}") and "ignored, using the shipped constants" in line, line
    for w in words:
        assert w in line, line


def test_entries_per_transport_and_layout_each_picked(tmp_path):
    tcp = dict(CONSTS, alpha=9e-6)
    path = _file(
        tmp_path,
        _settings.tuning_entry("shm", 2, CONSTS),
        _settings.tuning_entry("tcp", 2, tcp),
        _settings.tuning_entry("shm", 4, dict(CONSTS, beta=1e-9)),
        _other(host="elsewhere"),
    )
    job = _job(path)
    assert _settings.tuning_for(job, 2) == {"shm": CONSTS, "tcp": tcp}
    assert _settings.tuning_for(job, 4) == {"shm": dict(CONSTS, beta=1e-9)}
    assert _settings.tuning_verdict(job["tuning"], 2, "shm+tcp")[0] == logging.INFO
    # a hybrid job with constants for one of its backends: used, and the other named
    level, line = _settings.tuning_verdict(job["tuning"], 4, "shm+tcp")
    assert level == logging.WARNING and "constants for shm" in line and "shipped constants for tcp" in line, line


def test_old_version_is_ignored_with_a_log_line_not_an_error(tmp_path, caplog):
    for doc in ({"version": 2, "cost_model": {"shm": CONSTS}}, {"cost_model": {"shm": CONSTS}}):
        path = tmp_path / "old.json"
        path.write_text(json.dumps(doc))
        job = _job(str(path))
        assert _settings.tuning_for(job, 2) == {}
        level, line = _settings.tuning_verdict(job["tuning"], 2, "shm")
        assert level == logging.WARNING and "has version" in line and "this rdmacoll reads version 3" in line
        assert "ignored" in line and "RDMACOLL_TUNING_FILE=none" in line


def test_tune_adds_its_entry_keeping_the_others(tmp_path):
    path = str(tmp_path / "t.json")
    note = _settings.add_tuning_entry(path, _settings.tuning_entry("shm", 2, CONSTS))
    assert note == "no other entries"
    _settings.add_tuning_entry(path, _other(host="elsewhere"))
    note = _settings.add_tuning_entry(path, _settings.tuning_entry("shm", 2, dict(CONSTS, alpha=1e-6)))
    assert note == "kept 1 other entry, replaced this host's entry for the same transport and ranks per host"
    entries, why = _settings.read_tuning_file(path)
    assert why is None and sorted(e["host"] for e in entries) == sorted(["elsewhere", socket.gethostname()])
    assert [e["cost_model"]["alpha"] for e in entries if e["host"] != "elsewhere"] == [1e-6]
    (tmp_path / "old.json").write_text(json.dumps({"version": 2, "cost_model": {}}))
    note = _settings.add_tuning_entry(str(tmp_path / "old.json"), _settings.tuning_entry("shm", 2, CONSTS))
    assert note.startswith("replaced its previous contents (tuning file") and "version 2" in note


def _v3(entry_changes):
    return json.dumps({"version": 3, "entries": [dict(_settings.tuning_entry("shm", 2, CONSTS), **entry_changes)]})


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "unreadable"),
        ("[" * 100_000 + "]" * 100_000, "unreadable"),  # (before: RecursionError)
        (_v3({"cost_model": {"alpha": float("nan")}}), "NaN is not a number JSON has"),  # (before: used)
        ("[]", "not a JSON object"),
        (json.dumps({"version": 3}), "'entries'"),
        (json.dumps({"version": 3, "entries": [3]}), "entries[0] is not an object"),
        (_v3({"cost_model": {"alpha": -1}}), "'alpha'"),
        (_v3({"cost_model": {"beta": "fast"}}), "'beta'"),
        (_v3({"host": None}), "'host'"),
        (_v3({"ranks_per_host": "2"}), "'ranks_per_host'"),
    ],
)
def test_malformed_tuning_file_is_an_error(tmp_path, content, words):
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(_core.RdmacollError) as e:
        _job(str(path))
    assert words in str(e.value) and str(path) in str(e.value)


def test_tuning_file_is_not_written_through_a_planted_link(tmp_path):
    """A link where the writer's temporary file goes: an error, and its target is left alone
    (before: written through)."""
    victim, path = tmp_path / "victim", tmp_path / "t.json"
    victim.write_text("keep")
    (tmp_path / f"t.json.tmp{os.getpid()}").symlink_to(victim)
    with pytest.raises(_core.RdmacollError, match="exists"):
        _settings.write_tuning_file(str(path), [_settings.tuning_entry("shm", 2, CONSTS)])
    assert victim.read_text() == "keep" and not path.exists()


def test_missing_tuning_file_is_an_error(tmp_path):
    with pytest.raises(_core.RdmacollError) as e:
        _job(str(tmp_path / "absent.json"))
    assert "absent.json" in str(e.value)


# --------------------------------------------------------------------------- under mpiexec


def _chosen(res, nranks):
    recs = rank_records(res, nranks, "done")
    assert len(recs) == nranks
    return {rec["bytes"]: rec["ran"].split(">")[0] for rec in res.select(kind="sel", rank=0)}


def test_file_from_another_host_is_ignored_at_init_with_a_log_line(tmp_path):
    """Constants that would make direct win everywhere (alpha = beta = 0), measured on
    another host: init() ignores them (eager at 8 B, as shipped) and rank 0 logs why."""
    zero = {"alpha": 0.0, "beta": 0.0, "gamma": 1e-9}
    path = _file(tmp_path, _other(host="elsewhere", cost_model=zero))
    res = run_mpi(2, "selection.py", args=["8,4096"], env={"RDMACOLL_TUNING_FILE": path}, timeout=120)
    assert _chosen(res, 2)[8] == "eager"
    warned = [ln.text for ln in res.lines if ln.stream == "err" and "was measured on host elsewhere" in ln.text]
    res.check(
        len(warned) == 1 and "ignored, using the shipped constants" in warned[0],
        f"one warning, from rank 0, naming the other host: {warned}",
    )
    # the same constants measured here, with 2 ranks on shm: used
    path = _file(tmp_path, _settings.tuning_entry("shm", 2, zero), name="here.json")
    res = run_mpi(2, "selection.py", args=["8,4096"], env={"RDMACOLL_TUNING_FILE": path}, timeout=120)
    assert set(_chosen(res, 2).values()) == {"direct"}
    res.check(not any("ignored" in ln.text for ln in res.lines), "a matching file logs no warning")


def test_tune_stores_each_transport_under_its_own_key_with_progress(tmp_path):
    """--tune over tcp writes a "tcp" entry (and shows progress on stderr); a second run
    over shm with -q adds a "shm" entry beside it, silently."""
    path = tmp_path / "tuning.json"
    # (stderr is a pipe under mpiexec: --progress-every 0 asks for every progress line)
    args = ["--tune", "--tune-file", str(path), "--tune-sizes", "8,16K", "--progress-every", "0"]
    res = run_mpi(2, "bench_cli.py", args, env={"RDMACOLL_TRANSPORT": "tcp"}, timeout=240)
    for rec in rank_records(res, 2, "bench").values():
        res.check(rec["code"] == 0, f"--tune exited {rec['code']}")
    progress = [ln.text for ln in res.lines if ln.stream == "err" and ln.text.startswith("rdmacoll-bench: --tune ")]
    res.check(len(progress) == 2 * len(ALLREDUCE), f"a progress line per algorithm and size: {progress}")
    res.check(
        any(f"--tune ring 16 KiB ({2 * ALLREDUCE.index('ring') + 2}/{2 * len(ALLREDUCE)})" in t for t in progress),
        f"progress names algorithm, size and step: {progress}",
    )
    [tcp] = json.loads(path.read_text())["entries"]
    assert (tcp["transport"], tcp["ranks_per_host"], tcp["host"]) == ("tcp", 2, socket.gethostname())
    assert tcp["measured"]["ranks"] == 2 and set(tcp["cost_model"]) == {"alpha", "beta", "gamma"}

    res = run_mpi(2, "bench_cli.py", args + ["-q"], timeout=240)
    for rec in rank_records(res, 2, "bench").values():
        res.check(rec["code"] == 0, f"--tune -q exited {rec['code']}")
    res.check(not any(ln.text.startswith("rdmacoll-bench: --tune") for ln in res.lines), "-q shows no progress")
    entries = json.loads(path.read_text())["entries"]
    assert sorted(e["transport"] for e in entries) == ["shm", "tcp"]
    assert _settings.tuning_for(_job(str(path)), 2).keys() == {"shm", "tcp"}
