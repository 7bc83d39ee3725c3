#!/usr/bin/env bash
# Runs on the GPU machine: decode-shape sweep of fa4jit configs (stages, splits) with `bench`.
# CFGS: JSON configs separated by '|'; SPLITS: split counts (0: automatic) or CASES; PAGE: page size.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache
IFS='|' read -ra cfgs <<<"${CFGS:-{\"depth\":128,\"mask\":\"none\"\}}"
for cfg in "${cfgs[@]}"; do
  echo "$cfg" > /tmp/dc.json
  # CASES: "B,Sq,Sk,splits ..." (each shape with its own split counts); else every shape x SPLITS.
  cases=${CASES:-}
  if [ -z "$cases" ]; then
    for shape in "8,1,32768" "64,1,4096" "1,1,131072" "8,16,32768"; do
      for sp in ${SPLITS:-0}; do cases="$cases $shape,$sp"; done
    done
  fi
  for case_ in $cases; do
    IFS=, read -r B SQ SK splits <<<"$case_"
    shape="$B $SQ $SK"
    for lay in ${LAYOUTS:-bhsd}; do  # bhsd: the peers' layout; bshd: (B, S, H, D)
      [ "$lay" = bhsd ] && lay=--kv-bhsd; [ "$lay" = bshd ] && lay=
      out=$(.device/fa4jit bench --json --config /tmp/dc.json --arch "${ARCH:-sm_90a}" --batch "$B" --heads 32 \
            --kv-heads 8 --seqlen-q "$SQ" --seqlen-k "$SK" --iters 50 --splits "$splits" --pack-gqa \
            ${PAGE:+--page-size $PAGE} $lay 2>&1 | tail -1)
      CFG="$cfg" SHAPE="$shape" python3 -c '
import json, os, sys
t = sys.argv[1]
try:
    j = json.loads(t)
    print(os.environ["CFG"], os.environ["SHAPE"], j.get("kv_bhsd"), "splits", j["num_splits"], "%.0f us" % (j["ms"] * 1e3),
          "%.2f TB/s" % j["kv_TBps"], "stream %.0f us" % (j["ms_stream"] * 1e3), "%.2f TB/s" % j["kv_TBps_stream"])
except Exception:
    print(os.environ["CFG"], os.environ["SHAPE"], t[:200])' "$out"
    done
  done
done
