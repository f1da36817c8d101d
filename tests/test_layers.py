"""The layers of shared/DESIGN.md, checked in the sources: each layer includes only the
ones below it, transports are named only in csrc/transport/, algorithms reach peers only
through comm/, one function selects algorithms, frameworks and MPI are imported only
where they belong, and no C++ file outside the kernels grows past 450 lines."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
PACKAGE = ROOT / "rdmacoll"

if not CSRC.is_dir():
    pytest.skip("the C++ sources are not next to the tests", allow_module_level=True)

# Layer -> the layers it may include (itself implied). reduce/ is a leaf library of kernels.
BELOW = {
    "common": set(),
    "reduce": {"common"},
    "transport": {"common"},
    "comm": {"common", "transport", "reduce"},
    "algorithms": {"common", "transport", "comm", "reduce"},
    "tuning": {"common", "transport", "comm", "reduce", "algorithms"},
    "runtime": {"common", "transport", "comm", "reduce", "algorithms", "tuning"},
    "python": {"common", "transport", "comm", "reduce", "algorithms", "tuning", "runtime"},
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
    # bootstrap/store.py uses torch's store (torchrun's rendezvous), nothing else of torch
    pattern = re.compile(r"^\s*(import|from)\s+(torch|tensorflow|keras|horovod)\b", re.M)
    bad = [rel for rel, text in python_files(exclude=("frameworks/", "bootstrap/store.py")) if pattern.search(text)]
    assert not bad, f"framework imports outside rdmacoll/frameworks/: {bad}"


def test_mpi_imported_only_by_bootstrap():
    # frameworks/peers.py measures MPI as a peer of rdmacoll-bench --compare; nothing of
    # rdmacoll's own goes through it.
    pattern = re.compile(r"^\s*(import|from)\s+mpi4py\b", re.M)
    bad = [
        rel for rel, text in python_files(exclude=("bootstrap/mpi.py", "frameworks/peers.py")) if pattern.search(text)
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
