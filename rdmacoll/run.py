"""rdmacoll-run: horovodrun's common flags, translated for the MPI launcher you have.

    rdmacoll-run -np 4 -H node1:2,node2:2 -x NCCL_DEBUG python train.py
    rdmacoll-run -np 8 --hostfile hosts.txt python train.py

It prints the command, then becomes your own mpirun/mpiexec (Open MPI or MPICH/hydra,
told apart by `--version`): no process management of its own, so the job behaves exactly
as that launcher makes it. The launcher is the one next to this Python (a virtualenv's
MPICH), else the first on PATH, or --mpirun.

hostfile lines: "host slots=N" (Open MPI's form) or "host:N" (MPICH's); both are read.

Elastic jobs (--elastic, or any of --min-np, --max-np, --host-discovery-script, as
horovodrun): no MPI launcher; rdmacoll's own driver starts and watches the workers
(rdmacoll/elastic_run.py).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys

from . import elastic_run


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """'a:2,b:3' or 'a,b' (one slot each) -> [(host, slots)]."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, slots = item.partition(":")
        if not host or (slots and not slots.isdigit()) or (slots and int(slots) < 1):
            raise ValueError(f"-H: {item!r} is not host or host:slots")
        out.append((host, int(slots) if slots else 1))
    if not out:
        raise ValueError("-H: no hosts")
    return out


def read_hostfile(path: str) -> list[tuple[str, int]]:
    out = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            host, slots = words[0], 1
            if ":" in host:
                host, _, n = host.partition(":")
                slots = int(n)
            for w in words[1:]:
                if w.startswith(("slots=", "max_slots=")):
                    slots = int(w.split("=", 1)[1])
                    break
            out.append((host, slots))
    if not out:
        raise ValueError(f"--hostfile {path}: no hosts")
    return out


def flavor(mpirun: str) -> str:
    """'openmpi' or 'mpich' (hydra, also Intel MPI), from the launcher's --version."""
    try:
        text = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
        text = text.stdout + text.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SystemExit(f"rdmacoll-run: cannot run {mpirun} --version: {e}") from None
    if any(w in text for w in ("Open MPI", "OpenRTE", "PRRTE", "prterun")):
        return "openmpi"
    if any(w in text for w in ("HYDRA", "MPICH", "Intel(R) MPI")):
        return "mpich"
    raise SystemExit(
        f"rdmacoll-run: {mpirun} is neither Open MPI nor MPICH/hydra ({text.strip()[:200]!r}); run it yourself"
    )


def command(kind: str, mpirun: str, np_: int, hosts, env_names, program) -> list[str]:
    """The launcher's command line for horovodrun's arguments."""
    cmd = [mpirun]
    if kind == "openmpi":
        cmd += ["-np", str(np_)]
        if hosts:
            cmd += ["-H", ",".join(f"{h}:{s}" for h, s in hosts)]
            if np_ > sum(s for _, s in hosts):
                cmd += ["--oversubscribe"]
        elif np_ > (os.cpu_count() or 1):
            cmd += ["--oversubscribe"]
        cmd += ["--bind-to", "none", "--map-by", "slot"]
        for name in env_names:
            cmd += ["-x", name]
    else:
        cmd += ["-n", str(np_)]
        if hosts:
            cmd += ["-hosts", ",".join(f"{h}:{s}" for h, s in hosts)]
        if env_names:
            cmd += ["-genvlist", ",".join(env_names)]
    return cmd + list(program)


def find_mpirun(given: str | None) -> str:
    if given:
        return given
    for name in ("mpirun", "mpiexec"):
        beside = os.path.join(os.path.dirname(sys.executable), name)
        if os.access(beside, os.X_OK):
            return beside
    for name in ("mpirun", "mpiexec"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit(
        "rdmacoll-run: no mpirun or mpiexec found (install an MPI, e.g. pip install 'rdmacoll[mpich]', "
        "or pass --mpirun PATH)"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="rdmacoll-run",
        description=__doc__.split("\n\n")[0],
        epilog="Everything after the options is the program and its arguments.",
    )
    ap.add_argument("-np", "--num-proc", dest="np", type=int, required=True, help="number of processes")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", help="host:slots,... (e.g. node1:2,node2:2)")
    where.add_argument("--hostfile", help="a file of hosts: 'host slots=N' or 'host:N' per line")
    ap.add_argument(
        "-x",
        dest="env",
        action="append",
        default=[],
        metavar="VAR",
        help="pass this environment variable to every process (repeat for more; VAR=value sets it)",
    )
    ap.add_argument("--mpirun", help="the launcher to run (default: mpirun/mpiexec beside this Python, else PATH)")
    ap.add_argument("--verbose", action="store_true", help="also print the launcher's flavour and the host list")
    ap.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    el = ap.add_argument_group("elastic (horovodrun's flags; rdmacoll/elastic_run.py)")
    el.add_argument("--elastic", action="store_true", help="run elastic (implied by the flags below)")
    el.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int, help="fewest workers (default: -np)")
    el.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int, help="most workers (default: every slot)")
    el.add_argument("--host-discovery-script", help="prints the available hosts, 'host:slots' per line")
    el.add_argument("--slots-per-host", dest="slots", type=int, help="slots of a discovered host without ':slots'")
    el.add_argument(
        "--elastic-timeout", type=float, help="seconds to wait for --min-np slots (RDMACOLL_ELASTIC_TIMEOUT; 600)"
    )
    el.add_argument("--reset-limit", type=int, help="end the job after this many new worlds")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.np < 1:
        ap.error("-np must be at least 1")
    if not args.program:
        ap.error("no program to run (rdmacoll-run -np 2 python train.py)")
    try:
        hosts = parse_hosts(args.hosts) if args.hosts else read_hostfile(args.hostfile) if args.hostfile else None
    except (ValueError, OSError) as e:
        ap.error(str(e))
    names = []
    for item in args.env:
        name, eq, value = item.partition("=")
        if eq:
            os.environ[name] = value  # the launcher passes the value on from its environment
        names.append(name)
    if args.elastic or args.min_np is not None or args.max_np is not None or args.host_discovery_script:
        if args.host_discovery_script and hosts:
            ap.error("--host-discovery-script and -H/--hostfile: give one")
        return elastic_run.main(args, hosts, names)
    mpirun = find_mpirun(args.mpirun)
    kind = flavor(mpirun)
    cmd = command(kind, mpirun, args.np, hosts, names, args.program)
    if args.verbose:
        print(f"rdmacoll-run: {kind} launcher {mpirun}; hosts {hosts or 'this one'}", file=sys.stderr)
    print("rdmacoll-run: " + " ".join(_quote(c) for c in cmd), file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    env = dict(os.environ)
    if kind == "openmpi" and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    os.execvpe(cmd[0], cmd, env)
    return 127  # not reached


def _quote(s: str) -> str:
    return shlex.quote(s)


if __name__ == "__main__":
    sys.exit(main())
