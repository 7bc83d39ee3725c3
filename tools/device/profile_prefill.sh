#!/usr/bin/env bash
# On the GPU machine: Nsight Compute on one prefill shape, our fa4_fwd against cuDNN's kernel
# through SDPA, one report each under $OUT. SHAPE="B,H,S,D" (default the issue's short row),
# MASK=causal|none.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
F=.device/fa4jit
IFS=, read -r B H S D <<<"${SHAPE:-16,16,2048,128}"
MASK=${MASK:-causal}
echo "{\"depth\":$D,\"mask\":\"$MASK\"}" > /tmp/pp.json
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy
  --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
args="bench --config /tmp/pp.json --arch sm_90a --batch $B --heads $H --seqlen-q $S --seqlen-k $S --warmup 1 --iters 1"
$F $args >/dev/null  # compile outside the profiler
# Launches: first, warm-up, timed, stream: profile the timed one (as profile_decode.sh).
timeout 200 ncu --clock-control none --kernel-name regex:^fa4_fwd_ --launch-skip 2 --launch-count 1 $SECTIONS \
  $F $args > "$OUT/ncu_prefill_ours.txt" 2>&1
timeout 200 ncu --clock-control none --profile-from-start off $SECTIONS \
  python3 tools/device/sdpa_call.py "$B" "$H" "$H" "$S" "$S" "$D" "$MASK" > "$OUT/ncu_prefill_cudnn.txt" 2>&1
for f in ours cudnn; do
  echo "== $f $B,$H,$S,$D $MASK"
  grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Grid Size|Block Size|Dynamic Shared|Achieved Occupancy|Issue Slots Busy|Executed Ipc Active|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|L2 Hit Rate" \
    "$OUT/ncu_prefill_$f.txt" | head -40
done
