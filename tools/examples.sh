#!/usr/bin/env bash
# Builds and runs the consumer examples against build/ (configured and built by tools/build.sh):
#   - installs build/ into DIR/prefix (cmake --install, which strips by default) and checks that
#     the install carries no build-machine state: no libhiredis NEEDED, no absolute RUNPATH, no
#     debug info, no absolute -L in fa4jit.pc, no static archive, and LICENSE installed,
#   - examples/find_package against that prefix (find_package(fa4jit)),
#   - examples/add_subdirectory (fa4jit built inside the consumer's tree),
#   - the same program compiled with `pkg-config --cflags --libs fa4jit`,
# and runs each: kernels for sm_90a and sm_100a always; with a GPU, one attention checked
# against a float64 reference (it fails where a GPU is present but the run does not pass).
#
#   tools/examples.sh                 build and run in a temporary directory (CI)
#   tools/examples.sh build DIR       build only, leaving in DIR just what `run` needs (stripped
#                                     binaries, libfa4jit.so): small enough to carry
#   tools/examples.sh run DIR         run what `build DIR` left (on the GPU machine, which lacks
#                                     cmake's -dev dependencies: fmt, CLI11, nlohmann, GTest)
# FA4JIT_EXAMPLES_REQUIRE_GPU=1/0 forces/forbids failing without a GPU (default: 1 when
# nvidia-smi lists one). FA4JIT_CACHE_DIR is honoured (default: a fresh directory).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
mode=${1:-all}
case "$mode" in
  all) dir=${2:-$(mktemp -d)} ;;
  build | run) [ $# -ge 2 ] || { echo "usage: $0 [all [DIR] | build DIR | run DIR]" >&2; exit 2; }; dir=$2 ;;
  *) echo "usage: $0 [all [DIR] | build DIR | run DIR]" >&2; exit 2 ;;
esac
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}

build() {
  local work="$dir/work" jobs
  jobs=$(nproc)
  cmake --build build -j"$jobs" >/dev/null
  rm -rf "$dir/prefix" "$work" && mkdir -p "$work"
  echo "== install build/ into $dir/prefix"
  cmake --install build --prefix "$dir/prefix" >/dev/null
  check_install "$dir/prefix"

  echo "== examples/find_package against the installed prefix"
  cmake -S examples/find_package -B "$work/find_package" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$dir/prefix" >/dev/null
  cmake --build "$work/find_package" -j"$jobs" >/dev/null

  echo "== examples/add_subdirectory (builds fa4jit inside the example's tree)"
  cmake -S examples/add_subdirectory -B "$work/add_subdirectory" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DFA4JIT_SOURCE_DIR="$repo" >/dev/null
  cmake --build "$work/add_subdirectory" -j"$jobs" >/dev/null

  echo "== the same program through pkg-config"
  mkdir -p "$dir/pkg-config"
  # shellcheck disable=SC2046  # pkg-config's flags are meant to split
  c++ -std=c++17 -O2 -Wall -Wextra examples/find_package/main.cpp -o "$dir/pkg-config/fa4jit_example" \
      $(PKG_CONFIG_PATH="$dir/prefix/lib/pkgconfig" pkg-config --cflags --libs fa4jit) \
      -I"$cuda/include" -L"$cuda/lib64" -lcudart_static -ldl -lrt -pthread

  # What `run` needs, stripped: the examples and the add_subdirectory build's own libfa4jit.so.
  mkdir -p "$dir/find_package" "$dir/add_subdirectory"
  strip -o "$dir/find_package/fa4jit_example" "$work/find_package/fa4jit_example"
  strip -o "$dir/add_subdirectory/fa4jit_example" "$work/add_subdirectory/fa4jit_example"
  strip -o "$dir/add_subdirectory/libfa4jit.so.0" "$work/add_subdirectory/fa4jit/libfa4jit.so.0"
  strip "$dir/pkg-config/fa4jit_example"
  rm -rf "$work"
  du -sh "$dir"
}

