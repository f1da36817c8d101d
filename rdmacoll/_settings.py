"""Settings: the core's one table (_core.SETTINGS), read one way.

Every setting is declared once, in C++ (csrc/common/settings.cc): its name (the key of
``rdmacoll.init(config={...})``), its environment variable (a few also read an alias
that Horovod job scripts set; the RDMACOLL_ variable wins), its kind, default and doc.
Whatever its origin, every value is parsed by the core (``_core.parse_setting``), so
there is one grammar: sizes as 32768, 32K, 32KB, 32KiB or 1.5M (powers of 1024).

Where a value comes from, first match wins: ``init(config=...)``, the environment
variable, its alias, the default. Job-wide settings are rank 0's: bootstrap resolves
them there, with rank 0's tuning file, and broadcasts them (ranks that disagreed on
them would run different protocols or choose different algorithms); per-rank settings
(the interface, the RDMA device) every rank reads from its own environment.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import time

from . import _core, _log
from ._version import version as rdmacoll_version  # (rdmacoll.__version__)

TABLE = {row["name"]: row for row in _core.SETTINGS}
_BY_ENV = {row["env"]: row["name"] for row in _core.SETTINGS}

TUNING_FILE_VERSION = 3  # 3: entries tied to host, CPU, cores, transport, ranks per host, version
# (2: constants for one rank per CPU, tied to nothing; 1: as measured). Other versions are ignored.
_COST_KEYS = ("alpha", "beta", "gamma")


def defaults() -> dict:
    """Every setting's default value (typed: bytes and counts int, seconds float, text str)."""
    return {name: row["default"] for name, row in TABLE.items()}


