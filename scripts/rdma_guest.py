#!/usr/bin/env python3
"""Run a command in a throw-away QEMU guest with a Soft-RoCE (rdma_rxe) device: the kernel's
real RDMA stack and verbs ABI, for machines without an RDMA NIC (or without InfiniBand in
their kernel). Needs root on Debian.

    sudo python3 scripts/rdma_guest.py setup              # once: packages, kernel, initramfs
    sudo python3 scripts/rdma_guest.py run -- ibv_devinfo # boot, run, print, exit with its status
    sudo python3 scripts/rdma_guest.py run --hosts 2 -- CMD   # two guests, CMD in each

The guest runs Debian's stock kernel (extracted from the linux-image package into the cache
directory, nothing installed into the host's /boot or /lib/modules) under TCG (software
emulation; KVM only where /dev/kvm can boot a stock kernel, which kvm_pvm cannot). Its root
is the host's / shared read-only over 9p under a tmpfs overlay, so the host's Python,
virtualenvs and built extension run unchanged; a second, writable 9p share carries the
command, its exit status and its output back. The command runs in the current directory,
as root, with `ulimit -l unlimited`, after `rxe0` on eth0 is ACTIVE (10.0.2.15/24);
`--rails 2` (GUEST_RAILS=2 in Guest.run's env) adds `rxe1` on a veth end (10.0.3.1/24), a
second device for multi-rail runs.

--hosts 2 boots two guests at once, joined by a point-to-point QEMU network (UDP between
the two QEMU processes, nothing else on it): guest i is host `rchost<i>`, eth0 10.9.0.<i+1>/24
with its own rxe0, and runs CMD with HOST_INDEX=i. Two hosts, each with its own kernel,
/dev/shm and Soft-RoCE device, whose ranks reach each other only over RDMA. (Network
namespaces on one kernel cannot do this with this kernel: rdma_rxe of Linux 6.1 routes and
listens in the initial namespace only, so an rxe device on a veth end inside a namespace
fails its first send with IBV_WC_LOC_QP_OP_ERR.)

From Python (tests/test_rdma_guest.py): Guest().available() says why not, Guest().run(cmd).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PACKAGES = [
    "qemu-system-x86",
    "busybox-static",
    "kmod",
    "cpio",
    "ibverbs-utils",
    "ibverbs-providers",
    "rdma-core",
    "iproute2",
    "perftest",
]
# Debian builds these as modules; the guest has no modprobe, so the initramfs loads them
# (with what `modprobe --show-depends` lists) in this order. crc32_generic: rxe needs
# crc32, and without it `rdma link add` fails with "No such file or directory". sch_netem:
# the emulated NIC latency of `run --delay` (the host's kernel has no netem).
MODULES = [
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    "overlay",
    "virtio_net",
    "crc32_generic",
    "rdma_rxe",
    "veth",
    "bridge",
    "sch_netem",
]
DEFAULT_CACHE = Path(os.environ.get("RDMACOLL_GUEST_CACHE", "/var/cache/rdmacoll-guest"))

INIT = r"""#!/bin/busybox sh
# initramfs: load modules, mount the host's / read-only under a tmpfs overlay, run /out/run.sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /lib/modules/$m || echo "insmod $m failed"; done
mkdir -p /host /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,cache=loose,msize=512000 hostroot /host || echo "9p root failed"
mount -t tmpfs -o size=75% tmpfs /rw && mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot || echo "overlay failed"
mkdir -p /newroot/rdmacoll-out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out /newroot/rdmacoll-out || echo "9p out failed"
for d in proc sys dev; do mount --move /$d /newroot/$d; done
exec chroot /newroot /bin/sh /rdmacoll-out/run.sh
"""

RUN = r"""#!/bin/sh
# in the guest, as root: devices, network, rxe, then the command
# /tmp stays the overlay's (the host's files, writes kept in the guest): a clone under /tmp
# must stay visible. /dev/shm is the guest's own.
mkdir -p /dev/shm /dev/pts; mount -t tmpfs tmpfs /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
. /rdmacoll-out/env.sh
ip link set lo up
if [ "$HOSTS" -gt 1 ]; then
  hostname "rchost$HOST_INDEX"; ip addr add "10.9.0.$((HOST_INDEX + 1))/24" dev eth0
else
  hostname rdmacoll-guest; ip addr add 10.0.2.15/24 dev eth0
