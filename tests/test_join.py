"""hvd.join() while the other ranks go on with any collective (issue 14, item 6), at 2, 3
and 4 ranks, against NumPy references of what Horovod 0.28.1's joined ranks do
(common/controller.cc, tensor_queue.cc, operations.cc):

- reductions: a joined rank reduces zeros in place of its tensor, with every op (Max of
  negatives, Min of positives and Product are 0 then); Average divides by the whole
  size (integers truncated); grouped, in-place, asynchronous and scaled forms alike;
  DistributedOptimizer steps average over the whole size too (joined ranks add zero
  gradients), also when backward itself issues an allreduce;
- allgather, broadcast, alltoall, reducescatter (and the object helpers built on them)
  raise on every training rank ("X is not supported with Join at this time.", a
  RuntimeError), the joined ranks go on;
- a process set without the joined ranks works as usual;
- join() returns the last rank to join, on every rank; collectives work afterwards.

tests/workers/join_any.py runs the checks; where horovod.torch is importable (a Horovod
0.28.1 build, pytest run from its venv) it also runs under Horovod, and the outcomes must
be the same. rdmacoll also serves barrier while a rank is joined and refuses an allgather
whose name was used before (Horovod 0.28.1 crashes the joined rank on both: segmentation
fault, unordered_map::at): RC_TEST_JOIN_EXTRAS, rdmacoll only.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mpi_util import rank_records, require_real_horovod, run_mpi, share, shared_dir, shared_part

# (the workers run the torch adapter; without torch their parts would end the shared launches)
pytest.importorskip("torch")

HVD, RC = "horovod.torch", "rdmacoll.frameworks.torch"
LAST_PHASE = {0: 2, 1: 3, 2: 0, 3: 1}  # as in workers/join_any.py
PHASES = 4
REFUSED = {
    "allgather": "Allgather",
    "allgather_async": "Allgather",
    "allgather named": "Allgather",
    "allgather_object": "Allgather",
    "broadcast": "Broadcast",
    "broadcast_async_": "Broadcast",
    "broadcast_object": "Broadcast",
    "alltoall": "Alltoall",
    "reducescatter": "Reducescatter",
}
W0 = np.array([[0.5, -0.25, 1.0], [0.125, 2.0, -1.0]])
B0 = np.array([0.5, -0.5])


def run_worker(module, nranks, tmp_path, extras=False):
    out = tmp_path / f"{module.replace('.', '_')}_{nranks}"
    out.mkdir()
    env = {"RC_TEST_HVD": module, "RC_TEST_JOIN_DIR": out}
    if extras:
        env["RC_TEST_JOIN_EXTRAS"] = "1"
    return read_cases(run_mpi(nranks, "join_any.py", env=env, timeout=300), module, nranks, out)


def read_cases(res, module, nranks, out):
    rank_records(res, nranks, "done")
    res.check(res.returncode == 0, f"the {module} launch failed")
    return {r: json.loads((Path(out) / f"rank{r}.json").read_text())["cases"] for r in range(nranks)}


# rdmacoll's runs with the extras: parts of the launch shared per world size (mpi_util.share)
for _n in (2, 3, 4):
    _env = {"RC_TEST_HVD": RC, "RC_TEST_JOIN_DIR": shared_dir(f"join {_n}"), "RC_TEST_JOIN_EXTRAS": "1"}
    share(_n, f"join {_n}", {"script": "join_any.py", "env": _env})

# Every allreduce algorithm (hierarchical needs several hosts: tests/test_hosts.py joins a
# rank under it), allgather and broadcast algorithm with a rank joined, the joined rank
# changing from part to part.
JOIN_ALGORITHMS = ("eager", "direct", "ring", "ring_slots", "recursive_doubling", "halving_doubling", "tree")
for _n in (3, 4):
    for _i, _a in enumerate(JOIN_ALGORITHMS):
        _rules = f"allreduce:{_a};allgather:{('ring', 'direct')[_i % 2]};broadcast:{('chain', 'direct')[_i % 2]}"
        share(
            _n, f"join {_a}", {"script": "join_algos.py", "env": {"RDMACOLL_ALGO": _rules, "RC_TEST_JOINER": _i % _n}}
        )


# --------------------------------------------------------------------------- references


def training(p, n):
    return [r for r in range(n) if LAST_PHASE[r] >= p]


def x_of(r, p):
    return np.array([1.0, 2.0, 3.0, 4.0]) * (r + 1) + p


def xi_of(r, p):
    return np.array([7, -7, 9, 5]) * (r + 1) + p


def f32(values):
    return ["torch.float32", np.float32(values).tolist()]


def parameters(inside, n, last):
    """Layer's (weight, bias) after the steps of phases 0..last: SGD(lr=0.5) on the
    average over all n ranks of the training ranks' gradients (joined ranks: zeros). The
    loss is the sum of the outputs, so the weight's gradient is the sum of the input rows
    (times the number of training ranks when the outputs are summed across ranks)."""
    w, b = W0.copy(), B0.copy()
    for p in range(last + 1):
        t = training(p, n)
        factor = len(t) if inside else 1
        w -= 0.5 * sum(factor * np.tile([1.0 + q, 2.0 + p, 4.0], (2, 1)) for q in t) / n
        b -= 0.5 * sum(factor * np.array([2.0, 2.0]) for _ in t) / n
    return [f32(w), f32(b)]


def expected(case, p, r, n):
    """("ok", value as the worker describes it) or ("refused", what Horovod names)."""
    t = training(p, n)
    if case in REFUSED and len(t) < n:
        return "refused", REFUSED[case]
    s = sum(x_of(q, p) for q in t)
    joined = len(t) < n
    values = {
        "allreduce Sum": f32(s),
        "allreduce named": f32(s),
        "allreduce_async": f32(s),
        "allreduce Average": f32(s / n),
        "allreduce_ pre/post": f32(s / n),
        "allreduce Average int32": ["torch.int32", np.trunc(sum(xi_of(q, p) for q in t) / n).astype(int).tolist()],
        "allreduce Max": f32(np.zeros(4) if joined else np.max([x_of(q, p) - 100 for q in t], axis=0)),
        "allreduce Min": f32(np.zeros(4) if joined else np.min([x_of(q, p) for q in t], axis=0)),
        "allreduce Product": f32(np.zeros(4) if joined else np.prod([x_of(q, p) for q in t], axis=0)),
        "grouped_allreduce": [
            f32(s),
            ["torch.float64", sum(xi_of(q, p) for q in t).astype(float).tolist()],
            f32(s[:2]),
        ],
        "allgather": f32(np.concatenate([x_of(q, p)[: q + 1] for q in range(n)])),
        "allgather_async": f32(np.concatenate([x_of(q, p) for q in range(n)])),
        "allgather named": f32(np.concatenate([x_of(q, p) for q in range(n)])),
        "broadcast": f32(x_of(0, p)),
        "broadcast_async_": f32(x_of(0, p)),
        "alltoall": f32([2 * r + k + q for q in range(n) for k in (0, 1)]),
        "reducescatter": f32([n * (2 * r + k) + sum(range(n)) for k in (0, 1)]),
        "broadcast_object": str({"phase": p, "rank": 0}),
        "allgather_object": list(range(n)),
        "optimizer step": parameters(False, n, p),
        "optimizer step, allreduce in backward": parameters(True, n, p),
        "process set allreduce": f32(x_of(0, p) + x_of(1, p)),
        "barrier": None,
    }
    return "ok", values[case]


def close(got, want):
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(close(g, w) for g, w in zip(got, want))
    if isinstance(got, float) or isinstance(want, float):
        return isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)
    return got == want


def check_against_references(cases, n):
    problems = []
    last = max(range(n), key=lambda q: LAST_PHASE[q])
    for r, mine in cases.items():
        phases = sorted({int(k.split()[1]) for k in mine if k.startswith("phase ")})
        if phases != list(range(LAST_PHASE[r] + 1)):
            problems.append(f"rank {r} ran phases {phases}")
        for key, got in mine.items():
            if not key.startswith("phase "):
                continue
            _, p, case = key.split(" ", 2)
            kind, want = expected(case, int(p), r, n)
            if kind == "refused":
                text = f"{want} is not supported with Join at this time."
                if got[0] != "raises" or "RuntimeError" not in got[1] or not got[2].startswith(text):
                    problems.append(f"rank {r} {key}: {got}, expected RuntimeError {text!r}")
            elif got[0] != "ok" or not close(got[1], want):
                problems.append(f"rank {r} {key}: {got}, expected {want}")
        for key, want in (("join", last), ("after join", f32([n, n]))):
            if mine.get(key, [None])[0] != "ok" or not close(mine[key][1], want):
                problems.append(f"rank {r} {key}: {mine.get(key)}, expected {want}")
    return problems


@pytest.mark.timeout(900)  # (the first of a world runs the shared launch)
@pytest.mark.parametrize("algo", JOIN_ALGORITHMS)
@pytest.mark.parametrize("nranks", [3, 4])
def test_a_joined_rank_stands_in_for_every_algorithm(nranks, algo):
    """The joined rank learns each call from its first message, whichever algorithm runs
    (the plain API's collectives: nothing is announced), and the results are the
    training ranks' alone (workers/join_algos.py)."""
    res = shared_part(nranks, f"join {algo}")
    recs = rank_records(res, nranks, "case")
    for r, rec in recs.items():
        res.check(not rec["bad"], f"rank {r}: {rec['bad']}")
        if r != JOIN_ALGORITHMS.index(algo) % nranks:
            res.check(algo in rec["algorithms"], f"rank {r}: forced {algo}, ran {rec['algorithms']}")


@pytest.mark.timeout(900)  # (the first of a world runs the shared launch)
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_join_serves_every_collective_as_horovod(nranks):
    cases = read_cases(shared_part(nranks, f"join {nranks}"), RC, nranks, shared_dir(f"join {nranks}"))
    problems = check_against_references(cases, nranks)
    assert not problems, f"{len(problems)} differ from Horovod's rules, first: " + "; ".join(problems[:5])


# --------------------------------------------------------------------------- side by side


def differences(hvd_cases, rc_cases):
    out = []
    for r in hvd_cases:
        if set(hvd_cases[r]) != set(rc_cases[r]):
            out.append(f"rank {r}: cases {sorted(set(hvd_cases[r]) ^ set(rc_cases[r]))} run by one only")
        for key, h in hvd_cases[r].items():
            c = rc_cases[r].get(key)
            if c is None:
                continue
            if h[0] != c[0] or h[-1] != c[-1]:
                out.append(f"rank {r} {key}: {c}, Horovod {h}")
            elif h[0] == "raises" and not set(h[1]) <= set(c[1]):
                out.append(f"rank {r} {key}: raises {c[1]}, Horovod {h[1]}")
            elif h[0] == "ok" and not close(c[1], h[1]):
                out.append(f"rank {r} {key}: {c[1]}, Horovod {h[1]}")
    return out


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_join_side_by_side_with_real_horovod(nranks, tmp_path):
    require_real_horovod()
    hvd_cases = run_worker(HVD, nranks, tmp_path)
    rc_cases = run_worker(RC, nranks, tmp_path)
    diff = differences(hvd_cases, rc_cases)
    assert not diff, f"{len(diff)} differences from Horovod, first: " + "; ".join(diff[:6])
    problems = check_against_references(hvd_cases, nranks)
    assert not problems, "the references in this test misdescribe Horovod: " + "; ".join(problems[:5])
