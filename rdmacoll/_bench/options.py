"""rdmacoll-bench's command line: nccl-tests' options plus rdmacoll's, checked up front so
that a bad value costs one line on stderr, not a launch that fails halfway."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from rdmacoll import _core, _settings

COLLECTIVES = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall")
PEERS = ("mpi", "gloo", "horovod")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "int8")
OPS = ("Sum", "Average", "Min", "Max", "Product")
FLOATS = ("float16", "bfloat16", "float32", "float64")

# nccl-tests' spellings (common.cu: test_typenames, test_opnames), as printed in the table's
# type and redop columns; rdmacoll's own spellings are accepted too, in any case.
# In nccl-tests' order, which -d all / -o all follow.
NCCL_TYPES = {
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
    "float16": "half",
    "float32": "float",
    "float64": "double",
    "bfloat16": "bfloat16",
}
NCCL_OPS = {"Sum": "sum", "Product": "prod", "Max": "max", "Min": "min", "Average": "avg"}
# nccl-tests' names the core has no counterpart for
NOT_HERE = {
    "uint32": "the core moves uint32 but never reduces it",
    "uint64": "the core moves uint64 but never reduces it",
    "mulsum": "the core has no pre-multiplied sum",
}
# -a: how each rank's time becomes the one reported (nccl-tests' --average)
AVERAGE = {0: "rank 0's", 1: "the mean over ranks", 2: "the fastest rank's", 3: "the slowest rank's"}


def _choice(kind: str, table: dict[str, str], canonical: tuple[str, ...]):
    """An argparse type for -d / -o: nccl-tests' name or rdmacoll's (any case), or all;
    returns the list of rdmacoll names."""
    names = {c.lower(): c for c in canonical} | {v: k for k, v in table.items()}
    accepted = " ".join([*table.values(), *(c.lower() for c in canonical if c.lower() not in table.values()), "all"])

    def parse(text: str) -> list[str]:
        key = text.strip().lower()
        if key == "all":
            return list(table)
        if key in names:
            return [names[key]]
        why = f": {NOT_HERE[key]}" if key in NOT_HERE else ""
        raise argparse.ArgumentTypeError(f"unknown {kind} {text!r}{why} (accepted, any case: {accepted})")

    parse.__name__ = kind
    return parse


dtype_list = _choice("dtype", NCCL_TYPES, DTYPES)
op_list = _choice("op", NCCL_OPS, OPS)


def launcher_rank() -> int:
    """This process's rank as the MPI launcher announced it (0 when not launched by one)."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                pass
    return 0


def parse_size(text: str) -> int:
    """A size in the grammar of every size setting (32768, 32K, 32KB, 32KiB, 1.5M)."""
    try:
        return _core.parse_size(text)
    except _core.RdmacollError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 8, 64K, 16M, 1.5G)") from None


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}: {text!r}")
        return v

    parse.__name__ = f"integer >= {low}"
    return parse


positive_int = _int_at_least(1)


def peer_list(text: str) -> list[str]:
    names = []
    for name in (t.strip().lower() for t in text.split(",")):
        if name not in PEERS:
            raise argparse.ArgumentTypeError(f"unknown peer {name!r} (choose from {','.join(PEERS)})")
        if name not in names:
            names.append(name)
    return names


def human(n: int) -> str:
    for suffix, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


def human_bytes(n: int) -> str:
    """8 B, 64 KiB, 16 MiB (binary units where the size is a whole multiple)."""
    h = human(n)
    return f"{h[:-1]} {h[-1]}iB" if h[-1] in "KMG" else f"{n} B"