def _overrides(config) -> dict:
    """init(config=...) keyed by setting name; keys may be names or variables."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise _core.RdmacollError(f"init(config=...) takes a dict of settings, got {type(config).__name__}")
    out = {}
    for key, value in config.items():
        name = _BY_ENV.get(key, key)
        if name not in TABLE:
            raise _core.RdmacollError(f"init(config=...): unknown setting {key!r}; known: {', '.join(TABLE)}")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise _core.RdmacollError(f"init(config=...): {key}={value!r} must be a str or a number")
        out[name] = str(value)
    return out


# Horovod's variables that set a setting in another grammar than the setting's own (the
# aliases with the same grammar are in the core's table). Read after the setting's own
# variable and before its alias; Horovod reads them as integers, > 0 meaning on.
HOROVOD_SWITCHES = {
    "HOROVOD_STALL_CHECK_DISABLE": {"stall_warning": "0", "stall_shutdown": "0"},
    "HOROVOD_HIERARCHICAL_ALLREDUCE": {"algo": "allreduce:hierarchical"},
}


# Former variables of settings whose grammar changed: read after the setting's own
# variable, their value rewritten into the setting's grammar. RDMACOLL_IB_DEVICE named one
# device exactly (`name` or `name:port`); RDMACOLL_IB_HCA matches prefixes unless `=`.
FORMER_NAMES = {"RDMACOLL_IB_DEVICE": ("ib_hca", lambda text: "=" + text.strip())}


def _switched_on(var: str, text: str) -> bool:
    try:
        return int(text.strip()) > 0
    except ValueError:
        raise _core.RdmacollError(f"{var}={text!r} is not an integer (Horovod's switches: 1 on, 0 off)") from None


def horovod_ignored(env=None) -> list[str]:
    """The HOROVOD_ variables set in `env` that mean nothing to rdmacoll (GPU ones,
    HOROVOD_CYCLE_TIME, HOROVOD_CACHE_CAPACITY, HOROVOD_TIMELINE_MARK_CYCLES, ...): neither
    an alias in the table nor a switch above. init() logs them at debug level."""
    env = os.environ if env is None else env
    known = {row["alias"] for row in _core.SETTINGS if row["alias"]} | set(HOROVOD_SWITCHES)
    return sorted(v for v in env if v.startswith("HOROVOD_") and v not in known)


def resolve(env=None, config=None, scope=None) -> tuple[dict, dict]:
    """(values, sources) of every setting of `scope` ("job", "rank", or None for all):
    values typed as the core parsed them, sources naming where each came from
    ("init(config=)", the variable, or "default"). Raises RdmacollError naming the
    variable and the accepted forms on a bad value."""
    env = os.environ if env is None else env
    given = _overrides(config)
    values, sources = {}, {}
    for name, row in TABLE.items():
        if scope is not None and row["scope"] != scope:
            continue
        text, source = given.get(name), "init(config=)"
        # the variable, then a Horovod switch that sets it (HOROVOD_STALL_CHECK_DISABLE
        # overrides Horovod's times, as in Horovod), then a former name, then the alias;
        # each with what its value means in the setting's grammar (None: not set by it)
        candidates = (
            [(row["env"], lambda t: t)]
            + [
                (var, lambda t, var=var, v=sets[name]: v if _switched_on(var, t) else None)
                for var, sets in HOROVOD_SWITCHES.items()
                if name in sets
            ]
            + [(var, rewrite) for var, (setting, rewrite) in FORMER_NAMES.items() if setting == name]
            + [(row["alias"], lambda t: t)]
        )
        for var, meaning in candidates if text is None else ():
            if not var or not env.get(var, "").strip():
                continue
            if (value := meaning(env[var])) is not None:
                text, source = value, var
                break
        if text is None:
            values[name], sources[name] = row["default"], "default"
            continue
        try:
            values[name] = _core.parse_setting(name, text)
        except _core.RdmacollError as e:
            raise _core.RdmacollError(str(e) if source == row["env"] else f"{e} (set by {source})") from None
        sources[name] = source
    return values, sources


def given(config, scope=None) -> dict:
    """The settings of `scope` that init(config=...) sets, parsed: {name: value}."""
    return {
        name: _core.parse_setting(name, text)
        for name, text in _overrides(config).items()
        if scope is None or TABLE[name]["scope"] == scope
    }


def markdown_table() -> str:
    """The README's table of settings, from the core's table (python -m rdmacoll._settings)."""
    lines = ["| variable | `init(config=)` key | default | whose | meaning |", "|---|---|---|---|---|"]
    for row in _core.SETTINGS:
        var = f"`{row['env']}`" + (f" (or `{row['alias']}`)" if row["alias"] else "")
        default = f"`{row['default_text']}`" if row["default_text"] else "(unset)"
        whose = "rank 0's" if row["scope"] == "job" else "each rank's"
        lines.append(f"| {var} | `{row['name']}` | {default} | {whose} | {row['doc']} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- tuning file
#
# A tuning file (version 3) holds entries, one per (host, CPU, cores, transport, ranks per
# host): each the constants rdmacoll-bench --tune fitted there, for one rank per CPU, with
# the rdmacoll version and date of the run. Rank 0 reads the file at init() (job());
# once the layout is known every rank picks the same entries (tuning_for()) and rank 0
# logs which constants are in use, or exactly why the file's are not (log_tuning()).


def default_tuning_path(env=None) -> str:
    """Where `rdmacoll-bench --tune` writes and init() looks when RDMACOLL_TUNING_FILE is
    unset: $XDG_CACHE_HOME/rdmacoll/tuning.json, else ~/.cache/rdmacoll/tuning.json."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rdmacoll", "tuning.json")


def tuning_path(value: str, env=None) -> str | None:
    """The tuning file to read for the setting's value: a path (an error if missing),
    'none' (none), or '' (the default location, if a file is there)."""
    value = value.strip()
    if value.lower() == "none":
        return None
    if value:
        if not os.path.isfile(value):
            raise _core.RdmacollError(
                f"RDMACOLL_TUNING_FILE={value!r}: no such file (write one with rdmacoll-bench --tune)"
            )
        return value
    path = default_tuning_path(env)
    return path if os.path.isfile(path) else None


