#!/usr/bin/env bash
# Builds and runs the whole test suite. GPU tests skip (with the reason) where there is no GPU.
# Then the CPU suite under ASan + UBSan (tools/sanitize.sh) and the fuzzers for a bounded time
# (tools/fuzz.sh); FA4JIT_SKIP_SANITIZERS=1 leaves those two out (e.g. on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
export FA4JIT_CACHE_DIR="${FA4JIT_CACHE_DIR:-$(mktemp -d)}"
ctest --test-dir build --output-on-failure -j2 --timeout 1200
if [ "${FA4JIT_SKIP_SANITIZERS:-0}" != 1 ]; then
  start=$SECONDS
  FA4JIT_CACHE_DIR="$(mktemp -d)" bash tools/sanitize.sh
  echo "test.sh: sanitize.sh took $((SECONDS - start)) s"
  start=$SECONDS
  bash tools/fuzz.sh
  echo "test.sh: fuzz.sh took $((SECONDS - start)) s"
fi
