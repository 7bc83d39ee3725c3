#!/usr/bin/env bash
# Compiles the sm90a dev harness over {bf16, fp16} x {d64, d128} x {None, Causal} x
# {Identity, Softcap} x {simple, overlap, overlap+pingpong} (+ stage counts) at kBM 128, and
# {bf16, fp16} x d64 x {None, Causal} x {Identity, Softcap} x {simple, overlap, overlap+pingpong,
# simple+pingpong} at kBM 192 (3 consumer warpgroups, 512 threads), reports ptxas registers/spills
# and checks the PTX for wgmma / TMA / setmaxnreg (inc 240 / dec 24 at kBM 128, inc 160 / dec 32
# at kBM 192). Run from anywhere. `ONLY=bm192` / `ONLY=bm128` runs the kBM 192 / kBM 128 part only.
# kBN 176 (FA3's d128 non-causal tile, kBM 128, 2 stages): {bf16, fp16} x d128 x {None, Causal} x
# {Identity, Softcap} x {simple, overlap, overlap+pingpong}, part of bm128; `ONLY=bn176` runs only these.
# Deep heads (part of bm128; `ONLY=deep` runs only these): d96 (padded to 128, kBN 128), d192 (kBN 112) and
# d256 (kBN 80) at kBM 128, 2 stages, {bf16, fp16} x {None, Causal} x {Identity, Softcap} x {overlap, pingpong},
# plus negatives (d256 kBN 128: smem; d192 kBM 192).
# Exit status != 0 on any compile error, spill, C7508 (setmaxnreg ignored) or wgmma
# serialization warning, or missing instruction.
# PERSIST=1: every configuration with -DFA4_PERSISTENT=1 (Config::kPersistent, persistent tile
# scheduler); names get a "_persist" suffix. REF_PTX=dir: compare each PTX byte for byte with
# dir/<name>.ptx (e.g. the previous commit's output: kPersistent absent/0 must not change the PTX).
# Variants (part of bm128 and bm192; `ONLY=variants` runs only these): GQA packing kPack 4 and 8
# (-DFA4_PACK) over d128 / d64 / kBM 192 / kBN 176, masks (causal, a user mask with a block snippet),
# score-mods (softcap, a user score-mod) and schedules, plus negatives (kPack 3, persistent + kPack).
# Paged KV and split-KV are run-time branches present in every configuration above.
# SASS=1: also `cuobjdump -sass` each cubin (nvidia-cuda-cuobjdump wheel, or FA4JIT_CUOBJDUMP) and
# print key instruction counts (dev/sass_stats.py); REF_SASS=dir: compare each KV loop's opcode
# multiset with dir/<name>.sass (the default path's loop must not change; see README "Variants").
# The harness emits fa4_combine too (as the generator does): registers/spills are fa4_fwd's.
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/fa4_sm90a_matrix}
mkdir -p "$OUT"
NVCC=${NVCC:-nvcc}
BASE="-std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates"
fail=0
ONLY=${ONLY:-all}
PERSIST=${PERSIST:-0}
REF_PTX=${REF_PTX:-}
SASS=${SASS:-0}
REF_SASS=${REF_SASS:-}
CUOBJDUMP=${FA4JIT_CUOBJDUMP:-}
if [[ $SASS != 0 || -n $REF_SASS ]] && [[ -z $CUOBJDUMP ]]; then
  d=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "bin"))' 2>/dev/null)
  [[ -n $d && -x $d/cuobjdump ]] && CUOBJDUMP=$d/cuobjdump
  [[ -z $CUOBJDUMP ]] && { echo "SASS: cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"; exit 1; }