fi
ip link set eth0 up
# GUEST_DELAY (run --delay): netem delays every packet this guest sends by that much, so a
# round trip between two guests takes twice it on top of the emulated link's own
if [ -n "$GUEST_DELAY" ] && ! tc qdisc add dev eth0 root netem delay "$GUEST_DELAY" limit 100000; then
  echo "rdma_guest: netem delay $GUEST_DELAY failed" > /rdmacoll-out/output; echo 1 > /rdmacoll-out/rc
  sync; echo o > /proc/sysrq-trigger; while :; do :; done
fi
wait_active() {  # device
  for i in $(seq 1 100); do
    grep -q ACTIVE /sys/class/infiniband/$1/ports/1/state 2>/dev/null && return 0
    sleep 0.1
  done
  echo "rdma_guest: $1 never became ACTIVE" >&2; return 1
}
rdma link add rxe0 type rxe netdev eth0 && wait_active rxe0
# GUEST_RAILS=2: a second device, rxe1, for multi-rail runs (RDMACOLL_IB_HCA=rxe): on one
# end of a veth pair, which gives it a link that is up and an address of its own; ranks in
# this guest reach each other's rxe1 through rxe's loopback, as they do on rxe0
if [ "${GUEST_RAILS:-1}" -gt 1 ]; then
  ip link add rail1 type veth peer name rail1peer && ip addr add 10.0.3.1/24 dev rail1 &&
    ip link set rail1peer up && ip link set rail1 up &&
    rdma link add rxe1 type rxe netdev rail1 && wait_active rxe1
fi
ulimit -l unlimited
cd "$GUEST_CWD" 2>/dev/null || cd /
(timeout -k 10 "$GUEST_TIMEOUT" /bin/sh /rdmacoll-out/cmd.sh; echo $? > /rdmacoll-out/rc) 2>&1 |
  tee /rdmacoll-out/output > /dev/console
