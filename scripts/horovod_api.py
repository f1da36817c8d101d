"""Generate docs/horovod.md: every public name of Horovod's horovod.torch, horovod.tensorflow,
horovod.tensorflow.keras and horovod.keras, read from Horovod's sdist with `ast` (Horovod is
never imported), compared with rdmacoll's adapters (imported normally).

    python scripts/horovod_api.py --sdist DIR_OR_TAR_GZ --out docs/horovod.md

Without --sdist the sdist is looked for under /tmp/hvd/src, else downloaded with
`pip download --no-deps --no-binary :all: horovod==0.28.1`.

Public names are the ones `import horovod.torch as hvd; hvd.NAME` gives: the module's `__all__`
where it defines one, else every top-level binding not starting with `_`, following
`from X import *`, `from X import a as b`, `x = y`, `x = obj.attr` (methods of an instance made
at module level) and bindings inside top-level `if`/`try` blocks (the first branch that binds a
name wins). Left out: names imported from outside Horovod (`os`, `tf`, packaging's `version`,
`from typing import *`) and modules bound by plain `import` statements; submodules bound by
`from horovod.x import sub` are listed.

Status per name: same (present, accepts Horovod's parameters), differs (parameters compared
automatically, plus KNOWN_DIFFERENCES below), absent (ABSENT_REASONS below says why).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

HOROVOD_VERSION = "0.28.1"
REGENERATE = "python scripts/horovod_api.py --sdist /tmp/hvd/src/horovod-0.28.1 --out docs/horovod.md"

# Horovod module -> the rdmacoll module that replaces it (None: rdmacoll has none).
MODULES = {
    "horovod.torch": "rdmacoll.frameworks.torch",
    "horovod.tensorflow": "rdmacoll.frameworks.tensorflow",
    "horovod.tensorflow.keras": "rdmacoll.frameworks.tensorflow.keras",
    "horovod.keras": None,
}
# Where a Horovod module has no rdmacoll counterpart, the rdmacoll module its users move to.
MOVE_TO = {"horovod.keras": "rdmacoll.frameworks.tensorflow.keras"}
NO_MODULE_REASON = {
    "horovod.keras": "Horovod's API for standalone (multi-backend Keras 2) `import keras`; rdmacoll has one "
    "Keras API, `rdmacoll.frameworks.tensorflow.keras`, for Keras 3 over TensorFlow: "
    "use it in place of both `horovod.keras` and `horovod.tensorflow.keras`",
}

_HANDLES = "returns a handle object, not an int (docs/torch.md)"
_TAKES_HANDLES = "takes rdmacoll's handle objects (Horovod's are ints), waited in any order (docs/torch.md)"
_TF_GRAPH_ERRORS = (
    "a mismatch between ranks raises FailedPreconditionError eagerly but UnknownError inside a "
    "graph (TensorFlow keeps only ValueError's type for Python ops: docs/tensorflow.md, Errors)"
)
_TF1_ORDER = (
    "TF1 sessions: collectives fetched together are ordered at run time, on a session of at least "
    "two inter-op threads (docs/tensorflow.md, TF1 sessions)"
)
# Behaviour that differs although the parameters match: (horovod module, name) -> one-line reason.
# Prune an entry when the difference is fixed.
_ELASTIC_RUN = (
    "its jobs run under `rdmacoll-run --elastic` (horovodrun's flags), not horovodrun; a world that "
    "lost workers is formed in place, one that grows through the driver's store (docs/elastic.md)"
)
KNOWN_DIFFERENCES = {
    ("horovod.torch", "elastic"): _ELASTIC_RUN,
    ("horovod.tensorflow", "elastic"): _ELASTIC_RUN + "; eager TensorFlow 2 and Keras 3 only",
    ("horovod.tensorflow.keras", "elastic"): _ELASTIC_RUN + "; Keras 3",
    **{
        ("horovod.torch", name): _HANDLES
        for name in (
            "allreduce_async",
            "allreduce_async_",
            "grouped_allreduce_async",
            "grouped_allreduce_async_",
            "allgather_async",
            "broadcast_async",
            "broadcast_async_",
            "alltoall_async",
            "reducescatter_async",
            "grouped_allgather_async",
            "grouped_reducescatter_async",
        )
    },
    (
        "horovod.torch",
        "broadcast_optimizer_state",
    ): "also LBFGS (Horovod: ValueError) and with `process_set=`; the root's hyperparameters reach every rank "
    "even for a stateless optimizer (Horovod broadcasts nothing then); a rank with empty state is stepped "
    "with zero gradients only where the root's state was empty too (Horovod also does it where the root's "
    "was not, moving that rank's parameters by weight decay and waiting forever when the root has no state "
    "for a parameter that got no gradient)",
    **{("horovod.torch", name): _TAKES_HANDLES for name in ("poll", "synchronize")},
    (
        "horovod.torch",
        "DistributedOptimizer",
    ): "frozen/unfrozen parameters and `add_param_group` groups are reduced from the step they change "
    "(Horovod never reduces them, and moves parameters frozen after wrapping); `op=Adasum` steps and "
    "reduces at `step()`, not in backward hooks (same parameters): docs/torch.md",
    (
        "horovod.torch",
        "join",
    ): "serves `barrier()` and refuses an allgather of a name seen before like any other, where "
    "Horovod 0.28.1 crashes the joined rank; refusals raise `HorovodInternalError` (an `RdmacollError`) with Horovod's text "
    "(docs/torch.md, join)",
    (
        "horovod.tensorflow",
        "join",
    ): "refusals (allgather, broadcast, alltoall, reducescatter while a rank is joined) raise "
    "`FailedPreconditionError` (an `RdmacollError`) with Horovod's text, as Horovod's negotiation (docs/tensorflow.md)",
    (
        "horovod.torch",
        "Adasum",
    ): "reduces in the call: `allreduce_async(op=Adasum)` returns a finished handle (docs/torch.md, Adasum)",
    (
        "horovod.torch",
        "sparse_allreduce_async",
    ): "the handle is a handle object that can also be called (Horovod's is a function); ops other than "
    "Sum and Average raise `ValueError` (Horovod sums): docs/torch.md",
    (
        "horovod.torch",
        "SyncBatchNorm",
    ): "runs on CPU tensors (Horovod's needs a GPU); two allreduces per training call (docs/torch.md)",
    (
        "horovod.tensorflow",
        "DistributedOptimizer",
    ): "tf.compat.v1.train optimizers: `backward_passes_per_step` must be 1; Keras 3 optimizers: as "
    "horovod.tensorflow.keras; sparse gradients reduced as dense, `device_*`, `num_groups`, `groups` "
    "ignored (docs/tensorflow.md)",
    **{
        ("horovod.tensorflow", name): _TF_GRAPH_ERRORS
        for name in ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "grouped_allreduce")
    },
    **{
        ("horovod.tensorflow", name): _TF1_ORDER
        for name in ("BroadcastGlobalVariablesHook", "broadcast_global_variables")
    },
    (
        "horovod.tensorflow",
        "Adasum",
    ): "CPU Adasum for allreduce, grouped_allreduce, DistributedGradientTape and Keras optimizers; integer "
    "tensors raise InvalidArgumentError (Horovod: an internal error), a tf.compat.v1.train optimizer with "
    "op=Adasum raises NotImplementedError (Horovod's delta optimizer): docs/tensorflow.md",
    ("horovod.tensorflow", "grouped_allgather"): "one collective per tensor (Horovod: one op for the group)",
    ("horovod.tensorflow", "grouped_reducescatter"): "one collective per tensor (Horovod: one op for the group)",
    (
        "horovod.tensorflow",
        "SyncBatchNormalization",
    ): "a Keras 3 layer (keras.layers.BatchNormalization); `fused` must be False, as in Horovod",
    (
        "horovod.tensorflow.keras",
        "DistributedOptimizer",
    ): "Keras 3 optimizers; sparse gradients reduced as dense, `device_*`, `num_groups`, `groups` ignored "
    "(docs/tensorflow.md)",
}

_INTERNAL = (
    "Horovod-internal helper that leaks into the namespace through its imports "
    "(not in Horovod's API documentation); not provided"
)
# Why a name is absent: (horovod module or "*", name) -> reason. "*" applies to every module.
# An entry for a name rdmacoll now has everywhere it applies is stale (tests/test_horovod_api.py).
ABSENT_REASONS = {
    ("*", "check_extension"): _INTERNAL,
    ("*", "gpu_available"): _INTERNAL,
    ("*", "split_list"): _INTERNAL,
    ("*", "is_version_greater_equal_than"): _INTERNAL,
    ("horovod.tensorflow", "handle_average_backwards_compatibility"): _INTERNAL,
    ("horovod.tensorflow", "check_num_rank_power_of_2"): _INTERNAL,
    ("horovod.tensorflow", "vars_to_refs"): _INTERNAL,
    ("horovod.tensorflow", "refs_to_vars"): _INTERNAL,
    ("horovod.tensorflow", "LocalGradientAggregationHelper"): _INTERNAL,
}
NO_REASON = "no reason recorded: add one to ABSENT_REASONS in scripts/horovod_api.py"


# ---------------------------------------------------------------- parsing Horovod's sources


@dataclasses.dataclass
class Param:
    name: str
    kind: str  # "pos" (positional or keyword), "posonly", "varargs", "kwonly", "varkw"
    default: bool


@dataclasses.dataclass
class Entry:
    kind: str  # function / class / constant / module
    signature: str = ""
    params: list[Param] | None = None  # None: unknown, not compared
    origin: str = ""


def _params(args: ast.arguments, drop_self: bool) -> tuple[list[Param], str]:
    out, text = [], []
    positional = [(a, "posonly") for a in args.posonlyargs] + [(a, "pos") for a in args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, ((a, kind), d) in enumerate(zip(positional, defaults)):
        if drop_self and i == 0:
            continue
        out.append(Param(a.arg, kind, d is not None))
        text.append(a.arg if d is None else f"{a.arg}={ast.unparse(d)}")
        if kind == "posonly" and (i + 1 == len(args.posonlyargs)):
            text.append("/")
    if args.vararg:
        out.append(Param(args.vararg.arg, "varargs", False))
        text.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        text.append("*")
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append(Param(a.arg, "kwonly", d is not None))
        text.append(a.arg if d is None else f"{a.arg}={ast.unparse(d)}")
    if args.kwarg:
        out.append(Param(args.kwarg.arg, "varkw", False))
        text.append("**" + args.kwarg.arg)
    return out, "(" + ", ".join(text) + ")"


class Sources:
    """Top-level bindings of the modules of one source tree (the directory holding `horovod/`)."""

    def __init__(self, root: Path, package: str = "horovod"):
        self.root = Path(root)
        self.package = package
        self._trees: dict[str, ast.Module | None] = {}
        self._bindings: dict[str, dict] = {}
        self._parsing: set[str] = set()

    # --- files
    def _file(self, mod: str) -> Path | None:
        base = self.root.joinpath(*mod.split("."))
        for p in (base / "__init__.py", base.with_suffix(".py")):
            if p.is_file():
                return p
        return None

    def is_internal(self, mod: str) -> bool:
        return mod == self.package or mod.startswith(self.package + ".")

    def _tree(self, mod: str) -> ast.Module | None:
        if mod not in self._trees:
            f = self._file(mod) if self.is_internal(mod) else None
            self._trees[mod] = ast.parse(f.read_text(encoding="utf-8"), str(f)) if f else None
        return self._trees[mod]

    def _is_package(self, mod: str) -> bool:
        f = self._file(mod)
        return f is not None and f.name == "__init__.py"

    # --- bindings: name -> ("def", node) | ("ref", mod, name) | ("module", mod) | ("external",)
    #                       | ("assign", expr) | ("all", None)
    def bindings(self, mod: str) -> tuple[dict, list[str] | None]:
        if mod in self._bindings:
            return self._bindings[mod]
        tree = self._tree(mod)
        if tree is None or mod in self._parsing:
            return {}, None
        self._parsing.add(mod)
        try:
            names: dict = {}
            all_names: list[str] | None = None

            def visit(stmts, into):
                nonlocal all_names
                for s in stmts:
                    if isinstance(s, (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try))):
                        branches = (
                            [s.body, s.orelse]
                            if isinstance(s, ast.If)
                            else [s.body + s.orelse] + [h.body for h in s.handlers]
                        )
                        merged: dict = {}
                        for b in branches:
                            got: dict = {}
                            visit(b, got)
                            for k, v in got.items():
                                merged.setdefault(k, v)
                        into.update(merged)
                        if isinstance(s, ast.Try):
                            visit(s.finalbody, into)
                    elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        into[s.name] = ("def", s, mod)
                    elif isinstance(s, ast.Import):
                        for a in s.names:
                            into[a.asname or a.name.split(".")[0]] = ("external",)
                    elif isinstance(s, ast.ImportFrom):
                        src = self._resolve_from(mod, s)
                        for a in s.names:
                            if a.name == "*":
                                for n in self.public_names(src):
                                    into[n] = ("ref", src, n)
                            elif not self.is_internal(src):
                                into[a.asname or a.name] = ("external",)
                            elif self._file(f"{src}.{a.name}") is not None:  # a submodule
                                into[a.asname or a.name] = ("module", f"{src}.{a.name}")
                            else:
                                into[a.asname or a.name] = ("ref", src, a.name)
                    elif isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None:
                        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                        for t in targets:
                            if isinstance(t, ast.Name):
                                if t.id == "__all__":
                                    all_names = self._literal_names(s.value)
                                else:
                                    into[t.id] = ("assign", s.value, mod)
                    elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id == "__all__":
                        all_names = (all_names or []) + (self._literal_names(s.value) or [])

            visit(tree.body, names)
            self._bindings[mod] = (names, all_names)
            return self._bindings[mod]
        finally:
            self._parsing.discard(mod)

    @staticmethod
    def _literal_names(expr) -> list[str] | None:
        if isinstance(expr, (ast.List, ast.Tuple)):
            return [e.value for e in expr.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return None

    def _resolve_from(self, mod: str, s: ast.ImportFrom) -> str:
        if not s.level:
            return s.module or ""
        parts = mod.split(".")
        base = parts if self._is_package(mod) else parts[:-1]
        base = base[: len(base) - (s.level - 1)]
        return ".".join(base + ([s.module] if s.module else []))

    def public_names(self, mod: str) -> list[str]:
        names, all_names = self.bindings(mod)
        if all_names is not None:
            return list(all_names)
        return [n for n, b in names.items() if not n.startswith("_") and b[0] != "external"]

    # --- resolution
    def resolve(self, mod: str, name: str, seen=None) -> Entry | None:
        """The Entry that `mod.name` is, or None for a name from outside the tree."""
        seen = seen or set()
        if (mod, name) in seen:
            return Entry("constant", origin=f"{mod}.{name}")
        seen.add((mod, name))
        names, _ = self.bindings(mod)
        b = names.get(name)
        if b is None:
            sub = f"{mod}.{name}"
            if self._file(sub) is not None:
                return Entry("module", origin=sub)
            return None if self._tree(mod) is None else Entry("constant", origin=f"{mod}.{name}")
        if b[0] == "external":
            return None
        if b[0] == "ref":
            return self.resolve(b[1], b[2], seen)
        if b[0] == "module":
            return Entry("module", origin=b[1])
        if b[0] == "def":
            return self._entry_of_def(b[1], b[2], seen)
        if b[0] == "assign":
            return self._entry_of_expr(b[1], b[2], name, seen)
        return None

    def _entry_of_def(self, node, mod: str, seen) -> Entry:
        origin = f"{mod}.{node.name}"
        if isinstance(node, ast.ClassDef):
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            if init is None:
                for base in node.bases:  # the first base in this tree that defines __init__
                    if isinstance(base, ast.Name):
                        e = self.resolve(mod, base.id, set(seen))
                        if e is not None and e.kind == "class" and e.params is not None:
                            return Entry("class", e.signature, e.params, origin)
                return Entry("class", "", None, origin)
            params, text = _params(init.args, drop_self=True)
            return Entry("class", text, params, origin)
        params, text = _params(node.args, drop_self=False)
        fwd = self._forwarded(node, mod, seen)
        if fwd is not None:
            return Entry("function", fwd.signature, fwd.params, origin)
        return Entry("function", text, params, origin)

    def _forwarded(self, fn, mod, seen) -> Entry | None:
        """`def f(*args, **kwargs): g(*args, **kwargs)` has g's signature."""
        a = fn.args
        if not (a.vararg and a.kwarg and not a.args and not a.kwonlyargs and not a.posonlyargs):
            return None
        for n in ast.walk(fn):
            if (
                isinstance(n, ast.Call)
                and any(isinstance(x, ast.Starred) for x in n.args)
                and any(k.arg is None for k in n.keywords)
            ):
                e = self._entry_of_expr(n.func, mod, "", set(seen))
                if e is not None and e.kind == "function" and e.params is not None:
                    return e
        return None

    def _class_node(self, mod: str, name: str):
        names, _ = self.bindings(mod)
        b = names.get(name)
        if b is None:
            return None
        if b[0] == "ref":
            return self._class_node(b[1], b[2])
        if b[0] == "def" and isinstance(b[1], ast.ClassDef):
            return b[1], b[2]
        return None

    def _entry_of_expr(self, expr, mod: str, name: str, seen) -> Entry:
        origin = f"{mod}.{name}"
        if isinstance(expr, ast.Name):
            e = self.resolve(mod, expr.id, seen)
            return e if e is not None else Entry("constant", origin=origin)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            names, _ = self.bindings(mod)
            b = names.get(expr.value.id)
            if b is not None and b[0] == "assign" and isinstance(b[1], ast.Call) and isinstance(b[1].func, ast.Name):
                cls = self._class_node(b[2], b[1].func.id)
                if cls is not None:  # obj = Class(...); name = obj.attr
                    node, cmod = cls
                    for n in node.body:
                        if isinstance(n, ast.FunctionDef) and n.name == expr.attr:
                            params, text = _params(n.args, drop_self=True)
                            return Entry("function", text, params, f"{cmod}.{node.name}.{n.name}")
                    return Entry("constant", origin=f"{cmod}.{node.name}.{expr.attr}")
            e = self.resolve(mod, expr.value.id, set(seen))
            if e is not None and e.kind == "module":
                r = self.resolve(e.origin, expr.attr, seen)
                if r is not None:
                    return r
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            names, _ = self.bindings(mod)
            b = names.get(expr.func.id)
            while b is not None and b[0] == "ref":
                b = self.bindings(b[1])[0].get(b[2])
            if b is not None and b[0] == "def" and isinstance(b[1], ast.FunctionDef):
                last = b[1].body[-1] if b[1].body else None
                inner = {n.name: n for n in b[1].body if isinstance(n, ast.FunctionDef)}
                if (
                    isinstance(last, ast.Return) and isinstance(last.value, ast.Name) and last.value.id in inner
                ):  # a factory that returns a nested function
                    params, text = _params(inner[last.value.id].args, drop_self=False)
                    return Entry("function", text, params, origin)
        if isinstance(expr, ast.Constant):
            return Entry("constant", f"= {expr.value!r}", None, origin)
        return Entry("constant", origin=origin)

    def api(self, mod: str) -> dict[str, Entry]:
        """Every public name of `mod` with what it is; names from outside the tree are left out."""
        out = {}
        names, all_names = self.bindings(mod)
        for n in self.public_names(mod):
            b = names.get(n)
            if all_names is None and b is not None and b[0] == "external":
                continue
            e = self.resolve(mod, n)
            if e is not None:
                out[n] = e
        return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


