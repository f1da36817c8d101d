"""RDMACOLL_LOG_LEVEL and the `rdmacoll` logger, under the real mpiexec: with the level
set and no logging configured, each rank's init() report and the core's lines reach
stderr; a user's logging configuration receives them instead (once); the debug level
shows each algorithm choice once per size class; the default is quiet. (The core's
warnings from threads without the interpreter: tests/test_stall.py.)"""

import re

import pytest

from mpi_util import rank_records, run_mpi
from rdmacoll import RdmacollError, _settings


def _launch(how, env, n=2):
    res = run_mpi(n, "log_init.py", [how], env=env, timeout=90)
    for rec in rank_records(res, n, "result").values():
        res.check(rec["ok"], f"rank {rec['rank']}: wrong allreduce result")
    res.check(res.returncode == 0, "the launch failed")
    return res, [ln.text for ln in res.lines if ln.stream == "err"]


def test_info_without_logging_setup_prints_every_ranks_report_on_stderr():
    res, err = _launch("none", {"RDMACOLL_LOG_LEVEL": "info", "RDMACOLL_EAGER_BYTES": "64K"})
    for r in (0, 1):
        mine = [ln for ln in err if ln.startswith(f"rdmacoll INFO [rank {r}] ")]
        res.check(
            any(f"transport shm: shm to ranks [{1 - r}]" in ln for ln in mine), f"rank {r}: no transport line in {mine}"
        )
        res.check(
            any(
                "eager_bytes=65536 (" + ("this rank" if r == 0 else "rank 0") + "'s RDMACOLL_EAGER_BYTES)" in ln
                and "log_level='info' (this rank's RDMACOLL_LOG_LEVEL)" in ln
                for ln in mine
            ),
            f"rank {r}: settings and their sources missing from {mine}",
        )
        res.check(
            any(ln.endswith("] no tuning file: using the shipped cost-model constants") for ln in mine),
            f"rank {r}: no tuning file line in {mine}",
        )
    res.check(not any(" DEBUG " in ln for ln in err), "debug lines at level info")


def test_info_names_the_interface_and_address_of_the_network_transport():
    res, err = _launch("none", {"RDMACOLL_LOG_LEVEL": "info", "RDMACOLL_TRANSPORT": "tcp"})
    for r in (0, 1):
        res.check(
            any(
                re.match(
                    rf"rdmacoll INFO \[rank {r}\] host 0 of 1, transport tcp: tcp to ranks \[{1 - r}\]; "
                    r"listening on \S+ \S+:\d+$",
                    ln,
                )
                for ln in err
            ),
            f"rank {r}: no interface line in {err}",
        )


def test_debug_shows_each_choice_once_per_size_class_and_any_case():
    res, err = _launch("none", {"RDMACOLL_LOG_LEVEL": "DEBUG", "RDMACOLL_ALGO": "allreduce:1M-inf:ring"})
    for r in (0, 1):
        small = [ln for ln in err if ln.startswith(f"rdmacoll DEBUG [rank {r}] allreduce of 4000 B ")]
        res.check(len(small) == 1, f"rank {r}: 3 calls of 4000 B logged {len(small)} times: {small}")
        res.check(
            small and re.search(r"\): \w+ \(cost model estimates( \w+ [\d.]+ us,?)+\)$", small[0]),
            f"rank {r}: no estimates in {small}",
        )
        big = [ln for ln in err if ln.startswith(f"rdmacoll DEBUG [rank {r}] allreduce of 4194304 B ")]
        res.check(len(big) == 1 and "ring (forced by RDMACOLL_ALGO)" in big[0], f"rank {r}: {big}")


def test_default_level_is_quiet():
    res, err = _launch("none", {})
    res.check(not [ln for ln in err if ln.startswith("rdmacoll ")], f"lines at the default level: {err}")


def test_users_logging_configuration_receives_the_lines_once():
    # basicConfig(level=INFO) before init: the logger's effective level is info with no
    # RDMACOLL_LOG_LEVEL, and the lines come through the user's handler, not ours too.
    res, err = _launch("user", {})
    for r in (0, 1):
        res.check(
            any(ln.startswith(f"USER rdmacoll INFO [rank {r}] host 0 of 1") for ln in err),
            f"rank {r}: the user's handler got no init report: {err}",
        )
    res.check(not [ln for ln in err if ln.startswith("rdmacoll ")], f"also printed by rdmacoll's handler: {err}")


def test_logger_level_set_by_the_user_and_horovods_variable():
    res, err = _launch("logger-debug", {})
    res.check(
        any(ln.startswith("rdmacoll DEBUG [rank 1] allreduce of 4000 B") for ln in err),
        f"the rdmacoll logger at DEBUG did not reach the core: {err}",
    )
    res, err = _launch("none", {"HOROVOD_LOG_LEVEL": "trace", "HOROVOD_CYCLE_TIME": "5"})
    res.check(
        any(ln.startswith("rdmacoll DEBUG [rank 0] allreduce of 4000 B") for ln in err),
        f"HOROVOD_LOG_LEVEL=trace is not debug: {err}",
    )
    for r in (0, 1):
        res.check(
            f"rdmacoll DEBUG [rank {r}] HOROVOD_CYCLE_TIME='5' has no meaning in rdmacoll: ignored" in err,
            f"rank {r}: no line for the ignored Horovod variable: {err}",
        )
    res, err = _launch("none", {"HOROVOD_LOG_LEVEL": "debug", "RDMACOLL_LOG_LEVEL": "warning"})
    res.check(not [ln for ln in err if ln.startswith("rdmacoll ")], f"RDMACOLL_LOG_LEVEL did not win: {err}")


@pytest.mark.parametrize(
    "text,want",
    [
        ("info", "info"),
        (" INFO ", "info"),
        ("Debug", "debug"),
        ("trace", "debug"),
        ("fatal", "error"),
        ("warning", "warning"),
    ],
)
def test_level_names(text, want):
    assert _settings.resolve(env={"RDMACOLL_LOG_LEVEL": text}, scope="rank")[0]["log_level"] == want


def test_bad_level_names_the_variable_and_the_levels():
    with pytest.raises(RdmacollError, match=r"RDMACOLL_LOG_LEVEL='loud' is not one of: error, warning, info, debug"):
        _settings.resolve(env={"RDMACOLL_LOG_LEVEL": "loud"}, scope="rank")
