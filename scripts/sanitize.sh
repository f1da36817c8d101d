#!/usr/bin/env bash
# Build the core with AddressSanitizer + UBSan (CMake option RDMACOLL_SANITIZE) into a
# venv of its own and run the conformance and hostile-input tests under it.
#
#   scripts/sanitize.sh                 # the default test selection
#   scripts/sanitize.sh tests/test_x.py # other pytest arguments
#
# Python itself is not instrumented: libasan is preloaded (LD_PRELOAD, inherited by
# mpiexec and every rank) so that it comes first; leak detection is off (the interpreter's
# own allocations would drown the report). Any ASan or UBSan report aborts the process
# that made it, so the test that ran it fails and the report is in its output.
#
# Environment: SANITIZE_VENV (default /tmp/rdmacoll-sanitize-venv), SANITIZE_BUILD
# (default /tmp/rdmacoll-sanitize-build), PYTHON (default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SANITIZE_VENV:-/tmp/rdmacoll-sanitize-venv}"
BUILD="${SANITIZE_BUILD:-/tmp/rdmacoll-sanitize-build}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
pip install -q scikit-build-core pybind11 numpy mpi4py mpich pytest pytest-timeout ml_dtypes
pip install -q --no-build-isolation -C build-dir="$BUILD" \
  -C cmake.define.RDMACOLL_SANITIZE=ON "$ROOT"

LIBASAN="$(${CXX:-c++} -print-file-name=libasan.so)"
if [ ! -e "$LIBASAN" ]; then
  echo "sanitize.sh: libasan.so not found (install the compiler's sanitizer runtime)" >&2
  exit 2
fi
# (importing the core without the preload would abort: find the file instead)
CORE="$(ls "$(python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"/rdmacoll/_core*.so)"
if ! ldd "$CORE" | grep libasan > /dev/null; then  # (not -q: with pipefail, an early exit fails ldd)
  echo "sanitize.sh: the installed core is not linked against libasan" >&2
  exit 2
fi

if [ "$#" -eq 0 ]; then
  # Hostile input, every collective and dtype, bad input and mismatches, async, waits,
  # stall and timeline (test_allreduce's matrix adds ~70 launches: pass it explicitly).
  set -- "$ROOT/tests/test_fuzz_inputs.py" "$ROOT/tests/test_collectives.py" "$ROOT/tests/test_inputs.py" \
         "$ROOT/tests/test_errors.py" "$ROOT/tests/test_async.py" "$ROOT/tests/test_waiting.py" \
         "$ROOT/tests/test_stall.py" "$ROOT/tests/test_timeline.py"
fi

# libstdc++ too: Python does not link it, and ASan's __cxa_throw interceptor must find
# the real one when it starts (else the first C++ exception aborts: "real___cxa_throw").
export LD_PRELOAD="$LIBASAN $(${CXX:-c++} -print-file-name=libstdc++.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:detect_odr_violation=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The test hooks' module (_rdmacoll_testing, never installed) of this sanitized build:
# tests/conftest.py looks on PYTHONPATH first, then in the tree's build/.
export PYTHONPATH="$BUILD/hooks${PYTHONPATH:+:$PYTHONPATH}"
cd /tmp  # outside the source tree: the installed package is the one imported
exec python -m pytest -q -p no:cacheprovider "$@"
