#!/usr/bin/env bash
# Builds and runs the whole test suite (GPU tests skip, with the reason, where there is no GPU),
# then the consumer examples (tools/examples.sh), the Python package (tools/python_test.sh), the
# CPU suite under ASan + UBSan (tools/sanitize.sh) and the fuzzers for a bounded time
# (tools/fuzz.sh). FA4JIT_SKIP_SANITIZERS=1 leaves the last two out (e.g. on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
stage() {  # stage NAME COMMAND...: runs it and says how long it took
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - start)) s"
}
stage build bash tools/build.sh
export FA4JIT_CACHE_DIR="${FA4JIT_CACHE_DIR:-$(mktemp -d)}"
stage ctest ctest --test-dir build --output-on-failure -j2 --timeout 1200
# The consumer's view: install, find_package / add_subdirectory / pkg-config builds, and a run.
stage examples bash tools/examples.sh
# The Python package: pip install . into a fresh venv, then tests/python (docs/PYTHON.md).
# The wheel is built in build/ (its objects reused: tools/python_test.sh, FA4JIT_PY_REUSE_BUILD).
FA4JIT_PY_REUSE_BUILD=build stage python bash tools/python_test.sh
if [ "${FA4JIT_SKIP_SANITIZERS:-0}" != 1 ]; then
  FA4JIT_CACHE_DIR="$(mktemp -d)" stage sanitize bash tools/sanitize.sh
  stage fuzz bash tools/fuzz.sh
fi
