"""The ibverbs transport on any host: it is compiled where the verbs headers are, _core
never links libibverbs, init() fails clearly where RDMA cannot run (every rank, naming
the cause and the alternatives), and the pure parts (address blob, packed regions, key
and bounds checks, error texts) reject garbage. Where a usable RDMA port exists, the
init test runs allreduce over it instead (nothing of that has run here: no RDMA)."""

import errno
import os
import random
import re
import shutil
import struct
import subprocess

import pytest

from rdmacoll import _core
import _rdmacoll_testing as _testing
from mpi_util import rank_records, run_mpi

Error = _core.RdmacollError
COMPILED = "ibverbs" in _core.TRANSPORTS
needs_ibverbs = pytest.mark.skipif(not COMPILED, reason="this build has no ibverbs transport (no verbs headers)")

# Causes init() may name on a host where RDMA cannot run.
CAUSES = ("cannot load", "ENOSYS", "no RDMA devices", "no ACTIVE port", "not compiled")


def test_transports_exported():
    assert _core.TRANSPORTS[0] == "shm"
    assert len(set(_core.TRANSPORTS)) == len(_core.TRANSPORTS)
    if os.path.exists("/usr/include/infiniband/verbs.h"):
        assert COMPILED, "the verbs headers are installed but this build has no ibverbs transport"


# RDMACOLL_IB_HCA (NCCL_IB_HCA's grammar): (value, usable on the Soft-RoCE guest's device
# rxe0 with its one port, what the report says); bad values are refused anywhere
HCA = [
    ("", True, "ACTIVE ports here: rxe0:1"),
    ("=rxe0:1", True, "ACTIVE ports RDMACOLL_IB_HCA==rxe0:1 allows: rxe0:1"),
    ("rxe0", True, "would use rxe0:1"),
    ("^=rxe0:2,rxe1", True, "would use rxe0:1"),
    ("=rxe", False, "RDMACOLL_IB_HCA==rxe (named rxe) allows no port here"),
    ("^rxe", False, "allows no port here"),
    ("rxe0:2", False, "allows no port here"),
]
# where the guest has a second device, rxe1 (scripts/rdma_guest.py --rails 2): the rails
TWO_RAILS_HCA = [
    ("rxe", "would use 2 rails: rxe0:1, GID"),
    ("", "would use 2 rails: rxe0:1, GID"),
    ("^rxe0", "would use rxe1:1, GID"),
    ("=rxe1:1,rxe0:1", "would use 2 rails: rxe0:1"),  # the system's order, not the list's
]
BAD_HCA = [("rxe0,=rxe1", "applies to the whole list"), ("rxe0:x", "bad port 'x'"), ("^", "names no device")]


def test_probe_transport():
    assert _core.probe_transport("shm")[0] is True
    usable, lines = _core.probe_transport("bogus")
    assert not usable and "bogus" in lines[-1]
    usable, lines = _core.probe_transport("ibverbs")
    print("\n".join(lines))
    if not usable:
        assert any(c in lines[-1] for c in CAUSES), lines
    if COMPILED and usable:
        assert lines[-1].startswith("would use ")
    if not COMPILED:
        return
    for spec, why in BAD_HCA:
        ok, got = _core.probe_transport("ibverbs", {"ib_hca": spec})
        assert not ok and why in got[-1], (spec, got)
    if usable and any(line.startswith("rxe0:1 ACTIVE") for line in lines):  # the guest
        for spec, want_usable, why in HCA:
            ok, got = _core.probe_transport("ibverbs", {"ib_hca": spec})
            assert ok == want_usable and any(why in line for line in got), (spec, got)
    if usable and any(line.startswith("rxe1:1 ACTIVE") for line in lines):
        for spec, why in TWO_RAILS_HCA:
            ok, got = _core.probe_transport("ibverbs", {"ib_hca": spec})
            assert ok and any(why in line for line in got), (spec, got)


