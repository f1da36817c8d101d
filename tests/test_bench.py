"""rdmacoll-bench: option errors, busbw factors, sizes and references (in process); real
sweeps of every collective under mpiexec with --check, --compare (a missing peer is
skipped, rdmacoll's rows stay), --json, --plot and --np."""
import importlib.util
import json

import numpy as np
import pytest

from mpi_util import rank_records, run_mpi, run_python
from rdmacoll._bench import collectives as C
from rdmacoll._bench.report import JSON_KEYS, Row
from rdmacoll.bench import main

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None

# --------------------------------------------------------------------------- in process


@pytest.mark.parametrize("argv, words", [
    (["-b", "foo"], "not a size"),
    (["-e", "12X"], "not a size"),
    (["-f", "1"], "must be >= 2"),
    (["-n", "0"], "must be >= 1"),
    (["-w", "-1"], "must be >= 0"),
    (["-c", "2"], "invalid choice"),
    (["-d", "float8"], "invalid choice"),
    (["-o", "Mean"], "invalid choice"),
    (["allreduse"], "unknown collective 'allreduse'"),
    (["-b", "1M", "-e", "1K"], "--maxbytes"),
    (["-d", "int32", "-o", "Average"], "floating dtype"),
    (["--compare", "mpi,nccl"], "unknown peer 'nccl'"),
    (["--plot", "bw.jpg"], "FILE.png"),
    (["--json", "/nonexistent-dir/rows.json"], "cannot write"),
    (["--np", "0"], "must be >= 1"),
    (["--algo", " "], "--algo"),
])
def test_bad_option_is_one_line(argv, words, capsys, monkeypatch):
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rdmacoll-bench: error:"), err
    assert words in err, err


@pytest.mark.parametrize("coll, n, factor", [
    ("allreduce", 1, 0.0), ("allreduce", 2, 1.0), ("allreduce", 4, 1.5), ("allreduce", 8, 1.75),
    ("allgather", 2, 0.5), ("allgather", 4, 0.75), ("reducescatter", 4, 0.75), ("alltoall", 8, 0.875),
    ("broadcast", 2, 1.0), ("broadcast", 8, 1.0),
])
def test_busbw_factor_is_nccl_tests(coll, n, factor):
    assert C.bus_factor(coll, n) == pytest.approx(factor)


def test_sizes_round_to_whole_parts_and_count_like_nccl_tests():
    # allreduce: every size, count = elements
    assert C.sizes(8, 64, 2, "allreduce", 4, 3) == [(8, 2, 2), (16, 4, 4), (32, 8, 8), (64, 16, 16)]
    # split collectives: whole elements per rank, count = one rank's part; sizes that round
    # to the same call appear once; at least one element per rank
    assert C.sizes(4, 64, 2, "allgather", 4, 3) == [(12, 3, 1), (24, 6, 2), (60, 15, 5)]
    assert C.sizes(0, 4, 4, "alltoall", 2, 2) == [(0, 0, 0), (4, 2, 1)]
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
@pytest.mark.parametrize("dtype, op", [("float32", "Sum"), ("float16", "Average"), ("int32", "Product"),
                                       ("uint8", "Min"), ("float64", "Max")])
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
            "reducescatter": lambda: reduced.astype(dt)[r * count:(r + 1) * count],
            "broadcast": lambda: sends[0],
            "allgather": lambda: np.concatenate(sends),
            "alltoall": lambda: np.concatenate([s[r * count:(r + 1) * count] for s in sends]),
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
    row = Row("rdmacoll", "allreduce", 8, 2, "float32", "Sum", "eager", "shm", 1.0, 0.9, 2.0, 0.008, 0.008, 0)
    assert tuple(row.json()) == JSON_KEYS == ("impl", "collective", "bytes", "count", "dtype", "op", "algo",
                                              "transport", "time_us", "algbw", "busbw", "wrong")


# --------------------------------------------------------------------------- under mpiexec


