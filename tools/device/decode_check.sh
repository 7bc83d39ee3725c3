#!/usr/bin/env bash
# On the GPU machine: the decode path end to end in one call. GPU tests of the variants (stream-K
# included), compute-sanitizer on a stream-K decode (opt-in, FA4JIT_TUNE=persistent=2) whose tiles
# are cut into many segments, then bench/decode.py with the per-tile grid (default) and stream-K
# beside SDPA in the same run. Logs and JSON to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache FA4JIT=$PWD/.device/fa4jit FA4JIT_CLI_PATH=$PWD/.device/fa4jit PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
F=.device/fa4jit
LIMIT=${TEST_LIMIT:-200} bash tools/device/features.sh ${TESTS:-'GpuFeatures*'}
echo "== compute-sanitizer (stream-K decode)"
echo '{"depth":128,"mask":"causal","group":4,"pack_gqa":true}' > /tmp/sk.json
for tool in memcheck racecheck synccheck; do
  r=$(FA4JIT_TUNE=persistent=2 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $F check --require-gpu --config /tmp/sk.json \
      --arch sm_90a --batch 5 --seqlen-q 1 --seqlen-k 4100 --heads 8 --kv-heads 2 --pack-gqa --splits 0 2>&1 | tail -3 | tr '\n' ' ')
  echo "$tool: ${r: -220}"
done
echo "== decode"
timeout ${BENCH_LIMIT:-200} python3 bench/decode.py --archs "${ARCHS:-grid=sm_90a,streamk=sm_90a:persistent=2}" \
  ${SHAPES:+--shapes "$SHAPES"} --out "$OUT/decode.json" > "$OUT/decode.log" 2>&1
grep "^|" "$OUT/decode.log"; tail -3 "$OUT/decode.log" | grep -v "^|"
