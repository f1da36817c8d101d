"""Settings from RDMACOLL_* environment variables (defaults come from the C++ core).

Only rank 0 calls config_from_env(); bootstrap broadcasts the resulting dict, so every
rank runs with rank 0's settings, its tuning file included (ranks that disagreed on the
cost model would choose different algorithms for the same call).
"""
from __future__ import annotations

import copy
import json
import math
import os

from . import _core

# variable -> (config key, parser)
_VARS = {
    "RDMACOLL_SEGMENT_BYTES": ("segment_bytes", int),
    "RDMACOLL_SLOT_BYTES": ("slot_bytes", int),
    "RDMACOLL_SLOTS": ("slots", int),
    "RDMACOLL_EAGER_BYTES": ("eager_bytes", int),
    "RDMACOLL_TIMEOUT": ("timeout", float),
    "RDMACOLL_STALL_WARNING_SECONDS": ("stall_warning", float),
    "RDMACOLL_STALL_SHUTDOWN_SECONDS": ("stall_shutdown", float),
    "RDMACOLL_TIMELINE": ("timeline", str),
    "RDMACOLL_ALGO": ("algo", str),
    "RDMACOLL_TRANSPORT": ("transport", str),
}

TUNING_FILE_VAR = "RDMACOLL_TUNING_FILE"
TUNING_FILE_VERSION = 2  # 2: constants for one rank per CPU (1: as measured)
_COST_KEYS = ("alpha", "beta", "gamma")


def _parse_size(text: str) -> int:
    t = text.strip().upper()
    mult = 1
    for suffix, m in (("KIB", 1 << 10), ("MIB", 1 << 20), ("GIB", 1 << 30), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    return int(t) * mult


def default_tuning_path(env=None) -> str:
    """Where `rdmacoll-bench --tune` writes and init() looks when RDMACOLL_TUNING_FILE is
    unset: $XDG_CACHE_HOME/rdmacoll/tuning.json, else ~/.cache/rdmacoll/tuning.json."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rdmacoll", "tuning.json")


def tuning_path(env) -> str | None:
    """The tuning file init() reads: RDMACOLL_TUNING_FILE (an error if missing; 'none' or
    '' disables tuning files), else the default location if a file is there."""
    raw = env.get(TUNING_FILE_VAR)
    if raw is not None:
        raw = raw.strip()
        if raw == "" or raw.lower() == "none":
            return None
        if not os.path.isfile(raw):
            raise _core.RdmacollError(f"{TUNING_FILE_VAR}={raw!r}: no such file (write one with rdmacoll-bench --tune)")
        return raw
    path = default_tuning_path(env)
    return path if os.path.isfile(path) else None


def read_tuning_file(path: str) -> dict:
    """{transport: {alpha, beta, gamma}} from a tuning file; RdmacollError if malformed."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise _core.RdmacollError(f"tuning file {path!r} is unreadable ({e}); rerun rdmacoll-bench --tune "
                                  f"or set {TUNING_FILE_VAR}=none") from None
    version = doc.get("version") if isinstance(doc, dict) else None
    if version is not None and version != TUNING_FILE_VERSION:
        raise _core.RdmacollError(
            f"tuning file {path!r} has version {version!r}, this rdmacoll reads version {TUNING_FILE_VERSION} "
            "(version 1 held constants as measured, version 2 holds them for one rank per CPU): rerun "
            f"rdmacoll-bench --tune or set {TUNING_FILE_VAR}=none")
    models = doc.get("cost_model") if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        raise _core.RdmacollError(f"tuning file {path!r} has no 'cost_model' object; rerun rdmacoll-bench --tune")
    out = {}
    for transport, consts in models.items():
        if not isinstance(consts, dict):
            raise _core.RdmacollError(f"tuning file {path!r}: cost_model[{transport!r}] is not an object")
        model = {}
        for key in _COST_KEYS:
            if key not in consts:
                continue
            v = consts[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise _core.RdmacollError(f"tuning file {path!r}: cost_model[{transport!r}][{key!r}]={v!r} "
                                          "is not a number >= 0")
            model[key] = float(v)
        out[transport] = model
    return out


def write_tuning_file(path: str, models: dict, measured: dict | None = None) -> None:
    """Writes {transport: {alpha, beta, gamma}} (and what was measured) atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    doc = {"version": TUNING_FILE_VERSION, "cost_model": models}
    if measured is not None:
        doc["measured"] = measured
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def config_from_env(env) -> dict:
    cfg = copy.deepcopy(_core.DEFAULT_CONFIG)
    for var, (key, kind) in _VARS.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        try:
            if kind is int:
                cfg[key] = _parse_size(raw)
            elif kind is float:
                cfg[key] = float(raw)
            else:
                cfg[key] = raw.strip()
        except ValueError:
            raise _core.RdmacollError(f"{var}={raw!r} is not a valid {kind.__name__}") from None
    path = tuning_path(env)
    if path is not None:
        for transport, model in read_tuning_file(path).items():
            cfg.setdefault("cost_model", {}).setdefault(transport, {}).update(model)
        cfg["tuning_file"] = path  # informational; the core ignores it
    return cfg
