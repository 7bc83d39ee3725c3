#!/usr/bin/env bash
# Runs on the GPU machine (repo root): every variants GPU test, the regression suite, compute-sanitizer
# on the feature paths, the decode comparison with SDPA and the prefill comparison. Logs to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache FA4JIT_CLI_PATH=$PWD/.device/fa4jit PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; F=.device/fa4jit
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Compile the decode kernels while the tests run.
LIMIT=150 HEAD=14 bash tools/device/features.sh 'GpuFeatures.*:GpuCliRun.*' 'GpuAttention*:GpuVariants*:GpuMath*:GpuBlackwellHost*:ApiExample*'
echo "== compute-sanitizer (sm90a and sm80: paged + packed + varlen + split)"
echo '{"depth":128,"mask":"causal"}' > /tmp/s.json
for arch in sm_90a sm_90; do for tool in memcheck racecheck synccheck; do
  r=$(timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $F check --require-gpu --config /tmp/s.json --arch $arch \
      --seqlens-q 5,0,40 --seqlens-k 300,17,130 --page-size 64 --heads 8 --kv-heads 2 --pack-gqa --splits 3 --sinks 2>&1 | tail -2 | tr '\n' ' ')
  echo "$arch $tool: ${r: -150}"
done; done
echo "== decode"
FA4JIT=$F timeout 240 python3 bench/decode.py --out "$OUT/decode.json" 2>&1 | grep -v Warning | tail -8
if [ "${PREFILL:-1}" = 1 ]; then
  echo "== prefill"
  FA4JIT=$F timeout 200 python3 bench/compare.py --no-flex --variants sm90a=sm_90a --out "$OUT/compare.json" 2>&1 | tail -11
fi
