#!/usr/bin/env bash
# On the GPU machine: two kernels A and B on the same rows, alternating, same run, no peers (for
# a change's own effect; compare against peers with bench/compare.py). An arm is
# "binary[:FA4JIT_TUNE[:bench args, '+' for spaces]]" with the binary in .device/, e.g.
# "fa4jit:persistent=1:--splits+1"; $A and $B default to the base build against
# this one. For each of $PASSES passes and each row ($ROWS, "B,H,S,D,mask;..."): TFLOP/s per call
# of A, then B. Build a base here from the commit before the change, e.g.:
#   git worktree add /tmp/base <commit> && cmake -S /tmp/base -B /tmp/base/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=RelWithDebInfo && ninja -C /tmp/base/build fa4jit
#   bash tools/device/pack.sh && strip -o .device/fa4jit_base /tmp/base/build/fa4jit
# Same binary, two schedulers: A=fa4jit:persistent=0 B=fa4jit:persistent=1.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib FA4JIT_CACHE_DIR=/tmp/fa4jit-cache
ROWS=${ROWS:-16,16,2048,128,none;16,16,2048,128,causal;4,16,8192,128,none;4,16,8192,128,causal}
A=${A:-fa4jit_base} B=${B:-fa4jit} PASSES=${PASSES:-2}

tflops() {  # arm B H S D mask: "per-call stream" TFLOP/s (median synchronized call, back-to-back)
  local bin tune args flops
  IFS=: read -r bin tune args <<<"$1"
  echo "{\"depth\":$5,\"mask\":\"$6\"}" > /tmp/ab.json
  flops=$(python3 -c "print(4*$2*$3*$4*$4*$5*(0.5 if '$6'=='causal' else 1.0))")
  FA4JIT_TUNE=$tune timeout 60 ".device/$bin" bench --json --config /tmp/ab.json --arch sm_90a --batch "$2" \
    --heads "$3" --seqlen-q "$4" --seqlen-k "$4" --iters 20 ${args//+/ } 2>/dev/null | tail -1 |
    python3 -c "import json,sys; j=json.load(sys.stdin); print(f\"{$flops/(j['ms']*1e9):.0f} {$flops/(j['ms_stream']*1e9):.0f}\")" \
    2>/dev/null || echo "0 0"
}

# Odd passes run A then B, even passes B then A (ABBA), so a drift over the run or a bias of the
# second run of a pair falls on both arms alike.
echo "| row | pass | A: $A (call stream) | B: $B (call stream) | B / A call | B / A stream |"
echo "|---|---|---|---|---|---|"
IFS=';' read -ra rows <<<"$ROWS"
for pass in $(seq 1 "$PASSES"); do
  for row in "${rows[@]}"; do
    IFS=, read -r b h s d m <<<"$row"
    if (( pass % 2 )); then
      read -r ta sa <<<"$(tflops "$A" "$b" "$h" "$s" "$d" "$m")"
      read -r tb sb <<<"$(tflops "$B" "$b" "$h" "$s" "$d" "$m")"
    else
      read -r tb sb <<<"$(tflops "$B" "$b" "$h" "$s" "$d" "$m")"
      read -r ta sa <<<"$(tflops "$A" "$b" "$h" "$s" "$d" "$m")"
    fi
    echo "| $b,$h,$s,$d $m | $pass | $ta $sa | $tb $sb | $(python3 -c "print(f'{$tb / max($ta, 1):.3f} | {$sb / max($sa, 1):.3f}')") |"
  done
done
