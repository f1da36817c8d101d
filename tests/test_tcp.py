"""The tcp transport (csrc/transport/tcp/): its frame parser fuzzed, the contract's
conformance checks, hostile frames over a real connection, every allreduce
algorithm usable without map/read at 2-4 ranks, asynchronous operations, a killed rank,
and ranks on several "hosts" (network namespaces joined by veth pairs).

Every launch forces RDMACOLL_TRANSPORT=tcp, so all peers talk over sockets even on one
host (loopback, or the first non-loopback interface)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mpi_util import (
    ROTATED_MATRIX,
    UNMAPPED_ALGORITHMS,
    UNMAPPED_RULES,
    Launch,
    check_async,
    check_default_selection,
    check_forced_algorithms,
    check_killed_peer,
    keep_siblings_flags,
    matrix_results,
    require_mpiexec,
    run_mpi,
)

TCP = {"RDMACOLL_TRANSPORT": "tcp"}
REPO = Path(__file__).resolve().parent.parent
DETECTION_BOUND_S = 60  # catches hangs only; the measured time is printed

# --------------------------------------------------------------------------- parser fuzz


def _compiler():
    for cc in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


def _build_fuzzer(out: Path) -> tuple[Path, str]:
    """Builds tests/fuzz/tcp_frame_fuzz.cc against the parser's source, with
    AddressSanitizer + UBSan where the toolchain has them."""
    cc = _compiler()
    if cc is None:
        pytest.skip("no C++ compiler to build the frame parser fuzzer")
    src = [REPO / "tests" / "fuzz" / "tcp_frame_fuzz.cc", REPO / "csrc" / "transport" / "tcp" / "frame.cc"]
    if not all(p.exists() for p in src):
        pytest.skip("the C++ sources are not next to the tests (installed test tree?)")
    base = [cc, "-std=c++17", "-O1", "-g", f"-I{REPO / 'csrc'}", *map(str, src), "-o", str(out)]
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
    if subprocess.run(base[:1] + san + base[1:], capture_output=True).returncode == 0:
        return out, "asan+ubsan"
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 0, f"building the fuzzer failed:\n{r.stderr[-3000:]}"
    return out, "plain"


def test_frame_parser_fuzz():
    """Random, mutated, truncated and hostile frame streams through the parser in random
    chunk sizes: never a byte outside the named region, and the same events and memory
    as an independent reference parser (tests/fuzz/tcp_frame_fuzz.cc)."""
    with tempfile.TemporaryDirectory(prefix="rdmacoll-fuzz-") as d:
        exe, kind = _build_fuzzer(Path(d) / "tcp_frame_fuzz")
        seed = int(os.environ.get("RDMACOLL_FUZZ_SEED", time.time_ns() % 1_000_000))
        r = subprocess.run([str(exe), str(seed), "20000", "10"], capture_output=True, text=True, timeout=120)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 0 and out.startswith("ok"), f"fuzzer ({kind}, seed {seed}) failed:\n{out[-4000:]}"
    cases = int(re.search(r"cases=(\d+)", out).group(1))
    assert cases >= 1000, f"only {cases} cases ran in the time budget: {out}"
    print(f"frame parser fuzz ({kind}, seed {seed}): {out}")


# --------------------------------------------------------------------------- contract


def _results(res):
    results = res.select(kind="result")
    res.check(results, "no checks reported")
    return results


def test_conformance():
    """The transport contract's checks (tests/workers/transport.py) over tcp: immediates
    after payloads, unaligned writes, put64, zero-length writes, 5000 outstanding writes,
    malformed descriptors; read and map are absent (reads raise, map_read gives None)."""
    res = run_mpi(2, "transport.py", ["conformance", "--transport", "tcp"], timeout=120)
    results = _results(res)
    failed = [f"rank {r['rank']}: {r['name']}: {r['detail']}" for r in results if not r["ok"]]
    res.check(not failed, "conformance checks failed over tcp:\n" + "\n".join(failed))
    res.check(len({r["name"] for r in results}) >= 11, f"checks ran: {sorted({r['name'] for r in results})}")
    res.check(res.returncode == 0, "the launch failed")


@pytest.mark.parametrize("who", ["writer-exits", "reader-exits"])
def test_teardown_with_writes_pending(who):
    res = run_mpi(2, "transport.py", [who, "--transport", "tcp"], timeout=90, extra_launcher_args=keep_siblings_flags())
    results = _results(res)
    failed = [f"rank {r['rank']}: {r['name']}: {r['detail']}" for r in results if not r["ok"]]
    res.check(not failed, "\n".join(failed))
    res.check(len(results) >= (4 if who == "writer-exits" else 2), f"checks that reported: {results}")
    res.check(not res.leftovers, f"processes still running after the launch: {res.leftovers}")


def test_hostile_frames_close_the_connection():
    """Frames whose header a peer forged (offset past the region, unknown region, put64
    past the end) over a real connection: the receiver closes it, delivers nothing and
    writes nothing (guard bytes around the region checked)."""
    res = run_mpi(2, "tcp_hostile.py", [], timeout=120)
    results = _results(res)
    failed = [f"rank {r['rank']}: {r['name']}: {r['detail']}" for r in results if not r["ok"]]
    res.check(not failed, "\n".join(failed))
    res.check(
        {(r["rank"], r["name"]) for r in results} == {(k, c) for k in (0, 1) for c in ("length", "region", "put64")},
        f"results: {results}",
    )
    res.check(res.returncode == 0, "the launch failed")


# --------------------------------------------------------------------------- strangers


def test_hmac_sha256_matches_pythons():
    """The handshake's MAC (csrc/common/sha256.cc) against Python's hmac over keys and
    messages on both sides of SHA-256's block boundaries (55/56/64 bytes, keys past 64)."""
    import hashlib
    import hmac
    import random

    import _rdmacoll_testing as testing

    rng = random.Random(7)
    for key_len in (0, 1, 32, 63, 64, 65, 200):
        for msg_len in (0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000):
            key, msg = rng.randbytes(key_len), rng.randbytes(msg_len)
            assert testing.hmac_sha256(key, msg) == hmac.new(key, msg, hashlib.sha256).digest(), (key_len, msg_len)


