"""RDMACOLL_TIMELINE writes a Chrome trace per rank (pid = rank): every operation, its
negotiate / transfer / reduce (or copy) phases nested inside it, and its queueing as an
async slice when it waited for work ahead of it."""

import json
import os
import shutil
import tempfile

from mpi_util import rank_records, run_mpi, run_python

NRANKS = 3
EPS = 0.05  # microseconds: what a double keeps of the trace's timestamps, and then some
PHASES = {"negotiate", "transfer", "reduce", "copy"}


def _check_rank(res, r, doc, calls):
    events = doc["traceEvents"]
    res.check(all(e["pid"] == r for e in events), f"rank {r}: an event with another pid")
    ops = sorted((e for e in events if e.get("cat") == "op"), key=lambda e: e["ts"])
    phases = [e for e in events if e.get("cat") == "phase"]
    res.check(
        [o["args"]["seq"] for o in ops] == sorted(o["args"]["seq"] for o in ops),
        f"rank {r}: operations out of submission order",
    )
    names = [o["name"] for o in ops]  # (shutdown() may add a barrier of its own)
    res.check(
        names[: len(calls)] == calls and set(names[len(calls) :]) <= {"barrier"},
        f"rank {r}: ops {names}, expected {calls}",
    )
    for a, b in zip(ops, ops[1:]):
        res.check(a["ts"] + a["dur"] <= b["ts"] + EPS, f"rank {r}: operations {a} and {b} overlap")
    by_op = {}
    for ph in phases:
        res.check(ph["name"] in PHASES and ph["dur"] >= 0, f"rank {r}: bad phase {ph}")
        inside = [o for o in ops if o["ts"] - EPS <= ph["ts"] and ph["ts"] + ph["dur"] <= o["ts"] + o["dur"] + EPS]
        res.check(len(inside) == 1, f"rank {r}: phase {ph} is not inside exactly one operation")
        by_op.setdefault(inside[0]["args"]["seq"], set()).add(ph["name"])
    for o in ops:
        got = by_op.get(o["args"]["seq"], set())
        res.check(got & {"transfer", "negotiate"}, f"rank {r}: {o['name']} #{o['args']['seq']} has phases {got}")
        if o["name"] in ("allreduce", "reducescatter"):
            res.check("copy" not in got, f"rank {r}: a reduction with a copy phase: {got}")
    large = next(o for o in ops if o["args"].get("name") == "large")
    res.check(
        {"transfer", "reduce"} <= by_op[large["args"]["seq"]],
        f"rank {r}: the 4 MiB allreduce ({large['args']['algorithm']}) has phases {by_op[large['args']['seq']]}",
    )
    # Queueing: "b"/"e" pairs (id = sequence) ending where their operation starts.
    begins = {e["id"]: e for e in events if e.get("cat") == "queue" and e["ph"] == "b"}
    ends = {e["id"]: e for e in events if e.get("cat") == "queue" and e["ph"] == "e"}
    res.check(set(begins) == set(ends), f"rank {r}: unpaired queue events")
    start = {o["args"]["seq"]: o for o in ops}
    for i, e in ends.items():
        res.check(
            begins[i]["ts"] <= e["ts"] and abs(e["ts"] - start[i]["ts"]) <= EPS,
            f"rank {r}: queue slice {begins[i]} .. {e} does not end where operation #{i} starts",
        )
    queued = {start[i]["args"].get("name", "") for i in ends}
    res.check(any(n.startswith("async.") for n in queued), f"rank {r}: no asynchronous operation was queued ({queued})")
    return {p["name"] for p in phases} | ({"queue"} if ends else set())


def test_timeline_does_not_follow_a_planted_link(tmp_path):
    """A symbolic link where a rank's trace goes (planted in a shared directory): init()
    fails naming it, and what it points to is left alone (before: overwritten)."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "trace.rank0.json").symlink_to(victim)
    res = run_python("init_fails.py", env={"RDMACOLL_TIMELINE": str(tmp_path / "trace.json")}, timeout=60)
    rec = rank_records(res, 1, "init")[0]
    res.check(rec["error"] is not None and "is a symbolic link; not followed" in rec["error"], f"init() gave {rec}")
    res.check(victim.read_text() == "keep", "the link's target was written")


def test_timeline_phases_per_rank():
    tmp = tempfile.mkdtemp(prefix="rdmacoll-timeline-")
    try:
        path = os.path.join(tmp, "trace.json")
        res = run_mpi(NRANKS, "timeline.py", env={"RDMACOLL_TIMELINE": path}, timeout=120)
        done = rank_records(res, NRANKS, "done")
        res.check(all(d["ok"] for d in done.values()), "wrong results with the timeline on")
        seen = set()
        for r in range(NRANKS):
            f = os.path.join(tmp, f"trace.rank{r}.json")
            res.check(os.path.isfile(f), f"rank {r} wrote no {f} (files: {os.listdir(tmp)})")
            with open(f) as fh:
                doc = json.load(fh)  # a complete JSON document once the rank shut down
            seen |= _check_rank(res, r, doc, done[r]["calls"])
        res.check({"queue", "negotiate", "transfer", "reduce", "copy"} <= seen, f"phases seen: {seen}")
        print(f"timeline: phases seen {sorted(seen)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
