#!/usr/bin/env bash
# Compiles every sm100a variant of dev/harness.cu (no GPU needed) and checks each one:
#   nvcc -cubin -Xptxas -v : 0 bytes spill stores/loads, static + dynamic smem <= 232448, no warnings
#   nvcc -ptx              : contains tcgen05.mma, tcgen05.ld, tcgen05.st, tcgen05.commit,
#                            cp.async.bulk.tensor, setmaxnreg; reads FwdParams::page_table,
#                            kv_box_rows, o_partial, lse_partial, num_splits (the run-time paged and
#                            split-KV paths are in every kernel); packed GQA: the 5-D Q load and O store
#   NVRTC (as the runtime) : compiles with -I templates only (skipped if libnvrtc is missing)
# Variants: dtype x depth x mask (None, Causal, SlidingWindow, And<Causal,Chunked>, custom with and
# without a block snippet) x score-mod, then packed GQA (group 4 and 8) x depth x {None, Causal,
# custom+block} x {Identity, user snippet}.
# One line per variant: registers, smem, spills, nvcc and NVRTC compile time. Exit 1 on any failure.
# Usage: compile_matrix.sh [-j JOBS] [-q]   (-q: bf16 only)
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
TEMPLATES="$ROOT/templates"
JOBS=$(nproc)
QUICK=0
while [ $# -gt 0 ]; do
  case "$1" in
    -j) JOBS="$2"; shift 2 ;;
    -q) QUICK=1; shift ;;
    *) echo "usage: $0 [-j JOBS] [-q]" >&2; exit 2 ;;
  esac
done
NVCC="${NVCC:-nvcc}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
WORK="$(mktemp -d /tmp/fa4_sm100a_matrix.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
SMEM_LIMIT=232448

# Byte offsets of the FwdParams fields the paged / split paths read (PTX: ld.param [%rd+OFF]).
cat >"$WORK/offsets.cpp" <<EOF2
#include <cstddef>
#include <cstdio>
#include "common/params.h"
int main() {
  std::printf("%zu %zu %zu %zu %zu\\n", offsetof(fa4::FwdParams, page_table), offsetof(fa4::FwdParams, kv_box_rows),
              offsetof(fa4::FwdParams, o_partial), offsetof(fa4::FwdParams, lse_partial),
              offsetof(fa4::FwdParams, num_splits));
}
EOF2
g++ -std=c++17 -I"$TEMPLATES" "$WORK/offsets.cpp" -o "$WORK/offsets" || { echo "cannot build offsets.cpp" >&2; exit 1; }
PARAM_OFFSETS="$("$WORK/offsets")"

NVRTC_BIN=""
if g++ -std=c++17 -O1 -I"$CUDA_HOME/include" "$HERE/nvrtc_check.cpp" -L"$CUDA_HOME/lib64" -lnvrtc \
     -o "$WORK/nvrtc_check" 2>/dev/null; then
  NVRTC_BIN="$WORK/nvrtc_check"
fi

DTYPES="bf16 fp16"; [ "$QUICK" = 1 ] && DTYPES="bf16"
MASKS=(None Causal SlidingWindow CausalAndChunked CustomBlock Custom)
MODS=(Identity Softcap Alibi UserSnippet)

variants=()
for dt in $DTYPES; do for d in 128 64; do for m in 0 1 2 3 4 5; do for s in 0 1 2 3; do
  variants+=("$dt $d $m $s 1")
done; done; done; done
for g in 4 8; do for d in 128 64; do for m in 0 1 4; do for s in 0 3; do
  variants+=("bf16 $d $m $s $g")
done; done; done; done
[ "$QUICK" = 1 ] || variants+=("fp16 128 1 0 4" "fp16 64 4 3 8")