def _table(res):
    """Rank 0's table rows (stdout lines not starting with '#') as token lists."""
    return [ln.text.split() for ln in res.lines
            if ln.stream == "out" and ln.text.strip() and not ln.text.startswith(("#", "@@rc"))]


def _bench(res, nranks, code=0):
    recs = rank_records(res, nranks, "bench")
    for r, rec in recs.items():
        res.check(rec["code"] == code, f"rank {r}: rdmacoll-bench exited {rec['code']}, expected {code}")
    return recs


def test_sweep_every_collective_compared_json_plot(tmp_path):
    """2 ranks, every collective, checked, with the peers: gloo and mpi run (when
    installed), horovod is not installable here and must be reported and skipped."""
    rows_file, png = tmp_path / "rows.json", tmp_path / "bw.png"
    args = ["all", "-b", "8", "-e", "256K", "-f", "32", "-n", "3", "-w", "1", "-c", "1",
            "--compare", "mpi,gloo,horovod", "--json", rows_file]
    if HAVE_MPL:
        args += ["--plot", png]
    res = run_mpi(2, "bench_cli.py", args, timeout=240)
    recs = _bench(res, 2)
    rows = json.loads(rows_file.read_text())
    res.check(rows and all(tuple(r) == JSON_KEYS for r in rows), "JSON rows do not have exactly the keys")
    impls = {"rdmacoll", "mpi"} | ({"gloo"} if HAVE_TORCH else set()) | ({"horovod"} if HAVE_HOROVOD else set())
    for coll in ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall"):
        for impl in impls:
            mine = [r for r in rows if r["collective"] == coll and r["impl"] == impl]
            res.check([r["bytes"] for r in mine] == [8, 256, 8192, 262144],
                      f"{impl} {coll}: sizes {[r['bytes'] for r in mine]}")
            res.check(all(r["wrong"] == 0 for r in mine), f"{impl} {coll}: wrong elements {mine}")
            res.check(all(r["time_us"] > 0 and r["busbw"] >= 0 for r in mine), f"{impl} {coll}: bad times")
            for r in mine:
                factor = C.bus_factor(coll, 2)
                res.check(r["busbw"] == pytest.approx(r["algbw"] * factor), f"busbw factor of {r}")
                res.check(r["algbw"] == pytest.approx(r["bytes"] / r["time_us"] / 1e3), f"algbw of {r}")
    res.check({r["impl"] for r in rows} == impls, f"implementations {sorted({r['impl'] for r in rows})}")
    rd = [r for r in rows if r["impl"] == "rdmacoll"]
    res.check(all(r["transport"] == "shm" for r in rd), "rdmacoll rows name their transport")
    res.check(all(r["algo"] != "-" for r in rd if r["collective"] == "allreduce"), "allreduce rows name the algorithm")
    out = [ln.text for ln in res.lines if ln.stream == "out"]
    err = [ln.text for ln in res.lines if ln.stream == "err"]
    if not HAVE_HOROVOD:
        res.check(any("horovod: skipped" in t and "not installed" in t for t in out), "no note that horovod was skipped")
    headers = [t for t in out if "#wrong" in t]
    res.check(len(headers) == 5 and all("x mpi" in h for h in headers), "a ratio column per peer in every header")
    res.check(sum("Avg bus bandwidth" in t for t in out) >= 5, "no average busbw summary")
    table = _table(res)
    res.check(len(table) == len(rows), f"{len(table)} table rows, {len(rows)} JSON rows")
    ratio_rows = [t for t in table if t[0] == "rdmacoll"]
    res.check(all(len(t) == 13 + len(impls) - 1 for t in ratio_rows), "rdmacoll's rows carry a ratio per peer")
    res.check(any("left" in t for t in err) and not any("left" in t for t in out),
              "progress belongs on stderr only")
    res.check(recs[1]["matplotlib"] is False, "rank 1 imported matplotlib without plotting")
    if HAVE_MPL:
        from matplotlib import image

        img = image.imread(str(png))
        res.check(img.ndim == 3 and min(img.shape[:2]) > 100, "the plot does not open")
        res.check(png.stat().st_size < 1_000_000, f"the plot takes {png.stat().st_size} bytes")


