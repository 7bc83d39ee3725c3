#!/usr/bin/env bash
# Builds and runs the whole test suite, then the consumer examples (tools/examples.sh). GPU tests
# skip (with the reason) where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
export FA4JIT_CACHE_DIR="${FA4JIT_CACHE_DIR:-$(mktemp -d)}"
ctest --test-dir build --output-on-failure -j2 --timeout 1200
# The consumer's view: install, find_package / add_subdirectory / pkg-config builds, and a run.
bash tools/examples.sh
# The Python package: pip install . into a fresh venv, then tests/python (docs/PYTHON.md).
bash tools/python_test.sh