fi
run() {  # name, flags...  (a -DFA4_BM=192 flag selects the 3-warpgroup register budgets)
  local name=$1; shift
  if [[ $PERSIST != 0 ]]; then name="${name}_persist"; set -- "$@" -DFA4_PERSISTENT=$PERSIST; fi
  local inc=240 dec=24
  [[ " $* " == *" -DFA4_BM=192 "* ]] && inc=160 dec=32
  local log="$OUT/$name.log"
  if ! $NVCC $BASE -cubin -Xptxas -v "$@" templates/sm90a/dev/harness.cu -o "$OUT/$name.cubin" >"$log" 2>&1; then
    echo "FAIL compile  $name"; cat "$log"; fail=1; return
  fi
  local regs spill warn fwdlog
  fwdlog=$(sed -n "/entry function 'fa4_fwd'/,/Compile time/p" "$log")
  regs=$(grep -o "Used [0-9]* registers" <<<"$fwdlog" | head -1)
  spill=$(grep -o "[0-9]* bytes spill stores" <<<"$fwdlog" | head -1)
  warn=$(grep -i "warning\|C7508\|serialized" "$log" || true)
  if ! $NVCC $BASE -ptx "$@" templates/sm90a/dev/harness.cu -o "$OUT/$name.ptx" >>"$log" 2>&1; then
    echo "FAIL ptx      $name"; fail=1; return
  fi
  local nw nt nm
  nw=$(grep -c "wgmma.mma_async" "$OUT/$name.ptx")
  nt=$(grep -c "cp.async.bulk.tensor" "$OUT/$name.ptx")
  nm=$(grep -c "setmaxnreg" "$OUT/$name.ptx")
  grep -q "setmaxnreg.inc.sync.aligned.u32 $inc;" "$OUT/$name.ptx" || nm="$nm(no-inc-$inc)"
  grep -q "setmaxnreg.dec.sync.aligned.u32 $dec;" "$OUT/$name.ptx" || nm="$nm(no-dec-$dec)"
  local status=ok
  [[ "$spill" != "0 bytes spill stores" ]] && status=SPILL
  [[ -n "$warn" ]] && status=WARN
  [[ $nw -eq 0 || $nt -eq 0 || "$nm" != 2 ]] && status=MISSING
  if [[ -n "$REF_PTX" ]]; then
    if [[ ! -f "$REF_PTX/$name.ptx" ]]; then nm="$nm ref:none"
    elif cmp -s "$REF_PTX/$name.ptx" "$OUT/$name.ptx"; then nm="$nm ref:identical"
    else nm="$nm ref:DIFFERS"; status=PTXDIFF; fi
  fi
  local sass=""
  if [[ $SASS != 0 || -n $REF_SASS ]]; then
    PATH="$(dirname "$CUOBJDUMP"):$PATH" "$CUOBJDUMP" -sass -fun fa4_fwd "$OUT/$name.cubin" >"$OUT/$name.sass" 2>&1
    if [[ -n $REF_SASS && -f $REF_SASS/$name.sass ]]; then
      python3 templates/sm90a/dev/sass_stats.py "$REF_SASS/$name.sass" "$OUT/$name.sass" >"$OUT/$name.sass_stats" ||
        status=SASSDIFF  # the KV loop grew, or changed beyond integer moves/adds
      sass=" sass:$(grep -o 'loop diff: .*' "$OUT/$name.sass_stats" | cut -c12- | sed 's/^none/loop-identical/')"
    else
      python3 templates/sm90a/dev/sass_stats.py "$OUT/$name.sass" >"$OUT/$name.sass_stats"
      sass=" sass:$(grep -o 'KV loop [0-9]*' "$OUT/$name.sass_stats")"
    fi
  fi
  [[ $status != ok ]] && fail=1
  printf "%-7s %-44s %-22s %-22s wgmma=%-3s tma=%-2s setmaxnreg=%s%s\n" "$status" "$name" "$regs" "$spill" "$nw" "$nt" "$nm" "$sass"
  [[ -n "$warn" ]] && echo "$warn"
}
negative() {  # flags...: must fail with a static_assert
  if $NVCC $BASE -cubin "$@" templates/sm90a/dev/harness.cu -o "$OUT/neg.cubin" >"$OUT/neg.log" 2>&1; then
    echo "FAIL expected static_assert: $*"; fail=1
  else
    echo "ok      rejected ($*): $(grep -o 'static assertion failed with "[^"]*' "$OUT/neg.log" | head -1 | cut -c1-90)"
  fi
}
# GQA packing (kPack = group): d128 / d64 at kBM 128, kBN 176, the masks and score-mods that read
# (q, head) per row, and the simple schedule. Never persistent (negative below).
variants_bm128() {
  for k in 4 8; do
    run "pack${k}_bf16_d128_none_id_pingpong" -DFA4_PACK=$k
    run "pack${k}_fp16_d128_causal_softcap_pingpong" -DFA4_PACK=$k -DFA4_FP16 -DFA4_CAUSAL -DFA4_SOFTCAP
    run "pack${k}_bf16_d128_custom_usermod_pingpong" -DFA4_PACK=$k -DFA4_CUSTOM_MASK -DFA4_SCORE_MOD_USER
    run "pack${k}_bf16_d128_causal+custom_id_pingpong" -DFA4_PACK=$k -DFA4_CAUSAL -DFA4_CUSTOM_MASK
    run "pack${k}_bf16_d64_causal_id_pingpong" -DFA4_PACK=$k -DFA4_DEPTH=64 -DFA4_CAUSAL
    run "pack${k}_bf16_d64_none_softcap_pingpong" -DFA4_PACK=$k -DFA4_DEPTH=64 -DFA4_SOFTCAP
    run "pack${k}_bf16_d128_causal_id_simple" -DFA4_PACK=$k -DFA4_CAUSAL -DFA4_SM90A_INTRA_WG_OVERLAP=0 -DFA4_SM90A_PINGPONG=0
    run "pack${k}_bn176_bf16_d128_none_id_pingpong" -DFA4_PACK=$k -DFA4_BN=176
  done
  run "pack2_bf16_d128_causal_id_pingpong" -DFA4_PACK=2 -DFA4_CAUSAL
  run "pack16_bf16_d128_causal_softcap_pingpong" -DFA4_PACK=16 -DFA4_CAUSAL -DFA4_SOFTCAP
  # Unpacked custom mask / user score-mod (per-element (q, head) plumbing of the kPack = 1 path).
  run "bf16_d128_custom_id_pingpong" -DFA4_CUSTOM_MASK
  run "bf16_d128_causal+custom_usermod_pingpong" -DFA4_CAUSAL -DFA4_CUSTOM_MASK -DFA4_SCORE_MOD_USER
  negative -DFA4_PACK=3
  [[ $PERSIST == 0 ]] && negative -DFA4_PACK=4 -DFA4_PERSISTENT=1
}
variants_bm192() {
  for k in 4 8; do
    run "bm192_pack${k}_bf16_d64_none_id_pingpong" -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_PACK=$k
    run "bm192_pack${k}_bf16_d64_causal_id_pingpong" -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_PACK=$k -DFA4_CAUSAL
    run "bm192_pack${k}_fp16_d64_causal_softcap_pingpong" -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_PACK=$k -DFA4_FP16 -DFA4_CAUSAL -DFA4_SOFTCAP
    run "bm192_pack${k}_bf16_d64_custom_usermod_pingpong" -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_PACK=$k -DFA4_CUSTOM_MASK -DFA4_SCORE_MOD_USER
  done
  run "bm192_bf16_d64_custom_usermod_pingpong" -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_CUSTOM_MASK -DFA4_SCORE_MOD_USER
}
deep() {
  local d bn dt m sm sched f
  for d in 96 192 256; do
    case $d in 96) bn=128 ;; 192) bn=112 ;; 256) bn=80 ;; esac
    for dt in bf16 fp16; do
      for m in none causal; do
        for sm in id softcap; do
          for sched in overlap pingpong; do
            f=(-DFA4_DEPTH=$d -DFA4_BN=$bn)
            [[ $dt == fp16 ]] && f+=(-DFA4_FP16)
            [[ $m == causal ]] && f+=(-DFA4_CAUSAL)
            [[ $sm == softcap ]] && f+=(-DFA4_SOFTCAP)
            [[ $sched == overlap ]] && f+=(-DFA4_SM90A_PINGPONG=0)
            run "deep_${dt}_d${d}_bn${bn}_${m}_${sm}_${sched}" "${f[@]}"
          done
        done
      done
    done
  done
  negative -DFA4_DEPTH=256 -DFA4_BN=128
  negative -DFA4_DEPTH=192 -DFA4_BM=192
}
if [[ $ONLY == deep ]]; then
  deep
  echo "logs, cubins and PTX in $OUT"
  exit $fail
