"""rdmacoll-bench: option errors, busbw factors, sizes and references (in process); real
sweeps of every collective under mpiexec with --check, --compare (a missing peer is
skipped, rdmacoll's rows stay), --json, --plot and --np."""

import dataclasses
import importlib.util
import json

import numpy as np
import pytest

from mpi_util import rank_records, run_mpi, run_python
from rdmacoll._bench import collectives as C
from rdmacoll._bench.report import JSON_KEYS, Row, unstable
from rdmacoll.bench import main

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None

# --------------------------------------------------------------------------- in process


@pytest.mark.parametrize(
    "argv, words",
    [
        (["-b", "foo"], "not a size"),
        (["-e", "12X"], "not a size"),
        (["-f", "0"], "must be >= 1"),
        (["-n", "0"], "must be >= 1"),
        (["-w", "-1"], "must be >= 0"),
        (["-c", "-1"], "must be >= 0"),
        (
            ["-d", "float8"],
            "unknown dtype 'float8' (accepted, any case: int8 uint8 int32 int64 half float double "
            "bfloat16 float16 float32 float64 all)",
        ),
        (["-d", "uint32"], "the core moves uint32 but never reduces it"),
        (["-o", "Mean"], "unknown op 'Mean' (accepted, any case: sum prod max min avg average product all)"),
        (["-o", "mulsum"], "the core has no pre-multiplied sum"),
        (["-a", "4"], "invalid choice"),
        (["-z", "2"], "invalid choice"),
        (["-r", "-1"], "must be >= 0"),
        (["-f", "1", "-i", "0"], "-i (--stepbytes) must be >= 1"),
        (["--from", "rows.json"], "give --plot FILE.png too"),
        (["--plot", "x.png", "--from", "/nonexistent/rows.json"], "no such file"),
        (["allreduse"], "unknown collective 'allreduse'"),
        (["-b", "1M", "-e", "1K"], "--maxbytes"),
        (["-d", "int32", "-o", "Average"], "floating dtype"),
        (["-d", "int8", "-o", "avg"], "floating dtype"),
        (["--compare", "mpi,nccl"], "unknown peer 'nccl'"),
        (["--plot", "bw.jpg"], "FILE.png"),
        (["--json", "/nonexistent-dir/rows.json"], "cannot write"),
        (["--np", "0"], "must be >= 1"),
        (["--algo", " "], "--algo"),
    ],
)
def test_bad_option_is_one_line(argv, words, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rdmacoll-bench: error:"), err
    assert words in err, err


NCCL_TYPES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "bfloat16": "bfloat16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "int8": "int8",
}
NCCL_OPS = {"sum": "Sum", "prod": "Product", "min": "Min", "max": "Max", "avg": "Average"}


def _parse(argv):
    from rdmacoll._bench.options import parse

    return parse(argv)


@pytest.mark.parametrize(
    "spelling, dtype",
    list(NCCL_TYPES.items())
    + [
        ("FLOAT", "float32"),
        ("Half", "float16"),
        ("float16", "float16"),
        ("float32", "float32"),
        ("float64", "float64"),
        ("BFloat16", "bfloat16"),
    ],
)
def test_every_nccl_tests_dtype_is_accepted(spelling, dtype):
    assert _parse(["-d", spelling]).dtype == [dtype]


@pytest.mark.parametrize(
    "spelling, op",
    list(NCCL_OPS.items())
    + [
        ("SUM", "Sum"),
        ("Prod", "Product"),
        ("AVG", "Average"),
        ("Sum", "Sum"),
        ("Average", "Average"),
        ("Product", "Product"),
        ("min", "Min"),
        ("MAX", "Max"),
    ],
)
def test_every_nccl_tests_op_is_accepted(spelling, op):
    args = _parse(["-o", spelling])
    assert args.op == [op] and args.pairs == [("float32", op)]