one() {
  local dt=$1 d=$2 m=$3 s=$4 g=$5
  local name="${dt}_d${d}_${MASKS[$m]}_${MODS[$s]}"
  local defs="-DFA4_DEPTH=$d -DFA4_MASK=$m -DFA4_SCORE_MOD=$s -DFA4_PACK=$g"
  [ "$g" = 1 ] || name="${name}_pack$g"
  [ "$dt" = fp16 ] && defs="$defs -DFA4_FP16"
  local out="$WORK/$name"
  local t0 t1 rc=0 why=""
  t0=$(date +%s.%N)
  if ! "$NVCC" -std=c++17 -gencode=arch=compute_100a,code=sm_100a -cubin -Xptxas -v -I "$TEMPLATES" $defs \
       "$HERE/harness.cu" -o "$out.cubin" >"$out.log" 2>&1; then
    echo "FAIL $name nvcc -cubin: $(grep -m1 -i error "$out.log")" >"$out.res"; return
  fi
  t1=$(date +%s.%N)
  "$NVCC" -std=c++17 -gencode=arch=compute_100a,code=sm_100a -ptx -I "$TEMPLATES" $defs "$HERE/harness.cu" \
    -o "$out.ptx" >>"$out.log" 2>&1 || { echo "FAIL $name nvcc -ptx" >"$out.res"; return; }
  for ins in tcgen05.mma tcgen05.ld tcgen05.st tcgen05.commit cp.async.bulk.tensor setmaxnreg; do
    grep -q "$ins" "$out.ptx" || { rc=1; why="$why missing:$ins"; }
  done
  local off
  for off in $PARAM_OFFSETS; do
    grep -qE "ld\.param\.[a-z0-9]+[[:space:]]+%[a-z0-9]+, \[[^]]*\+$off\]" "$out.ptx" || { rc=1; why="$why no-param+$off"; }
  done
  if [ "$g" != 1 ]; then
    grep -q "cp.async.bulk.tensor.5d.shared::cluster.global" "$out.ptx" || { rc=1; why="$why missing:5d-load"; }
    grep -q "cp.async.bulk.tensor.5d.global.shared::cta" "$out.ptx" || { rc=1; why="$why missing:5d-store"; }
  fi
  local regs spill_st spill_ld smem_static dyn
  regs=$(grep -oE 'Used [0-9]+ registers' "$out.log" | grep -oE '[0-9]+' | head -1)
  spill_st=$(grep -oE '[0-9]+ bytes spill stores' "$out.log" | grep -oE '^[0-9]+' | head -1)
  spill_ld=$(grep -oE '[0-9]+ bytes spill loads' "$out.log" | grep -oE '^[0-9]+' | head -1)
  smem_static=$(grep -oE '[0-9]+ bytes smem' "$out.log" | grep -oE '^[0-9]+' | head -1)
  smem_static=${smem_static:-0}
  # DEVICE_ABI sm100a formula: 2 * (BM*Dp + 2*S*BN*Dp) + BM*4 + 1024 (harness defaults)
  if [ "$d" = 64 ]; then dyn=$((2 * (256 * 64 + 2 * 4 * 192 * 64) + 256 * 4 + 1024));
  else dyn=$((2 * (256 * 128 + 2 * 2 * 128 * 128) + 256 * 4 + 1024)); fi
  local smem=$((dyn + smem_static))
  [ "${spill_st:-x}" = 0 ] && [ "${spill_ld:-x}" = 0 ] || { rc=1; why="$why spills"; }
  # e.g. ptxas C7508 "'setmaxnreg' ignored", front-end diagnostics
  grep -qi "warning" "$out.log" && { rc=1; why="$why warnings"; }
  [ "$smem" -le "$SMEM_LIMIT" ] || { rc=1; why="$why smem"; }
  local nvrtc="n/a"
  if [ -n "$NVRTC_BIN" ]; then
    local r
    r=$("$NVRTC_BIN" "$HERE/harness.cu" "$TEMPLATES" $defs 2>&1)
    case "$r" in ok*) nvrtc="$(echo "$r" | awk '{print $2}')ms" ;; *) rc=1; why="$why nvrtc"; nvrtc=FAIL ;; esac
  fi
  local status=ok; [ $rc = 0 ] || status="FAIL($why )"
  printf '%-40s regs %3s  smem %6s (dyn %6s + static %s)  spills %s/%s  nvcc %5.1fs  nvrtc %7s  %s\n' \
    "$name" "$regs" "$smem" "$dyn" "$smem_static" "$spill_st" "$spill_ld" "$(echo "$t1 - $t0" | bc)" "$nvrtc" \
    "$status" >"$out.res"
}
export -f one
export NVCC HERE TEMPLATES WORK NVRTC_BIN SMEM_LIMIT PARAM_OFFSETS
export MASKS_S="${MASKS[*]}" MODS_S="${MODS[*]}"
run_one() { MASKS=($MASKS_S); MODS=($MODS_S); one "$@"; }
export -f run_one

printf '%s\n' "${variants[@]}" | xargs -P "$JOBS" -L 1 bash -c 'run_one $0 $1 $2 $3 $4'
cat "$WORK"/*.res | sort
n=$(cat "$WORK"/*.res | wc -l)
bad=$(grep -c FAIL "$WORK"/*.res | awk -F: '{s+=$2} END {print s}')
echo "variants: $n, failed: $bad (nvcc $("$NVCC" --version | grep -oE 'V[0-9.]+'), sm_100a)"
[ "$bad" = 0 ] && [ "$n" = "${#variants[@]}" ]