class OneLineParser(argparse.ArgumentParser):
    """Errors as one line on stderr (from rank 0 only under a launcher), exit status 2."""

    def error(self, message):
        if launcher_rank() == 0:
            print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="rdmacoll-bench", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "collectives",
        nargs="*",
        metavar="COLLECTIVE",
        default=[],
        help=f"{' '.join(COLLECTIVES)} or all (default: allreduce)",
    )
    ap.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("8"), help="smallest size (default 8)")
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("64M"), help="largest size (default 64M)")
    ap.add_argument(
        "-f",
        "--stepfactor",
        type=positive_int,
        default=None,
        help="size multiplier; 1: add -i instead (default 4, or 1 when only -i is given)",
    )
    ap.add_argument(
        "-i", "--stepbytes", type=parse_size, default=None, help="size increment when -f is 1 or not given (default 1M)"
    )
    ap.add_argument("-n", "--iters", type=positive_int, default=20, help="timed iterations per size (default 20)")
    ap.add_argument(
        "-w", "--warmup", "--warmup_iters", type=_int_at_least(0), default=5, help="warm-up iterations (default 5)"
    )
    ap.add_argument(
        "-c",
        "--check",
        type=_int_at_least(0),
        default=1,
        help="verify results: 0 no, N > 0 yes, once per size and placement (default 1)",
    )
    ap.add_argument(
        "-d",
        "--dtype",
        "--datatype",
        type=dtype_list,
        default=["float32"],
        help="half float double bfloat16 int8 uint8 int32 int64 (nccl-tests' names), float16 float32 "
        "float64 (rdmacoll's), or all; any case (default float)",
    )
    ap.add_argument(
        "-o",
        "--op",
        type=op_list,
        default=["Sum"],
        help="sum prod min max avg (nccl-tests' names), Average Product (rdmacoll's), or all; any case (default sum)",
    )
    ap.add_argument("-r", "--root", type=_int_at_least(0), default=0, help="broadcast's root rank (default 0)")
    ap.add_argument(
        "-a",
        "--average",
        type=int,
        choices=sorted(AVERAGE),
        default=None,
        help="how ranks' times combine: 0 rank 0's, 1 mean, 2 fastest, 3 slowest "
        "(default 3 per call; 1 with --back-to-back, as nccl-tests)",
    )
    ap.add_argument(
        "-z",
        "--blocking",
        type=int,
        choices=(0, 1),
        default=0,
        help="with --back-to-back: a barrier after every call (nccl-tests' -z 1); without it every "
        "call is already barrier-aligned",
    )
    ap.add_argument(
        "--back-to-back",
        action="store_true",
        help="time as nccl-tests does: -n calls back to back, each rank's average per call",
    )
    ap.add_argument(
        "--algo",
        default=None,
        help="force an algorithm: a name (applied to every collective swept) or RDMACOLL_ALGO rules",
    )
    ap.add_argument(
        "--transport",
        default=None,
        help=f"RDMACOLL_TRANSPORT for this run (default: the setting's, {_settings.TABLE['transport']['default']})",
    )
    ap.add_argument(
        "--inplace",
        type=int,
        choices=(0, 1),
        default=None,
        help="only in place (1) or only out of place (0); default both, side by side",
    )
    ap.add_argument(
        "--memory",
        choices=("user", "empty"),
        default="user",
        help="user: plain NumPy arrays; empty: arrays from rc.empty (zero-copy)",
    )
    ap.add_argument(
        "--compare",
        type=peer_list,
        default=[],
        metavar="PEERS",
        help="also time these, same sizes, same processes: mpi,gloo,horovod",
    )
    ap.add_argument("--json", metavar="FILE", default=None, help="write every row as JSON (rank 0)")
    ap.add_argument("--plot", metavar="FILE.png", default=None, help="draw busbw and time against size (matplotlib)")
    ap.add_argument(
        "--from",
        dest="from_json",
        metavar="FILE.json",
        default=None,
        help="with --plot: redraw from a saved --json file (runs nothing, needs no launcher)",
    )
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    ap.add_argument(
        "--progress-every",
        metavar="SECONDS",
        type=float,
        default=10.0,
        help="when stderr is not a terminal (under mpiexec): a progress line at most this often, "
        "none before (default: 10; a terminal shows one line redrawn in place)",
    )
    ap.add_argument("--list", action="store_true", help="list the allreduce algorithms and exit")
    ap.add_argument("--np", type=positive_int, default=None, help="launch this many local ranks through mpiexec")
    ap.add_argument("--tune", action="store_true", help="measure the cost model constants and write the tuning file")
    ap.add_argument(
        "--tune-file",
        default=None,
        help="where --tune writes (default: $RDMACOLL_TUNING_FILE, else ~/.cache/rdmacoll/tuning.json)",
    )
    ap.add_argument(
        "--tune-sizes", default="8,1K,4K,16K,32K,64K,256K,1M,4M", help="message sizes --tune times (comma-separated)"
    )
    return ap