def test_three_ranks_half_average_out_of_place():
    """3 ranks (uneven parts), float16 Average out of place, every collective checked;
    matplotlib and torch stay unimported when not asked for."""
    res = run_mpi(3, "bench_cli.py", ["all", "-b", "2", "-e", "4K", "-f", "8", "-n", "2", "-w", "1",
                                      "-d", "float16", "-o", "Average", "--inplace", "0", "-q"], timeout=120)
    recs = _bench(res, 3)
    res.check(not any(r["matplotlib"] or r["torch"] for r in recs.values()), "optional modules were imported")
    table = _table(res)
    res.check(len(table) >= 15 and all(t[-1] == "0" for t in table), "wrong elements (last column)")
    res.check(all(t[2] == "float16" for t in table), "dtype column")
    res.check(not any(ln.stream == "err" for ln in res.lines if "left" in ln.text), "-q printed progress")


def test_forced_algo_bfloat16_rc_empty_mpi_skipped():
    """--algo reaches the selector, bfloat16 on rc.empty memory checks out, and a peer that
    cannot run a dtype (MPI has no bfloat16) is reported and skipped."""
    res = run_mpi(2, "bench_cli.py", ["-b", "64", "-e", "1M", "-f", "16", "-n", "2", "-w", "1", "-d", "bfloat16",
                                      "-o", "Max", "--memory", "empty", "--algo", "ring", "--compare", "mpi"],
                  timeout=120)
    _bench(res, 2)
    table = _table(res)
    res.check(len(table) == 5 and all(t[0] == "rdmacoll" and t[5] == "ring" and t[12] == "0" for t in table),
              "rdmacoll rows with algo ring and 0 wrong")
    res.check(any("mpi: allreduce skipped: MPI has no bfloat16" in ln.text for ln in res.lines), "no skip note")


def test_bad_transport_is_one_error_line():
    res = run_mpi(2, "bench_cli.py", ["--transport", "carrier-pigeon", "-e", "64"], timeout=60)
    _bench(res, 2, code=2)
    err = [ln.text for ln in res.lines if ln.stream == "err" and "carrier-pigeon" in ln.text]
    res.check(len(err) == 1 and err[0].startswith("rdmacoll-bench:"), "one error line from rank 0")


def test_np_launches_itself():
    res = run_python("bench_cli.py", ["--np", "2", "broadcast", "-b", "8", "-e", "1K", "-f", "32", "-n", "2"],
                     timeout=120)
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
    res = run_mpi(nranks, "bench_cli.py", ["--tune", "--tune-file", str(path), "--tune-sizes", "8,4K,64K,256K"],
                  timeout=240)
    _bench(res, nranks, code=0)
    doc = json.loads(path.read_text())
    measured = doc["measured"]
    cpus = len(os.sched_getaffinity(0))
    per_cpu = max(1.0, nranks / cpus)
    assert measured["ranks"] == nranks and measured["ranks_per_cpu"] == pytest.approx(per_cpu)
    scale = _core.cost_model_for({"alpha": 1.0, "beta": 1.0, "gamma": 1.0}, per_cpu)
    for k, v in doc["cost_model"]["shm"].items():
        assert v == pytest.approx(measured["fitted"][k] / scale[k])
    assert _settings.read_tuning_file(str(path))["shm"].keys() == {"alpha", "beta", "gamma"}
    fit = [ln.text for ln in res.lines if "# measured: alpha" in ln.text]
    res.check(len(fit) == 1, "one fit line from rank 0")


def test_cost_model_scale_for_shared_cpus():
    from rdmacoll import _core

    m = {"alpha": 1.0, "beta": 2.0, "gamma": 3.0}
    assert _core.cost_model_for(m, 1.0) == m
    assert _core.cost_model_for(m, 0.5) == m  # fewer ranks than CPUs: unchanged
    assert _core.cost_model_for(m, 2.0) == {"alpha": 4.0, "beta": 4.0, "gamma": 6.0}
