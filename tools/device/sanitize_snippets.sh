#!/usr/bin/env bash
# On the GPU machine: compute-sanitizer memcheck on user-snippet kernels whose snippets index
# exactly-sized aux arrays by position (issue 19): the issue's reproducer (document mask
# `doc[q_idx] == doc[kv_idx]` + score-mod `aux[1][kv_idx]`, Sq = Sk = 1000, d64 (BM 192) and d128)
# and the counting snippets of tests/snippet_bounds_test.cpp (odd lengths, Sq != Sk, varlen with
# empty sequences, paged + seqused_k, KV splits, block snippets, the persistent walker, packed GQA
# decode), on every arch the GPU runs (sm_90a and the portable backend). Fails on any memcheck
# error (a read past an aux array included) and on any failed test (an out-of-range snippet call,
# a wrong result).
# Usage, from the repository root with binaries packed by tools/device/pack.sh into .device/:
#   bash tools/device/sanitize_snippets.sh [test ...]   (default: all three GpuSnippetBounds tests)
# Kernels compile under the sanitizer unless FA4JIT_CACHE_DIR already holds them (run the tests
# once without it first to keep each call short).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib
export FA4JIT_CACHE_DIR=${FA4JIT_CACHE_DIR:-/tmp/fa4jit-cache}
T=${FA4JIT_TESTS:-.device/fa4jit_tests}  # another test binary, e.g. one built at c9e8894 (reads past the arrays)
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
tests=("$@")
[[ ${#tests[@]} -gt 0 ]] || tests=(IssueReproducerReadsOnlyTheAuxArrays PrefillSnippetsSeeOnlyTheSequence
                                   PackedGqaSnippetsSeeOnlyTheSequence)
# Padding after every allocation, so that a read just past an aux array cannot land in a
# neighbouring allocation (where memcheck would not see it), where this compute-sanitizer has it.
pad=()
"$CS" --help 2>/dev/null | grep -q -- '--padding' && pad=(--padding 4096)
fail=0
for t in "${tests[@]}"; do
  timeout 560 "$CS" --tool memcheck "${pad[@]}" --error-exitcode 9 --print-limit 20 \
    "$T" --gtest_filter="GpuSnippetBounds.${t#GpuSnippetBounds.}" > /tmp/snip_san.log 2>&1
  rc=$?
  gtest=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' /tmp/snip_san.log | tr '\n' ' ')
  echo "$t | memcheck ${pad[*]} rc=$rc invalid global reads: $(grep -c 'Invalid __global__' /tmp/snip_san.log)" \
    "| $(grep -E 'ERROR SUMMARY' /tmp/snip_san.log | tail -1) | $gtest"
  if [[ $rc -ne 0 || $gtest != *PASSED* ]]; then
    fail=1
    grep -E -A4 'Invalid __global__|Failure' /tmp/snip_san.log | head -40
  fi
done
exit $fail
