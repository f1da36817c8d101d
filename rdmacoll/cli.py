"""The `rdmacoll` command: one entry point with subcommands.

rdmacoll --version
rdmacoll doctor                  # this host; under mpiexec/torchrun: the whole job
rdmacoll bench [ARGS...]         # = rdmacoll-bench ARGS
rdmacoll run [ARGS...]           # = rdmacoll-run ARGS (horovodrun's flags for your mpirun)
"""

from __future__ import annotations

import argparse
import sys

from . import _settings, bench, doctor, run


def _doctor(args) -> int:
    return doctor.doctor()


def _bench(args) -> int:
    return bench.main(args.rest)


def _run(args) -> int:
    return run.main(args.rest)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rdmacoll",
        description="rdmacoll: collective communication for data-parallel deep learning. Subcommands:",
        epilog="Settings: RDMACOLL_* variables (README, 'Settings'); "
        "RDMACOLL_LOG_LEVEL=info|debug explains what init() chose.",
    )
    ap.add_argument("--version", action="version", version=f"rdmacoll {_settings.rdmacoll_version()}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    d = sub.add_parser("doctor", help=doctor.HELP, description=doctor.DESCRIPTION)
    d.set_defaults(func=_doctor)
    for name, func, what in (
        ("bench", _bench, "rdmacoll-bench: nccl-tests style sweeps (rdmacoll bench --help)"),
        ("run", _run, "rdmacoll-run: horovodrun's flags for your mpirun (rdmacoll run --help)"),
    ):
        p = sub.add_parser(name, help=what, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=func)
    return ap


# The subcommands that hand the rest of the line, options included, to another command.
# argparse's REMAINDER inside a subparser does not take a first word that starts with '-'
# (`rdmacoll run -np 2 ...` was "unrecognized arguments: -np"): they are dispatched before
# parsing; the parser only lists them for --help.
_PASS_THROUGH = {"bench": bench.main, "run": run.main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in _PASS_THROUGH:
        return _PASS_THROUGH[argv[0]](argv[1:])
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
