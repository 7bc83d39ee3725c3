#!/usr/bin/env bash
# Compiles the sm90a dev harness over {bf16, fp16} x {d64, d128} x {None, Causal} x
# {Identity, Softcap} x {simple, overlap, overlap+pingpong} (+ stage counts), reports ptxas
# registers/spills and checks the PTX for wgmma / TMA / setmaxnreg. Run from the repo root.
# Exit status != 0 on any compile error, spill, C7508 (setmaxnreg ignored) or wgmma
# serialization warning, or missing instruction.
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/fa4_sm90a_matrix}
mkdir -p "$OUT"
NVCC=${NVCC:-nvcc}
BASE="-std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates"
fail=0
run() {  # name, flags...
  local name=$1; shift
  local log="$OUT/$name.log"
  if ! $NVCC $BASE -cubin -Xptxas -v "$@" templates/sm90a/dev/harness.cu -o "$OUT/$name.cubin" >"$log" 2>&1; then
    echo "FAIL compile  $name"; cat "$log"; fail=1; return
  fi
  local regs spill warn
  regs=$(grep -o "Used [0-9]* registers" "$log" | head -1)
  spill=$(grep -o "[0-9]* bytes spill stores" "$log" | head -1)
  warn=$(grep -i "warning\|C7508\|serialized" "$log" || true)
  if ! $NVCC $BASE -ptx "$@" templates/sm90a/dev/harness.cu -o "$OUT/$name.ptx" >>"$log" 2>&1; then
    echo "FAIL ptx      $name"; fail=1; return
  fi
  local nw nt nm
  nw=$(grep -c "wgmma.mma_async" "$OUT/$name.ptx")
  nt=$(grep -c "cp.async.bulk.tensor" "$OUT/$name.ptx")
  nm=$(grep -c "setmaxnreg" "$OUT/$name.ptx")
  local status=ok
  [[ "$spill" != "0 bytes spill stores" ]] && status=SPILL
  [[ -n "$warn" ]] && status=WARN
  [[ $nw -eq 0 || $nt -eq 0 || $nm -ne 2 ]] && status=MISSING
  [[ $status != ok ]] && fail=1
  printf "%-7s %-44s %-22s %-22s wgmma=%-3s tma=%-2s setmaxnreg=%s\n" "$status" "$name" "$regs" "$spill" "$nw" "$nt" "$nm"
  [[ -n "$warn" ]] && echo "$warn"
}
for dt in bf16 fp16; do
  for d in 64 128; do
    for m in none causal; do
      for sm in id softcap; do
        for sched in simple overlap pingpong; do
          f=(-DFA4_DEPTH=$d)
          [[ $dt == fp16 ]] && f+=(-DFA4_FP16)
          [[ $m == causal ]] && f+=(-DFA4_CAUSAL)
          [[ $sm == softcap ]] && f+=(-DFA4_SOFTCAP)
          case $sched in
            simple) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=0 -DFA4_SM90A_PINGPONG=0) ;;
            overlap) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=1 -DFA4_SM90A_PINGPONG=0) ;;
            pingpong) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=1 -DFA4_SM90A_PINGPONG=1) ;;
          esac
          run "${dt}_d${d}_${m}_${sm}_${sched}" "${f[@]}"
        done
      done
    done
  done
done
# Stage counts that fit in 227 KB: d128 S=3, d64 S=3,4; kBN = 64.
run bf16_d128_none_id_pingpong_S3 -DFA4_DEPTH=128 -DFA4_STAGES=3
run bf16_d64_causal_id_pingpong_S4 -DFA4_DEPTH=64 -DFA4_STAGES=4 -DFA4_CAUSAL
run bf16_d128_none_id_pingpong_BN64 -DFA4_DEPTH=128 -DFA4_BN=64
run bf16_d128_causal_id_simple+pingpong -DFA4_CAUSAL -DFA4_SM90A_INTRA_WG_OVERLAP=0 -DFA4_SM90A_PINGPONG=1
run bf16_d128_causal_id_cfgsimple -DFA4_CAUSAL -DFA4_CFG_SIMPLE   # expect wgmma=16
echo "logs, cubins and PTX in $OUT"
exit $fail