sync
echo o > /proc/sysrq-trigger
while :; do :; done  # power-off is asynchronous: init must not exit first (the kernel panics then)
"""


class GuestError(RuntimeError):
    """The guest cannot be set up or run here (not root, no QEMU, no kernel...)."""


def _run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Guest:
    """idle: QEMU runs under the SCHED_IDLE policy (chrt --idle): a guest run beside other
    work takes only the CPU time that work leaves idle, and gives it back at once when that
    work wakes (a niced QEMU, tried first, still delayed each wake-up of the host's tests by
    up to a time slice: their latency-bound tests ran 1.3x longer beside it). stop() kills
    the guests running now and any run started later (from another thread: a test run's
    end)."""

    def __init__(self, cache: Path | str = DEFAULT_CACHE, cpus: int = 2, memory: str = "2G", idle: bool = False):
        self.cache = Path(cache)
        self.cpus, self.memory, self.idle = cpus, memory, idle
        self._lock = threading.Lock()
        self._live: list[subprocess.Popen] = []
        self._stopped = False
        self.cpu_seconds = 0.0  # CPU time of every QEMU run so far (its threads: the vCPUs and I/O)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for p in self._live:
                if p.poll() is None:
                    p.kill()

    # ------------------------------------------------------------------ set-up
    @property
    def kernel(self) -> Path:
        return self.cache / "vmlinuz"

    @property
    def initramfs(self) -> Path:
        return self.cache / "initramfs.cpio.gz"

    def available(self) -> str | None:
        """None when run() can work here, else why not."""
        if os.geteuid() != 0:
            return "the guest needs root (9p export of /, QEMU)"
        if shutil.which("qemu-system-x86_64") is None:
            return "qemu-system-x86_64 is not installed (scripts/rdma_guest.py setup)"
        if not self.kernel.exists() or not self.initramfs.exists():
            return f"no guest kernel/initramfs in {self.cache} (scripts/rdma_guest.py setup)"
        return None

    def setup(self, install_packages: bool = True) -> None:
        if os.geteuid() != 0:
            raise GuestError("setup needs root")
        if install_packages and shutil.which("apt-get"):
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
            )
        self.cache.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="guest-setup-", dir=self.cache))
        try:
            # the package linux-image-amd64 depends on: Debian's current stock kernel
            deps = _run(["apt-cache", "depends", "linux-image-amd64"]).stdout.split()
            pkg = next(w for w in deps if w.startswith("linux-image-") and w != "linux-image-amd64")
            subprocess.run(["apt-get", "download", pkg], check=True, cwd=work, capture_output=True)
            deb = next(work.glob("*.deb"))
            root = work / "root"
            _run(["dpkg", "-x", str(deb), str(root)])
            kver = next((root / "lib/modules").iterdir()).name
            _run(["depmod", "-b", str(root), kver])
            order = []
            for m in MODULES:
                out = _run(["modprobe", "-d", str(root), "-S", kver, "--show-depends", m]).stdout
                for line in out.splitlines():
                    if line.startswith("insmod "):
                        path = line.split()[1]
                        if path not in order:
                            order.append(path)
            initrd = work / "initrd"
            for d in ("bin", "proc", "sys", "dev", "lib/modules"):
                (initrd / d).mkdir(parents=True, exist_ok=True)
            shutil.copy(shutil.which("busybox") or "/bin/busybox", initrd / "bin/busybox")
            names = []
            for path in order:
                name = Path(path).name
                shutil.copy(path, initrd / "lib/modules" / name)
                names.append(name)
            (initrd / "modules.order").write_text("\n".join(names) + "\n")
            (initrd / "init").write_text(INIT)
            (initrd / "init").chmod(0o755)
            files = subprocess.run(
                "find . | cpio -o -H newc --quiet | gzip -1", shell=True, cwd=initrd, check=True, capture_output=True
            ).stdout
            self.initramfs.write_bytes(files)
            shutil.copy(next((root / "boot").glob("vmlinuz-*")), self.kernel)
            (self.cache / "kernel-version").write_text(kver + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # ------------------------------------------------------------------ run
    @staticmethod
    def _accel() -> list[str]:
        # /dev/kvm of a PVM host (kvm_pvm) cannot boot a stock kernel: emulate there
        pvm = Path("/sys/module/kvm_pvm").exists()
        if (
            os.path.exists("/dev/kvm")
            and os.access("/dev/kvm", os.W_OK)
            and not pvm
            and os.environ.get("RDMACOLL_GUEST_ACCEL") != "tcg"
        ):
            return ["-accel", "kvm", "-cpu", "host"]
        return ["-accel", "tcg,thread=multi", "-cpu", "max"]

    def run(
        self, command: str, timeout: float = 600, env: dict | None = None, cwd: str | None = None, echo: bool = True
    ) -> tuple[int, str]:
        """Boot, run `command` (a shell line) in the guest, power off: (exit status, the
        command's output). The status is 124 when the command ran past `timeout` (it is killed
        in the guest; the guest itself is killed 120 s later), 125 when it never reported."""
        return self.run_hosts([command], timeout, env, cwd, echo)[0]

    def run_hosts(
        self,
        commands: list[str],
        timeout: float = 600,
        env: dict | None = None,
        cwd: str | None = None,
        echo: bool = True,
        cpus: int | None = None,
    ) -> list[tuple[int, str]]:
        """One guest per command, all at once; with two, they are hosts rchost0 and rchost1 on
        a network of their own (module docstring). [(exit status, output)] per guest.
        cpus: each guest's vCPUs (default: this Guest's)."""
        why = self.available()
        if why:
            raise GuestError(why)
        if len(commands) not in (1, 2):
            raise ValueError("one guest, or two joined as hosts")
        hosts = len(commands)
        ports = _free_udp_ports(2) if hosts == 2 else []
        outs, procs, readers, consoles = [], [], [], []
        try:
            for i, command in enumerate(commands):
                out = Path(tempfile.mkdtemp(prefix="rdmacoll-guest-"))
                outs.append(out)
                (out / "run.sh").write_text(RUN)
                (out / "cmd.sh").write_text(command + "\n")
                exports = {
                    "HOSTS": str(hosts),
                    "HOST_INDEX": str(i),
                    "RDMACOLL_IN_GUEST": "1",
                    "GUEST_CWD": cwd or os.getcwd(),
                    "GUEST_TIMEOUT": str(int(timeout)),
                    **(env or {}),
                }
                (out / "env.sh").write_text("".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in exports.items()))
                out.chmod(out.stat().st_mode | stat.S_IRWXO)
                if hosts == 1:
                    net = ["-netdev", "user,id=n0"]
                else:  # point-to-point: guest i sends to the other's port, listens on its own
                    net = ["-netdev", f"socket,id=n0,udp=127.0.0.1:{ports[1 - i]},localaddr=127.0.0.1:{ports[i]}"]
                qemu = [
                    "qemu-system-x86_64",
                    *self._accel(),
                    "-smp",
                    str(cpus or self.cpus),
                    "-m",
                    self.memory,
                    "-kernel",
                    str(self.kernel),
                    "-initrd",
                    str(self.initramfs),
                    "-append",
                    "console=ttyS0 quiet panic=-1 rdinit=/init",
                    "-nographic",
                    "-no-reboot",
                    "-monitor",
                    "none",
                    "-virtfs",
                    "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
                    "-virtfs",
                    f"local,path={out},mount_tag=out,security_model=none,multidevs=remap",
                    *net,
                    "-device",
                    f"virtio-net-pci,netdev=n0,mac=52:54:00:12:34:{0x56 + i:02x},speed=10000,duplex=full,romfile=",
                ]
                with self._lock:
                    if self._stopped:
                        raise GuestError("stopped")
                    procs.append(
                        subprocess.Popen(
                            ["chrt", "--idle", "0", *qemu] if self.idle else qemu,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            text=True,
                            errors="replace",
                        )
                    )
                    self._live.append(procs[-1])
                lines: list[str] = []
                consoles.append(lines)
                prefix = f"[rchost{i}] " if hosts > 1 else ""
                t = threading.Thread(
                    target=_pump, args=(procs[-1].stdout, lines, prefix if echo else None), daemon=True
                )
                t.start()
                readers.append(t)
            deadline = time.monotonic() + timeout + 120  # boot and shutdown around the command's own limit
            for p in procs:
                try:
                    cpu = _reap(p, deadline)
                except subprocess.TimeoutExpired:
                    p.kill()
                    cpu = _reap(p, None)
                with self._lock:
                    self.cpu_seconds += cpu
            for t in readers:
                t.join(timeout=10)
            results = []
            for out, lines in zip(outs, consoles):
                rc_file, output = out / "rc", out / "output"
                rc = int(rc_file.read_text().strip()) if rc_file.exists() else 125
                text = output.read_text(errors="replace") if output.exists() else ""
                results.append((rc, text if rc != 125 else text + "".join(lines)))
            return results
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            with self._lock:
                self._live = [p for p in self._live if p not in procs]
            for out in outs:
                shutil.rmtree(out, ignore_errors=True)


def _reap(p: subprocess.Popen, deadline: float | None) -> float:
    """Wait for p to exit (until `deadline`, time.monotonic(); subprocess.TimeoutExpired
    then), reap it and return the CPU seconds it used: read from /proc while it is a zombie,
    so that a test run can tell the guests' share of the CPU from its own (its reaped children
    count both). 0 where the run's end reaped it first (Guest.stop)."""
    if p.returncode is not None:
        return 0.0
    while True:
        try:
            if os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                break
        except ChildProcessError:
            return 0.0
        if deadline is not None and time.monotonic() > deadline + 1:
            raise subprocess.TimeoutExpired(p.args, 0)  # (caught by the caller, who kills it)
        time.sleep(0.2)
    try:
        fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    except (OSError, IndexError, ValueError):
        cpu = 0.0
    p.wait()
    return cpu


