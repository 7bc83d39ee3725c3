#!/usr/bin/env bash
# Builds and runs the whole test suite. GPU tests skip (with the reason) where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
export FA4JIT_CACHE_DIR="${FA4JIT_CACHE_DIR:-$(mktemp -d)}"
ctest --test-dir build --output-on-failure -j2 --timeout 1200
# The Python package: pip install . into a fresh venv, then tests/python (docs/PYTHON.md).
bash tools/python_test.sh