def _cpu_model() -> str:
    """/proc/cpuinfo's first "model name" (x86), else the platform's word for the CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def this_host() -> dict:
    """What ties a tuning entry to a machine and a build: host name, CPU model, cores
    (os.cpu_count), rdmacoll version."""
    return {
        "host": socket.gethostname(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "rdmacoll": rdmacoll_version(),
    }


_MACHINE = ("host", "cpu", "cores")
_KEY = _MACHINE + ("transport", "ranks_per_host")  # one entry per key in a file
_FIELDS = {
    "host": str,
    "cpu": str,
    "cores": int,
    "transport": str,
    "ranks_per_host": int,
    "rdmacoll": str,
    "date": str,
    "cost_model": dict,
}


def tuning_entry(transport: str, ranks_per_host: int, cost_model: dict, measured: dict | None = None) -> dict:
    """An entry of this host: constants for one rank per CPU, measured now over `transport`
    with `ranks_per_host` ranks on this host."""
    entry = dict(
        this_host(),
        transport=transport,
        ranks_per_host=int(ranks_per_host),
        date=time.strftime("%Y-%m-%dT%H:%M:%S"),
        cost_model=dict(cost_model),
    )
    if measured is not None:
        entry["measured"] = measured
    return entry


def _check_entry(path: str, i: int, entry) -> dict:
    where = f"tuning file {path!r}: entries[{i}]"
    if not isinstance(entry, dict):
        raise _core.RdmacollError(f"{where} is not an object; rerun rdmacoll-bench --tune")
    for key, kind in _FIELDS.items():
        v = entry.get(key)
        if isinstance(v, bool) or not isinstance(v, kind):
            raise _core.RdmacollError(f"{where}[{key!r}]={v!r} is not a {kind.__name__}; rerun rdmacoll-bench --tune")
    model = {}
    for key in _COST_KEYS:
        v = entry["cost_model"].get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _core.RdmacollError(f"{where}['cost_model'][{key!r}]={v!r} is not a number")
        model[key] = float(v)
    _core.check_cost_model(model, f"{where}['cost_model']")
    return dict(entry, cost_model=model)


def read_tuning_file(path: str) -> tuple[list[dict], str | None]:
    """(entries, None), or ([], why) for a file of another version (ignored, not an error:
    an old file must never stop a job). RdmacollError if the file is malformed."""

    def no_constant(name):  # NaN, Infinity: JSON has none; a cost model needs finite numbers
        raise ValueError(f"{name} is not a number JSON has")

    try:
        with open(path) as f:
            doc = json.load(f, parse_constant=no_constant)
    except (OSError, ValueError, RecursionError) as e:
        raise _core.RdmacollError(
            f"tuning file {path!r} is unreadable ({e}); rerun rdmacoll-bench --tune or set RDMACOLL_TUNING_FILE=none"
        ) from None
    if not isinstance(doc, dict):
        raise _core.RdmacollError(f"tuning file {path!r} is not a JSON object; rerun rdmacoll-bench --tune")
    version = doc.get("version", 1)
    if version != TUNING_FILE_VERSION:
        return [], (
            f"tuning file {path!r} has version {version!r}, which records neither the host nor the "
            f"transport and layout it was measured on (this rdmacoll reads version {TUNING_FILE_VERSION})"
        )
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise _core.RdmacollError(f"tuning file {path!r} has no 'entries' list; rerun rdmacoll-bench --tune")
    return [_check_entry(path, i, e) for i, e in enumerate(entries)], None


def write_tuning_file(path: str, entries: list[dict]) -> None:
    """Writes the entries as a version-3 tuning file, atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    doc = {"version": TUNING_FILE_VERSION, "entries": entries}
    tmp = f"{path}.tmp{os.getpid()}"
    # a new file, never through a link planted under that name (the rename then replaces
    # `path` itself, a link there included, never what a link points to)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except FileExistsError:
        raise _core.RdmacollError(
            f"cannot write the tuning file: {tmp!r} exists (a link or a stale file; remove it)"
        ) from None
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def add_tuning_entry(path: str, entry: dict) -> str:
    """Writes `entry` into the file at `path`, replacing the entry of the same host, CPU,
    cores, transport and ranks per host and keeping the others. Returns what became of
    the file's previous contents (one line)."""
    old, why = [], None
    if os.path.exists(path):
        try:
            old, why = read_tuning_file(path)
        except _core.RdmacollError as e:
            why = str(e)
    kept = [e for e in old if any(e[k] != entry[k] for k in _KEY)]
    write_tuning_file(path, kept + [entry])
    if why:
        return f"replaced its previous contents ({why})"
    replaced = len(old) - len(kept)
    return (f"kept {len(kept)} other entr{'y' if len(kept) == 1 else 'ies'}" if kept else "no other entries") + (
        ", replaced this host's entry for the same transport and ranks per host" if replaced else ""
    )


def _machine(e: dict) -> str:
    return f"host {e['host']} (CPU {e['cpu']}, {e['cores']} cores)"


def _holds(entries: list[dict]) -> str:
    return (
        ", ".join(sorted({f"{e['transport']} at {e['ranks_per_host']} ranks per host" for e in entries})) or "nothing"
    )