def test_all_runs_every_dtype_and_op_in_nccl_tests_order_less_avg_on_integers():
    from rdmacoll._bench.options import pairs_skipped

    args = _parse(["-d", "all", "-o", "all"])
    assert args.dtype == ["int8", "uint8", "int32", "int64", "float16", "float32", "float64", "bfloat16"]
    assert args.op == ["Sum", "Product", "Max", "Min", "Average"]
    assert ("int8", "Average") not in args.pairs and ("float16", "Average") in args.pairs
    assert len(args.pairs) == 8 * 5 - 4
    assert pairs_skipped(args) == ["int8 avg", "uint8 avg", "int32 avg", "int64 avg"]


def test_nccl_tests_flags_are_accepted():
    a = _parse(
        [
            "-b",
            "1K",
            "-e",
            "1M",
            "-f",
            "2",
            "-i",
            "4K",
            "-n",
            "7",
            "-w",
            "3",
            "-c",
            "0",
            "-z",
            "1",
            "-r",
            "1",
            "-a",
            "0",
            "broadcast",
        ]
    )
    assert (
        a.minbytes,
        a.maxbytes,
        a.stepfactor,
        a.stepbytes,
        a.iters,
        a.warmup,
        a.check,
        a.blocking,
        a.root,
        a.average,
    ) == (1024, 1 << 20, 2, 4096, 7, 3, 0, 1, 1, 0)
    # -i alone: sizes grow by adding it (nccl-tests' stepbytes when no factor is given)
    assert (_parse(["-i", "1K"]).stepfactor, _parse(["-i", "1K"]).stepbytes) == (1, 1024)
    # -f 1 alone: nccl-tests' default step, 1M
    assert (_parse(["-f", "1"]).stepfactor, _parse(["-f", "1"]).stepbytes) == (1, 1 << 20)
    # -a: slowest rank per call by default, the mean over ranks back to back (nccl-tests')
    assert _parse([]).average == 3 and _parse(["--back-to-back"]).average == 1
    assert _parse(["--back-to-back", "-a", "2"]).average == 2
    # long names as nccl-tests spells them
    assert _parse(["--datatype", "double", "--warmup_iters", "2"]).dtype == ["float64"]


def test_ranks_combine_as_nccl_tests_average_modes():
    from rdmacoll._bench.timing import combine

    per_rank = np.array([[1.0, 8.0], [3.0, 2.0], [5.0, 5.0]])  # 3 ranks, 2 values
    assert combine(per_rank, 0).tolist() == [1.0, 8.0]  # rank 0's
    assert combine(per_rank, 1).tolist() == [3.0, 5.0]  # mean
    assert combine(per_rank, 2).tolist() == [1.0, 2.0]  # min
    assert combine(per_rank, 3).tolist() == [5.0, 8.0]  # max


def _row(placement="out-of-place", impl="rdmacoll", time_us=2.0, wrong=0, **kw):
    from rdmacoll._bench.report import Row

    fields = dict(
        impl=impl,
        collective="allreduce",
        placement=placement,
        bytes=1024,
        count=256,
        dtype="float32",
        op="Sum",
        root=-1,
        algo="ring",
        transport="shm",
        time_us=time_us,
        min_us=1.0,
        q1_us=time_us * 0.9,
        median_us=time_us,
        q3_us=time_us * 1.1,
        max_us=3.0,
        algbw=1024 / time_us / 1e3,
        busbw=1024 / time_us / 1e3,
        wrong=wrong,
        ranks=2,
        hosts=1,
        version="0.1.0",
        timing="per call, -a 3",
    )
    fields.update(kw)
    return Row(**fields)


