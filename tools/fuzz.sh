#!/usr/bin/env bash
# libFuzzer targets (fuzz/<name>_fuzz.cpp), built with clang + ASan + UBSan into build-fuzz/ and run
# for FA4JIT_FUZZ_SECONDS each (default 45) from their seed corpora (fuzz/corpus/<name>/), two at a
# time. Any crash, leak, sanitizer report or timeout fails the script (the input is kept under
# build-fuzz/artifacts/). New corpus entries stay in build-fuzz/corpus/, never in the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FA4JIT_FUZZ_SECONDS:-45}"

bash tools/setup.sh clang-14 libclang-rt-14-dev llvm-14

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
      -DFA4JIT_FUZZ=ON -DFA4JIT_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz --target fa4jit_fuzzers -j"$(nproc)"

mkdir -p build-fuzz/artifacts build-fuzz/logs
run_one() {  # $1: fuzzer executable
  local exe="$1" name
  name="$(basename "$exe" _fuzz)"
  local corpus="build-fuzz/corpus/$name" log="build-fuzz/logs/$name.log" dict=()
  mkdir -p "$corpus"
  [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
  # New inputs go to the first corpus dir; the repo's seeds are read only.
  if "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="build-fuzz/artifacts/$name-" "${dict[@]}" "$corpus" "fuzz/corpus/$name" >"$log" 2>&1; then
    echo "fuzz: $name ok: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${seconds}s"
  else
    echo "fuzz: $name FAILED (log: $log)"
    tail -n 60 "$log"
    return 1
  fi
}
export -f run_one
export seconds
ls build-fuzz/fuzz/*_fuzz | xargs -P 2 -I{} bash -c 'run_one "$@"' _ {}
