#!/usr/bin/env bash
# The main job: build, prewarm the default kernels for every backend, and where a GPU is
# present run one attention and check it against the float64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
./build/fa4jit info
./build/fa4jit prewarm --preset default --arch sm_80,sm_90a,sm_100a
./build/fa4jit check --batch 2 --seqlen 1024 --heads 16 --kv-heads 4
