#!/usr/bin/env python3
"""Run a command in a throw-away QEMU guest with a Soft-RoCE (rdma_rxe) device: the kernel's
real RDMA stack and verbs ABI, for machines without an RDMA NIC (or without InfiniBand in
their kernel). Needs root on Debian.

    sudo python3 scripts/rdma_guest.py setup              # once: packages, kernel, initramfs
    sudo python3 scripts/rdma_guest.py run -- ibv_devinfo # boot, run, print, exit with its status
    sudo python3 scripts/rdma_guest.py run --hosts 2 -- CMD   # also two "hosts": netns h0, h1

The guest runs Debian's stock kernel (extracted from the linux-image package into the cache
directory, nothing installed into the host's /boot or /lib/modules) under TCG (software
emulation; KVM only where /dev/kvm can boot a stock kernel, which kvm_pvm cannot). Its root
is the host's / shared read-only over 9p under a tmpfs overlay, so the host's Python,
virtualenvs and built extension run unchanged; a second, writable 9p share carries the
command, its exit status and its output back. The command runs in the current directory,
as root, with `ulimit -l unlimited`, after `rxe0` on eth0 is ACTIVE (10.0.2.15/24).

--hosts 2 adds network namespaces h0 and h1 joined by a veth pair (10.9.0.1, 10.9.0.2),
each end with its own rxe device (rxe_h0, rxe_h1): two "hosts" whose ranks reach each other
only over RDMA (run ranks with `ip netns exec h0 ...`).

From Python (tests/test_rdma_guest.py): Guest().available() says why not, Guest().run(cmd).
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PACKAGES = ["qemu-system-x86", "busybox-static", "kmod", "cpio", "ibverbs-utils", "ibverbs-providers",
            "rdma-core", "iproute2", "perftest"]
# Debian builds these as modules; the guest has no modprobe, so the initramfs loads them
# (with what `modprobe --show-depends` lists) in this order. crc32_generic: rxe needs
# crc32, and without it `rdma link add` fails with "No such file or directory".
MODULES = ["virtio_pci", "9pnet_virtio", "9p", "overlay", "virtio_net", "crc32_generic", "rdma_rxe", "veth", "bridge"]
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
mkdir -p /dev/shm /dev/pts; mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
. /rdmacoll-out/env.sh
hostname rdmacoll-guest
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0
wait_active() {  # device
  for i in $(seq 1 100); do
    grep -q ACTIVE /sys/class/infiniband/$1/ports/1/state 2>/dev/null && return 0
    sleep 0.1
  done
  echo "rdma_guest: $1 never became ACTIVE" >&2; return 1
}
rdma link add rxe0 type rxe netdev eth0 && wait_active rxe0
if [ "$HOSTS" = 2 ]; then
  ip netns add h0; ip netns add h1
  ip link add v0 type veth peer name v1
  ip link set v0 netns h0; ip link set v1 netns h1
  ip -n h0 addr add 10.9.0.1/24 dev v0; ip -n h1 addr add 10.9.0.2/24 dev v1
  ip -n h0 link set v0 up; ip -n h1 link set v1 up; ip -n h0 link set lo up; ip -n h1 link set lo up
  ip netns exec h0 rdma link add rxe_h0 type rxe netdev v0 && wait_active rxe_h0
  ip netns exec h1 rdma link add rxe_h1 type rxe netdev v1 && wait_active rxe_h1
fi
ulimit -l unlimited
cd "$GUEST_CWD" 2>/dev/null || cd /
timeout -k 10 "$GUEST_TIMEOUT" /bin/sh /rdmacoll-out/cmd.sh > /dev/console 2>&1
echo $? > /rdmacoll-out/rc
sync
echo o > /proc/sysrq-trigger
while :; do :; done  # power-off is asynchronous: init must not exit first (the kernel panics then)
"""


class GuestError(RuntimeError):
    """The guest cannot be set up or run here (not root, no QEMU, no kernel...)."""


def _run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Guest:
    def __init__(self, cache: Path | str = DEFAULT_CACHE, cpus: int = 2, memory: str = "2G"):
        self.cache = Path(cache)
        self.cpus, self.memory = cpus, memory

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
            subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
                           check=True, env=env, stdout=subprocess.DEVNULL)
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
            files = subprocess.run("find . | cpio -o -H newc --quiet | gzip -1", shell=True, cwd=initrd,
                                   check=True, capture_output=True).stdout
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
        if os.path.exists("/dev/kvm") and os.access("/dev/kvm", os.W_OK) and not pvm and \
                os.environ.get("RDMACOLL_GUEST_ACCEL") != "tcg":
            return ["-accel", "kvm", "-cpu", "host"]
        return ["-accel", "tcg,thread=multi", "-cpu", "max"]

    def run(self, command: str, timeout: float = 600, hosts: int = 1, env: dict | None = None,
            cwd: str | None = None, echo: bool = True) -> tuple[int, str]:
        """Boot, run `command` (a shell line) in the guest, power off: (exit status, output).
        The status is 124 when the command ran past `timeout` (it is killed in the guest; the
        guest itself is killed 60 s later)."""
        why = self.available()
        if why:
            raise GuestError(why)
        out = Path(tempfile.mkdtemp(prefix="rdmacoll-guest-"))
        try:
            (out / "run.sh").write_text(RUN)
            (out / "cmd.sh").write_text(command + "\n")
            exports = {"HOSTS": str(hosts), "GUEST_CWD": cwd or os.getcwd(), "GUEST_TIMEOUT": str(int(timeout))}
            for k, v in (env or {}).items():
                exports[k] = v
            (out / "env.sh").write_text("".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in exports.items()))
            out.chmod(out.stat().st_mode | stat.S_IRWXO)
            qemu = ["qemu-system-x86_64", *self._accel(), "-smp", str(self.cpus), "-m", self.memory,
                    "-kernel", str(self.kernel), "-initrd", str(self.initramfs),
                    "-append", "console=ttyS0 quiet panic=-1 rdinit=/init",
                    "-nographic", "-no-reboot", "-monitor", "none",
                    "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
                    "-virtfs", f"local,path={out},mount_tag=out,security_model=none,multidevs=remap",
                    "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,speed=10000,duplex=full,romfile="]
            lines = []
            t0 = time.monotonic()
            proc = subprocess.Popen(qemu, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    text=True, errors="replace")
            try:
                deadline = timeout + 60 + 60  # boot, then the command's own timeout, then shutdown
                for line in proc.stdout:
                    lines.append(line)
                    if echo:
                        sys.stdout.write(line)
                        sys.stdout.flush()
                    if time.monotonic() - t0 > deadline:
                        break
            finally:
                if proc.poll() is None:
                    try:
                        proc.wait(timeout=max(1, deadline - (time.monotonic() - t0)))
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            rc_file = out / "rc"
            rc = int(rc_file.read_text().strip()) if rc_file.exists() else 125
            return rc, "".join(lines)
        finally:
            shutil.rmtree(out, ignore_errors=True)


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
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.what == "setup":
        Guest(args.cache).setup(install_packages=not args.no_packages)
        print(f"guest ready in {args.cache}")
        return 0
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("run: no command")
    rc, _ = Guest(args.cache, args.cpus, args.memory).run(" ".join(shlex.quote(c) for c in cmd) if len(cmd) > 1
                                                          else cmd[0], timeout=args.timeout, hosts=args.hosts)
    return rc


if __name__ == "__main__":
    sys.exit(main())