@needs_ibverbs
def test_core_does_not_link_libibverbs():
    """Every ibv_* call goes through the dlopen'ed table or verbs.h's inline ops."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no `nm` (binutils) to list _core's undefined symbols")
    out = subprocess.run(
        [nm, "-D", "--undefined-only", _core.__file__], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    linked = [line.split()[-1] for line in out.splitlines() if "ibv_" in line]
    assert not linked, f"_core needs libibverbs at load time for {linked}"


def _check_init(env, must_fail_with=None):
    res = run_mpi(2, "ibverbs_init.py", env=dict(env, RDMACOLL_TRANSPORT="ibverbs"), timeout=60)
    inits = rank_records(res, 2, "init")
    if all(r["error"] is None for r in inits.values()) and must_fail_with is None:
        for a in rank_records(res, 2, "allreduce").values():  # a host with RDMA
            res.check(a["transport"] == "ibverbs", f"rank {a['rank']} ran over {a['transport']}")
            res.check(not a["wrong"], f"rank {a['rank']}: wrong allreduce results for counts {a['wrong']}")
        print("init() succeeded: allreduce over ibverbs checked")
        return
    for rec in inits.values():
        e = rec["error"]
        res.check(e is not None, f"rank {rec['rank']}: init() succeeded while another rank failed")
        res.check(
            "ibverbs" in e and "shm" in e and "tcp" in e,
            f"rank {rec['rank']}: {e!r} does not name the transport and the alternatives (shm, tcp)",
        )
        causes = [must_fail_with] if must_fail_with else CAUSES
        res.check(any(c in e for c in causes), f"rank {rec['rank']}: {e!r} names none of the causes {causes}")
        res.check(not rec["initialized"], "is_initialized() after a failed init()")
    res.check(res.returncode == 0, "the launch failed")
    print(f"init() refused: {inits[0]['error']}")


def test_init_fails_or_runs_everywhere():
    _check_init({})


@needs_ibverbs
def test_init_without_the_library():
    _check_init({"RDMACOLL_IBVERBS_LIBRARY": "libibverbs-not-installed.so.1"}, must_fail_with="cannot load")


# --------------------------------------------------------------------------- address blob

RAIL = dict(port=1, mtu=5, gid_index=3, lid=0, gid=bytes([0] * 10 + [0xFF, 0xFF, 10, 0, 0, 2]))
GOOD = dict(rank=1, size=3, link_layer=2, psn=0xABCDEF, rail=[RAIL], qpn=[0x11, 0, 0x33], lanes=1)


def _address(**change):
    """GOOD with `change`; keys of a rail's address change rail 0."""
    rail = dict(RAIL, **{k: v for k, v in change.items() if k in RAIL})
    return dict(GOOD, rail=[rail], **{k: v for k, v in change.items() if k not in RAIL})


def test_address_round_trip():
    blob = _testing.ibverbs_pack_address(GOOD)
    got = _testing.ibverbs_unpack_address(blob, peer=1, self=0, size=3)
    assert got == GOOD
    ib = _address(link_layer=1, lid=7, gid=bytes(16))
    assert (
        _testing.ibverbs_unpack_address(_testing.ibverbs_pack_address(ib), peer=1, self=2, size=3)["rail"][0]["lid"]
        == 7
    )


def test_address_with_two_queue_pairs_per_peer():
    # RDMACOLL_IB_QPS_PER_CONNECTION=2: qpn[r * 2 + lane], both of this rank's checked
    two = dict(GOOD, lanes=2, qpn=[0x11, 0x12, 0, 0, 0x33, 0x34])
    assert _testing.ibverbs_unpack_address(_testing.ibverbs_pack_address(two), peer=1, self=0, size=3) == two
    with pytest.raises(Error, match="queue pair number 0 for rank 2"):
        bad = dict(two, qpn=[0x11, 0x12, 0, 0, 0x33, 0])
        _testing.ibverbs_unpack_address(_testing.ibverbs_pack_address(bad), peer=1, self=2, size=3)
    # a peer with another number of lanes (other rails) is fine: a connection uses those both have
    with pytest.raises(Error, match="17 queue pairs per peer"):
        many = dict(GOOD, lanes=17, qpn=[1] * 51)
        _testing.ibverbs_unpack_address(_testing.ibverbs_pack_address(many), peer=1, self=0, size=3)


