#!/usr/bin/env bash
# Installs what fa4jit builds against (Debian packages). The CUDA 13 toolkit (NVRTC, headers)
# is expected at /usr/local/cuda; no GPU or driver is needed to build, compile kernels or test.
# Arguments: further Debian packages a caller needs (tools/fuzz.sh: clang).
set -euo pipefail
pkgs=(python3-pip cmake ninja-build g++ pkg-config libfmt-dev nlohmann-json3-dev libcli11-dev libxxhash-dev libgtest-dev
      libhiredis-dev redis-server python3-jsonschema clang-format xz-utils "$@")
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# cuobjdump + nvdisasm (CUDA 13) from PyPI: SASS checks of kernels for GPUs this machine lacks.
python3 -c 'import nvidia, os, sys; d = os.path.join(list(nvidia.__path__)[0], "cu13", "bin"); sys.exit(0 if os.path.exists(os.path.join(d, "nvdisasm")) else 1)' 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check "nvidia-cuda-cuobjdump>=13.0,<14" "nvidia-cuda-nvdisasm>=13.0,<14" ||
  python3 -m pip install -q --break-system-packages "nvidia-cuda-cuobjdump>=13.0,<14" "nvidia-cuda-nvdisasm>=13.0,<14"