fi
if [[ $ONLY == variants ]]; then
  if [[ $PERSIST == 0 ]]; then variants_bm128; variants_bm192; else
    run "bf16_d128_custom_id_pingpong" -DFA4_CUSTOM_MASK; run "bm192_bf16_d64_custom_usermod_pingpong" -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_CUSTOM_MASK -DFA4_SCORE_MOD_USER; fi
  echo "logs, cubins and PTX in $OUT"
  exit $fail
fi
if [[ $ONLY != bm192 && $ONLY != bn176 ]]; then
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
[[ $PERSIST == 0 ]] && variants_bm128
fi
# kBN 176 at kBM 128, depth 128, 2 stages (214016 B smem): wgmma = 8 + 8 QK (m64n176) + 11 + 11 PV
# (m64n128) = 38 with the overlap, 8 + 11 = 19 simple.
if [[ $ONLY != bm192 ]]; then
for dt in bf16 fp16; do
  for m in none causal; do
    for sm in id softcap; do
      for sched in simple overlap pingpong; do
        f=(-DFA4_DEPTH=128 -DFA4_BN=176 -DFA4_STAGES=2)
        [[ $dt == fp16 ]] && f+=(-DFA4_FP16)
        [[ $m == causal ]] && f+=(-DFA4_CAUSAL)
        [[ $sm == softcap ]] && f+=(-DFA4_SOFTCAP)
        case $sched in
          simple) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=0 -DFA4_SM90A_PINGPONG=0) ;;
          overlap) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=1 -DFA4_SM90A_PINGPONG=0) ;;
          pingpong) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=1 -DFA4_SM90A_PINGPONG=1) ;;
        esac
        run "bn176_${dt}_d128_${m}_${sm}_${sched}" "${f[@]}"
      done
    done
  done