def test_table_prints_both_placements_side_by_side_with_nccl_tests_headers():
    import io

    from rdmacoll._bench.report import Table

    out = io.StringIO()
    t = Table([], out=out)
    t.header()
    t.rows([_row(), _row("in-place", time_us=4.0, algo="direct")])
    t.rows([_row(bytes=8, count=2)])  # in place not run: N/A
    t.summary([_row(), _row("in-place", time_us=4.0)], ["rdmacoll"])
    lines = out.getvalue().splitlines()
    assert (
        "out-of-place" in lines[0]
        and "in-place" in lines[0]
        and lines[0].index("out-of-place") < lines[0].index("in-place")
    )
    assert lines[1].split()[:14] == [
        "#",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
    ]
    assert lines[1].split()[14:] == ["algo", "transport"]
    assert lines[2].split()[1:3] == ["(B)", "(elements)"]
    row = lines[3].split()
    assert row == [
        "1024",
        "256",
        "float",
        "sum",
        "-1",
        "2.00",
        "0.51",
        "0.51",
        "0",
        "4.00",
        "0.26",
        "0.26",
        "0",
        "ring/direct",
        "shm",
    ]
    assert lines[4].split()[9:13] == ["N/A"] * 4
    assert lines[-3:] == ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.384", "#"]


def test_unstable_timings_are_named():
    from rdmacoll._bench.report import instability_warning

    quiet = [_row(bytes=8, time_us=1.0), _row(), _row(bytes=4096, time_us=3.0)]
    assert instability_warning(quiet, 2, 3.0) is None  # (the load alone is no sign)
    # spread: most calls ~1 us, a quarter a scheduler quantum later
    spread = _row(bytes=8, count=2, time_us=1.2, q1_us=0.9, q3_us=880.0, max_us=4000.0)
    text = instability_warning([spread] + quiet[1:], 2, 3.1)
    assert "in 1 of 3 rows" in text and "rdmacoll allreduce 8 B out-of-place: quartiles 0.9-880.0 us" in text
    assert "load average 3.1 on 2 cores" in text
    # back to back, the spread is over ranks (imbalance, not noise): not judged
    assert instability_warning([dataclasses.replace(spread, timing="back to back, -a 1")], 2, None) is None
    # inversion: 8 B steadily at 180 us, 1 KiB at 2 us (another series is not compared)
    slow = _row(bytes=8, time_us=180.0, q1_us=175.0, q3_us=185.0)
    text = instability_warning([slow, _row(), _row(bytes=16, impl="mpi", time_us=1.0)], 2, None)
    assert "in 1 of 3 rows" in text and "8 B out-of-place: 180.0 us, slower than a larger size at 2.0 us" in text
    # a small inversion is noise
    assert instability_warning([_row(bytes=8, time_us=3.0), _row()], 2, None) is None
    # a spread that a quiet machine shows at 16 MiB (0.63 here) is no sign
    assert instability_warning([_row(q1_us=1.5, q3_us=2.7)], 2, None) is None


def test_table_with_peers_puts_impl_and_ratios_after_nccl_tests_columns():
    import io

    from rdmacoll._bench.report import Table

    out = io.StringIO()
    t = Table(["mpi"], out=out)
    t.header()
    t.rows([_row(), _row("in-place"), _row(impl="mpi", time_us=3.0), _row("in-place", impl="mpi", time_us=5.0)])
    lines = out.getvalue().splitlines()
    assert lines[1].split()[14:] == ["algo", "transport", "impl", "mpi:oop", "mpi:ip"]
    mine, theirs = lines[3].split(), lines[4].split()
    assert mine[15:] == ["rdmacoll", "1.50", "2.50"] and theirs[15:] == ["mpi"]
    assert mine[:5] == theirs[:5] == ["1024", "256", "float", "sum", "-1"]


