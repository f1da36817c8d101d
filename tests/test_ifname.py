"""RDMACOLL_SOCKET_IFNAME (NCCL_SOCKET_IFNAME's rules): which interface and address the tcp
transport listens on (csrc/transport/tcp/interfaces.h).

The rules as a pure function over made-up interface lists; what `rdmacoll doctor` is told
(_core.probe_transport("tcp")) on this host and in a network namespace holding interfaces
named docker0, veth*, eth* with IPv4, IPv6-only, down; and ranks on two namespace "hosts"
whose only route to each other is IPv6 (a docker0 with IPv4 beside it) connecting by the
default rule and by the setting. Namespace tests need root and iproute2, and skip saying so.
"""

import os
import json
import shutil
import subprocess
import sys

import _rdmacoll_testing
import pytest

from mpi_util import rank_records, run_mpi
from test_hosts import net_hosts

core = pytest.importorskip("rdmacoll._core")
T = _rdmacoll_testing
UP, LOOPBACK = T.IFF_UP, T.IFF_LOOPBACK


def entries(*ifaces):
    """getifaddrs' order for interfaces given as (name, up, [addresses], loopback=False):
    one entry without an address per interface, then the IPv4 entries, then the IPv6 ones."""
    out = []
    for f in ifaces:
        name, up, _, *lo = f
        out.append((name, (UP if up else 0) | (LOOPBACK if lo and lo[0] else 0), ""))
    for v6 in (False, True):
        for f in ifaces:
            name, up, addrs, *lo = f
            flags = (UP if up else 0) | (LOOPBACK if lo and lo[0] else 0)
            out += [(name, flags, a) for a in addrs if (":" in a) == v6]
    return out


LO = ("lo", True, ["127.0.0.1", "::1"], True)
HOST = entries(
    LO,
    ("docker0", True, ["172.17.0.1"]),
    ("eth0", True, ["10.0.0.2", "fe80::1"]),
    ("eth1", True, ["10.1.0.2"]),
    ("ens5", False, ["10.3.0.2"]),
    ("ib0", True, ["10.2.0.2"]),
    ("v6net", True, ["fe80::5", "fd00::5", "fd00::6"]),
    ("llonly", True, ["fe80::7"]),
    ("veth12ab", True, ["169.254.3.3"]),
    ("virbr0", True, ["192.168.122.1"]),
)


def choose(spec, host=HOST):
    return T.choose_socket_interface(spec, host)


# --------------------------------------------------------------------------- the rules


@pytest.mark.parametrize(
    "spec, name, address",
    [
        ("", "eth0", "10.0.0.2"),  # first up, not lo/docker*/virbr*/veth*
        ("eth", "eth0", "10.0.0.2"),  # prefix
        ("eth1", "eth1", "10.1.0.2"),
        ("ib,eth1", "eth1", "10.1.0.2"),  # a list allows; the system's order picks
        ("=eth1", "eth1", "10.1.0.2"),  # exact
        ("=ib0,eth1", "eth1", "10.1.0.2"),
        ("=ib0", "ib0", "10.2.0.2"),
        (" eth1 , ib0 ", "eth1", "10.1.0.2"),  # spaces around names are ignored
        ("^eth", "ib0", "10.2.0.2"),  # ^ excludes by prefix
        ("^=eth0", "eth1", "10.1.0.2"),  # ^= excludes exact names
        ("^=eth0,eth1", "ib0", "10.2.0.2"),  # ^ applies to the whole list
        ("^eth,ib", "v6net", "fd00::5"),  # no IPv4: first IPv6 that is not link-local
        ("v6", "v6net", "fd00::5"),
        ("docker", "docker0", "172.17.0.1"),  # asked for: a default-skipped name is fine
        ("=lo", "lo", "127.0.0.1"),
        ("virbr", "virbr0", "192.168.122.1"),
        ("veth", "veth12ab", "169.254.3.3"),
        ("^eth,ib,v6", "docker0", "172.17.0.1"),  # only skipped ones left: docker*, lo, virbr*, veth*
        ("^eth,ib,v6,docker", "lo", "127.0.0.1"),
        ("^eth,ib,v6,docker,lo", "virbr0", "192.168.122.1"),
        ("^eth,ib,v6,docker,lo,virbr", "veth12ab", "169.254.3.3"),
    ],
)
def test_rules(spec, name, address):
    got = choose(spec)
    assert got[:2] == (name, address), got