def tuning_match(tuning: dict | None, ranks_per_host: int) -> tuple[list[dict], str | None]:
    """The entries of rank 0's tuning file (job()["tuning"]) that apply to this job:
    measured on this host (name, CPU model and cores all equal: rank 0's host), with this
    rdmacoll version, with `ranks_per_host` ranks on the host. ([], why) if none does."""
    if tuning is None:
        return [], None
    path, here, entries = tuning["path"], tuning["here"], tuning["entries"]
    if tuning["why"]:
        return [], tuning["why"]
    if not entries:
        return [], f"tuning file {path!r} holds no entries"
    same = [e for e in entries if all(e[k] == here[k] for k in _MACHINE)]
    if not same:
        return [], (
            f"tuning file {path!r} was measured on {'; '.join(sorted({_machine(e) for e in entries}))}, "
            f"this is {_machine(here)}"
        )
    now = [e for e in same if e["rdmacoll"] == here["rdmacoll"]]
    if not now:
        return [], (
            f"tuning file {path!r} was measured here with rdmacoll "
            f"{', '.join(sorted({e['rdmacoll'] for e in same}))}, this is rdmacoll {here['rdmacoll']}"
        )
    fit = [e for e in now if e["ranks_per_host"] == ranks_per_host]
    if not fit:
        return [], (
            f"tuning file {path!r} has no entry for {ranks_per_host} ranks per host on this host "
            f"(it holds {_holds(now)})"
        )
    return fit, None


def tuning_for(job: dict, ranks_per_host: int) -> dict:
    """The cost model constants the communicator gets, {transport: constants}: those of
    the matching entries (the core takes each backend's own, the shipped ones for the
    others). The same on every rank: it depends only on what rank 0 broadcast."""
    return {e["transport"]: e["cost_model"] for e in tuning_match(job["tuning"], ranks_per_host)[0]}


def tuning_verdict(tuning: dict | None, ranks_per_host: int, transport: str) -> tuple[int, str]:
    """(logging level, one line): the constants a job over `transport` (a backend, or
    hybrid "shm+tcp") with `ranks_per_host` ranks per host uses, and why not the file's."""
    if tuning is None:
        return logging.INFO, "no tuning file: using the shipped cost-model constants"
    fit, why = tuning_match(tuning, ranks_per_host)
    backends = transport.split("+")
    used = [b for b in backends if any(e["transport"] == b for e in fit)]
    missing = [b for b in backends if b not in used]
    if why is None and missing:
        why = (
            f"tuning file {tuning['path']!r} has no entry for transport {', '.join(missing)} at {ranks_per_host} "
            f"ranks per host on this host (it holds {_holds(fit)})"
        )
    fix = (
        f"measure them with {'RDMACOLL_TRANSPORT=' + missing[0] + ' ' if missing and missing[0] != 'shm' else ''}"
        f"mpiexec -n {ranks_per_host} rdmacoll-bench --tune on this host, or set RDMACOLL_TUNING_FILE=none"
    )
    if not used:
        return logging.WARNING, f"{why}: ignored, using the shipped constants ({fix})"
    e = next(e for e in fit if e["transport"] == used[0])
    line = (
        f"tuning file {tuning['path']!r}: constants for {', '.join(used)} measured here at {ranks_per_host} "
        f"ranks per host on {e['date']} (rdmacoll {e['rdmacoll']})"
    )
    if missing:
        return logging.WARNING, f"{line}; shipped constants for {', '.join(missing)}: {why} ({fix})"
    return logging.INFO, line


def log_tuning(job: dict, ranks_per_host: int, transport: str, rank: int = 0) -> None:
    """Once connected: which cost-model constants the job uses, on logger rdmacoll (a
    warning, why the file is not used, from rank 0 only; the info line from every rank)."""
    level, line = tuning_verdict(job["tuning"], ranks_per_host, transport)
    if rank == 0 or level < logging.WARNING:
        _log.say(level, rank, line)


def job(env=None, config=None) -> dict:
    """What rank 0 broadcasts at init(): the job-wide settings, their sources, and its
    tuning file's entries with this host's identity (tuning_match decides which apply
    once the layout is known)."""
    env = os.environ if env is None else env
    values, sources = resolve(env, config, scope="job")
    path = tuning_path(values["tuning_file"], env)
    tuning = None
    if path:
        entries, why = read_tuning_file(path)
        # what was measured stays in the file: only identities and constants travel
        tuning = {
            "path": path,
            "here": this_host(),
            "why": why,
            "entries": [{k: e[k] for k in _FIELDS} for e in entries],
        }
    return {"settings": values, "sources": sources, "tuning": tuning, "tuning_file": path}


if __name__ == "__main__":
    print(markdown_table())
