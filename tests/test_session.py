"""The session object (rdmacoll/_session.py): torn down and built again in one process.

One launch of workers/session.py checks: the membership epoch grows by one per init();
reset hooks run once per teardown, in registration order, after the communicator is
closed (join's descriptor templates drop themselves through one); process sets are unregistered by shutdown() and registered again by init();
collectives after re-init match NumPy; a Session that is not the current one works
beside the API. The layout (local/cross ranks, is_homogeneous) is checked on one host
and, where network namespaces can be made (tests/test_hosts.py), on uneven hosts (2 + 1
ranks), against an independent reference; _session.layout is checked directly too.
"""

import pytest
from mpi_util import rank_records, run_mpi
from test_hosts import net_hosts

from rdmacoll import _session

NRANKS = 3


def expected_layout(hosts, rank):
    """Horovod's definitions written out: local rank = how many ranks before this one share
    its host; the cross communicator = the ranks with this local rank, in rank order."""
    local = [sum(1 for q in range(r) if hosts[q] == hosts[r]) for r in range(len(hosts))]
    cross = [q for q in range(len(hosts)) if local[q] == local[rank]]
    counts = {h: hosts.count(h) for h in hosts}
    return local[rank], counts[hosts[rank]], cross.index(rank), len(cross), len(set(counts.values())) == 1


@pytest.mark.parametrize(
    "hosts",
    [[0, 0, 0], [0, 1, 2], [0, 0, 1], [0, 1, 1], [0, 1, 0, 1], [0, 0, 0, 1, 1, 2], [1, 0, 0, 1], [0, 1, 2, 0, 0]],
)
def test_layout_matches_horovods_definition(hosts):
    for rank in range(len(hosts)):
        assert _session.layout(hosts, rank) == expected_layout(hosts, rank), (hosts, rank)


def check_session_launch(res, hosts):
    """The records of workers/session.py run with rank r on host hosts[r]."""
    p = len(hosts)
    for r, rec in rank_records(res, p, "layout").items():
        want = [r, p, *expected_layout(hosts, r)[:4]]
        res.check(rec["values"] == want, f"rank {r}: rank, size, local, cross {rec['values']}, expected {want}")
        res.check(rec["homogeneous"] == expected_layout(hosts, r)[4], f"rank {r}: is_homogeneous {rec['homogeneous']}")
    by_host = {}
    for r, rec in rank_records(res, p, "layout").items():
        by_host.setdefault(rec["host"], []).append(r)
    res.check(len(by_host) == len(set(hosts)), f"ranks ran on hosts {by_host}, expected the layout {hosts}")

    firsts = rank_records(res, p, "first")
    epoch = firsts[0]["epoch"]
    for r, rec in firsts.items():
        res.check(rec["epoch"] == epoch >= 1, f"rank {r}: first epoch {rec['epoch']} (rank 0: {epoch})")
        res.check([rec["static_id"], rec["dynamic_id"]] == [1, 2], f"rank {r}: set ids {rec}")
        res.check(rec["calls"] == [], f"rank {r}: hooks ran before shutdown: {rec['calls']}")
        res.check(rec["static_sum"] == ([4.0] * 5 if r in (0, 2) else None), f"rank {r}: static set sum {rec}")
        res.check(rec["dynamic_sum"] == ([5.0] * 5 if r in (1, 2) else None), f"rank {r}: dynamic set sum {rec}")
        res.check(rec["join_sum"] == [p * (p + 1) / 2] * 5, f"rank {r}: join's allreduce {rec['join_sum']}")
        res.check(rec["join_rows"] == 5 * p, f"rank {r}: join's allgather gave {rec['join_rows']} rows")
        res.check(rec["join_templates"] == 1, f"rank {r}: join templates {rec['join_templates']}, expected 1")

    not_init = (
        "RdmacollValueError: rdmacoll is not initialised: call rdmacoll.init() first (hvd.init() with Horovod's API)"
    )
    hooks_closed = [[tag, False, True, not_init] for tag in ("a", "b", "c")]
    for r, rec in rank_records(res, p, "closed").items():
        res.check(rec["calls"] == hooks_closed, f"rank {r}: hooks at shutdown {rec['calls']}, expected {hooks_closed}")
        res.check(rec["calls_again"] == hooks_closed, f"rank {r}: a second shutdown() ran hooks: {rec['calls_again']}")
        res.check(not rec["initialized"] and rec["current_is_first"], f"rank {r}: after shutdown {rec}")
        res.check(rec["rank_error"] == not_init and rec["allreduce_error"] == not_init, f"rank {r}: {rec}")
        res.check(rec["ids"] == [None, None], f"rank {r}: sets still registered after shutdown: {rec['ids']}")
        res.check(
            rec["join_templates"] == 0, f"rank {r}: join kept {rec['join_templates']} templates of the old session"
        )

    for r, rec in rank_records(res, p, "second").items():
        res.check(rec["epoch"] == epoch + 1, f"rank {r}: second epoch {rec['epoch']}, first {epoch}")
        res.check(not rec["same_object"] and rec["first_closed"], f"rank {r}: {rec}")
        res.check(rec["static_id"] == 1, f"rank {r}: static set id {rec['static_id']} after re-init")
        want_rank = {0: 0, 2: 1}.get(r)
        res.check(rec["static_rank"] == want_rank, f"rank {r}: static set rank {rec['static_rank']}, {want_rank}")
        res.check(rec["dynamic_id"] is None, f"rank {r}: the first session's dynamic set is registered: {rec}")
        res.check(
            rec["dynamic_error"] == "ValueError: Process set does not exist or has not been registered.",
            f"rank {r}: a collective on the old dynamic set gave {rec['dynamic_error']}",
        )
        res.check(rec["calls"] == hooks_closed, f"rank {r}: init() ran hooks again: {rec['calls']}")
        res.check(rec["join_sum"] == [p * (p + 1) / 2] * 5, f"rank {r}: join's allreduce after re-init {rec}")

    cases = res.select(kind="case")
    res.check(len(cases) == 9 * p + 2, f"{len(cases)} case records")  # + the 2 static-set members
    bad = [c for c in cases if not c["ok"]]
    res.check(not bad, f"collectives after re-init wrong: {bad[:4]}")

    for r, rec in rank_records(res, p, "final").items():
        want = hooks_closed + [["d", False, True, not_init]]
        res.check(rec["calls"] == want, f"rank {r}: hooks after the second shutdown {rec['calls']}")
        res.check(rec["epoch"] == epoch + 1 and rec["closed"], f"rank {r}: {rec}")
    for r, rec in rank_records(res, p, "beside").items():
        res.check(rec["total"] == p * (p + 1) // 2, f"rank {r}: the direct session's allreduce gave {rec['total']}")
        res.check(not rec["initialized"], f"rank {r}: a direct Session made rdmacoll initialised")
        res.check(rec["hooks"] == [True], f"rank {r}: the direct session's hooks {rec['hooks']}")
    rank_records(res, p, "done")
    res.check(res.returncode == 0, "the launch failed")


def test_session_rebuilt_on_one_host():
    res = run_mpi(NRANKS, "session.py", timeout=180)
    check_session_launch(res, [0] * NRANKS)


def test_session_rebuilt_on_uneven_hosts():
    """2 ranks on one host, 1 on another: cross_rank/cross_size/is_homogeneous as Horovod."""
    with net_hosts(2) as tb:
        res = run_mpi([(2, tb.prefix(0)), (1, tb.prefix(1))], "session.py", timeout=240)
    check_session_launch(res, [0, 0, 1])
