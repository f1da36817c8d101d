"""rdmacoll as a torch.distributed backend (rdmacoll.frameworks.torch.distributed), under
torchrun: every op against references at 2, 3 and 4 processes, sync and async, groups of
subsets, uneven splits; DDP and FSDP trained over gloo and over rdmacoll from the same
seed end with the same parameters; a mismatch raises DistBackendError on every rank."""

import importlib.util
import json
import shlex
import socket
import sys

import pytest

from mpi_util import Launch, chained_part, rank_records, run_torchrun

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


# 3 and 4 processes: the worker's groups ([0, n-1], [1..n-1], the world) run every op over
# 2-rank communicators too (a world of 2 ran as well until 0.1.x: nothing it ran is not run
# by these over a 2-rank group)
# One torchrun launch per world size runs these modes of workers/torch_dist.py one after
# another (workers/chain.py): the agent and every rank import torch once for all of them.
# The stalled peer's run leaves the job aborted: last. (ddp after ops also checks that a
# process whose rdmacoll default group was destroyed makes new rdmacoll groups beside gloo:
# it raised "rdmacoll is shut down" until the family of groups was made anew.)
CHAINS = {2: ["fsdp", "lost"], 3: ["ops", "ddp"], 4: ["ops"]}
LOST_ENV = {"RC_TEST_LOSE": "stall", "RC_TEST_STALL_S": 3.5, "RDMACOLL_TIMEOUT": 2}
_launched: dict = {}


def _torchrun_chain(n, parts, timeout):
    return run_torchrun(n, "chain.py", [json.dumps(parts)], timeout=timeout)


def chained(n, mode):
    parts = [(m, {"script": "torch_dist.py", "args": [m], "env": LOST_ENV if m == "lost" else {}}) for m in CHAINS[n]]
    return chained_part(_launched, n, n, parts, mode, timeout=540, run=_torchrun_chain)


@pytest.mark.timeout(600)  # (the first test of a world runs its launch)
@pytest.mark.parametrize("n", [3, 4])
def test_every_op_matches_the_reference(n):
    res = chained(n, "ops")
    done = rank_records(res, n, "done")
    bad = [c for c in res.select(kind="check") if not c["ok"]]
    res.check(
        not bad, f"{len(bad)} wrong: " + "; ".join(f"rank {c['rank']} {c['name']}: {c['detail']}" for c in bad[:6])
    )
    names = {r: {c["name"] for c in res.select(kind="check") if c["rank"] == r} for r in done}
    # the same checks everywhere, but for groups and a gather's root (its results live there)
    plain = {r: {x.split(":")[0] for x in ns if not x.startswith(("group ", "gather "))} for r, ns in names.items()}
    for r, ns in names.items():
        res.check({f"gather to {r} from {q}" for q in range(n)} <= ns, f"rank {r} did not check its gather")
    res.check(
        len({frozenset(v) for v in plain.values()}) == 1 and len(plain[0]) > 60,
        f"ranks ran different checks: {[len(v) for v in plain.values()]}",
    )
    subsets = [[0, n - 1], list(range(1, n)), list(range(n))]  # as the worker makes them
    for r, ns in names.items():
        seen = {x.split("]")[0] + "]" for x in ns if x.startswith("group ")}
        want = {f"group {s}" for s in subsets if r in s}
        res.check(seen == want, f"rank {r} ran group checks for {sorted(seen)}, wants {sorted(want)}")


# 3 processes: buckets are reduced over a world of no power of two (FSDP below runs at 2)
@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [3])
def test_ddp_over_rdmacoll_trains_like_gloo(n):
    res = chained(n, "ddp")
    rank_records(res, n, "done")
    runs = {}
    for rec in res.select(kind="params"):
        res.check(rec["diff"] <= 1e-5, f"rank {rec['rank']} {rec['run']}: differs from gloo by {rec['diff']}")
        runs.setdefault(rec["run"], set()).add(rec["digest"])
    res.check(set(runs) == {"plain", "accumulate", "hook", "unused"}, f"runs {sorted(runs)}")
    res.check(all(len(d) == 1 for d in runs.values()), f"ranks ended with different parameters: {runs}")


