#!/usr/bin/env bash
# On the GPU machine: one session's benchmark and sanitizer pass, each step under its own limit,
# logs and JSON to $OUT: decode vs SDPA, the prefill rows vs peers (+ D64 at BM 128),
# deep heads vs peers, compute-sanitizer on the deep-head and many-split kernels.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache FA4JIT=$PWD/.device/fa4jit PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
F=.device/fa4jit
echo "== decode"
timeout 150 python3 bench/decode.py --archs sm90a=sm_90a,sm80=sm_90 --out "$OUT/decode.json" > "$OUT/decode.log" 2>&1
grep "^|" "$OUT/decode.log"
echo "== prefill"
timeout 210 python3 bench/compare.py --variants 'sm90a=sm_90a,d64bm128=sm_90a::{"depth":64;"BM":128}' \
  --out "$OUT/compare.json" > "$OUT/compare.log" 2>&1
grep "^|" "$OUT/compare.log"
echo "== deep heads"
timeout 130 python3 bench/compare.py --no-flex --variants sm90a=sm_90a --rows '4,16,4096,96;4,16,4096,192;4,16,4096,256' \
  --out "$OUT/deep.json" > "$OUT/deep.log" 2>&1
grep "^|" "$OUT/deep.log"
echo "== compute-sanitizer"
for cfg in '{"depth":96,"mask":"causal"}' '{"depth":256,"mask":"none"}' '{"depth":192,"mask":"causal","group":4,"pack_gqa":true}'; do
  echo "$cfg" > /tmp/san.json
  shape="--seqlen-q 150 --seqlen-k 270 --heads 4 --kv-heads 2"
  case "$cfg" in *pack_gqa*) shape="--seqlen-q 1 --seqlen-k 3000 --splits 40 --pack-gqa --heads 8 --kv-heads 2";; esac
  for tool in memcheck racecheck; do
    r=$(timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $F check --require-gpu --config /tmp/san.json \
        --arch sm_90a --batch 1 $shape 2>&1 | tail -3 | tr '\n' ' ')
    echo "$cfg $tool: ${r: -200}"
  done
done
