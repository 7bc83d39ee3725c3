#!/usr/bin/env bash
# ctest dev.SassStatsFindsTheKvLoop: dev/sass_stats.py on the SASS of a real generated kernel
# (`fa4jit gen --cubin`, then cuobjdump): it must find the sm90a KV loop (both HGMMA forms) and
# report no difference when a kernel is compared with itself. Exit 77 (skipped) without cuobjdump.
# Usage: dev/sass_stats_test.sh FA4JIT_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
fa4jit=$1
cuobjdump=$(command -v cuobjdump || true)
if [[ -z $cuobjdump ]]; then
  d=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "bin"))' 2>/dev/null || true)
  [[ -n $d && -x $d/cuobjdump ]] && cuobjdump=$d/cuobjdump
fi
[[ -n $cuobjdump ]] || { echo "cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo '{"depth":128,"mask":"causal"}' > "$work/c.json"
FA4JIT_CACHE_DIR=$work/cache "$fa4jit" gen --config "$work/c.json" --arch sm_90a --cubin "$work/k.cubin"
PATH=$(dirname "$cuobjdump"):$PATH "$cuobjdump" -sass "$work/k.cubin" > "$work/k.sass"
out=$(python3 dev/sass_stats.py "$work/k.sass" "$work/k.sass")
echo "$out"
loop=$(grep -o 'KV loop [0-9]*' <<<"$out" | head -1 | grep -o '[0-9]*$')
[[ ${loop:-0} -gt 0 ]] || { echo "FAIL: no KV loop found"; exit 1; }
grep -q '^  loop: .*HGMMA' <<<"$out" || { echo "FAIL: the KV loop holds no HGMMA"; exit 1; }
grep -q 'loop diff: none' <<<"$out" || { echo "FAIL: a kernel differs from itself"; exit 1; }