# ---------------------------------------------------------------- comparing with rdmacoll


def _live_params(obj) -> list[Param] | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "posonly",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
        inspect.Parameter.VAR_POSITIONAL: "varargs",
        inspect.Parameter.KEYWORD_ONLY: "kwonly",
        inspect.Parameter.VAR_KEYWORD: "varkw",
    }
    return [Param(p.name, kinds[p.kind], p.default is not inspect.Parameter.empty) for p in sig.parameters.values()]


def compare_params(hvd: list[Param], ours: list[Param]) -> list[str]:
    """How `ours` fails to accept every call that `hvd` accepts (empty: it accepts them all)."""
    our_pos = [p for p in ours if p.kind in ("posonly", "pos")]
    our_kw = {p.name for p in ours if p.kind in ("pos", "kwonly")}
    any_pos = any(p.kind == "varargs" for p in ours)
    any_kw = any(p.kind == "varkw" for p in ours)
    hvd_pos = [p for p in hvd if p.kind in ("posonly", "pos")]
    hvd_names = {p.name for p in hvd}
    renamed, missing, keyword_only, order = [], [], [], None
    for i, p in enumerate(hvd_pos):
        mine = our_pos[i] if i < len(our_pos) else None
        if p.kind == "pos" and p.name not in our_kw and not any_kw:
            if mine is not None and mine.name not in hvd_names:
                renamed.append((p.name, mine.name))
            else:
                missing.append(p.name)
        elif mine is None:
            if not any_pos:
                keyword_only.append(p.name)
        elif mine.name != p.name and order is None and p.kind == "pos":
            order = f"parameter {i + 1} by position is `{mine.name}` here, `{p.name}` in Horovod"
    for p in hvd:
        if p.kind == "kwonly" and p.name not in our_kw and not any_kw:
            missing.append(p.name)
        elif p.kind == "varargs" and not any_pos:
            missing.append("*" + p.name)
        elif p.kind == "varkw" and not any_kw:
            missing.append("**" + p.name)
    renamed_to = {mine for _, mine in renamed}
    hvd_varargs = any(p.kind == "varargs" for p in hvd)
    required = [
        p.name
        for p in ours
        if not p.default
        and p.kind in ("posonly", "pos", "kwonly")
        and p.name not in hvd_names
        and p.name not in renamed_to
        and not (hvd_varargs and p.kind != "kwonly")
    ]
    out = []
    out += [f"no `{theirs}` (by position: `{mine}` here)" for theirs, mine in renamed]
    if missing:
        out.append("no " + ", ".join(f"`{m}`" for m in missing))
    if order:
        out.append(order)
    if keyword_only:
        out.append("by keyword only here: " + ", ".join(f"`{m}`" for m in keyword_only))
    if required:
        out.append("requires " + ", ".join(f"`{m}`" for m in required) + ", which Horovod does not have")
    return out


