"""The one settings table (csrc/common/settings.cc, read by rdmacoll/_settings.py): one
grammar for every size, bounds and messages, where values come from (init(config=),
the variable, its alias, the default), rank 0's job-wide values on every rank and each
rank's own per-rank values."""

from pathlib import Path

import pytest

from rdmacoll import RdmacollError, _core, _settings
from mpi_util import rank_records, run_mpi

SPELLINGS = ("32KB", "32KiB", "32K", "32768", " 32kib ", "0.03125M", "32kb")


def test_every_row_is_complete():
    names = [row["name"] for row in _core.SETTINGS]
    assert len(names) == len(set(names))
    for row in _core.SETTINGS:
        assert row["env"].startswith("RDMACOLL_") and row["doc"], row
        assert row["kind"] in ("bytes", "count", "seconds", "text") and row["scope"] in ("job", "rank"), row
        assert _core.parse_setting(row["name"], row["default_text"]) == row["default"], row


def test_readme_table_is_the_settings_table():
    """README's table is generated from the core's (python -m rdmacoll._settings)."""
    readme = Path(__file__).resolve().parent.parent / "README.md"
    if not readme.is_file():
        pytest.skip("README.md is not next to the tests")
    assert _settings.markdown_table() in readme.read_text(), "regenerate it: python -m rdmacoll._settings"


@pytest.mark.parametrize("text", SPELLINGS)
def test_size_spellings_mean_the_same(text):
    values, sources = _settings.resolve({"RDMACOLL_EAGER_BYTES": text})
    assert values["eager_bytes"] == 32768
    assert sources["eager_bytes"] == "RDMACOLL_EAGER_BYTES"
    assert _core.parse_size(text) == 32768


@pytest.mark.parametrize("bad", ["32Q", "-1", "1.3K", "K", "inf", "32 KB", "1e3", "99999999999999999999K"])
def test_bad_size_names_the_setting_and_the_forms(bad):
    with pytest.raises(RdmacollError) as e:
        _settings.resolve({"RDMACOLL_EAGER_BYTES": bad})
    msg = str(e.value)
    assert "RDMACOLL_EAGER_BYTES" in msg and f"'{bad.strip()}'" in msg, msg
    assert "32768, 32K, 32KB, 32KiB or 1.5M" in msg, msg


@pytest.mark.parametrize(
    "var, value, words",
    [
        ("RDMACOLL_SLOTS", "65", "between 0 and 64"),
        ("RDMACOLL_SLOTS", "two", "not a whole number"),
        ("RDMACOLL_SEGMENT_BYTES", "100", "at least 4096"),
        ("RDMACOLL_SEGMENT_BYTES", "4100", "multiple of 64"),
        ("RDMACOLL_TIMEOUT", "-1", "RDMACOLL_TIMEOUT"),
        ("RDMACOLL_TIMEOUT", "soon", "not a number of seconds"),
        ("RDMACOLL_TRANSPORT", "bogus", "'bogus' is not a transport"),
        ("RDMACOLL_ALGO", "allreduce:0-1K:bogus", "'bogus'"),
    ],
)
def test_bounds_and_checks_name_the_variable(var, value, words):
    with pytest.raises(RdmacollError) as e:
        _settings.resolve({var: value})
    assert var in str(e.value) and words in str(e.value), str(e.value)


def test_sources_alias_and_config():
    env = {"HOROVOD_FUSION_THRESHOLD": "1M"}
    values, sources = _settings.resolve(env)
    assert values["fusion_threshold"] == 1 << 20 and sources["fusion_threshold"] == "HOROVOD_FUSION_THRESHOLD"
    values, sources = _settings.resolve(dict(env, RDMACOLL_FUSION_THRESHOLD="4K"))
    assert values["fusion_threshold"] == 4096 and sources["fusion_threshold"] == "RDMACOLL_FUSION_THRESHOLD"
    values, sources = _settings.resolve(env, config={"fusion_threshold": 8192, "RDMACOLL_TIMEOUT": "5"})
    assert values["fusion_threshold"] == 8192 and sources["fusion_threshold"] == "init(config=)"
    assert values["timeout"] == 5.0 and sources["slots"] == "default"
    with pytest.raises(RdmacollError, match="HOROVOD_FUSION_THRESHOLD"):
        _settings.resolve({"HOROVOD_FUSION_THRESHOLD": "lots"})
    with pytest.raises(RdmacollError, match="unknown setting 'eager'"):
        _settings.resolve({}, config={"eager": 1})


def _settings_of(res, nranks):
    return {r: rec for r, rec in rank_records(res, nranks, "settings").items()}


def test_spellings_under_mpiexec_and_rank0_wins():
    """Every spelling gives every rank the same bytes; a job-wide value only rank 1's
    environment holds is not used (rank 0's is); per-rank values are each rank's own."""
    for text in ("32KB", "32KiB", "32K", "32768"):
        res = run_mpi(2, "settings.py", ["report"], env={"RDMACOLL_EAGER_BYTES": text}, timeout=60)
        for r, rec in _settings_of(res, 2).items():
            res.check(rec["values"]["eager_bytes"] == 32768, f"rank {r}: {text} gave {rec['values']['eager_bytes']}")
    res = run_mpi(
        [(1, ["env", "RDMACOLL_IB_GID_INDEX=3"]), (1, ["env", "RDMACOLL_EAGER_BYTES=1K", "RDMACOLL_IB_GID_INDEX=5"])],
        "settings.py",
        ["report"],
        timeout=60,
    )
    got = _settings_of(res, 2)
    default = _settings.TABLE["eager_bytes"]["default"]
    res.check(
        all(rec["values"]["eager_bytes"] == default for rec in got.values()),
        f"rank 1's RDMACOLL_EAGER_BYTES reached a rank: {got}",
    )
    res.check([got[r]["values"]["ib_gid_index"] for r in (0, 1)] == [3, 5], f"per-rank values: {got}")