def test_prefix_is_not_exact():
    # "eth" allows eth0 and eth1; "=eth" allows only an interface named exactly eth
    assert choose("eth")[0] == "eth0"
    with pytest.raises(core.RdmacollError, match="RDMACOLL_SOCKET_IFNAME==eth allows no interface"):
        choose("=eth")
    # ^=eth excludes nothing that exists, so the default choice stands
    assert choose("^=eth")[0] == "eth0"
    assert "excluded none of the interfaces here" in choose("^=eth")[2]


def test_default_skips_lo_docker_virbr_veth_unless_nothing_else():
    only_skipped = entries(
        LO, ("veth1", True, ["10.9.0.1"]), ("virbr0", True, ["192.168.122.1"]), ("docker0", True, ["172.17.0.1"])
    )
    name, address, why = choose("", only_skipped)
    assert (name, address) == ("docker0", "172.17.0.1")
    assert why == ("no interface but lo/docker*/virbr*/veth* is up with an address; RDMACOLL_SOCKET_IFNAME unset")
    assert choose("", entries(LO, ("veth1", True, ["10.9.0.1"])))[0] == "lo"
    assert choose("", entries(("veth1", True, ["10.9.0.1"]), LO))[0] == "lo"
    assert choose("", entries(("veth1", True, ["10.9.0.1"]), ("lo", False, ["127.0.0.1"], True)))[0] == "veth1"
    # an ordinary interface later in the list still wins over every skipped one
    assert choose("", entries(LO, ("docker0", True, ["172.17.0.1"]), ("zz9", True, ["10.5.5.5"])))[0] == "zz9"
    # a loopback that is not called lo counts as loopback
    assert choose("", entries(("lback", True, ["127.0.0.2"], True), ("eth7", True, ["10.7.0.1"])))[0] == "eth7"


def test_why_says_what_decided():
    assert choose("")[2] == (
        "first interface that is up with an address, not lo/docker*/virbr*/veth*; RDMACOLL_SOCKET_IFNAME unset"
    )
    assert choose("^eth")[2] == (
        "RDMACOLL_SOCKET_IFNAME=^eth: excluded eth0, eth1; first interface that is up "
        "with an address, not lo/docker*/virbr*/veth*"
    )
    assert choose("=eth1,ib0")[2] == (
        "RDMACOLL_SOCKET_IFNAME==eth1,ib0: named eth1 or ib0; the first of these that is up with an address"
    )
    assert choose("eth,ib")[2].startswith("RDMACOLL_SOCKET_IFNAME=eth,ib: name starts with eth or ib; ")
    assert choose("v6")[2].endswith("IPv6: it has no IPv4 address")


def test_ipv4_first_then_global_ipv6():
    # IPv4 wins wherever the interface has one, whatever the order of its entries
    assert choose("", [("e0", UP, "fd00::1"), ("e0", UP, "10.0.0.1")])[1] == "10.0.0.1"
    # IPv6: the first address that is not link-local
    assert choose("", [("e0", UP, "fe80::1"), ("e0", UP, "2001:db8::1"), ("e0", UP, "fd00::1")])[1] == "2001:db8::1"
    # link-local only (every interface has one, configured or not) is no address
    assert choose("", entries(("e0", True, ["fe80::1"]), ("e1", True, ["fd00::2"])))[:2] == ("e1", "fd00::2")


@pytest.mark.parametrize(
    "spec, says",
    [
        ("nope", "RDMACOLL_SOCKET_IFNAME=nope allows no interface that is up"),
        ("ens", "RDMACOLL_SOCKET_IFNAME=ens allows no interface"),  # ens5 is down
        ("=llonly", "RDMACOLL_SOCKET_IFNAME==llonly allows no interface"),  # link-local only
        ("^eth,ib,v6,docker,lo,virbr,veth,ll,e", "allows no interface"),
    ],
)
def test_nothing_matching_names_every_interface(spec, says):
    with pytest.raises(core.RdmacollError) as e:
        choose(spec)
    msg = str(e.value)
    assert "\n" not in msg and says in msg, msg
    assert (
        "interfaces here: lo (up, 127.0.0.1, ::1), docker0 (up, 172.17.0.1), eth0 (up, 10.0.0.2), "
        "eth1 (up, 10.1.0.2), ens5 (down, 10.3.0.2), ib0 (up, 10.2.0.2), v6net (up, fd00::5), "
        "llonly (up, link-local IPv6 only), veth12ab (up, 169.254.3.3), virbr0 (up, 192.168.122.1)"
    ) in msg


