#!/usr/bin/env bash
# On the GPU machine: a kernel change checked and timed in one call. The GPU tests ($TESTS: gtest
# filters, space-separated, each under its own limit), then the issue's prefill rows with the
# fa4jit $VARIANTS beside the peers in the same run (bench/compare.py), then the Hopper matrix
# under the other scheduler ($OTHER_TUNE, default persistent=0: the per-tile grid, which packed
# decode, deep heads and score-mods run by default). Logs and JSON to $OUT.
set -uo pipefail
set -f  # the filters' '*' are gtest's, not the shell's
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache FA4JIT=$PWD/.device/fa4jit FA4JIT_CLI_PATH=$PWD/.device/fa4jit PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LIMIT=${TEST_LIMIT:-200} bash tools/device/features.sh ${TESTS:-GpuFeatures* GpuAttention*:GpuVariants*:GpuMath*:GpuCliRun*:GpuBlackwellHost*:ApiExample*}
echo "== prefill"
timeout "${BENCH_LIMIT:-200}" python3 bench/compare.py ${FLEX:---no-flex} --variants "${VARIANTS:-sm90a=sm_90a}" \
  ${ROWS:+--rows "$ROWS"} --out "$OUT/compare.json" > "$OUT/compare.log" 2>&1
grep "^|" "$OUT/compare.log"; tail -2 "$OUT/compare.log" | grep -v "^|"
if [ "${OTHER_LIMIT:-60}" -gt 0 ]; then
  echo "== ${OTHER_TUNE:=persistent=0} (GpuAttention.Hopper*)"
  FA4JIT_TUNE=$OTHER_TUNE timeout "${OTHER_LIMIT:-60}" .device/fa4jit_tests --gtest_filter='GpuAttention.Hopper*' \
    --gtest_brief=1 > "$OUT/other_scheduler.log" 2>&1
  echo "rc=$? $(tail -1 "$OUT/other_scheduler.log")"
fi