done
deep
# Must NOT compile: kBN 160 (no generated wgmma N), kBN 176 with 3 stages (280 KB smem).
for neg in "-DFA4_DEPTH=128 -DFA4_BN=160" "-DFA4_DEPTH=128 -DFA4_BN=176 -DFA4_STAGES=3"; do
  if $NVCC $BASE -cubin $neg templates/sm90a/dev/harness.cu -o "$OUT/neg.cubin" >"$OUT/neg.log" 2>&1; then
    echo "FAIL expected static_assert: $neg"; fail=1
  else
    echo "ok      rejected ($neg): $(grep -o 'static assertion failed with "[^"]*' "$OUT/neg.log" | head -1 | cut -c1-90)"
  fi
done
fi
# kBM 192: 3 consumer warpgroups at 160 registers, depth 64 only, kBN 128 (default).
[[ $ONLY == bm128 || $ONLY == bn176 ]] && { echo "logs, cubins and PTX in $OUT"; exit $fail; }
for dt in bf16 fp16; do
  for m in none causal; do
    for sm in id softcap; do
      for sched in simple overlap pingpong simplepp; do
        f=(-DFA4_DEPTH=64 -DFA4_BM=192)
        [[ $dt == fp16 ]] && f+=(-DFA4_FP16)
        [[ $m == causal ]] && f+=(-DFA4_CAUSAL)
        [[ $sm == softcap ]] && f+=(-DFA4_SOFTCAP)
        case $sched in
          simple) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=0 -DFA4_SM90A_PINGPONG=0) ;;
          overlap) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=1 -DFA4_SM90A_PINGPONG=0) ;;
          pingpong) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=1 -DFA4_SM90A_PINGPONG=1) ;;
          simplepp) f+=(-DFA4_SM90A_INTRA_WG_OVERLAP=0 -DFA4_SM90A_PINGPONG=1) ;;
        esac
        run "bm192_${dt}_d64_${m}_${sm}_${sched}" "${f[@]}"
      done
    done
  done
done
run bm192_bf16_d64_causal_id_pingpong_S4 -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_STAGES=4 -DFA4_CAUSAL
run bm192_bf16_d64_none_id_pingpong_BN64 -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_BN=64
run bm192_bf16_d64_causal_id_cfgsimple -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_CAUSAL -DFA4_CFG_SIMPLE
run bm192_bf16_d64_none_id_simple_BN192 -DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_BN=192 -DFA4_CFG_SIMPLE
[[ $PERSIST == 0 ]] && variants_bm192
# Must NOT compile (static_assert): kBM 192 at depth 128, kBM 192 + kBN 192 with the overlap.
for neg in "-DFA4_DEPTH=128 -DFA4_BM=192" "-DFA4_DEPTH=64 -DFA4_BM=192 -DFA4_BN=192"; do
  if $NVCC $BASE -cubin $neg templates/sm90a/dev/harness.cu -o "$OUT/neg.cubin" >"$OUT/neg.log" 2>&1; then
    echo "FAIL expected static_assert: $neg"; fail=1
  else
    echo "ok      rejected ($neg): $(grep -o 'static assertion failed with "[^"]*' "$OUT/neg.log" | head -1 | cut -c1-90)"
  fi
done
echo "logs, cubins and PTX in $OUT"
exit $fail