def test_strangers_during_setup_are_dropped_and_logged():
    """Issue 36's failure 5 and its acceptance: while 3 ranks set up over tcp, a stranger
    holds 16 idle connections at every listener (before: handled one at a time with a 10 s
    hello timeout, 13 of them made init() fail after 120 s), sends garbage, forges hellos
    whose proof lacks the secret, names another device, and replays a real peer's
    recorded hello and proof (through a relay that then carries that pair's traffic). Every
    attempt is dropped and named in each rank's one setup warning, the replay is refused,
    the results are exact, and once init() returned every listener refuses connections."""
    res = run_mpi(3, "tcp_strangers.py", ["strangers"], env=TCP, timeout=120)
    res.check(res.returncode == 0, "the launch failed")
    setup = {r["rank"]: r for r in res.select(kind="setup")}
    res.check(set(setup) == {0, 1, 2}, f"setup records: {setup}")
    attempts = 16 + 2 + 2 + 1
    for rank, rec in setup.items():
        expected = attempts + (1 if rank == 1 else 0)  # rank 1 also gets the replay
        res.check(rec["dropped"] == expected, f"rank {rank} logged {rec['dropped']} dropped, expected {expected}")
        if rank:  # (rank 0 accepts from nobody: its strangers are dropped when setup ends)
            for why in ("garbage", "without proving the job's secret", "another rank, job or device"):
                res.check(why in rec["reasons"], f"rank {rank}'s warning names no '{why}': {rec['reasons']}")
    print("init() seconds under strangers:", {r: round(v["seconds"], 3) for r, v in sorted(setup.items())})
    replay = res.select(kind="replay")
    res.check(len(replay) == 1 and replay[0]["refused"], f"the replayed handshake: {replay}")
    after, sums = res.select(kind="after"), res.select(kind="sums")
    res.check(len(after) == 3 and all(r["refused"] for r in after), f"listeners after init(): {after}")
    res.check(len(sums) == 3 and all(r["ok"] for r in sums), f"sums: {sums}")
    res.check(len(res.select(kind="done")) == 3, "not every rank finished")


