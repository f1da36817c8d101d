"""Hostile input: random and mutated bytes where the core reads what a peer sent (packed
memory descriptors, call headers, descriptors, bootstrap address blobs). Every case must
end in success or a clear RdmacollError: no crash, no hang, no out-of-bounds access
(scripts/sanitize.sh runs this under AddressSanitizer/UBSan).

RDMACOLL_FUZZ_SCALE (default 1: ~12,000 cases) scales the number of cases."""

import os

import pytest

from mpi_util import rank_records, run_python

SCALE = float(os.environ.get("RDMACOLL_FUZZ_SCALE", "1"))
TARGETS = ("unpack", "headers", "descriptors", "connect")


@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_peer_bytes(seed):
    res = run_python("fuzz_inputs.py", [seed, SCALE / 2], timeout=600)
    rank_records(res, 1, "done")
    recs = {r["target"]: r for r in res.select(kind="target")}
    res.check(set(recs) == set(TARGETS), f"targets that ran: {sorted(recs)}")
    for name, r in recs.items():
        res.check(r["results"] == r["cases"], f"{name}: {r['results']} results for {r['cases']} cases")
        res.check(not r["bad"], f"{name}: cases ended neither ok nor in an error: {r['bad']}")
        res.check(
            r["errors"] > 0 and r["ok"] > 0,
            f"{name}: {r['ok']} accepted, {r['errors']} rejected: the cases do not reach both sides of the checks",
        )
        if r["templates_ok"] is not None:
            res.check(
                all(t == "ok" for t in r["templates_ok"]), f"{name}: valid inputs were rejected: {r['templates_ok']}"
            )
    total = sum(r["cases"] for r in recs.values())
    print(
        f"seed {seed}: {total} cases: "
        + "; ".join(f"{n} {r['cases']} ({r['ok']} accepted, {r['errors']} rejected)" for n, r in recs.items())
    )
    for n, r in recs.items():
        print(f"  {n} rejections, e.g.: " + " | ".join(r["samples"][:3]))
