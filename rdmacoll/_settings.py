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
import os

from . import _core

TABLE = {row["name"]: row for row in _core.SETTINGS}
_BY_ENV = {row["env"]: row["name"] for row in _core.SETTINGS}

TUNING_FILE_VERSION = 2  # 2: constants for one rank per CPU (1: as measured)
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
        if text is None:
            for var in (row["env"], row["alias"]):
                if var and env.get(var, "").strip():
                    text, source = env[var], var
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
    return {name: _core.parse_setting(name, text) for name, text in _overrides(config).items()
            if scope is None or TABLE[name]["scope"] == scope}


def current() -> dict:
    """The settings in effect: the job's (rank 0's, broadcast at init()) once rdmacoll is
    initialised, else this process's environment."""
    import rdmacoll

    world = rdmacoll._world
    return dict(world.settings) if world is not None else resolve()[0]


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
            raise _core.RdmacollError(f"RDMACOLL_TUNING_FILE={value!r}: no such file (write one with "
                                      "rdmacoll-bench --tune)")
        return value
    path = default_tuning_path(env)
    return path if os.path.isfile(path) else None


def read_tuning_file(path: str) -> dict:
    """{backend: {alpha, beta, gamma}} from a tuning file; RdmacollError if malformed."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise _core.RdmacollError(f"tuning file {path!r} is unreadable ({e}); rerun rdmacoll-bench --tune "
                                  "or set RDMACOLL_TUNING_FILE=none") from None
    version = doc.get("version") if isinstance(doc, dict) else None
    if version is not None and version != TUNING_FILE_VERSION:
        raise _core.RdmacollError(
            f"tuning file {path!r} has version {version!r}, this rdmacoll reads version {TUNING_FILE_VERSION} "
            "(version 1 held constants as measured, version 2 holds them for one rank per CPU): rerun "
            "rdmacoll-bench --tune or set RDMACOLL_TUNING_FILE=none")
    models = doc.get("cost_model") if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        raise _core.RdmacollError(f"tuning file {path!r} has no 'cost_model' object; rerun rdmacoll-bench --tune")
    out = {}
    for backend, consts in models.items():
        where = f"tuning file {path!r}: cost_model[{backend!r}]"
        if not isinstance(consts, dict):
            raise _core.RdmacollError(f"{where} is not an object")
        model = {}
        for key in _COST_KEYS:
            v = consts.get(key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _core.RdmacollError(f"{where}[{key!r}]={v!r} is not a number")
            model[key] = float(v)
        _core.check_cost_model(model, where)
        out[backend] = model
    return out


def write_tuning_file(path: str, models: dict, measured: dict | None = None) -> None:
    """Writes {backend: {alpha, beta, gamma}} (and what was measured) atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    doc = {"version": TUNING_FILE_VERSION, "cost_model": models}
    if measured is not None:
        doc["measured"] = measured
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def job(env=None, config=None) -> dict:
    """What rank 0 broadcasts at init(): the job-wide settings, their sources, and the
    cost model's constants from the tuning file (if any)."""
    env = os.environ if env is None else env
    values, sources = resolve(env, config, scope="job")
    path = tuning_path(values["tuning_file"], env)
    models = read_tuning_file(path) if path else {}
    return {"settings": values, "sources": sources, "cost_models": models, "tuning_file": path}


if __name__ == "__main__":
    print(markdown_table())