def test_strangers_exhausting_descriptors_are_dropped_for_the_peers():
    """The last rank may open only 8 more descriptors when init() starts, and 21 strangers
    connect to it: out of descriptors, the listener drops strangers' connections (before: it
    spun on a readable listener until they expired, 10 s each) and its peers get in."""
    res = run_mpi(3, "tcp_strangers.py", ["direct"], env=TCP | {"RC_TEST_FD_HEADROOM": 8}, timeout=120)
    res.check(res.returncode == 0, "the launch failed")
    last = [r for r in res.select(kind="setup") if r["rank"] == 2]
    res.check(len(last) == 1, f"rank 2's setup: {last}")
    reasons = last[0]["reasons"] if last else ""
    res.check("no complete handshake within" not in reasons, f"rank 2 waited for strangers to expire: {reasons}")
    res.check(last and last[0]["dropped"] == 16 + 2 + 2 + 1, f"rank 2's dropped connections: {last}")
    res.check("out of file descriptors" in reasons, f"rank 2 names no descriptor shortage: {reasons}")
    sums = res.select(kind="sums")
    res.check(len(sums) == 3 and all(r["ok"] for r in sums), f"sums: {sums}")


# --------------------------------------------------------------------------- allreduce

SMALL = {"RDMACOLL_SEGMENT_BYTES": 4096, "RDMACOLL_SLOT_BYTES": 4096, "RDMACOLL_SLOTS": 2, "RDMACOLL_EAGER_BYTES": 256}
# Elements (bytes depend on the dtype): empty, tiny, odd, multi-segment, multi-MiB.
SIZES = "0,1,7,1023,4097,100003"
ON_TCP = UNMAPPED_ALGORITHMS  # direct and ring need map/read: never chosen on tcp


# 4 ranks run once here, and on two hosts below (CI time).
@pytest.mark.parametrize("nranks, rules", [(2, "a"), (2, "b"), (3, "a"), (3, "b"), (4, "a")])
def test_allreduce_algorithms(nranks, rules):
    check_forced_algorithms(nranks, TCP | SMALL, rules, SIZES, "tcp")


@pytest.mark.parametrize("nranks", [1, 2])
def test_default_selection_and_big_message(nranks):
    """The selector's own choice on tcp with the default thresholds, up to 16 MiB."""
    check_default_selection(nranks, TCP, "tcp")


# --------------------------------------------------------------------------- async, failure


def test_async_many_in_flight():
    check_async(TCP, "tcp")


def test_killed_peer_is_detected():
    """kill -9 of one rank in a 64 MiB allreduce loop: the others raise RdmacollError
    naming it (EOF/RST on its connections), and so does their next call."""
    check_killed_peer(TCP, signal.SIGKILL, 64, "tcp", bound_s=DETECTION_BOUND_S)


# --------------------------------------------------------------------------- several hosts


def _testbed_module():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import netns_testbed
    finally:
        sys.path.pop(0)
    return netns_testbed


@pytest.mark.parametrize("rules", ["a"])  # "a" forces all five algorithms; "b" adds little (CI time)
def test_two_hosts_in_network_namespaces(rules):
    """2 hosts x 2 ranks, each host a network namespace with its own address on a veth
    bridge (scripts/netns_testbed.py) and its own hostname: every tcp-usable algorithm,
    against NumPy. Skips where namespaces cannot be created."""
    if not (REPO / "scripts" / "netns_testbed.py").exists():
        pytest.skip("scripts/netns_testbed.py is not next to the tests")
    nb = _testbed_module()
    mpiexec = require_mpiexec()
    env = TCP | SMALL | {"RDMACOLL_ALGO": UNMAPPED_RULES[rules], "RDMACOLL_SOCKET_IFNAME": "eth0"}
    try:
        tb = nb.Testbed(hosts=2, tag=f"{os.getpid() % 100000}{rules}")
        tb.create()
    except (nb.TestbedError, OSError, subprocess.SubprocessError) as e:
        tb.destroy()
        pytest.skip(f"cannot create network namespaces here: {e}")
    try:
        args = [*ROTATED_MATRIX, "--sizes", SIZES]
        launch = Launch(4, "allreduce_matrix.py", args, env=env, timeout=240)
        workers = Path(launch.script)
        launch.command = tb.mpiexec_command(mpiexec, 2, [sys.executable, str(workers), *map(str, args)])
        with launch:
            res = launch.finish()
    finally:
        tb.destroy()
    done = matrix_results(res, 4)
    used = set(done[0]["algorithms"])
    forced = set(re.findall(r":([a-z_]+)", UNMAPPED_RULES[rules]))
    res.check(used <= ON_TCP and forced - {"eager"} <= used, f"algorithms used: {sorted(used)}")
    res.check(res.returncode == 0, "the launch failed")
    print(f"2 hosts x 2 ranks over veth, rules {rules}: {done[0]['cases']} cases, algorithms {sorted(used)}")
