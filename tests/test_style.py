"""The tree is formatted and linted as configured (pyproject.toml's [tool.ruff] and
[tool.mypy], .clang-format): the same checks a developer runs before committing, in
seconds. The tools come with the test extras, pinned, so that a new release cannot
reformat the tree under CI. A failure prints the tool's own report: run the command it
names (e.g. `ruff format .`, `clang-format -i FILE`) to fix it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    """The test extras' copy of a tool (beside this interpreter), else one on PATH."""
    here = BIN / name
    path = str(here) if here.exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install '.[test]' brings it")
    return path


def _run(args: list[str]) -> None:
    res = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=240)
    report = (res.stdout + res.stderr).strip()
    assert res.returncode == 0, (
        f"`{' '.join(Path(args[0]).name if i == 0 else a for i, a in enumerate(args))}` failed:\n{report[-6000:]}"
    )


def test_ruff_lint():
    _run([_tool("ruff"), "check", "--no-cache", "."])


def test_ruff_format():
    _run([_tool("ruff"), "format", "--check", "--no-cache", "."])


def test_clang_format():
    sources = subprocess.run(
        ["git", "ls-files", "csrc/*.cc", "csrc/*.h"], cwd=REPO, capture_output=True, text=True
    ).stdout.split()
    if not sources:  # not a git checkout (an sdist): list the files ourselves
        sources = [str(p.relative_to(REPO)) for p in (REPO / "csrc").rglob("*") if p.suffix in (".cc", ".h")]
    assert len(sources) > 50, f"csrc/ should hold the core's sources, found {len(sources)}"
    _run([_tool("clang-format"), "--dry-run", "-Werror", *sources])


def test_mypy_public_api():
    # the files are listed in pyproject.toml; no cache directory is left in the tree
    _run([_tool("mypy"), "--no-incremental", "--cache-dir", "/dev/null"])
