#!/usr/bin/env python3
"""Several "hosts" on one machine: network namespaces joined by veth pairs to a bridge.

Each host is a namespace with its own loopback and one interface, eth0, addressed
10.77.0.(i+1)/24 on a bridge that lives in a namespace of its own: no route out, and
nothing is changed in the machine's own namespace. Ranks are launched inside the hosts
with one MPMD mpiexec (hydra's PMI descriptor and MPICH's shared-memory bootstrap survive
`ip netns exec`); each rank also gets its own UTS namespace with the host's name as its
hostname, so rdmacoll's bootstrap sees distinct hosts.

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2.

    sudo python scripts/netns_testbed.py --hosts 2 --ranks-per-host 2 -- \\
        python tests/workers/allreduce_matrix.py --sizes 0,1,1023
    # RDMACOLL_* variables in the environment reach the ranks (RDMACOLL_TRANSPORT=tcp
    # is set unless given).

From Python (tests/test_tcp.py):

    with Testbed(hosts=2) as tb:
        cmd = tb.mpiexec_command("mpiexec", 2, [sys.executable, "w.py"])
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

SUBNET = "10.77.0"


class TestbedError(RuntimeError):
    """The namespaces could not be created (not root, no iproute2, not permitted)."""


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise TestbedError(f"ip {' '.join(args)}: {(r.stderr or r.stdout).strip()}")
    return r


class Testbed:
    def __init__(self, hosts: int = 2, tag: str | None = None):
        """(No RDMA here: Soft-RoCE of Linux 6.1 works in the initial namespace only; RDMA
        hosts are the two guests of scripts/rdma_guest.py --hosts 2.)"""
        if hosts < 1 or hosts > 200:
            raise ValueError("hosts must be in 1..200")
        tag = tag or str(os.getpid())
        self.hosts = hosts
        self.bridge_ns = f"rcbr{tag}"
        self.host_ns = [f"rch{tag}-{i}" for i in range(hosts)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(hosts)]
        self.hostnames = [f"rchost{i}" for i in range(hosts)]
        self._created: list[str] = []

    # -- setup / teardown
    def __enter__(self) -> Testbed:
        try:
            self.create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc):
        self.destroy()

    def create(self):
        if os.geteuid() != 0:
            raise TestbedError("network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)")
        for tool in ("ip", "unshare", "hostname"):
            if shutil.which(tool) is None:
                raise TestbedError(f"{tool} not found (iproute2 / util-linux)")
        _ip("netns", "add", self.bridge_ns)
        self._created.append(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, ns in enumerate(self.host_ns):
            _ip("netns", "add", ns)
            self._created.append(ns)
            # made under a temporary name: this namespace may have an eth0 of its own
            tmp = f"rct{os.getpid() % 100000}x{i}"
            _ip("link", "add", tmp, "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", self.bridge_ns)
            _ip("-n", ns, "link", "set", tmp, "name", "eth0")
            _ip("-n", self.bridge_ns, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def destroy(self):
        # Deleting a namespace deletes its interfaces (and their veth peers).
        for ns in reversed(self._created):
            _ip("netns", "delete", ns, check=False)
        self._created = []

    # -- launching
    def prefix(self, host: int) -> list[str]:
        """Command prefix that runs a program inside `host` with its own hostname."""
        return [
            "ip",
            "netns",
            "exec",
            self.host_ns[host],
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.hostnames[host],
        ]

    def mpiexec_command(self, mpiexec: str, ranks_per_host: int, program: list[str]) -> list[str]:
        """One MPMD mpiexec: ranks 0..k-1 on host 0, the next k on host 1, ..."""
        cmd = [mpiexec]
        for h in range(self.hosts):
            if h:
                cmd.append(":")
            cmd += ["-n", str(ranks_per_host), *self.prefix(h), *program]
        return cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=1)
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec")
    ap.add_argument("program", nargs=argparse.REMAINDER, help="-- program and arguments")
    a = ap.parse_args()
    program = a.program[1:] if a.program[:1] == ["--"] else a.program
    if not program:
        ap.error("give the program to run after --")
    env = dict(os.environ)
    env.setdefault("RDMACOLL_TRANSPORT", "tcp")
    with Testbed(a.hosts) as tb:
        print("# hosts: " + ", ".join(f"{n} {ip}" for n, ip in zip(tb.hostnames, tb.addresses)), flush=True)
        return subprocess.run(tb.mpiexec_command(a.mpiexec, a.ranks_per_host, program), env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