@dataclasses.dataclass
class Row:
    name: str
    kind: str
    signature: str
    status: str  # same / differs / absent
    note: str


def _absent_reason(hmod: str, name: str) -> str:
    return ABSENT_REASONS.get((hmod, name)) or ABSENT_REASONS.get(("*", name)) or NO_REASON


def compare_module(hmod: str, api: dict[str, Entry], ours) -> list[Row]:
    rows = []
    for name, e in api.items():
        sig = e.signature
        if ours is None:
            other = MOVE_TO.get(hmod)
            has = other is not None and hasattr(importlib.import_module(other), name)
            note = (
                f"standalone Keras 2 is not supported; `{other}.{name}` exists (Keras 3)"
                if has
                else f"standalone Keras 2 is not supported; `{other}` has no `{name}` either"
                if other
                else "no rdmacoll module"
            )
            rows.append(Row(name, e.kind, sig, "absent", note))
            continue
        if not hasattr(ours, name):
            rows.append(Row(name, e.kind, sig, "absent", _absent_reason(hmod, name)))
            continue
        obj = getattr(ours, name)
        notes = []
        if e.kind == "module" and not isinstance(obj, types.ModuleType):
            notes.append(f"a {type(obj).__name__} here, a module in Horovod")
        if e.kind in ("function", "class") and e.params is not None and callable(obj):
            live = _live_params(obj)
            if live is not None:
                notes += compare_params(e.params, live)
        known = KNOWN_DIFFERENCES.get((hmod, name))
        if known:
            notes.append(known)
        rows.append(Row(name, e.kind, sig, "differs" if notes else "same", "; ".join(notes)))
    return rows


