#!/usr/bin/env bash
# Runs on the GPU machine (repo root; no network): installs the wheel built here and carried in .whl/
# (python3 -m pip wheel . -w .whl --no-deps) into /tmp/site, then the Python GPU tests (against the
# float64 reference, SDPA, transformers models) and the host-overhead bench. Logs go to $OUT.
# Usage: python_gpu.sh [pytest -k expression]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export FA4JIT_CACHE_DIR=${FA4JIT_CACHE_DIR:-/tmp/fa4jit-cache} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
site=${FA4JIT_SITE:-/tmp/site}
rm -rf "$site"
whl=$(ls .whl/fa4jit-*.whl | head -1)
python3 -m pip install --no-deps --no-index --target "$site" "$whl" 2>&1 | tail -2
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PATH=$site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import sys, torch, fa4jit; print("python", sys.version.split()[0], "torch", torch.__version__, "fa4jit", fa4jit.__version__, fa4jit.library_path); print(fa4jit.runtime_info())' 2>&1 | tee "$OUT/python_info.log"
cmd=(python3 -m pytest -q -rs -p no:cacheprovider -W ignore::UserWarning --rootdir tests/python tests/python)
[ $# -gt 0 ] && cmd+=(-k "$1")
timeout 480 "${cmd[@]}" -s 2>&1 | tee "$OUT/python_tests.log" | grep -E "passed|failed|error|max \|logit|agreement|frames compiled|graph\(s\)|FAILED|SKIPPED" | tail -60
echo "pytest rc=${PIPESTATUS[0]}"
timeout 120 python3 bench/python_overhead.py --json "$OUT/python_overhead.json" 2>&1 | tee "$OUT/python_overhead.log"
