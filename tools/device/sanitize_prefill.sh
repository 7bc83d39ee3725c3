#!/usr/bin/env bash
# On the GPU machine: compute-sanitizer (memcheck, racecheck, synccheck) on small cases of the
# default sm90a prefill kernels (persistent): d128 causal, d128 with KV splits (persistent walker
# over (tile, split) pairs + fa4_combine), d64 causal (3 consumer warpgroups), a varlen batch, and
# a persistent unmasked launch with a split tail (134 tiles: 132 whole, 2 split 5 ways + combine),
# and two causal launches with more tiles than SMs, so cross-tile CTAs (SmemLayout::kCrossTile) run
# a pending tile into the next one: 144 tiles, and 320 tiles of which most see no key (Sq > Sk).
# The d64 causal case runs per-warpgroup P V spans (default at kBM 192); the last forces them on
# d128 (the cross-tile loop) with the diagonal 64 keys off the tiles.
# A case is "FA4JIT_TUNE depth mask fa4jit-check-args" ('-': default tuning).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib FA4JIT_CACHE_DIR=/tmp/fa4jit-cache
F=.device/fa4jit
cases=(
  '- 128 causal --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700'
  'persistent=1 128 none --batch 1 --heads 4 --seqlen-q 200 --seqlen-k 3000 --splits 3'
  '- 64 causal --batch 2 --heads 4 --seqlen-q 500 --seqlen-k 900'
  '- 128 causal --heads 4 --seqlens-q 300 0 129 --seqlens-k 300 50 700'
  'persistent=1 128 none --batch 67 --heads 2 --seqlen-q 121 --seqlen-k 637'
  '- 128 causal --batch 3 --heads 16 --seqlen-q 384 --seqlen-k 384'
  '- 128 causal --batch 2 --heads 40 --seqlen-q 400 --seqlen-k 150'
  'wg_spans=1 128 causal --batch 2 --heads 4 --seqlen-q 515 --seqlen-k 579'
)
for c in "${cases[@]}"; do
  read -r tune d m rest <<<"$c"
  [[ $tune == - ]] && tune=""
  export FA4JIT_TUNE=$tune
  echo "{\"depth\":$d,\"mask\":\"$m\"}" > /tmp/san.json
  for tool in memcheck racecheck synccheck; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $F check --require-gpu --config /tmp/san.json \
      --arch sm_90a $rest > /tmp/san.log 2>&1
    rc=$?
    echo "${tune:-default} d$d $m $rest | $tool rc=$rc: $(tail -3 /tmp/san.log | tr '\n' ' ' | tail -c 200)"
  done
done