def test_nothing_up_at_all():
    with pytest.raises(
        core.RdmacollError,
        match=r"^tcp: no interface that is up .*interfaces here: lo \(down, "
        r"127\.0\.0\.1\), eth0 \(down, no address\)$",
    ):
        choose("", entries(("lo", False, ["127.0.0.1"], True), ("eth0", False, [])))
    with pytest.raises(core.RdmacollError, match="interfaces here: none"):
        choose("", [])


@pytest.mark.parametrize(
    "spec, says",
    [
        ("^", "names no interface"),
        ("=", "names no interface"),
        ("^=,", "names no interface"),
        ("eth0,=eth1", "'=' applies to the whole list"),
        ("eth0,^eth1", r"'\^' applies to the whole list"),
    ],
)
def test_malformed_settings(spec, says):
    with pytest.raises(core.RdmacollError, match=says):
        choose(spec)


def test_blank_setting_is_unset():
    assert choose("  ")[2].endswith("RDMACOLL_SOCKET_IFNAME unset")


# --------------------------------------------------------------------------- doctor's lines, this host


def test_probe_names_interface_address_and_why():
    ok, lines = core.probe_transport("tcp", {"socket_ifname": "=lo"})
    assert ok, lines
    assert lines[0] == (
        "listens on lo 127.0.0.1 (RDMACOLL_SOCKET_IFNAME==lo: named lo; the first of these that is up with an address)"
    ), lines
    assert lines[1].startswith("interfaces here: ") and "lo (up, 127.0.0.1" in lines[1], lines


def test_probe_of_a_setting_that_matches_nothing_is_unusable():
    ok, lines = core.probe_transport("tcp", {"socket_ifname": "=no-such-if0"})
    assert not ok
    assert len(lines) == 1 and "RDMACOLL_SOCKET_IFNAME==no-such-if0 allows no interface" in lines[0], lines
    assert "lo (up, 127.0.0.1" in lines[0], lines


@pytest.mark.parametrize(
    "env, listen",
    [
        ({}, ""),  # shm alone: no network transport
        ({"RDMACOLL_TRANSPORT": "tcp", "RDMACOLL_SOCKET_IFNAME": "=lo"}, "lo 127.0.0.1:"),
    ],
    ids=["shm", "tcp-lo"],
)
def test_listen_address_of_a_running_job(env, listen):
    res = run_mpi(2, "ifname.py", env=env, timeout=120)
    where = rank_records(res, 2, "where")
    for r, w in where.items():
        res.check(w["listen"].startswith(listen) and (listen or w["listen"] == ""), f"rank {r}: {w}")
        if listen:
            port = w["listen"].rsplit(":", 1)[1]
            res.check(
                port.isdigit() and f"127.0.0.1:{port})" in where[1 - r]["peers"][r],
                f"rank {1 - r} reaches rank {r} by {where[1 - r]['peers']}, rank {r} listens on {w['listen']}",
            )
    res.check(all(c["ok"] for c in res.select(kind="case")) and len(res.select(kind="case")) == 6, "allreduce")
    rank_records(res, 2, "done")


# --------------------------------------------------------------------------- in network namespaces


def _need_netns():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)")
    if shutil.which("ip") is None:
        pytest.skip("ip (iproute2) not found")


def _ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {(r.stderr or r.stdout).strip()}")


class Namespaces:
    """Network namespaces this test made, deleted at exit (and their interfaces with them)."""

    def __init__(self, tag):
        self.tag = f"rcif{os.getpid() % 100000}{tag}"
        self.made = []

    def add(self, i) -> str:
        ns = f"{self.tag}-{i}"
        _ip("netns", "add", ns)
        self.made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)


def _iface(ns, name, addrs=(), up=True):
    """An interface named `name` in ns: one end of a veth pair whose other end (up, no
    address of its own but link-local) lives in the same namespace."""
    peer = f"p{abs(hash(name)) % 10**8}"
    _ip("-n", ns, "link", "add", name, "type", "veth", "peer", "name", peer)
    for a in addrs:
        _ip("-n", ns, "addr", "add", a, "dev", name, *(["nodad"] if ":" in a else []))
    _ip("-n", ns, "link", "set", peer, "up")
    if up:
        _ip("-n", ns, "link", "set", name, "up")
    return peer


PROBE = (
    "import json, sys, rdmacoll._core as c; "
    "print(json.dumps([c.probe_transport('tcp', {'socket_ifname': s}) for s in sys.argv[1:]]))"
)


