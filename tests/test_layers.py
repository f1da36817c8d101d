"""The layers of docs/design.md, checked in the sources: each C++ layer includes only the
ones below it, transports are named only in csrc/transport/, algorithms reach peers only
through comm/, one function selects algorithms, frameworks and MPI are imported only
where they belong, and no C++ file outside the kernels grows past 450 lines. The Python
floors ("Python floors"), read with ast from rdmacoll/ (nothing is imported): no import
circle, no import from a lower floor to a higher one, no import inside a function or
class except of the optional dependencies."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
PACKAGE = ROOT / "rdmacoll"

if not CSRC.is_dir():
    pytest.skip("the C++ sources are not next to the tests", allow_module_level=True)

# Layer -> the layers it may include (itself implied). reduce/ is a leaf library of kernels,
# device/ one of the CUDA runtime (loaded at run time).
BELOW = {
    "common": set(),
    "reduce": {"common"},
    "transport": {"common"},
    "device": {"common"},
    "comm": {"common", "transport", "reduce"},
    "algorithms": {"common", "transport", "comm", "reduce"},
    "tuning": {"common", "transport", "comm", "reduce", "algorithms"},
    # the algorithms run again with nothing moved (csrc/trace/: the schedules as data)
    "trace": {"common", "transport", "comm", "reduce", "algorithms"},
    "runtime": {"common", "transport", "comm", "reduce", "algorithms", "tuning", "device"},
    "python": {"common", "transport", "comm", "reduce", "algorithms", "tuning", "runtime", "device", "trace"},
}


def sources(*layers):
    for layer in layers:
        yield from sorted(p for p in (CSRC / layer).rglob("*") if p.suffix in (".h", ".cc"))


def includes(path):
    return re.findall(r'^#include "([a-z_]+)/', path.read_text(), re.M)


def code(path):
    """The file without its comments and string literals."""
    text = re.sub(r"//[^\n]*", "", path.read_text())
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


@pytest.mark.parametrize("layer", sorted(BELOW))
def test_includes_point_down(layer):
    bad = [
        f"{p.relative_to(CSRC)} includes {inc}/"
        for p in sources(layer)
        for inc in includes(p)
        if inc != layer and inc not in BELOW[layer]
    ]
    assert not bad, "\n".join(bad)


def test_algorithms_never_name_an_endpoint():
    bad = [
        str(p.relative_to(CSRC)) for p in sources("algorithms") if re.search(r"\bEndpoint\b|\bep\s*->|\.ep\b", code(p))
    ]
    assert not bad, f"algorithms reach peers only through comm/'s primitives: {bad}"


def test_transports_are_named_only_in_transport():
    names = r'"(shm|tcp|ibverbs)"'
    bad = [
        str(p.relative_to(CSRC))
        for layer in BELOW
        if layer != "transport"
        for p in sources(layer)
        if re.search(names, p.read_text())
    ]
    assert not bad, f"a transport's name outside csrc/transport/: {bad}"


def test_no_mpi_in_cpp():
    bad = [
        str(p.relative_to(CSRC))
        for p in CSRC.rglob("*")
        if p.suffix in (".h", ".cc") and re.search(r"#include\s*[<\"]mpi", p.read_text())
    ]
    assert not bad


def test_one_function_selects():
    """Selection minimises a cost over table entries: only tuning/select.h does."""
    selecting = [
        str(p.relative_to(CSRC))
        for p in CSRC.rglob("*")
        if p.suffix in (".h", ".cc") and re.search(r"\bbestCost\b|\bmatchRule\s*\(\s*rules", code(p))
    ]
    assert selecting == ["tuning/select.h"], selecting


def test_cpp_files_stay_small():
    big = [
        f"{p.relative_to(CSRC)}: {n} lines"
        for p in CSRC.rglob("*")
        if p.suffix in (".h", ".cc") and "reduce" not in p.relative_to(CSRC).parts[:1]
        for n in [len(p.read_text().splitlines())]
        if n > 450
    ]
    assert not big, big


def python_files(exclude=()):
    for p in sorted(PACKAGE.rglob("*.py")):
        rel = p.relative_to(PACKAGE).as_posix()
        if not any(rel.startswith(e) for e in exclude):
            yield rel, p.read_text()


def test_frameworks_imported_only_in_frameworks():
    # bootstrap/store.py uses torch's store (torchrun's rendezvous), nothing else of torch;
    # _bench/peers.py runs torch.distributed and Horovod beside rdmacoll-bench --compare.
    allowed = ("rdmacoll.frameworks", "rdmacoll.bootstrap.store", "rdmacoll._bench.peers")
    bad = [
        f"{where}: {target}"
        for module, target, where, _ in python_imports()
        if _within(target, ("torch", "tensorflow", "keras", "tf_keras", "horovod")) and not _within(module, allowed)
    ]
    assert not bad, f"framework imports outside rdmacoll/frameworks/: {bad}"


def test_mpi_imported_only_by_bootstrap():
    # _bench/peers.py measures MPI as a peer of rdmacoll-bench --compare; nothing of
    # rdmacoll's own goes through it.
    allowed = ("rdmacoll.bootstrap.mpi", "rdmacoll._bench.peers")
    bad = [
        f"{where}: {target}"
        for module, target, where, _ in python_imports()
        if _within(target, ("mpi4py",)) and not _within(module, allowed)
    ]
    assert not bad, f"mpi4py imported outside rdmacoll/bootstrap/mpi.py: {bad}"


def test_every_setting_is_read_through_the_table():
    """No RDMACOLL_ variable is read from the environment by name outside the table's
    reader (rdmacoll/_settings.py); the C++ core reads none."""
    env_read = re.compile(r"(environ(\.get)?\s*[\[(]|getenv\s*\()\s*[\"']RDMACOLL_")
    bad = [rel for rel, text in python_files(exclude=("_settings.py",)) if env_read.search(text)]
    bad += [
        str(p.relative_to(CSRC))
        for p in CSRC.rglob("*")
        if p.suffix in (".h", ".cc") and re.search(r"getenv\s*\(", p.read_text())
    ]
    assert not bad, bad


# --------------------------------------------------------------------------- Python floors
#
# docs/design.md, "Python floors". Each module of rdmacoll/ is on one floor (the first
# prefix that matches); a module imports modules of its own floor (without a circle) and of
# the floors below it, never above. torch and tensorflow are side by side: neither imports
# the other.

PY_FLOORS = [
    ("core", "rdmacoll._core"),
    ("base", "rdmacoll._log"),
    ("base", "rdmacoll._settings"),
    ("base", "rdmacoll._version"),
    ("bootstrap", "rdmacoll.bootstrap"),
    ("torch", "rdmacoll.frameworks.torch"),
    ("tensorflow", "rdmacoll.frameworks.tensorflow"),
    ("frameworks", "rdmacoll.frameworks"),
    ("tools", "rdmacoll.__main__"),
    ("tools", "rdmacoll.cli"),
    ("tools", "rdmacoll.bench"),
    ("tools", "rdmacoll.doctor"),
    ("tools", "rdmacoll.run"),
    ("tools", "rdmacoll._bench"),
    ("api", "rdmacoll"),  # the package itself and every other module of it
]
PY_BELOW = {
    "core": set(),
    "base": {"core"},
    "bootstrap": {"core", "base"},
    "api": {"core", "base", "bootstrap"},
    "frameworks": {"core", "base", "bootstrap", "api"},
    "torch": {"core", "base", "bootstrap", "api", "frameworks"},
    "tensorflow": {"core", "base", "bootstrap", "api", "frameworks"},
    "tools": {"core", "base", "bootstrap", "api", "frameworks", "torch", "tensorflow"},
}
# What may be imported inside a function: optional dependencies, imported where they are
# used so that `import rdmacoll` needs none of them (and starts no MPI), and
# importlib.metadata, which the version lookup imports on first use (it is slow to import).
OPTIONAL = (
    "torch",
    "tensorflow",
    "keras",
    "tf_keras",
    "horovod",
    "mpi4py",
    "matplotlib",
    "ml_dtypes",
    "scipy",
    "pyverbs",
    "importlib.metadata",
)


def _within(module, prefixes):
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def floor_of(module):
    return next(floor for floor, prefix in PY_FLOORS if _within(module, (prefix,)))


def python_modules():
    """{module name: (path, is a package)} of every .py under rdmacoll/, and the compiled core."""
    modules = {"rdmacoll._core": (None, False)}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (p, package)
    return modules


def python_imports():
    """[(module, imported module, "file:line", inside a function or class)] of rdmacoll/,
    read with ast: relative imports resolved, `from package import submodule` as the
    submodule, `from module import name` as the module."""
    modules = python_modules()
    found = []
    for module, (path, package) in modules.items():
        if path is None:
            continue
        here = module.split(".") if package else module.split(".")[:-1]

        def visit(node, nested):
            for child in ast.iter_child_nodes(node):
                where = f"{path.relative_to(ROOT)}:{getattr(child, 'lineno', 0)}"
                if isinstance(child, ast.Import):
                    found.extend((module, a.name, where, nested) for a in child.names)
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = ".".join(here[: len(here) - child.level + 1] + ([child.module] if child.module else []))
                    else:
                        base = child.module
                    for a in child.names:
                        full = f"{base}.{a.name}"
                        found.append((module, full if full in modules else base, where, nested))
                else:
                    inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
                    visit(child, nested or inner)

        visit(ast.parse(path.read_text(), str(path)), False)
    return list(dict.fromkeys(found))  # (`from m import a, b` once)


def internal_imports():
    """[(module, imported module of rdmacoll, "file:line", nested)], the imported module
    being the longest prefix of the name that is a module (`rdmacoll._core.Sum` -> `_core`)."""
    modules = python_modules()
    edges = []
    for module, target, where, nested in python_imports():
        if not _within(target, ("rdmacoll",)):
            continue
        while target not in modules:
            target = target.rpartition(".")[0]
        if target != module:
            edges.append((module, target, where, nested))
    return edges


def test_python_modules_have_floors():
    """Every module is on a floor, and the floors' table names only floors it defines."""
    assert {floor for floor, _ in PY_FLOORS} == set(PY_BELOW)
    assert {floor_of(m) for m in python_modules()} <= set(PY_BELOW)