def test_config_overrides_the_environment_everywhere():
    res = run_mpi(2, "settings.py", ["config"], env={"RDMACOLL_EAGER_BYTES": "16K"}, timeout=60)
    for r, rec in _settings_of(res, 2).items():
        res.check(rec["values"]["eager_bytes"] == 65536 and rec["values"]["slots"] == 3, f"rank {r}: {rec['values']}")
        res.check(rec["sources"]["eager_bytes"] == "init(config=)", f"rank {r}: {rec['sources']}")


def test_config_that_differs_between_ranks_fails_everywhere():
    res = run_mpi(2, "settings.py", ["mismatch"], timeout=60)
    for r, rec in rank_records(res, 2, "init").items():
        res.check(
            rec["error"] and "differs between ranks" in rec["error"] and "slots" in rec["error"],
            f"rank {r}: {rec['error']!r}",
        )


# --------------------------------------------------------------------------- Horovod's variables


@pytest.mark.parametrize(
    "env,name,value,source",
    [
        ({"HOROVOD_STALL_CHECK_TIME_SECONDS": "5"}, "stall_warning", 5.0, "HOROVOD_STALL_CHECK_TIME_SECONDS"),
        (
            {"HOROVOD_STALL_CHECK_TIME_SECONDS": "5", "RDMACOLL_STALL_WARNING_SECONDS": "7"},
            "stall_warning",
            7.0,
            "RDMACOLL_STALL_WARNING_SECONDS",
        ),
        ({"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "30"}, "stall_shutdown", 30.0, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"),
        (
            {"HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_STALL_CHECK_TIME_SECONDS": "5"},
            "stall_warning",
            0.0,
            "HOROVOD_STALL_CHECK_DISABLE",
        ),
        (
            {"HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "30"},
            "stall_shutdown",
            0.0,
            "HOROVOD_STALL_CHECK_DISABLE",
        ),
        (
            {"HOROVOD_STALL_CHECK_DISABLE": "1", "RDMACOLL_STALL_WARNING_SECONDS": "9"},
            "stall_warning",
            9.0,
            "RDMACOLL_STALL_WARNING_SECONDS",
        ),
        (
            {"HOROVOD_STALL_CHECK_DISABLE": "0", "HOROVOD_STALL_CHECK_TIME_SECONDS": "5"},
            "stall_warning",
            5.0,
            "HOROVOD_STALL_CHECK_TIME_SECONDS",
        ),
        ({"HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}, "algo", "allreduce:hierarchical", "HOROVOD_HIERARCHICAL_ALLREDUCE"),
        ({"HOROVOD_HIERARCHICAL_ALLREDUCE": "0"}, "algo", "", "default"),
        ({"HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "RDMACOLL_ALGO": "ring"}, "algo", "ring", "RDMACOLL_ALGO"),
        ({"HOROVOD_TIMELINE": "/tmp/t.json"}, "timeline", "/tmp/t.json", "HOROVOD_TIMELINE"),
        ({"HOROVOD_FUSION_THRESHOLD": "1048576"}, "fusion_threshold", 1 << 20, "HOROVOD_FUSION_THRESHOLD"),
        ({"HOROVOD_LOG_LEVEL": "TRACE"}, "log_level", "debug", "HOROVOD_LOG_LEVEL"),
    ],
)
def test_horovods_variables(env, name, value, source):
    values, sources = _settings.resolve(env=env)
    assert (values[name], sources[name]) == (value, source)


def test_horovod_switch_that_is_not_a_number():
    with pytest.raises(RdmacollError, match=r"HOROVOD_HIERARCHICAL_ALLREDUCE='yes' is not an integer"):
        _settings.resolve(env={"HOROVOD_HIERARCHICAL_ALLREDUCE": "yes"})


def test_horovod_variables_without_meaning_here():
    env = {
        "HOROVOD_CYCLE_TIME": "5",
        "HOROVOD_CACHE_CAPACITY": "0",
        "HOROVOD_GPU_OPERATIONS": "NCCL",
        "HOROVOD_TIMELINE_MARK_CYCLES": "1",
        "HOROVOD_FUSION_THRESHOLD": "1",
        "HOROVOD_STALL_CHECK_DISABLE": "1",
        "RDMACOLL_ALGO": "ring",
    }
    assert _settings.horovod_ignored(env) == [
        "HOROVOD_CACHE_CAPACITY",
        "HOROVOD_CYCLE_TIME",
        "HOROVOD_GPU_OPERATIONS",
        "HOROVOD_TIMELINE_MARK_CYCLES",
    ]


def test_former_ib_device_keeps_its_exact_meaning():
    """RDMACOLL_IB_DEVICE=name[:port] (the setting's former variable) named one device
    exactly; RDMACOLL_IB_HCA matches prefixes as NCCL_IB_HCA does, so the old value is read
    as =name[:port], and the new variable wins when both are set."""
    values, sources = _settings.resolve({"RDMACOLL_IB_DEVICE": "mlx5_1:1"}, scope="rank")
    assert values["ib_hca"] == "=mlx5_1:1" and sources["ib_hca"] == "RDMACOLL_IB_DEVICE"
    values, sources = _settings.resolve({"RDMACOLL_IB_DEVICE": "mlx5_1", "RDMACOLL_IB_HCA": "mlx5"}, scope="rank")
    assert values["ib_hca"] == "mlx5" and sources["ib_hca"] == "RDMACOLL_IB_HCA"
