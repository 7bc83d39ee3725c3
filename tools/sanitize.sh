#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (gcc), in build-asan/.
# Every fa4jit binary is instrumented (library, CLI, tests, cache workers); NVRTC and the driver are
# not. Any report aborts its test. Left out, as in the list below: the kernel-compile tests, whose
# time is NVRTC's own (uninstrumented) and which tools/test.sh already runs; every other test runs,
# the GPU tests skipping without a GPU as they do there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
# Debug keeps assert() on; -O1 -g1 is the level ASan's documentation recommends.
# gcc's "undefined" leaves out float-cast-overflow (1e10 -> int), so it is named. --as-needed: gcc's
# sanitizer link spec turns it off, and the driver stub that CUDA::toolkit drags in would become a
# dependency (the driver is dlopen'd; CI has none).
flags="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_CXX_FLAGS="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined -Wl,--as-needed" \
      -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-asan -j"$(nproc)"

compile_matrix='^(Archs/PresetCompile\.|BlackwellCompile\.|FeatureCompile\.|Compile\.|SnippetBoundsCompile\.|PackGqa\.AnyGroupKernelsCompileWithoutSpills$|Fp8(Kv)?Host\.Sm90aKernelsCompileWithoutSpills$)'
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export FA4JIT_CACHE_DIR="${FA4JIT_CACHE_DIR:-$(mktemp -d)}"
ctest --test-dir build-asan --output-on-failure -j2 --timeout 1200 -E "$compile_matrix"
