"""docs/horovod.md: generated from Horovod's sdist by scripts/horovod_api.py, and true of rdmacoll."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "horovod.md"


def _script():
    if "horovod_api" not in sys.modules:  # dataclasses need the module registered
        spec = importlib.util.spec_from_file_location("horovod_api", REPO / "scripts" / "horovod_api.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["horovod_api"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["horovod_api"]


def _sdist() -> Path | None:
    env = os.environ.get("HOROVOD_SDIST")
    cands = [Path(env)] if env else sorted(Path("/tmp/hvd/src").glob("horovod-0.28.1*"))
    for c in cands:
        if (c / "horovod" / "torch" / "__init__.py").is_file():
            return c
    return None


def _doc_rows():
    """(rdmacoll module, name, status) for every row of docs/horovod.md's per-module tables."""
    rows, ours = [], None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            ours = None
        m = re.match(r"rdmacoll module: `([\w.]+)`", line)
        if m:
            ours = m.group(1)
        m = re.match(r"\| `(\w+)` \| (\w+) \| .* \| (same|differs|absent) \| .*\|$", line)
        if m:
            rows.append((ours, m.group(1), m.group(3)))
    return rows


def _frameworks():
    for name in ("torch", "tensorflow", "keras"):  # the adapters the doc describes import these
        pytest.importorskip(name)


def test_doc_is_what_the_script_generates():
    _frameworks()
    root = _sdist()
    if root is None:
        pytest.skip("Horovod 0.28.1's sdist is not under /tmp/hvd/src (set HOROVOD_SDIST=DIR to point at it)")
    assert DOC.read_text(encoding="utf-8") == _script().generate(root), (
        "docs/horovod.md is stale: regenerate it with " + _script().REGENERATE
    )


def test_doc_claims_only_names_that_exist():
    _frameworks()
    rows = _doc_rows()
    assert len(rows) > 150  # all four tables were parsed
    present = [(mod, name) for mod, name, status in rows if status in ("same", "differs")]
    assert present and all(mod for mod, _ in present), "a same/differs row without an rdmacoll module"
    missing = [f"{mod}.{name}" for mod, name in present if not hasattr(importlib.import_module(mod), name)]
    assert not missing, f"docs/horovod.md lists as present names that rdmacoll lacks: {missing}"


def test_absent_rows_say_why():
    lines = [ln for ln in DOC.read_text(encoding="utf-8").splitlines() if "| absent |" in ln]
    assert lines
    bad = [ln for ln in lines if ln.rstrip().endswith("| absent |  |") or _script().NO_REASON in ln]
    assert not bad, bad


def test_tables_of_reasons_name_real_horovod_names():
    root = _sdist()
    if root is None:
        pytest.skip("Horovod 0.28.1's sdist is not under /tmp/hvd/src (set HOROVOD_SDIST=DIR to point at it)")
    h = _script()
    src = h.Sources(root)
    apis = {mod: src.api(mod) for mod in h.MODULES}
    every = set().union(*apis.values())
    stale = [key for key in h.KNOWN_DIFFERENCES if key[1] not in apis[key[0]]]
    stale += [key for key in h.ABSENT_REASONS if key[1] not in (every if key[0] == "*" else apis[key[0]])]
    assert not stale, f"entries for names Horovod does not have: {stale}"
    # a reason is stale once rdmacoll has the name in every module it applies to
    _frameworks()
    ours = {mod: importlib.import_module(r) for mod, r in h.MODULES.items() if r}
    provided = [
        key
        for key in h.ABSENT_REASONS
        if all(hasattr(ours[mod], key[1]) for mod in ([key[0]] if key[0] != "*" else ours) if key[1] in apis[mod])
    ]
    assert not provided, f"ABSENT_REASONS entries for names rdmacoll now has: {provided}"


def _write(root: Path, rel: str, text: str):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text), encoding="utf-8")


