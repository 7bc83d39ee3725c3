#!/usr/bin/env bash
# Tuning sweep on the GPU machine: `fa4jit bench` over FA4JIT_TUNE settings and configs.
# Each line of the sweep file: <FA4JIT_TUNE value or -> <config json> <bench flags...>
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export FA4JIT_CACHE_DIR=/tmp/fa4jit-cache
while read -r tune cfg flags; do
  [ -z "$tune" ] || [ "${tune:0:1}" = "#" ] && continue
  echo "$cfg" > /tmp/sweep_cfg.json
  [ "$tune" = "-" ] && tune=""
  printf '%-40s %-50s ' "$tune" "$cfg"
  FA4JIT_TUNE="$tune" .device/fa4jit bench --config /tmp/sweep_cfg.json $flags 2>&1 | tail -1
done < "${1:-bench/sweep.txt}"
