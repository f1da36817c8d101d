#!/usr/bin/env bash
# The GPU check (issue 33) on a machine with an NVIDIA GPU, PyTorch and CuPy (the device
# machine of docs/gpu.md): builds the core there (CMake, no wheel: nothing to fetch), then
# scripts/gpu_check.py under torchrun with 2 and 4 ranks and benchmarks/gpu_staging.py with
# 2, every rank on the one GPU. Output: stdout and $OUT/gpu_check.log (OUT defaults to
# /tmp/gpu_check). Exit status 1 when a check failed. Takes 3-5 minutes.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
exec > >(tee "$LOG") 2>&1
PY=${PYTHON:-python3}
stage() { echo "== $1 ($(($(date +%s) - T0)) s)"; }
T0=$(date +%s)
nvidia-smi -L || true
$PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
$PY -c 'import cupy; print("cupy", cupy.__version__)' || echo "no cupy: its checks skip"
stage build
BUILD=/tmp/rdmacoll-gpu-build
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRDMACOLL_TESTING=OFF \
  -DPython_EXECUTABLE="$(command -v "$PY")" -Dpybind11_DIR="$($PY -m pybind11 --cmakedir)" >"$OUT/cmake.log" 2>&1 \
  && ninja -C "$BUILD" _core >"$OUT/ninja.log" 2>&1 || { tail -30 "$OUT/cmake.log" "$OUT/ninja.log"; exit 2; }
cp "$BUILD"/_core*.so rdmacoll/
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 RDMACOLL_TIMEOUT=${RDMACOLL_TIMEOUT:-60} GPU_CHECK_TRACE=1
$PY -m rdmacoll doctor | sed -n '/^GPU/,/^frameworks/p'
status=0
stage "2 ranks"
timeout 180 $PY -m torch.distributed.run --nproc_per_node=2 scripts/gpu_check.py || status=1
stage "the staging benchmark, 2 ranks"
timeout 90 $PY -m torch.distributed.run --nproc_per_node=2 benchmarks/gpu_staging.py || status=1
stage "4 ranks"
timeout 180 $PY -m torch.distributed.run --nproc_per_node=4 scripts/gpu_check.py || status=1
stage "done (status $status)"
exit $status