@pytest.mark.timeout(600)
def test_fsdp_over_rdmacoll_trains_like_gloo():
    res = chained(2, "fsdp")
    if res.select(kind="skip"):
        pytest.skip(res.select(kind="skip")[0]["why"])
    recs = [r for r in res.select(kind="params") if r["run"] == "fsdp"]
    res.check(len(recs) == 2, f"{len(recs)} parameter records")
    for rec in recs:
        res.check(rec["diff"] <= 1e-5, f"rank {rec['rank']}: FSDP differs from gloo by {rec['diff']}")
    res.check(len({r["digest"] for r in recs}) == 1, "ranks ended with different parameters")


def test_mismatch_raises_dist_backend_error_everywhere():
    """Also: init_process_group("rdmacoll") in a script that never imports rdmacoll (the
    backend registered by torch's plugin hook at `import torch`; torch's own error
    otherwise: "Unknown backend type rdmacoll")."""
    res = run_torchrun(2, "torch_dist.py", ["mismatch"], timeout=120)
    for r, rec in rank_records(res, 2, "imported_before_init").items():
        res.check(rec["modules"] == [], f"rank {r}: rdmacoll was imported before init_process_group: {rec}")
    for r, rec in rank_records(res, 2, "error").items():
        res.check(rec["type"] == "DistBackendError" and "mismatch" in (rec["text"] or ""), f"rank {r}: {rec}")


def _check_lost(res, n, how):
    """Every rank but the lost one raised from its training step (the stalled one raises too,
    once it goes on and finds its peers gone), naming the lost rank; none crashed."""
    errors = rank_records(res, n - 1 if how == "kill" else n, "error")
    res.check(res.select(kind="lost"), "the last rank was not lost")
    for r, rec in errors.items():
        # DDP's reducer reads a bucket's result in C++: the failure reaches backward() as
        # RuntimeError carrying the DistBackendError (gloo's gives RuntimeError too)
        res.check(rec["type"] in ("DistBackendError", "RuntimeError"), f"rank {r}: {rec['type']}: {rec['text']}")
        res.check("DistBackendError" in rec["type"] + rec["text"], f"rank {r}: no DistBackendError: {rec['text']}")
        if r < n - 1:
            res.check(f"rank {n - 1}" in rec["text"], f"rank {r} does not name rank {n - 1}: {rec['text']}")
        res.check(rec["step"] == 3, f"rank {r} raised at step {rec['step']}")
    res.check("Segmentation fault" not in res.output() and "SIGSEGV" not in res.output(), "a native crash")
    print(f"rank 0 raised {errors[0]['type']}: {errors[0]['text'][:400]}")


def test_ddp_with_a_peer_killed_raises_everywhere_ranks_started_by_hand():
    """No launcher (nothing kills the survivors for us): ranks 0 and 1 raise, naming rank 2,
    which was SIGKILLed before its backward (0.1.x: SIGSEGV in DDP's reducer)."""
    n = 3
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def command(script):
        one = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} lost"
        each = " ".join(f'(RANK={r} LOCAL_RANK={r} {one}; echo "rank {r} exit status $?") &' for r in range(n))
        return ["sh", "-c", f"{each} wait"]

    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": n, "LOCAL_WORLD_SIZE": n}
    env |= {"RC_TEST_LOSE": "kill", "RDMACOLL_TIMEOUT": 30}
    with Launch(0, "torch_dist.py", env=env, timeout=120, command=command) as launch:
        res = launch.finish()
    _check_lost(res, n, "kill")
    for r in range(n - 1):
        res.check(f"rank {r} exit status 0" in res.output(), f"rank {r} did not exit normally (139: SIGSEGV)")


@pytest.mark.timeout(600)
def test_ddp_with_a_peer_stalled_past_the_timeout_raises_everywhere_under_torchrun():
    """Rank 1 sleeps 3.5 s before its backward, RDMACOLL_TIMEOUT=2: rank 0 raises after 2 s
    naming it, and rank 1, going on, raises as it finds rank 0 gone."""
    res = chained(2, "lost")
    _check_lost(res, 2, "stall")
