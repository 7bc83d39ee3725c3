#!/usr/bin/env bash
# Soak of the kernel cache through the real CLI (docs/CACHE.md "Tests and reliability figures"):
# 8 concurrent `fa4jit prewarm` processes on one cache directory, SIGKILLed at random moments
# (mid-compile, mid-publish, holding a lock) and restarted, with `cache prune` and `cache clear`
# running beside them. Afterwards `cache verify` must find no bad entry (staging dirs of the
# killed writers are expected and swept), and a last prewarm must succeed.
#
# usage: soak.sh FA4JIT_BINARY
#   FA4JIT_SOAK_SECONDS  how long the kills go on (default 60; CI's budget is the default)
#   FA4JIT_SOAK_PROCS    concurrent prewarms (default 8)
#   FA4JIT_SOAK_SEED     seed of the kill / prune / clear schedule (default: the time; printed)
set -euo pipefail
fa4jit=${1:?usage: soak.sh FA4JIT_BINARY}
secs=${FA4JIT_SOAK_SECONDS:-60}
procs=${FA4JIT_SOAK_PROCS:-8}
seed=${FA4JIT_SOAK_SEED:-$(date +%s)}
RANDOM=$seed

work=$(mktemp -d)
declare -a pids=()
cleanup() {
  for p in "${pids[@]}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# This run's own cache and nothing of the caller's environment that changes what is built.
export FA4JIT_CACHE_DIR=$work/cache FA4JIT_CACHE_PATH= FA4JIT_CACHE_FAULT= FA4JIT_TUNE= FA4JIT_SEALED= \
  FA4JIT_COMPILE= FA4JIT_REMOTE_CACHE= FA4JIT_CACHE_SECRET= FA4JIT_CACHE_MAX_BYTES= FA4JIT_LOG=error \
  FA4JIT_BUNDLE_PATH=
# sm_80 kernels compile fastest (about a second each on one core): three kernels, two combine kernels.
cat >"$work/configs.json" <<'EOF'
[{"depth": 64}, {"depth": 64, "mask": "causal"}, {"depth": 128}]
EOF

started=0 killed=0 completed=0 failed=0 prunes=0 clears=0
# The loops below run with stderr dropped (bash reports every SIGKILLed job there); ours goes to fd 3.
exec 3>&2
fail() { echo "soak: FAIL: $*" >&3; exit 1; }

# Reaps slot i's process if it ended (or, with a second argument, waits for it): a SIGKILL is
# expected, any other failure is not.
reap() {
  local i=$1 p=${pids[$1]:-} rc=0
  [ -n "$p" ] || return 0
  [ $# -lt 2 ] && kill -0 "$p" 2>/dev/null && return 0
  wait "$p" || rc=$?
  pids[$i]=""
  if [ "$rc" -eq 0 ]; then
    completed=$((completed + 1))
  elif [ "$rc" -ne 137 ]; then
    failed=$((failed + 1))
    echo "soak: prewarm $p exited $rc:" >&3
    cat "$work/prewarm.$i.log" >&3
  fi
}

start() {
  "$fa4jit" prewarm --config "$work/configs.json" --arch sm_80 --jobs 1 >"$work/prewarm.$1.log" 2>&1 &
  pids[$1]=$!
  started=$((started + 1))
}

echo "soak: $procs prewarms for ${secs}s, seed $seed, cache $FA4JIT_CACHE_DIR"
end=$((SECONDS + secs))
while [ "$SECONDS" -lt "$end" ]; do
  for ((i = 0; i < procs; i++)); do
    reap "$i"
    [ -n "${pids[$i]:-}" ] || start "$i"
  done
  # Per tick (about 4 a second): a kill 3 times in 10, so a prewarm lives a few seconds (it
  # compiles for one to a few), a prune 2 in 10 and a clear 1 in 10.
  r=$((RANDOM % 10))
  if [ "$r" -lt 3 ]; then
    victim=${pids[$((RANDOM % procs))]}
    if [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null; then killed=$((killed + 1)); fi
  elif [ "$r" -lt 5 ]; then
    "$fa4jit" cache prune --max-size "$((RANDOM % 512))K" >/dev/null || fail "cache prune exited $?"
    prunes=$((prunes + 1))
  elif [ "$r" -lt 6 ]; then
    "$fa4jit" cache clear >/dev/null || fail "cache clear exited $?"
    clears=$((clears + 1))
  fi
  sleep "0.$((RANDOM % 5))$((RANDOM % 10))"
done 2>/dev/null
for ((i = 0; i < procs; i++)); do
  if [ -n "${pids[$i]:-}" ] && kill -9 "${pids[$i]}" 2>/dev/null; then killed=$((killed + 1)); fi
  reap "$i" wait
done 2>/dev/null
[ "$failed" -eq 0 ] || fail "$failed prewarm(s) that were not killed failed (above)"

# Every entry left behind must verify; the only expected finding is the sweep of killed writers' staging dirs.
"$fa4jit" cache verify >"$work/verify.log" 2>&1 || { cat "$work/verify.log" >&2; fail "cache verify exited non-zero"; }
bad=$(grep '^bad: ' "$work/verify.log" | grep -vc 'staging dir(s) of dead writers' || true)
[ "$bad" -eq 0 ] || { cat "$work/verify.log" >&2; fail "$bad bad entries after the soak"; }
# And the cache still works: a last prewarm completes and leaves every entry good.
"$fa4jit" prewarm --config "$work/configs.json" --arch sm_80 --jobs 2 >"$work/last.log" 2>&1 ||
  { cat "$work/last.log" >&2; fail "the last prewarm failed"; }
"$fa4jit" cache verify >"$work/verify.log" 2>&1
bad=$(grep -c '^bad: ' "$work/verify.log" || true)
[ "$bad" -eq 0 ] || { cat "$work/verify.log" >&2; fail "$bad bad entries after the last prewarm"; }
echo "[reliability] soak: ${secs}s, $procs concurrent prewarms, $started started, $killed SIGKILLed, $completed" \
  "completed, $prunes prunes, $clears clears; bad entries = 0, failed survivors = 0 (seed $seed)"
