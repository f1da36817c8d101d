"""Settings from RDMACOLL_* environment variables (defaults come from the C++ core)."""
from __future__ import annotations

from . import _core

# variable -> (config key, parser)
_VARS = {
    "RDMACOLL_SEGMENT_BYTES": ("segment_bytes", int),
    "RDMACOLL_SLOT_BYTES": ("slot_bytes", int),
    "RDMACOLL_SLOTS": ("slots", int),
    "RDMACOLL_EAGER_BYTES": ("eager_bytes", int),
    "RDMACOLL_TIMEOUT": ("timeout", float),
    "RDMACOLL_ALGO": ("algo", str),
    "RDMACOLL_TRANSPORT": ("transport", str),
}


def _parse_size(text: str) -> int:
    t = text.strip().upper()
    mult = 1
    for suffix, m in (("KIB", 1 << 10), ("MIB", 1 << 20), ("GIB", 1 << 30), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    return int(t) * mult


def config_from_env(env) -> dict:
    cfg = dict(_core.DEFAULT_CONFIG)
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
    return cfg
