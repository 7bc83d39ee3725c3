#!/usr/bin/env bash
# On the GPU machine: SASS evidence (cuobjdump) for each backend and compute-sanitizer
# (memcheck, racecheck, synccheck) on a small case of each runnable kernel variant.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
F=.device/fa4jit
echo '{"depth":128,"mask":"causal"}' > /tmp/c128.json
echo '{"depth":64,"mask":"none"}' > /tmp/c64.json
echo "== SASS"
for arch in sm_90a sm_100a sm_90; do
  $F gen --config /tmp/c128.json --arch $arch --cubin /tmp/k_$arch.cubin --log | grep -E "registers|spill" | head -2
  cuobjdump -sass /tmp/k_$arch.cubin > "$OUT/sass_$arch.txt" 2>&1
  printf '%s: ' $arch
  for op in HGMMA UTMALDG UTMASTG USETMAXREG UTCHMMA UTCBAR LDTM STTM HMMA LDSM LDGSTS STL LDL; do
    printf '%s=%s ' $op "$(grep -c "$op" "$OUT/sass_$arch.txt")"
  done; echo
done
echo "== compute-sanitizer"
for arch in sm_90a sm_90; do for cfg in /tmp/c128.json /tmp/c64.json; do
  for tool in memcheck racecheck synccheck; do
    r=$(timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $F check --require-gpu --config $cfg --arch $arch \
        --batch 1 --seqlen-q 150 --seqlen-k 270 --heads 4 --kv-heads 2 2>&1 | tail -3 | tr '\n' ' ')
    echo "$arch $(basename $cfg) $tool: ${r: -160}"
  done
done; done
