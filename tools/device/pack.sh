#!/usr/bin/env bash
# Builds here and packs stripped binaries into .device/ (git-ignored) for the lent GPU machine,
# whose image has the CUDA driver and toolkit but not fmt/CLI11/GTest. Carry ".device".
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --build build -j"$(nproc)" >/dev/null
rm -rf .device && mkdir -p .device
strip -o .device/fa4jit build/fa4jit
strip -o .device/fa4jit_tests build/tests/fa4jit_tests
for t in build/tests/cache/fa4jit_cache_tests build/tests/cache/fa4jit_cache_worker build/tests/cache/fa4jit_cache_runtime_tests; do
  [ -f "$t" ] && strip -o ".device/$(basename "$t")" "$t"
done
# Libraries the device image lacks (hiredis for the Redis tier); scripts put .device on LD_LIBRARY_PATH.
for lib in $(ldd build/fa4jit | awk '/hiredis/ {print $3}'); do cp -L "$lib" .device/; done
cp "$(command -v redis-server 2>/dev/null || echo /dev/null)" .device/ 2>/dev/null || true
du -sh .device