def test_plot_redraws_from_saved_json(tmp_path, capsys, monkeypatch):
    if not HAVE_MPL:
        pytest.skip("matplotlib is not installed")
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    saved, png = tmp_path / "rows.json", tmp_path / "again.png"
    saved.write_text(
        json.dumps(
            [_row(bytes=b).json() for b in (8, 1024, 65536)]
            + [_row("in-place", bytes=b).json() for b in (8, 1024, 65536)]
        )
    )
    assert main(["--plot", str(png), "--from", str(saved)]) == 0
    from matplotlib import image

    img = image.imread(str(png))
    assert img.ndim == 3 and min(img.shape[:2]) > 100
    assert "drew 6 rows" in capsys.readouterr().err
    saved.write_text('{"not": "rows"}')
    assert main(["--plot", str(png), "--from", str(saved)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a list of rows" in err


def test_without_a_launcher_it_says_how_to_launch(capsys, monkeypatch):
    from rdmacoll.bootstrap.launcher import MPI_VARS, TORCH_VARS

    for var in (*MPI_VARS, *TORCH_VARS, "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_STEP_ID"):
        monkeypatch.delenv(var, raising=False)
    assert main(["-d", "float", "-e", "1M"]) == 2
    err = capsys.readouterr().err
    assert "no launcher" in err
    assert "mpiexec -n 2 rdmacoll-bench -d float -e 1M" in err and "rdmacoll-bench --np 2 -d float -e 1M" in err


@pytest.mark.parametrize(
    "coll, n, factor",
    [
        ("allreduce", 1, 0.0),
        ("allreduce", 2, 1.0),
        ("allreduce", 4, 1.5),
        ("allreduce", 8, 1.75),
        ("allgather", 2, 0.5),
        ("allgather", 4, 0.75),
        ("reducescatter", 4, 0.75),
        ("alltoall", 8, 0.875),
        ("broadcast", 2, 1.0),
        ("broadcast", 8, 1.0),
    ],
)
def test_busbw_factor_is_nccl_tests(coll, n, factor):
    assert C.bus_factor(coll, n) == pytest.approx(factor)


def test_sizes_round_to_whole_parts_and_count_like_nccl_tests():
    # allreduce: every size, count = elements
    assert C.sizes(8, 64, 2, "allreduce", 4, 3) == [(8, 2, 2), (16, 4, 4), (32, 8, 8), (64, 16, 16)]
    # split collectives: whole elements per rank, count = one rank's part; sizes that round
    # to the same call appear once; at least one element per rank
    assert C.sizes(4, 64, 2, "allgather", 4, 3) == [(12, 3, 1), (24, 6, 2), (60, 15, 5)]
    assert C.sizes(0, 4, 4, "alltoall", 2, 2) == [(0, 0, 0), (4, 2, 1)]
    # -f 1 -i step (nccl-tests' linear sweep): minbytes plus multiples of step
    assert [b for b, _, _ in C.sizes(1024, 4096, 1, "allreduce", 4, 2, step=1024)] == [1024, 2048, 3072, 4096]
    assert [b for b, _, _ in C.sizes(8, 100, 1, "allreduce", 4, 2, step=40)] == [8, 48, 88, 100]
    # the largest size is swept even where the steps jump over it
    assert [b for b, _, _ in C.sizes(8, 100, 4, "allreduce", 4, 2)] == [8, 32, 100]
    assert [b for b, _, _ in C.sizes(8, 64 << 20, 4, "broadcast", 4, 2)][-2:] == [32 << 20, 64 << 20]


def test_sizes_beyond_memory_are_refused_up_front():
    from rdmacoll._bench.sweep import too_big

    assert too_big(64 << 20, 2, True, 2, 24 << 30) is None
    why = too_big(1 << 40, 0, True, 2, 24 << 30)
    assert "-e 1024 GiB does not fit in memory" in why and "lower --maxbytes" in why
    assert too_big(1 << 40, 0, True, 2, None) is None  # unknown: let it try


@pytest.mark.parametrize("coll", ["allreduce", "allgather", "broadcast", "reducescatter", "alltoall"])
@pytest.mark.parametrize(
    "dtype, op",
    [("float32", "Sum"), ("float16", "Average"), ("int32", "Product"), ("uint8", "Min"), ("float64", "Max")],
)
def test_reference_is_the_collective_of_the_inputs(coll, dtype, op):
    """expected() (computed on one period of the inputs) against the collective computed
    the plain way from every rank's send buffer."""
    p, total = 3, 3 * 7
    dt = np.dtype(dtype)
    count = total // p if coll in C.SPLIT else total
    sends = [C.send_buffer(coll, r, total, count, dt) for r in range(p)]
    wide = np.int64 if dt.kind in "iu" else np.float64
    red = {"Sum": np.sum, "Average": np.sum, "Min": np.min, "Max": np.max, "Product": np.prod}[op]
    reduced = red(np.stack(sends).astype(wide), axis=0)
    if op == "Average":
        reduced = reduced / p
    for r in range(p):
        want = {
            "allreduce": lambda: reduced.astype(dt),
            "reducescatter": lambda: reduced.astype(dt)[r * count : (r + 1) * count],
            "broadcast": lambda: sends[0],
            "allgather": lambda: np.concatenate(sends),
            "alltoall": lambda: np.concatenate([s[r * count : (r + 1) * count] for s in sends]),
        }[coll]()
        got = C.expected(coll, r, p, total, count, dt, op)
        assert got.dtype == dt and np.array_equal(got, want), (coll, r, got, want)
        assert C.count_wrong(got, want) == 0
    assert len({s.tobytes() for s in sends}) == p  # ranks send different data


def test_count_wrong():
    want = np.arange(10, dtype=np.float32)
    got = want.copy()
    got[3] += 1
    assert C.count_wrong(got, want) == 1
    assert C.count_wrong(want[:5], want) == 10
    assert C.count_wrong(want * (1 + 1e-7), want) == 0  # within a few ulps


def test_json_row_has_exactly_the_keys():
    assert (
        tuple(_row().json())
        == JSON_KEYS
        == (
            "impl",
            "collective",
            "placement",
            "bytes",
            "count",
            "dtype",
            "op",
            "root",
            "algo",
            "transport",
            "time_us",
            "min_us",
            "q1_us",
            "median_us",
            "q3_us",
            "max_us",
            "algbw",
            "busbw",
            "wrong",
            "ranks",
            "hosts",
            "version",
            "timing",
        )
    )


# --------------------------------------------------------------------------- under mpiexec


def _table(res):
    """Rank 0's table rows (stdout lines not starting with '#') as token lists."""
    return [
        ln.text.split()
        for ln in res.lines
        if ln.stream == "out" and ln.text.strip() and not ln.text.startswith(("#", "@@rc"))
    ]


def _bench(res, nranks, code=0):
    recs = rank_records(res, nranks, "bench")
    for r, rec in recs.items():
        res.check(rec["code"] == code, f"rank {r}: rdmacoll-bench exited {rec['code']}, expected {code}")
    return recs


def test_sweep_every_collective_compared_json_plot(tmp_path):
    """2 ranks, every collective, checked, with the peers: gloo and mpi run (when
    installed), horovod is not installable here and must be reported and skipped."""
    rows_file, png = tmp_path / "rows.json", tmp_path / "bw.png"
    args = [
        "all",
        "-b",
        "8",
        "-e",
        "256K",
        "-f",
        "32",
        "-n",
        "3",
        "-w",
        "1",
        "-c",
        "1",
        "--compare",
        "mpi,gloo,horovod",
        "--json",
        rows_file,
        "--progress-every",  # (stderr is a pipe here: every line, to check where they go)
        "0",
    ]
    if HAVE_MPL:
        args += ["--plot", png]
    res = run_mpi(2, "bench_cli.py", args, timeout=240)
    recs = _bench(res, 2)
    rows = json.loads(rows_file.read_text())
    res.check(rows and all(tuple(r) == JSON_KEYS for r in rows), "JSON rows do not have exactly the keys")
    impls = {"rdmacoll", "mpi"} | ({"gloo"} if HAVE_TORCH else set()) | ({"horovod"} if HAVE_HOROVOD else set())
    for coll in ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall"):
        placements = ["out-of-place", "in-place"] if coll in ("allreduce", "broadcast") else ["out-of-place"]
        for impl in impls:
            for pl in placements:
                mine = [r for r in rows if r["collective"] == coll and r["impl"] == impl and r["placement"] == pl]
                res.check(
                    [r["bytes"] for r in mine] == [8, 256, 8192, 262144],
                    f"{impl} {coll} {pl}: sizes {[r['bytes'] for r in mine]}",
                )
                res.check(all(r["wrong"] == 0 for r in mine), f"{impl} {coll}: wrong elements {mine}")
                res.check(
                    all(
                        r["min_us"] <= r["q1_us"] <= r["median_us"] <= r["q3_us"] <= r["max_us"]
                        and r["time_us"] == r["median_us"] > 0
                        for r in mine
                    ),
                    f"{impl} {coll}: min/median/max {mine}",
                )
                for r in mine:
                    factor = C.bus_factor(coll, 2)
                    res.check(r["busbw"] == pytest.approx(r["algbw"] * factor), f"busbw factor of {r}")
                    res.check(r["algbw"] == pytest.approx(r["bytes"] / r["time_us"] / 1e3), f"algbw of {r}")
    res.check({r["impl"] for r in rows} == impls, f"implementations {sorted({r['impl'] for r in rows})}")
    res.check(
        all(r["ranks"] == 2 and r["hosts"] == 1 and r["version"] and r["timing"] == "per call, -a 3" for r in rows),
        "rows carry ranks, hosts, version and timing",
    )
    rd = [r for r in rows if r["impl"] == "rdmacoll"]
    res.check(all(r["transport"] == "shm" for r in rd), "rdmacoll rows name their transport")
    res.check(all(r["algo"] != "-" for r in rd if r["collective"] == "allreduce"), "allreduce rows name the algorithm")
    out = [ln.text for ln in res.lines if ln.stream == "out"]
    err = [ln.text for ln in res.lines if ln.stream == "err"]
    if not HAVE_HOROVOD:
        res.check(
            any("horovod: skipped" in t and "not installed" in t for t in out), "no note that horovod was skipped"
        )
    headers = [t for t in out if "#wrong" in t]
    res.check(len(headers) == 5 and all("mpi:oop" in h for h in headers), "a ratio column per peer in every header")
    res.check(sum(t.startswith("# Avg bus bandwidth    : ") for t in out) >= 5, "no average busbw summary")
    res.check(sum(t == "# Out of bounds values : 0 OK" for t in out) == 5, "no out of bounds line per table")
    table = _table(res)
    res.check(
        len(table) == len({(r["impl"], r["collective"], r["bytes"]) for r in rows}),
        f"{len(table)} table lines: one per implementation and size",
    )
    ratio_rows = [t for t in table if t[15] == "rdmacoll"]
    res.check(
        len(ratio_rows) == 20 and all(len(t) >= 16 + len(impls) - 1 for t in ratio_rows),
        "rdmacoll's lines carry a ratio per peer",
    )
    res.check(any("left" in t for t in err) and not any("left" in t for t in out), "progress belongs on stderr only")
    bad = unstable([Row(**r) for r in rows])
    warned = [t for t in err if "timings unstable" in t]
    res.check(
        len(warned) == (1 if bad else 0) and all(f"in {len(bad)} of {len(rows)} rows" in t for t in warned),
        f"{len(bad)} unstable rows, warnings: {warned}",
    )
    res.check(recs[1]["matplotlib"] is False, "rank 1 imported matplotlib without plotting")
    if HAVE_MPL:
        from matplotlib import image

        img = image.imread(str(png))
        res.check(img.ndim == 3 and min(img.shape[:2]) > 100, "the plot does not open")
        res.check(png.stat().st_size < 1_000_000, f"the plot takes {png.stat().st_size} bytes")


def test_three_ranks_half_average_out_of_place():
    """3 ranks (uneven parts), float16 Average out of place, every collective checked;
    matplotlib and torch stay unimported when not asked for."""
    res = run_mpi(
        3,
        "bench_cli.py",
        [
            "all",
            "-b",
            "2",
            "-e",
            "4K",
            "-f",
            "8",
            "-n",
            "2",
            "-w",
            "1",
            "-d",
            "float16",
            "-o",
            "Average",
            "--inplace",
            "0",
            "-q",
        ],
        timeout=120,
    )
    recs = _bench(res, 3)
    res.check(not any(r["matplotlib"] or r["torch"] for r in recs.values()), "optional modules were imported")
    table = _table(res)
    res.check(len(table) >= 15 and all(t[8] == "0" for t in table), "wrong elements (out of place)")
    res.check(all(t[9:13] == ["N/A"] * 4 for t in table), "--inplace 0: no in-place columns")
    res.check(all(t[2] == "half" for t in table), "type column in nccl-tests' spelling")
    res.check(not any(ln.stream == "err" for ln in res.lines if "left" in ln.text), "-q printed progress")


def test_forced_algo_bfloat16_rc_empty_mpi_skipped():
    """--algo reaches the selector, bfloat16 on rc.empty memory checks out, and a peer that
    cannot run a dtype (MPI has no bfloat16) is reported and skipped."""
    res = run_mpi(
        2,
        "bench_cli.py",
        [
            "-b",
            "64",
            "-e",
            "1M",
            "-f",
            "16",
            "-n",
            "2",
            "-w",
            "1",
            "-d",
            "bfloat16",
            "-o",
            "Max",
            "--memory",
            "empty",
            "--algo",
            "ring",
            "--compare",
            "mpi",
        ],
        timeout=120,
    )
    _bench(res, 2)
    table = _table(res)
    res.check(
        len(table) == 5
        and all(
            t[15] == "rdmacoll" and t[13] == "ring" and t[8] == t[12] == "0" and t[2] == "bfloat16" and t[3] == "max"
            for t in table
        ),
        "rdmacoll rows with algo ring and 0 wrong",
    )
    res.check(
        any("mpi: allreduce bfloat16 skipped: MPI has no bfloat16" in ln.text for ln in res.lines), "no skip note"
    )
    # under mpiexec (stderr a pipe) a sweep this short prints no progress between the rows
    res.check(not any("left" in ln.text or "rdmacoll-bench: done" in ln.text for ln in res.lines), "progress lines")


def test_back_to_back_int8_linear_sizes_root_1(tmp_path):
    """nccl-tests' timing (--back-to-back -z 1 -a 0), nccl-tests' spellings, int8, a linear
    sweep (-i), broadcast from root 1: every row checked, the JSON says how it was timed,
    and min/median/max spread over the ranks."""
    rows_file = tmp_path / "rows.json"
    res = run_mpi(
        2,
        "bench_cli.py",
        [
            "allreduce",
            "broadcast",
            "-b",
            "1K",
            "-e",
            "3K",
            "-i",
            "1K",
            "-n",
            "4",
            "-w",
            "1",
            "-d",
            "int8",
            "-o",
            "PROD",
            "-r",
            "1",
            "--back-to-back",
            "-z",
            "1",
            "-a",
            "0",
            "-q",
            "--json",
            rows_file,
        ],
        timeout=120,
    )
    _bench(res, 2)
    rows = json.loads(rows_file.read_text())
    res.check(len(rows) == 2 * 2 * 3, f"{len(rows)} rows")
    res.check(
        all(r["wrong"] == 0 and r["dtype"] == "int8" and r["timing"] == "back to back, -a 0" for r in rows),
        "int8 rows, checked, timed back to back",
    )
    res.check(all(r["min_us"] <= r["median_us"] <= r["max_us"] for r in rows), "min/median/max over ranks")
    res.check(sorted({r["bytes"] for r in rows}) == [1024, 2048, 3072], "-i 1K: linear sizes")
    res.check({r["root"] for r in rows if r["collective"] == "broadcast"} == {1}, "broadcast from root 1")
    res.check({r["root"] for r in rows if r["collective"] == "allreduce"} == {-1}, "allreduce has no root")
    table = _table(res)
    res.check(all(t[2] == "int8" for t in table) and {t[3] for t in table} == {"prod", "none"}, "type and redop")
    out = [ln.text for ln in res.lines if ln.stream == "out"]
    res.check(any("calls back to back" in t and "(-a 0)" in t for t in out), "the preamble says how it timed")


def test_bad_transport_is_one_error_line():
    res = run_mpi(2, "bench_cli.py", ["--transport", "carrier-pigeon", "-e", "64"], timeout=60)
    _bench(res, 2, code=2)
    err = [ln.text for ln in res.lines if ln.stream == "err" and "carrier-pigeon" in ln.text]
    res.check(len(err) == 1 and err[0].startswith("rdmacoll-bench:"), "one error line from rank 0")


def test_np_launches_itself():
    res = run_python(
        "bench_cli.py", ["--np", "2", "broadcast", "-b", "8", "-e", "1K", "-f", "32", "-n", "2"], timeout=120
    )
    recs = [r for r in res.select(kind="bench")]
    res.check(len(recs) == 1 and recs[0]["code"] == 0, "--np 2 failed")
    header = [ln.text for ln in res.lines if ln.text.startswith("# rdmacoll-bench broadcast: 2 ranks")]
    res.check(len(header) == 1, "one table, from rank 0 of 2")
    res.check(len(_table(res)) == 3, "sizes 8, 256 and 1K")


@pytest.mark.parametrize("nranks", [2, 4])
def test_tune_writes_constants_for_one_rank_per_cpu(tmp_path, nranks):
    """--tune under mpiexec: times every algorithm, writes a tuning file init() accepts, and
    divides the fit by the oversubscription scale (4 ranks here share 2 CPUs: ranks_per_cpu
    2, alpha / 4, beta and gamma / 2), so the file holds one-rank-per-CPU constants."""
    import os

    from rdmacoll import _core, _settings

    path = tmp_path / "tuning.json"
    res = run_mpi(
        nranks, "bench_cli.py", ["--tune", "--tune-file", str(path), "--tune-sizes", "8,4K,64K,256K"], timeout=240
    )
    _bench(res, nranks, code=0)
    [entry] = json.loads(path.read_text())["entries"]
    assert (entry["transport"], entry["ranks_per_host"]) == ("shm", nranks)
    measured = entry["measured"]
    cpus = len(os.sched_getaffinity(0))
    per_cpu = max(1.0, nranks / cpus)
    assert measured["ranks"] == nranks and measured["ranks_per_cpu"] == pytest.approx(per_cpu)
    scale = _core.cost_model_for({"alpha": 1.0, "beta": 1.0, "gamma": 1.0}, per_cpu)
    for k, v in entry["cost_model"].items():
        assert v == pytest.approx(measured["fitted"][k] / scale[k])
    job = _settings.job({"RDMACOLL_TUNING_FILE": str(path)})
    assert _settings.tuning_for(job, nranks)["shm"].keys() == {"alpha", "beta", "gamma"}
    fit = [ln.text for ln in res.lines if "# measured: alpha" in ln.text]
    res.check(len(fit) == 1, "one fit line from rank 0")


def test_cost_model_scale_for_shared_cpus():
    from rdmacoll import _core

    m = {"alpha": 1.0, "beta": 2.0, "gamma": 3.0}
    assert _core.cost_model_for(m, 1.0) == m
    assert _core.cost_model_for(m, 0.5) == m  # fewer ranks than CPUs: unchanged
    assert _core.cost_model_for(m, 2.0) == {"alpha": 4.0, "beta": 4.0, "gamma": 6.0}
