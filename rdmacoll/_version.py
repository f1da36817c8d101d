"""rdmacoll's version: the installed distribution's (pyproject.toml is the one place it is
written). importlib.metadata is imported on the first call, not with the package: it costs
more to import than the rest of rdmacoll without NumPy, and few programs ask."""

from __future__ import annotations


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rdmacoll")
    except PackageNotFoundError:
        return "0+unknown"  # (a source tree on sys.path, not installed)