# The installed tree is the machine-independent one the issue asks for (#57): checked with readelf
# on the library and the CLI, not assumed from the CMake options.
check_install() {
  local prefix=$1 f dyn bad=0
  echo "== the install carries no build-machine state"
  for f in "$prefix/lib/libfa4jit.so.0" "$prefix/bin/fa4jit"; do
    dyn=$(readelf -d "$f")
    if grep -q 'NEEDED.*hiredis' <<<"$dyn"; then echo "install check: $f links libhiredis (it must be dlopen'ed)"; bad=1; fi
    if grep -E '(RPATH|RUNPATH)' <<<"$dyn" | grep -Eq '\[(/|.*:/)'; then
      echo "install check: $f has an absolute RPATH/RUNPATH: $(grep -E 'RPATH|RUNPATH' <<<"$dyn")"; bad=1
    fi
    if readelf -S "$f" | grep -q '\.debug_info'; then echo "install check: $f is not stripped (.debug_info)"; bad=1; fi
  done
  if grep -Eq -- '-L/' "$prefix/lib/pkgconfig/fa4jit.pc"; then
    echo "install check: fa4jit.pc has an absolute -L: $(grep -- '-L/' "$prefix/lib/pkgconfig/fa4jit.pc")"; bad=1
  fi
  if [ -e "$prefix/lib/libfa4jit.a" ]; then echo "install check: libfa4jit.a installed without FA4JIT_INSTALL_STATIC"; bad=1; fi
  if ! cmp -s LICENSE "$prefix/share/licenses/fa4jit/LICENSE"; then
    echo "install check: LICENSE is not installed as share/licenses/fa4jit/LICENSE"; bad=1
  fi
  [ "$bad" = 0 ] || return 1
  du -hL "$prefix/lib/libfa4jit.so.0" "$prefix/bin/fa4jit" | sed 's/^/  /'
}

run() {
  local require=${FA4JIT_EXAMPLES_REQUIRE_GPU:-}
  if [ -z "$require" ]; then
    require=0
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then require=1; fi
  fi
  local flag=""
  [ "$require" = 1 ] && flag=--require-gpu
  export FA4JIT_CACHE_DIR="${FA4JIT_CACHE_DIR:-$(mktemp -d)}"
  # The installed binaries have no RUNPATH: libnvrtc comes from the loader's path, as for any user
  # (the toolkit's ld.so.conf.d entry; this covers a toolkit that has none).
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cuda/lib64"
  echo "== installed CLI"
  "$dir/prefix/bin/fa4jit" --version
  # The install's kernel bundle (share/fa4jit/kernels): every preset, for every bundled arch, with
  # an empty cache and compiles forbidden; with a GPU, the main job's check the same way.
  echo "== a fresh install serves the presets with 0 compiles"
  local presets archs
  presets=$("$dir/prefix/bin/fa4jit" info | sed -n 's/^presets: //p')
  archs=$(python3 -c "import json,sys; print(','.join(sorted({k['arch'] for k in json.load(open(sys.argv[1]))['kernels']})))" \
          "$dir/prefix/share/fa4jit/kernels/manifest.json")
  local served
  # shellcheck disable=SC2046,SC2086  # one --preset per name (the names split on purpose)
  if ! served=$(FA4JIT_CACHE_DIR="$(mktemp -d)" FA4JIT_COMPILE=forbid \
      "$dir/prefix/bin/fa4jit" prewarm $(printf -- '--preset %s ' $presets) --arch "$archs" 2>&1); then
    echo "$served"
    return 1
  fi
  # Not `tee /dev/stderr`: where stderr is a log file, reopening it truncates it (CI lost its build
  # and ctest output that way).
  echo "$served"
  grep -q ' 0 compiled, .* 0 failed' <<<"$served"
  if [ "$require" = 1 ]; then
    FA4JIT_CACHE_DIR="$(mktemp -d)" FA4JIT_COMPILE=forbid "$dir/prefix/bin/fa4jit" check
  fi
  for ex in find_package add_subdirectory pkg-config; do
    local libdir="$dir/prefix/lib"
    [ "$ex" = add_subdirectory ] && libdir="$dir/add_subdirectory"
    echo "== $ex example $flag"
    LD_LIBRARY_PATH="$libdir:$LD_LIBRARY_PATH" "$dir/$ex/fa4jit_example" $flag
  done
  echo "examples: all passed"
}

case "$mode" in
  all) build; run ;;
  build) build ;;
  run) run ;;
esac