def test_parser_on_a_synthetic_package(tmp_path):
    _write(tmp_path, "fake/__init__.py", "")
    _write(
        tmp_path,
        "fake/core.py",
        """
        import os
        from typing import *
        __all__ = ["listed", "Klass", "CONST"]
        CONST = 3
        def listed(a, b=1, *, c=None): pass
        def not_listed(x): pass
        class Klass:
            def __init__(self, n, m=2): pass
        class _Basics:
            def size(self): pass
            def init(self, comm=None, process_sets=None): pass
            def __init__(self):
                self.Sum = 1
        """,
    )
    _write(
        tmp_path,
        "fake/ops.py",
        """
        from fake.core import _Basics
        _b = _Basics()
        size = _b.size
        Sum = _b.Sum
        def init(*args, **kwargs):
            return _b.init(*args, **kwargs)
        def _private(): pass
        def public_fn(t, name=None): pass
        """,
    )
    _write(tmp_path, "fake/api/sub/__init__.py", "")
    _write(
        tmp_path,
        "fake/api/__init__.py",
        """
        import os
        import numpy as np
        from packaging import version
        from fake.core import *
        from fake.ops import size, Sum, init, public_fn as renamed, _private
        from . import sub
        from ..ops import *
        try:
            from fake.ops import public_fn as guarded
        except ImportError:
            guarded = None
        def _helper(): pass
        alias = renamed
        """,
    )
    h = _script()
    api = h.Sources(tmp_path, package="fake").api("fake.api")
    assert set(api) == {
        "listed",
        "Klass",
        "CONST",
        "size",
        "Sum",
        "init",
        "renamed",
        "sub",
        "public_fn",
        "guarded",
        "alias",
    }
    assert api["listed"].kind == "function" and api["listed"].signature == "(a, b=1, *, c=None)"
    assert api["Klass"].kind == "class" and api["Klass"].signature == "(n, m=2)"
    assert api["CONST"].kind == "constant"
    assert api["size"].kind == "function" and api["size"].signature == "()"  # a method of an instance
    assert api["Sum"].kind == "constant"
    assert api["init"].signature == "(comm=None, process_sets=None)"  # forwards *args, **kwargs
    assert api["renamed"].signature == api["alias"].signature == api["guarded"].signature == "(t, name=None)"
    assert api["sub"].kind == "module"


def test_parameter_comparison():
    h = _script()
    P = h.Param
    hvd = [P("tensor", "pos", False), P("name", "pos", True), P("op", "kwonly", True)]
    assert (
        h.compare_params(
            hvd,
            [P("tensor", "pos", False), P("name", "pos", True), P("op", "kwonly", True), P("extra", "kwonly", True)],
        )
        == []
    )
    assert h.compare_params(hvd, [P("tensor", "pos", False), P("op", "kwonly", True)]) == ["no `name`"]
    assert h.compare_params(hvd, [P("tensor", "pos", False), P("nom", "pos", True), P("op", "kwonly", True)]) == [
        "no `name` (by position: `nom` here)"
    ]
    assert h.compare_params(hvd, [P("tensor", "pos", False), P("op", "pos", True), P("name", "pos", True)]) == [
        "parameter 2 by position is `op` here, `name` in Horovod"
    ]
    assert h.compare_params(hvd, [P("tensor", "pos", False), P("op", "kwonly", True), P("name", "kwonly", True)]) == [
        "by keyword only here: `name`"
    ]
    assert h.compare_params(hvd, [P("args", "varargs", False), P("kw", "varkw", False)]) == []
    assert h.compare_params([], [P("x", "pos", False), P("y", "pos", True)]) == [
        "requires `x`, which Horovod does not have"
    ]


def test_parser_agrees_with_real_horovod():
    """Side by side: where Horovod is installed in this interpreter, the names the parser reads
    from the sdist are the names the imported module has (submodules that Horovod does not
    import by name, and names from outside Horovod, left out on both sides)."""
    import inspect
    import types

    root = _sdist()
    if root is None or importlib.util.find_spec("horovod") is None:
        pytest.skip(
            "needs real Horovod installed in this interpreter and its sdist under /tmp/hvd/src "
            "(build-horovod.sh; run pytest from its venv)"
        )
    src, checked = _script().Sources(root), []
    for mod in _script().MODULES:
        try:
            real = importlib.import_module(mod)
        except Exception:  # e.g. Horovod built without TensorFlow: its module does not import
            continue
        parsed = src.api(mod)
        runtime = {}
        for n in dir(real):
            obj = getattr(real, n)
            if n.startswith("_") or (isinstance(obj, types.ModuleType) and n not in parsed):
                continue
            if (inspect.isclass(obj) or inspect.isroutine(obj)) and not getattr(obj, "__module__", "").startswith(
                "horovod"
            ):
                continue
            runtime[n] = (
                "module"
                if isinstance(obj, types.ModuleType)
                else "class"
                if inspect.isclass(obj)
                else "function"
                if callable(obj)
                else "constant"
            )
        assert {n: e.kind for n, e in parsed.items()} == runtime, mod
        checked.append(mod)
    if not checked:
        pytest.skip("none of Horovod's modules imports here")