def test_address_with_two_rails():
    # two ports (RDMACOLL_IB_HCA): each rail's port, MTU, LID and GID; lanes >= rails
    second = dict(RAIL, port=2, mtu=3, gid=bytes([0] * 10 + [0xFF, 0xFF, 10, 0, 1, 2]))
    two = dict(GOOD, rail=[RAIL, second], lanes=2, qpn=[0x11, 0x12, 0, 0, 0x33, 0x34])
    assert _testing.ibverbs_unpack_address(_testing.ibverbs_pack_address(two), peer=1, self=0, size=3) == two
    for change, words in [
        (dict(lanes=1, qpn=[0x11, 0, 0x33]), "1 queue pairs per peer on 2 rails"),
        (dict(rail=[RAIL, dict(second, mtu=0)]), "invalid MTU code 0 (rail 1)"),
        (dict(rail=[RAIL, dict(second, gid=bytes(16))]), "all-zero GID for a RoCE port (rail 1)"),
        (dict(rail=[RAIL, second, second], lanes=3, qpn=[1, 2, 3, 0, 0, 0, 4, 5, 6]), "3 rails (1 to 2)"),
        (dict(rail=[], qpn=[0x11, 0, 0x33], lanes=1), "0 rails"),
    ]:
        with pytest.raises(Error, match=re.escape(words)):
            _testing.ibverbs_unpack_address(_testing.ibverbs_pack_address(dict(two, **change)), peer=1, self=0, size=3)


@pytest.mark.parametrize(
    "change,where,words",
    [
        ({}, "truncate", "shorter"),
        ({}, "extend", "expected"),
        ({}, "magic", "not an ibverbs address"),
        ({"rank": 2}, None, "expected rank 1"),
        ({"size": 4, "qpn": [1, 0, 3, 4]}, None, "of 4"),
        ({"mtu": 0}, None, "MTU"),
        ({"mtu": 6}, None, "MTU"),
        ({"psn": 1 << 24}, None, "24 bits"),
        ({"port": 0}, None, "port"),
        ({"link_layer": 3}, None, "link layer"),
        ({"qpn": [0, 0, 0x33]}, None, "queue pair number 0"),
        ({"qpn": [1 << 24, 0, 1]}, None, "queue pair number"),
        ({"link_layer": 1, "lid": 0}, None, "LID"),
        ({"link_layer": 1, "lid": 0xC001}, None, "LID"),
        ({"gid": bytes(16)}, None, "GID"),
    ],
)
def test_address_rejected(change, where, words):
    blob = bytearray(_testing.ibverbs_pack_address(_address(**change)))
    if where == "truncate":
        blob = blob[:20]
    elif where == "extend":
        blob += b"\0\0\0\0"
    elif where == "magic":
        blob[0] ^= 0xFF
    with pytest.raises(Error, match="rank 1") as e:
        _testing.ibverbs_unpack_address(bytes(blob), peer=1, self=0, size=3)
    assert words in str(e.value)


def test_address_fuzz():
    """Random and mutated blobs: an RdmacollError or a parse that passed every check."""
    rng = random.Random(4)
    good = _testing.ibverbs_pack_address(GOOD)
    parsed = 0
    for i in range(3000):
        if i % 2:
            blob = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 3, 24, 48, 60, len(good)])))
        else:
            b = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.getrandbits(8)
            blob = bytes(b)
        try:
            a = _testing.ibverbs_unpack_address(blob, peer=1, self=0, size=3)
        except Error:
            continue
        parsed += 1
        assert a["rank"] == 1 and a["size"] == 3 and 1 <= a["rail"][0]["mtu"] <= 5 and 0 < a["qpn"][0] < 1 << 24
    assert parsed < 3000


# --------------------------------------------------------------------------- regions and keys


def test_region_round_trip():
    packed = _testing.ibverbs_pack_region(owner=2, allocated=True, addr=0x7F0000001000, len=1 << 20, rkey=[0x1234])
    assert len(packed) == _core.PACKED_MEMORY_BYTES
    r = _testing.ibverbs_unpack_region(packed, peer=2)
    assert r["len"] == 1 << 20 and r["allocated"] and r["key"][0] == 0x7F0000001000
    assert [_testing.ibverbs_rkey_of(r, rail) for rail in (0, 1)] == [0x1234, 0x1234]  # one rail: its key for both
    two = _testing.ibverbs_pack_region(owner=2, allocated=True, addr=0x1000, len=4096, rkey=[0x1234, 0x5678])
    r = _testing.ibverbs_unpack_region(two, peer=2)
    assert [_testing.ibverbs_rkey_of(r, rail) for rail in (0, 1)] == [0x1234, 0x5678]
    assert not _testing.ibverbs_unpack_region(
        _testing.ibverbs_pack_region(owner=2, allocated=False, addr=8, len=0, rkey=[0]), peer=2
    )["allocated"]