def test_rules_on_real_interfaces():
    _need_netns()
    with Namespaces("r") as nss:
        try:
            ns = nss.add(0)
            _iface(ns, "docker0", ["172.31.9.1/24"])
            _iface(ns, "veth-x", ["10.99.2.1/24"])
            _iface(ns, "eth-test", ["fd00:99::1/64"])
            _iface(ns, "eth-down", ["10.99.3.1/24"], up=False)
            _iface(ns, "eth-v4", ["10.99.4.1/24"])
        except RuntimeError as e:
            pytest.skip(f"cannot make interfaces in a network namespace here: {e}")
        specs = ["", "^eth", "^=eth-test", "=eth-down", "veth", "^eth,docker"]
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", PROBE, *specs],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
            cwd="/",
        )
        assert r.returncode == 0, r.stderr  # (cwd: the source tree must not shadow the installed package)
        got = dict(zip(specs, json.loads(r.stdout)))
    first = {s: (ok, lines[0]) for s, (ok, lines) in got.items()}
    # (each veth pair's other end, p<digits>, is up with a link-local address only: never chosen)
    assert first[""] == (
        True,
        "listens on eth-test fd00:99::1 (first interface that is up with an address, not "
        "lo/docker*/virbr*/veth*, IPv6: it has no IPv4 address; RDMACOLL_SOCKET_IFNAME "
        "unset)",
    ), got[""]
    assert first["^eth"] == (
        True,
        "listens on docker0 172.31.9.1 (RDMACOLL_SOCKET_IFNAME=^eth: excluded "
        "eth-test, eth-down, eth-v4; no interface but lo/docker*/virbr*/veth* is up "
        "with an address)",
    ), got["^eth"]
    assert first["^=eth-test"] == (
        True,
        "listens on eth-v4 10.99.4.1 (RDMACOLL_SOCKET_IFNAME=^=eth-test: excluded "
        "eth-test; first interface that is up with an address, not "
        "lo/docker*/virbr*/veth*)",
    ), got["^=eth-test"]
    ok, line = first["=eth-down"]
    assert not ok and "RDMACOLL_SOCKET_IFNAME==eth-down allows no interface" in line
    assert "eth-down (down, 10.99.3.1)" in line and "eth-test (up, fd00:99::1)" in line, line
    assert first["veth"][1].startswith("listens on veth-x 10.99.2.1 "), got
    assert first["^eth,docker"][1].startswith("listens on lo 127.0.0.1 "), got
    # the second line lists what is there, for the reader of `rdmacoll doctor`
    assert (
        got[""][1][1].startswith("interfaces here: lo (up, 127.0.0.1, ::1), ")
        and "docker0 (up, 172.31.9.1)" in got[""][1][1]
    ), got[""]


def _ipv6_only(tb):
    """Each host's eth0 keeps only an IPv6 address, fd77::(i+1)/64, and gets a docker0
    beside it with an IPv4 address that reaches nothing."""
    for i, ns in enumerate(tb.host_ns):
        _ip("-n", ns, "addr", "flush", "dev", "eth0", "scope", "global")
        _ip("-n", ns, "addr", "add", f"fd77::{i + 1}/64", "dev", "eth0", "nodad")
        _iface(ns, "docker0", [f"172.31.{i}.1/24"])


@pytest.mark.parametrize("ifname", ["", "=eth0"], ids=["default", "setting"])
def test_two_hosts_connect_over_ipv6_only(ifname):
    _need_netns()
    env = {"RDMACOLL_SOCKET_IFNAME": ifname} if ifname else {}
    with net_hosts(2, setup=_ipv6_only) as tb:
        res = run_mpi([(1, tb.prefix(h)) for h in range(2)], "ifname.py", env=env, timeout=180)
    where = rank_records(res, 2, "where")
    for r, w in where.items():
        mine, theirs = f"fd77::{r + 1}", f"fd77::{2 - r}"
        res.check(w["transport"] == "shm+tcp", f"rank {r}: {w}")
        res.check(w["listen"].startswith(f"eth0 [{mine}]:"), f"rank {r} listens on {w['listen']!r}")
        res.check(f"[{theirs}]:" in w["peers"][1 - r], f"rank {r} reaches its peer by {w['peers']}")
    cases = res.select(kind="case")
    res.check(len(cases) == 6 and all(c["ok"] for c in cases), f"allreduce over IPv6: {cases}")
    rank_records(res, 2, "done")
    res.check(res.returncode == 0, "the launch failed")
