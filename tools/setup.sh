#!/usr/bin/env bash
# Installs what fa4jit builds against (Debian packages). The CUDA 13 toolkit (NVRTC, headers)
# is expected at /usr/local/cuda; no GPU or driver is needed to build, compile kernels or test.
set -euo pipefail
pkgs=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libcli11-dev libxxhash-dev libgtest-dev
      libhiredis-dev redis-server)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