# ---------------------------------------------------------------- sdist and markdown


def find_sdist(arg: str | None, workdir: Path) -> Path:
    """The directory holding `horovod/` from a directory, a .tar.gz, or by download."""
    if arg is None:
        cands = sorted(Path("/tmp/hvd/src").glob(f"horovod-{HOROVOD_VERSION}*"))
        if cands:
            arg = str(cands[0])
        else:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    f"horovod=={HOROVOD_VERSION}",
                    "-d",
                    str(workdir),
                ],
                check=True,
            )
            arg = str(next(workdir.glob("horovod-*.tar.gz")))
    p = Path(arg)
    if p.is_file():
        with tarfile.open(p) as tf:
            tf.extractall(workdir, filter="data")
        p = next(d for d in workdir.iterdir() if d.is_dir() and (d / "horovod").is_dir())
    if (p / "horovod").is_dir():
        return p
    sub = [d for d in p.iterdir() if d.is_dir() and (d / "horovod").is_dir()] if p.is_dir() else []
    if not sub:
        raise SystemExit(f"horovod_api.py: no horovod/ package under {arg}")
    return sub[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(results: dict[str, list[Row]]) -> str:
    out = [
        "# Horovod's API in rdmacoll",
        "",
        "<!-- generated by scripts/horovod_api.py: do not edit by hand -->",
        "",
        f"Every public name of Horovod {HOROVOD_VERSION}'s `horovod.torch`, `horovod.tensorflow`, "
        "`horovod.tensorflow.keras` and `horovod.keras` (what `hvd.NAME` gives after "
        "`import horovod.torch as hvd`), read from Horovod's sdist with Python's `ast` (Horovod is not "
        "imported), and what rdmacoll's adapter module has under the same name. Generated by "
        "`scripts/horovod_api.py`; regenerate after changing an adapter with",
        "",
        "```",
        REGENERATE,
        "```",
        "",
        "(without `--sdist` it looks under `/tmp/hvd/src`, else runs "
        f"`pip download --no-deps --no-binary :all: horovod=={HOROVOD_VERSION}`).",
        "",
        "- **same**: present, and accepts every parameter Horovod's accepts, by the same position and name.",
        "- **differs**: present; how: parameters compared automatically, behaviour from the script's "
        "table of known differences.",
        "- **absent**: not provided, and why.",
        "",
        "Names Horovod's modules import from elsewhere (`os`, `tf`, `torch`, packaging's `version`) are "
        "not its API and are left out; submodules appear when Horovod imports them by name "
        "(`from horovod.torch import elastic`), not its implementation modules (`hvd.mpi_ops`, reachable only "
        "because importing a submodule sets the attribute). No name of these modules is GPU-only: GPU "
        "support shows in parameters (`device_dense`, `device`) and in the `cuda_built`/`nccl_built`-style "
        "probes (rdmacoll answers False: its adapters take CPU tensors).",
        "",
        "Horovod's `horovod.keras` is its API for standalone multi-backend Keras 2; rdmacoll has one Keras "
        "API, `rdmacoll.frameworks.tensorflow.keras` (Keras 3 over TensorFlow), which stands in for both "
        "`horovod.tensorflow.keras` and `horovod.keras`; `horovod.keras`'s names are listed as absent.",
        "",
        "Behaviour, measured by Horovod's own TensorFlow test file run over rdmacoll "
        "(`scripts/horovod_tests.py`): what passes, and what cannot pass and why, in "
        "[docs/tensorflow.md](tensorflow.md#horovods-own-tensorflow-tests).",
        "",
        "## Summary",
        "",
        "| Horovod module | rdmacoll module | same | differs | absent |",
        "|---|---|---|---|---|",
    ]
    for hmod, rows in results.items():
        counts = {s: sum(r.status == s for r in rows) for s in ("same", "differs", "absent")}
        ours = f"`{MODULES[hmod]}`" if MODULES[hmod] else "none"
        out.append(f"| `{hmod}` | {ours} | {counts['same']} | {counts['differs']} | {counts['absent']} |")
    for hmod, rows in results.items():
        out += ["", f"## `{hmod}`", ""]
        if MODULES[hmod]:
            out.append(f"rdmacoll module: `{MODULES[hmod]}`")
        else:
            out.append(f"rdmacoll module: none. {NO_MODULE_REASON[hmod]}.")
        out += ["", "| name | kind | Horovod signature | status | how / why |", "|---|---|---|---|---|"]
        for r in rows:
            sig = f"`{_cell(r.signature)}`" if r.signature else ""
            out.append(f"| `{r.name}` | {r.kind} | {sig} | {r.status} | {_cell(r.note)} |")
    return "\n".join(out) + "\n"


def generate(root: Path) -> str:
    src = Sources(root)
    results = {}
    for hmod, rmod in MODULES.items():
        ours = importlib.import_module(rmod) if rmod else None
        results[hmod] = compare_module(hmod, src.api(hmod), ours)
    return render(results)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", help="Horovod's sdist: a directory or the .tar.gz")
    ap.add_argument("--out", help="write here (default: stdout)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        text = generate(find_sdist(a.sdist, Path(tmp)))
    if a.out:
        Path(a.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