def test_python_imports_have_no_circle():
    """No import circle, lazy imports included: report each circle's modules and imports."""
    graph = {}
    for module, target, where, _ in internal_imports():
        graph.setdefault(module, {}).setdefault(target, where)
    # Tarjan's strongly connected components: each one with more than one module is a circle
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    report = [
        " <-> ".join(c)
        + ": "
        + "; ".join(f"{graph[a][b]} imports {b}" for a in c for b in sorted(graph.get(a, {})) if b in c)
        for c in circles
    ]
    assert not report, "import circles:\n" + "\n".join(report)


def test_python_imports_point_down():
    bad = [
        f"{where}: {module} ({floor_of(module)}) imports {target} ({floor_of(target)})"
        for module, target, where, _ in internal_imports()
        if floor_of(target) != floor_of(module) and floor_of(target) not in PY_BELOW[floor_of(module)]
    ]
    assert not bad, "imports running back up a floor:\n" + "\n".join(bad)


def test_no_import_hidden_in_a_function():
    """Imports are at the top of the module, where a reader sees them; inside a function or
    class only an optional dependency (OPTIONAL), imported where it is used."""
    bad = [
        f"{where}: {target}"
        for _, target, where, nested in python_imports()
        if nested and not _within(target, OPTIONAL)
    ]
    assert not bad, "imports inside a function or class:\n" + "\n".join(bad)
