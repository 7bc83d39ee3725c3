#!/usr/bin/env bash
# Runs on the GPU machine (repo root): the variant features' GPU tests, one filter at a time with
# its own time limit, logs to $OUT. Usage: features.sh [gtest filter ...] (default: all Gpu tests)
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache FA4JIT_CLI_PATH=$PWD/.device/fa4jit
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
limit=${LIMIT:-150}
filters=("$@"); [ ${#filters[@]} -eq 0 ] && filters=('Gpu*:ApiExample*')
# Compile every kernel the tests need first, in parallel (16 cores), so test time is run time.
for f in "${filters[@]}"; do
  name=$(echo "$f" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-60)
  start=$(date +%s)
  timeout "$limit" .device/fa4jit_tests --gtest_filter="$f" --gtest_brief=1 >"$OUT/$name.log" 2>&1
  rc=$?
  echo "== $f rc=$rc $(( $(date +%s) - start ))s: $(grep -c 'Failure' "$OUT/$name.log") failures"
  grep -E "^\[  (FAILED|PASSED)|Failure|rel_l2=" "$OUT/$name.log" | grep -v "^\[  PASSED" | cut -c1-260 | head -${HEAD:-12}
done
