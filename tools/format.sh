#!/usr/bin/env bash
# Formats the host C++ (generator, runtime, cache, cli, capi, check, include, tests, fuzz,
# examples) with .clang-format; `--check` changes nothing and fails listing the files that differ
# (a ctest runs it). Templates (.cuh, .h under templates/) are left to their hand layout.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
mapfile -t files < <(git ls-files -- 'generator/*' 'runtime/*' 'cache/*' 'cli/*' 'capi/*' 'check/*' 'include/*' \
  'tests/*' 'fuzz/*' 'examples/*' | grep -E '\.(cpp|hpp|h|c)$')
if [ "${1:-}" = --check ]; then
  bad=()
  for f in "${files[@]}"; do
    "$CLANG_FORMAT" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} files differ from .clang-format (run tools/format.sh):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files match .clang-format"
else
  "$CLANG_FORMAT" -i "${files[@]}"
fi
