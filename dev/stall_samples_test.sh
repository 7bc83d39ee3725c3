#!/usr/bin/env bash
# ctest dev.StallSamplesSumsBySourceLine: dev/stall_samples.py on a small file in the layout of
# `ncu --page source --csv --print-source sass` (ncu's own log lines first, a "Kernel Name" line,
# the header, one row per instruction; predicated instructions; a gzipped copy): the totals by
# reason and by opcode must be the rows' sums, and comparing a file with itself gives ratio 1.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/a.csv" <<'EOF'
==PROF== Connected to process 1 (fa4jit)
"Kernel Name","fa4_fwd_0123456789abcdef",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","stall_barrier","stall_selected","stall_wait","stall_wait (Not Issued)"
"0x100","      FMNMX.FTZ R4, R76, R5, !PT","30","20","1,000","0","10","20","20"
"0x110","      FMNMX.FTZ R5, R77, R4, !PT","40","30","1,000","0","10","30","30"
"0x120","  @P1 MUFU.EX2 R5, R9","25","5","1,000","0","20","5","5"
"0x130","      BAR.SYNC.DEFER_BLOCKING R4, 0x100","5","5","10","5","0","0","0"
EOF
gzip -c "$work/a.csv" > "$work/b.csv.gz"
out=$(python3 dev/stall_samples.py "$work/a.csv")
echo "$out"
grep -q '100 samples, 3010 warp instructions executed' <<<"$out" || { echo "FAIL: totals"; exit 1; }
grep -q 'by reason: wait 55.0%, selected 40.0%, barrier 5.0%' <<<"$out" || { echo "FAIL: reasons"; exit 1; }
grep -q '^| FMNMX | 70 (70.0%) | 50 |$' <<<"$out" || { echo "FAIL: FMNMX row"; exit 1; }
grep -q '^| MUFU | 25 (25.0%) | 5 |$' <<<"$out" || { echo "FAIL: predicated MUFU row"; exit 1; }
out=$(python3 dev/stall_samples.py "$work/a.csv" "$work/b.csv.gz")
echo "$out"
grep -q 'total A / B: 1.000' <<<"$out" || { echo "FAIL: a file against itself"; exit 1; }
if python3 dev/stall_samples.py /dev/null 2>/dev/null; then echo "FAIL: accepted a file without the table"; exit 1; fi
echo PASS
