#!/usr/bin/env bash
# Compiles dev/harness.cu (the generated layer of docs/DEVICE_ABI.md) for every arch and
# config of the sm80 backend with nvcc, printing ptxas register/spill lines of fa4_fwd.
# Paged KV and split-KV are run-time branches, so every config compiles them too.
# Usage: templates/sm80/dev/compile_matrix.sh [quick]   (any directory)
#   ARCHS="80 90" ...   restrict the arch list
#   NVRTC=1 ...         compile through NVRTC (dev/nvrtc_check.cpp, the runtime's path) instead of nvcc
set -u
cd "$(dirname "$0")/../../.."
ARCHS=${ARCHS:-"80 86 89 90 100 120"}
CONFIGS=(
  "-DFA4_DEPTH=128 -DFA4_MASK=None"
  "-DFA4_DEPTH=128 -DFA4_MASK=Causal"
  "-DFA4_DEPTH=64 -DFA4_MASK=None"
  "-DFA4_DEPTH=64 -DFA4_MASK=Causal"
  "-DFA4_DEPTH=128 -DFA4_MASK=None -DFA4_DTYPE=half_t"
  "-DFA4_DEPTH=64 -DFA4_MASK=Causal -DFA4_DTYPE=half_t"
  "-DFA4_DEPTH=128 -DFA4_MASK=Causal -DFA4_SCORE_MOD=Softcap"
  "-DFA4_DEPTH=64 -DFA4_MASK=None -DFA4_SCORE_MOD=Softcap"
  "-DFA4_DEPTH=128 -DFA4_MASK=SlidingWindow"
  "-DFA4_DEPTH=128 -DFA4_MASK=Chunked -DFA4_SCORE_MOD=Alibi"
  "-DFA4_DEPTH=128 -DFA4_MASK=CausalOrChunked"
  "-DFA4_DEPTH=128 -DFA4_BM=64 -DFA4_MASK=Causal"
  "-DFA4_DEPTH=64 -DFA4_BM=64 -DFA4_BN=64 -DFA4_MASK=None"
  "-DFA4_DEPTH=96 -DFA4_MASK=Causal"
  "-DFA4_DEPTH=72 -DFA4_PADDED_DEPTH=80 -DFA4_MASK=Causal"
  "-DFA4_DEPTH=256 -DFA4_BM=64 -DFA4_BN=64 -DFA4_MASK=Causal"
  # variants: GQA packing (kPack = group), custom masks with block snippet / run-time block mask
  "-DFA4_DEPTH=128 -DFA4_MASK=None -DFA4_PACK=4"
  "-DFA4_DEPTH=128 -DFA4_MASK=Causal -DFA4_PACK=8"
  "-DFA4_DEPTH=64 -DFA4_MASK=Causal -DFA4_PACK=4"
  "-DFA4_DEPTH=128 -DFA4_BM=64 -DFA4_MASK=None -DFA4_PACK=8"
  "-DFA4_DEPTH=128 -DFA4_MASK=SlidingWindow -DFA4_PACK=6 -DFA4_SCORE_MOD=Alibi"
  "-DFA4_DEPTH=96 -DFA4_MASK=Causal -DFA4_PACK=4"
  "-DFA4_DEPTH=128 -DFA4_MASK=DevCustom"
  "-DFA4_DEPTH=64 -DFA4_MASK=CausalAndDevCustom -DFA4_PACK=4"
)
[ "${1:-}" = quick ] && { ARCHS="80"; CONFIGS=("${CONFIGS[@]:0:4}"); }
if [ "${NVRTC:-0}" = 1 ]; then
  CUDA=${CUDA_HOME:-/usr/local/cuda}
  g++ -std=c++17 -I"$CUDA/include" templates/sm80/dev/nvrtc_check.cpp -L"$CUDA/lib64" -lnvrtc \
      -o /tmp/fa4_nvrtc_check_$$ || exit 1
fi
fail=0
for arch in $ARCHS; do
  for cfg in "${CONFIGS[@]}"; do
    if [ "${NVRTC:-0}" = 1 ]; then
      out=$(/tmp/fa4_nvrtc_check_$$ sm_$arch $cfg 2>&1)
    else
      out=$(nvcc -std=c++17 -arch=sm_$arch -cubin -Xptxas -v -I templates $cfg \
            templates/sm80/dev/harness.cu -o /tmp/fa4_sm80_$$.cubin 2>&1)
    fi
    rc=$?
    # The module also holds fa4_combine: report the attention kernel's lines only.
    fwd=$(echo "$out" | grep -A3 "entry function 'fa4_fwd'")
    regs=$(echo "$fwd" | grep -o 'Used [0-9]* registers' | grep -o '[0-9]*')
    spill=$(echo "$fwd" | grep -o '[0-9]* bytes spill stores, [0-9]* bytes spill loads' | sed 's/ bytes spill stores, /\//; s/ bytes spill loads//')
    if [ $rc -ne 0 ]; then fail=1; echo "FAIL sm_$arch $cfg"; echo "$out" | grep -i error | head -5;
    else printf 'sm_%-4s regs %-4s spill st/ld %-8s %s\n' "$arch" "$regs" "$spill" "$cfg"; fi
  done
done
rm -f /tmp/fa4_sm80_$$.cubin /tmp/fa4_nvrtc_check_$$
exit $fail