@pytest.mark.parametrize(
    "mutate,words",
    [
        (lambda b: b.__setitem__(slice(0, 4), b"XXXX"), "not an ibverbs region"),
        (lambda b: b.__setitem__(2, 9), "unknown kind"),
        (lambda b: b.__setitem__(3, 3), "impossible number of rails"),
        (lambda b: b.__setitem__(3, 0), "impossible number of rails"),
        (lambda b: b.__setitem__(slice(16, 24), struct.pack("<Q", 1 << 50)), "impossible length"),
        (lambda b: b.__setitem__(slice(8, 16), struct.pack("<Q", (1 << 64) - 16)), "wraps"),
    ],
)
def test_region_rejected(mutate, words):
    b = bytearray(_testing.ibverbs_pack_region(owner=1, allocated=True, addr=0x1000, len=4096, rkey=[5]))
    mutate(b)
    with pytest.raises(Error, match=words):
        _testing.ibverbs_unpack_region(bytes(b), peer=1)


def test_region_of_another_rank_rejected():
    packed = _testing.ibverbs_pack_region(owner=1, allocated=True, addr=0x1000, len=4096, rkey=[5])
    with pytest.raises(Error, match="another rank"):
        _testing.ibverbs_unpack_region(packed, peer=2)


def test_region_fuzz():
    rng = random.Random(5)
    for _ in range(3000):
        blob = bytes(rng.getrandbits(8) for _ in range(_core.PACKED_MEMORY_BYTES))
        try:
            r = _testing.ibverbs_unpack_region(blob, peer=1)
        except Error:
            continue
        assert r["len"] <= 1 << 48 and r["key"][0] + r["len"] < 1 << 64


def _remote(addr=0x10000, length=4096, peer=1):
    return _testing.ibverbs_unpack_region(
        _testing.ibverbs_pack_region(owner=peer, allocated=True, addr=addr, len=length, rkey=[7]), peer=peer
    )


def test_check_remote_accepts_inside():
    m = _remote()
    for off, n in [(0, 0), (0, 4096), (4095, 1), (4096, 0), (100, 200)]:
        _testing.ibverbs_check_remote(m, 1, off, n)
    _testing.ibverbs_check_remote(m, 1, 4088, 8, "put64", 8)


@pytest.mark.parametrize("off,n", [(4097, 0), (4096, 1), (1, 4096), (0, 4097), ((1 << 64) - 1, 2), (8, (1 << 64) - 4)])
def test_check_remote_bounds(off, n):
    with pytest.raises(Error, match="outside rank 1"):
        _testing.ibverbs_check_remote(_remote(), 1, off, n)


def test_check_remote_alignment():
    with pytest.raises(Error, match="aligned"):
        _testing.ibverbs_check_remote(_remote(), 1, 4, 8, "put64", 8)
    with pytest.raises(Error, match="aligned"):
        _testing.ibverbs_check_remote(_remote(addr=0x10004), 1, 0, 8, "put64", 8)


@pytest.mark.parametrize("tamper", ["peer", "tag", "foreign", "length"])
def test_check_remote_keys(tamper):
    m = _remote()
    if tamper == "peer":
        peer = 2  # unpacked by rank 1's endpoint, used on rank 2's
    else:
        peer = 1
        if tamper == "tag":
            m["key"][3] ^= 1
        elif tamper == "foreign":  # what another backend (or nothing) put there
            m["key"] = [1234, 5, 0, 0]
        else:
            m["len"] = 1 << 60
    with pytest.raises(Error, match="not unpacked by this endpoint|corrupt"):
        _testing.ibverbs_check_remote(m, peer, 0, 8)


# --------------------------------------------------------------------------- error texts


def test_registration_error_texts():
    e = _testing.ibverbs_registration_error(errno.ENOMEM, 1 << 30, 8 << 20)
    assert "ulimit -l" in e and "8.0 MiB" in e and "RLIMIT_MEMLOCK" in e
    assert "unlimited)" in _testing.ibverbs_registration_error(errno.ENOMEM, 1 << 30, (1 << 64) - 1)
    assert "EFAULT" in _testing.ibverbs_registration_error(errno.EFAULT, 4096, 0)
    assert "1073741824 bytes" in _testing.ibverbs_registration_error(errno.EIO, 1 << 30, 0)


def test_device_list_error_texts():
    e = _testing.ibverbs_device_list_error(errno.ENOSYS)
    assert "ENOSYS" in e and "kernel" in e and "RDMACOLL_TRANSPORT=shm" in e and "RDMACOLL_TRANSPORT=tcp" in e
    assert "permission" in _testing.ibverbs_device_list_error(errno.EACCES)
