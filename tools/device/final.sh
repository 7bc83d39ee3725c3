#!/usr/bin/env bash
# The full device session: every GPU test, the persistent sm90a mode (tested first with a short
# timeout so a hang cannot cost the rest), cache verify with GPU loading, and the peer comparison.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache PYTHONUNBUFFERED=1 FA4JIT_CLI_PATH=$PWD/.device/fa4jit
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== persistent sm90a correctness"
FA4JIT_TUNE=persistent=1 timeout 240 .device/fa4jit_tests \
  --gtest_filter='GpuAttention.Hopper*:GpuVariants*' --gtest_brief=1 > "$OUT/persistent_tests.log" 2>&1
prc=$?; tail -4 "$OUT/persistent_tests.log"; echo "persistent tests rc=$prc"
echo "== cache verify with GPU loading"
.device/fa4jit prewarm --preset default --arch sm_80,sm_90,sm_90a,sm_100a --jobs 16 | tail -1
.device/fa4jit cache verify | tail -2
variants="sm90a=sm_90a,sm80=sm_90"
[ $prc -eq 0 ] && variants="sm90a=sm_90a,sm90a_persistent=sm_90a:persistent=1,sm80=sm_90"
bash tools/device/gpu_checks.sh 'Gpu*' "$variants"