def _pump(stream, lines: list[str], prefix: str | None) -> None:
    for line in stream:
        lines.append(line)
        if prefix is not None:
            sys.stdout.write(prefix + line)
            sys.stdout.flush()


def _free_udp_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="kernel + initramfs directory (%(default)s)")
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("setup", help="install packages, extract the kernel, build the initramfs")
    s.add_argument("--no-packages", action="store_true", help="skip apt-get install")
    r = sub.add_parser("run", help="run a command in a fresh guest")
    r.add_argument("--hosts", type=int, choices=(1, 2), default=1)
    r.add_argument("--timeout", type=float, default=600)
    r.add_argument("--cpus", type=int, default=2)
    r.add_argument("--memory", default="2G")
    r.add_argument("--delay", help="netem delay on each guest's link, e.g. 250us (an RTT of twice it)")
    r.add_argument("--rails", type=int, choices=(1, 2), default=1, help="RDMA devices per guest: 2 adds rxe1")
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.what == "setup":
        Guest(args.cache).setup(install_packages=not args.no_packages)
        print(f"guest ready in {args.cache}")
        return 0
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("run: no command")
    line = " ".join(shlex.quote(c) for c in cmd) if len(cmd) > 1 else cmd[0]
    env = ({"GUEST_DELAY": args.delay} if args.delay else {}) | ({"GUEST_RAILS": "2"} if args.rails > 1 else {})
    results = Guest(args.cache, args.cpus, args.memory).run_hosts(
        [line] * args.hosts, timeout=args.timeout, env=env or None
    )
    return max(rc for rc, _ in results)


if __name__ == "__main__":
    sys.exit(main())
