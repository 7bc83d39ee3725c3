#!/usr/bin/env bash
# The Python package on a machine without a GPU (CI): `pip install .` (scikit-build-core builds
# libfa4jit.so and the CLI with the project's CMake) into a fresh venv, then tests/python with pytest.
# The torch-layer tests need PyTorch: installed from PyPI (the CUDA build, about 2.5 minutes and 4.6 GB;
# there is no CPU-only torch on PyPI) with transformers; FA4JIT_PY_TORCH=0 skips both and those tests
# skip with the reason.
# GPU tests skip here; `tools/gpu.sh python` runs them on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FA4JIT_PY_VENV:-build-py/venv}
torch_spec=${FA4JIT_PY_TORCH_SPEC:-torch==2.11.*}                      # the lent GPU machine's versions
transformers_spec=${FA4JIT_PY_TRANSFORMERS_SPEC:-transformers==5.17.*}
t0=$(date +%s)
rm -rf "$venv"
python3 -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check pytest
if [ "${FA4JIT_PY_TORCH:-1}" = 1 ]; then
  # transformers: the attention backend's plumbing is tested on the CPU with tiny random models.
  t=$(date +%s); "$py" -m pip install -q --disable-pip-version-check "$torch_spec" "$transformers_spec"
  echo "python_test: pip install $torch_spec $transformers_spec: $(( $(date +%s) - t ))s"
fi
t=$(date +%s)
reuse=()
if [ -n "${FA4JIT_PY_REUSE_BUILD:-}" ]; then
  # tools/test.sh: the wheel is built in the tree it has just built and tested, with that tree's build
  # type and options, so only the files whose defines differ (install paths, Redis) recompile
  # (CMakeLists.txt puts those defines on those files). The wheel is the one `pip install .` makes,
  # but for the optimisation level of the tree. Afterwards the tree's cache forgets SKBUILD.
  tree="$FA4JIT_PY_REUSE_BUILD"
  cached() { sed -n "s/^$1:[A-Z]*=//p" "$tree/CMakeCache.txt"; }
  reuse=(-C "build-dir=$tree" -C "cmake.build-type=$(cached CMAKE_BUILD_TYPE)"
         -C "cmake.define.FA4JIT_BUILD_TESTS=$(cached FA4JIT_BUILD_TESTS)"
         -C "cmake.define.FA4JIT_WITH_REDIS=$(cached FA4JIT_WITH_REDIS)")
fi
"$py" -m pip install -q --disable-pip-version-check "${reuse[@]}" .
[ -n "${FA4JIT_PY_REUSE_BUILD:-}" ] && cmake -U 'SKBUILD*' "$FA4JIT_PY_REUSE_BUILD" >/dev/null
echo "python_test: pip install . (build + install): $(( $(date +%s) - t ))s"
export FA4JIT_CACHE_DIR="$(mktemp -d)"   # its own cache: tests count compiles and hits
# `import fa4jit` is the installed package (the sources live under python/); PATH has its console script.
export PATH="$PWD/$venv/bin:$PATH"
"$py" -m pytest -q -p no:cacheprovider --rootdir "$PWD/tests/python" "$PWD/tests/python" -W ignore::UserWarning
echo "python_test: total $(( $(date +%s) - t0 ))s"
