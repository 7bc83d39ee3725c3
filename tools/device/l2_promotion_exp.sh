#!/usr/bin/env bash
# On the GPU machine: TMA L2 promotion 128B (default) against 256B, decode and prefill, two passes.
# Needs .device/fa4jit_p256, built here with the override (runtime/tma.cpp):
#   cmake -S . -B /tmp/p256 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#     -DCMAKE_CXX_FLAGS=-DFA4JIT_L2_PROMOTION=CU_TENSOR_MAP_L2_PROMOTION_L2_256B && ninja -C /tmp/p256 fa4jit
#   bash tools/device/pack.sh && strip -o .device/fa4jit_p256 /tmp/p256/fa4jit
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib FA4JIT_CACHE_DIR=/tmp/fa4jit-cache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
for pass in a b; do
  for bin in fa4jit fa4jit_p256; do
    echo "== decode $bin pass $pass"
    FA4JIT=.device/$bin timeout 120 python3 bench/decode.py --archs $bin=sm_90a --shapes "64,1,4096;8,1,32768;1,1,131072" --out $OUT/dec_${bin}_$pass.json 2>&1 | grep "^| [0-9]"
  done
done
for bin in fa4jit fa4jit_p256; do
  for m in none causal; do
    echo "{\"depth\":128,\"mask\":\"$m\"}" > /tmp/pf.json
    r=$(.device/$bin bench --json --config /tmp/pf.json --arch sm_90a --batch 16 --heads 16 --seqlen-q 2048 --seqlen-k 2048 --iters 30 2>/dev/null | tail -1)
    echo "prefill $bin $m S2048 ms per call / stream: $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['ms'], d['ms_stream'])")"
    r=$(.device/$bin bench --json --config /tmp/pf.json --arch sm_90a --batch 4 --heads 16 --seqlen-q 8192 --seqlen-k 8192 --iters 20 2>/dev/null | tail -1)
    echo "prefill $bin $m S8192 ms per call / stream: $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['ms'], d['ms_stream'])")"
  done
done
