#!/usr/bin/env bash
# Runs on the GPU machine (repo root): GPU tests against the float64 reference, one `check`,
# and the peer comparison. Logs go to $OUT. Usage: gpu_checks.sh [gtest filter] [bench variants|none]
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache PYTHONUNBUFFERED=1 FA4JIT_CLI_PATH=$PWD/.device/fa4jit
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
filter=${1:-GpuAttention.*}
variants=${2:-sm90a=sm_90a,sm80=sm_90}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
.device/fa4jit info
date -u; git log -1 --format='commit %h %s' 2>/dev/null
timeout 420 .device/fa4jit_tests --gtest_filter="$filter" --gtest_brief=1 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
echo "gpu tests rc=${PIPESTATUS[0]}"
.device/fa4jit check --require-gpu --batch 2 --seqlen 1024 --heads 16 --kv-heads 4
if [ "$variants" != none ]; then
  FA4JIT=.device/fa4jit timeout 420 python3 bench/compare.py --variants "$variants" --out "$OUT/compare.json" 2>&1 | tail -14
fi