def _writable(path: str) -> bool:
    return os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)


def parse(argv: list[str], description: str | None = None) -> argparse.Namespace:
    """Parsed and checked arguments; a bad one exits with a one-line error."""
    ap = build_parser(description)
    args = ap.parse_args(argv)
    wanted = args.collectives or ["allreduce"]
    for name in wanted:
        if name != "all" and name not in COLLECTIVES:
            ap.error(f"unknown collective {name!r} (choose from {', '.join(COLLECTIVES)}, all)")
    args.collectives = list(COLLECTIVES) if "all" in wanted else list(dict.fromkeys(wanted))
    if args.maxbytes < args.minbytes:
        ap.error(f"--maxbytes ({args.maxbytes}) must be >= --minbytes ({args.minbytes})")
    if args.stepfactor is None:
        args.stepfactor = 1 if args.stepbytes is not None else 4
    if args.stepbytes is None:
        args.stepbytes = 1 << 20
    if args.stepfactor == 1 and args.stepbytes < 1:
        ap.error("-i (--stepbytes) must be >= 1 when sizes grow by adding it")
    if args.dtype == ["bfloat16"] and importlib.util.find_spec("ml_dtypes") is None:
        ap.error("-d bfloat16 needs ml_dtypes (pip install ml_dtypes)")
    if "bfloat16" in args.dtype and importlib.util.find_spec("ml_dtypes") is None:
        args.dtype.remove("bfloat16")  # -d all without ml_dtypes: the others
    args.pairs = [(d, o) for d in args.dtype for o in args.op if o != "Average" or d in FLOATS]
    if not args.pairs:
        ap.error(f"-o avg needs a floating dtype, not {args.dtype[0]} (use -o sum for integers)")
    if args.average is None:
        args.average = 1 if args.back_to_back else 3
    if args.from_json is not None:
        if args.plot is None:
            ap.error("--from redraws a plot: give --plot FILE.png too")
        if not os.path.isfile(args.from_json):
            ap.error(f"--from {args.from_json}: no such file")
    if args.json is not None and not _writable(args.json):
        ap.error(f"--json {args.json}: cannot write into its directory")
    if args.plot is not None:
        if not args.plot.lower().endswith(".png"):
            ap.error(f"--plot writes a PNG: name the file FILE.png, not {args.plot!r}")
        if not _writable(args.plot):
            ap.error(f"--plot {args.plot}: cannot write into its directory")
        if importlib.util.find_spec("matplotlib") is None:
            ap.error("--plot needs matplotlib (pip install matplotlib, or rdmacoll[plot])")
    if args.algo is not None and not args.algo.strip():
        ap.error("--algo needs an algorithm name or RDMACOLL_ALGO rules")
    if args.transport is not None and not args.transport.strip():
        ap.error("--transport needs a transport name (e.g. shm)")
    return args


def pairs_skipped(args) -> list[str]:
    """The (dtype, op) combinations -d/-o named that do not run (avg on integers)."""
    return [f"{NCCL_TYPES[d]} {NCCL_OPS[o]}" for d in args.dtype for o in args.op if (d, o) not in args.pairs]


def algo_rules(algo: str, collectives: list[str]) -> str:
    """--algo as RDMACOLL_ALGO: rules pass through; a bare name applies to every
    collective swept (collective:name;...)."""
    text = algo.strip()
    if ":" in text or ";" in text or "," in text:
        return text
    return ";".join(f"{c}:{text}" for c in collectives)


def without_np(argv: list[str]) -> list[str]:
    """argv less --np N / --np=N (what the ranks of a self-launch get)."""
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--np":
            skip = True
        elif not a.startswith("--np="):
            rest.append(a)
    return rest
