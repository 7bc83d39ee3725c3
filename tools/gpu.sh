#!/usr/bin/env bash
# One driver for the lent GPU machine (`tools/gpu.sh --help`). `pack` runs here; every other verb
# runs there, from the repository root, on the binaries `pack` put in .device/ (carried with the
# call: the device image has the CUDA driver and toolkit, not fmt/CLI11/GTest). Logs and JSON go
# to $OUT (the device tool brings back what is written there; at most 8 files, so each verb writes
# few). Each step runs under its own time limit, so a hang costs one step, not the call.
set -uo pipefail
set -f  # gtest filters' '*' are gtest's, not the shell's
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
Usage: tools/gpu.sh VERB [ARGS]

Here (the development machine):
  pack [--base DIR]     build build/, strip fa4jit, fa4jit_tests and the cache test binaries into
                        .device/ (+ hiredis, redis-server); carry ".device" in the device call.
                        --base DIR also packs DIR/fa4jit as .device/fa4jit_base (a build of the
                        commit to compare against, for `ab`).
  peers-pack [MIB]      the peers' files (FA4: .fa4/ of ../shared/bench/fa4_peer.sh prepare; FlashInfer,
                        if prepared: .fi/ of flashinfer_peer.sh prepare) cut into .stage/cN/ of MIB
                        (default 50) each: every device call carries the working tree too, and no call
                        more than 64 MiB. Then, back to back (the machine goes back after 30 s idle),
                        one call per folder: carry [".stage/cN"], run `tools/gpu.sh peers-stage`; the
                        last one unpacks FA4 into $HOME/fa4site and FlashInfer into $HOME/fisite.
On the GPU machine (repository root, .device carried):
  info                  GPU, driver, commit, `fa4jit info`, one `fa4jit check` (the build runs here)
  tests [FILTER ...]    fa4jit_tests, the filters side by side, each in SHARDS (4) gtest shards that
                        run side by side too, each under TEST_LIMIT s (240); default: 'GpuFeatures*'
                        and 'Gpu*:ApiExample*-GpuFeatures*' (2026-12-03: as 8 unsharded filters, 5
                        finished in 220 s and 3 did not: the compiles share the 16 cores); a log per
                        filter and shard, and $OUT brings back 8 files: keep filters x SHARDS <= 8
  sanitize [SET ...]    compute-sanitizer; SET: prefill (memcheck/racecheck/synccheck on small cases
                        of every sm90a tile walk: grid, persistent + splits, split tail, several
                        tiles per CTA, 3 warpgroups, varlen, per-warpgroup spans, d192/d256 causal,
                        d96), dynamic (the dynamic walk, persistent=3: splits, varlen, pages 64
                        and 3), decode
                        (stream-K and a paged + packed + varlen + split case on sm_90a and sm_90),
                        anygroup (packed GQA groups 7, 12 (padded spans) and 128 (sliced, sm_90a)),
                        depthv (depth 192 with a 128-wide V: every tile walk, varlen, paged, split),
                        mla (depth 576 / depth_v 512, MLA's latent KV: paged, varlen keys, split, Sq 1-4),
                        d512 (head dim 512: GQA prefill, a window, varlen, packed paged decode + splits),
                        poles (long-pole splits of a packed continuous-batching step, both orders;
                        its decode rows alone, split by the key hint),
                        tiles (sm_90a's packed prefill tile, BM 128, and unpacked decode tile, BM 64),
                        gather (pages 1 and 3: persistent prefill at d128, d256, (192, 128) and d512, packed
                        decode + splits, FP8 KV, MLA),
                        snippets (memcheck on the GpuSnippetBounds tests), fp8 (the e4m3 kernels),
                        d96 (head dim 96 on the portable kernel: the last row at the allocation's
                        end, a window, varlen + paged + split, FP8 KV),
                        kvfp8 (FP8 KV caches, sm_90a and sm_90: packed decode, the persistent
                        walk with pages and varlen), window (sm_90a's windowed prefill at d64 and
                        d96: a small window's 64-row tile, the persistent and dynamic walks); default: prefill decode
  peers-stage           this call's .stage/cN (peers-pack) into $HOME/stage; once every part is there,
                        FA4 and FlashInfer installed (FA4_SITE, FI_SITE: zoo and profile find them)
  zoo [ARGS]            the benchmark zoo (bench/zoo.py ARGS, e.g. --rows decode --models llama3_8b):
                        fa4jit through its Python op and every peer (cuDNN, FA2, FlexAttention, and
                        FlashAttention-4 when FA4_SITE is set or peers-stage installed it; FlashInfer
                        on the MLA, paged, varlen and paged prefill rows when FI_SITE is set or
                        peers-stage installed it) in one
                        process at steady state; fa4jit from .whl/ if carried, else python/ over
                        .device/libfa4jit.so.0; BENCH_LIMIT (570)
  ab [A B]              two fa4jit arms on the same rows, no peers, ABBA passes; an arm is
                        binary[:FA4JIT_TUNE[:bench args, '+' for spaces]] (default fa4jit_base
                        fa4jit). ROWS='B,H,S,D,mask[+score_mod][,dtype];...' (H: query and KV heads,
                        or Hq/Hkv for GQA; D: head dim, or D/Dv where V's differs; softcap: cap 30;
                        dtype bf16 default, e4m3, fp16), PASSES=2,
                        ARCH=sm_90a
  decode sweep          fa4jit bench over CFGS ('|'-separated JSON), SPLITS, PAGE, LAYOUTS on decode
                        shapes (fa4jit alone, each in its own process: for its own knobs, never
                        against a peer; peers: zoo --rows decode)
  python [-k EXPR]      fa4jit from .whl/ (or python/ over .device), run tests/python and (without -k)
                        bench/python_overhead.py
  profile prefill|decode  Nsight Compute on our fa4_fwd and on cuDNN's kernel (through SDPA; prefill: FlashAttention-4 too when FA4_SITE is set);
                        prefill: SHAPE=B,H,S,D[,Hkv] MASK=causal|none [PEERS='cudnn fa4'|none PAGE=rows] [OPCODES=1: executed
                        instructions per SASS opcode instead of the sections; SOURCE=1: warp-stall samples per
                        SASS instruction, summed by dev/stall_samples.py]; decode: SHAPES="B,Sq,Sk ..." [HEADS=H,Hkv
                        PAGE=rows PEERS=cudnn|none SOURCE=1]
  sweep [FILE]          fa4jit bench over FA4JIT_TUNE settings (default bench/sweep.txt)
  kvfp8                 FP8 KV caches: `fa4jit check` on sm_90a and sm_90 (speed: zoo --rows fp8kv)
  fp8                   FP8 (e4m3) kernels: `fa4jit check` on a few configs and the GpuFp8 tests
  all                   info, tests, sanitize, a zoo subset in one call, each stage timed; keep the call
                        under the device tool's 600 s: TEST_LIMIT 220, SAN_LIMIT 150 (all sets
                        together; default 400; a case past it is reported NOT RUN and fails the
                        call), BENCH_LIMIT 170

Full verification in one device call (timeout_s 600, carry .device):
  here:  tools/gpu.sh pack --base /tmp/base/build
  there: OUT=$OUT tools/gpu.sh all
EOF
}

export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FA4JIT_CACHE_DIR=${FA4JIT_CACHE_DIR:-/tmp/fa4jit-cache} FA4JIT=$PWD/.device/fa4jit
export FA4JIT_CLI_PATH=$PWD/.device/fa4jit PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
F=.device/fa4jit

need() { [[ -x $F && -x .device/fa4jit_tests ]] || { echo "gpu.sh: no .device/ binaries: run 'tools/gpu.sh pack' here and carry .device"; exit 2; }; }

pack() {
  local base=""
  [[ ${1:-} == --base ]] && { base=${2:?--base DIR}; [[ -x $base/fa4jit ]] || { echo "pack: $base/fa4jit missing"; exit 2; }; }
  cmake --build build -j"$(nproc)" >/dev/null || { echo "pack: build failed"; exit 1; }
  rm -rf .device && mkdir -p .device
  strip -o .device/fa4jit build/fa4jit
  strip -o .device/fa4jit_tests build/tests/fa4jit_tests
  strip -o .device/libfa4jit.so.0 build/libfa4jit.so.0  # the Python package's library (gpu.sh py_env)
  local t
  for t in build/tests/cache/fa4jit_cache_tests build/tests/cache/fa4jit_cache_worker build/tests/cache/fa4jit_cache_runtime_tests; do
    [[ -f $t ]] && strip -o ".device/$(basename "$t")" "$t"
  done
  [[ -n $base ]] && strip -o .device/fa4jit_base "$base/fa4jit"
  # Libraries the device image lacks (hiredis for the Redis tier, which the binaries dlopen under its
  # SONAME, the file libhiredis.so points to); LD_LIBRARY_PATH has .device, which dlopen searches.
  t=$(sed -n 's/^HIREDIS_LIBRARY:FILEPATH=//p' build/CMakeCache.txt)
  [[ -n $t && -e $t ]] && cp -L "$t" ".device/$(basename "$(readlink -f "$t")")"
  cp "$(command -v redis-server 2>/dev/null || echo /dev/null)" .device/ 2>/dev/null || true
  du -sh .device
}

info() {
  need
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  date -u
  git log -1 --format='commit %h %s' 2>/dev/null
  $F info
  timeout 120 $F check --require-gpu --batch 2 --seqlen 1024 --heads 16 --kv-heads 4
}

tests() {  # the filters run side by side, each in SHARDS gtest shards (kernel compiles use the 16 cores; one GPU is enough)
  need
  local filters=("$@") f i k name rc pids=() names=() labels=() start=$SECONDS shards=${SHARDS:-4}
  [[ ${#filters[@]} -gt 0 ]] || filters=('GpuFeatures*' 'Gpu*:ApiExample*-GpuFeatures*')
  for i in "${!filters[@]}"; do
    for ((k = 0; k < shards; k++)); do
      name=$(echo "${filters[$i]}" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-40)_s$k
      names+=("$name")
      labels+=("${filters[$i]} (shard $((k + 1))/$shards)")
      GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k timeout "${TEST_LIMIT:-240}" .device/fa4jit_tests \
        --gtest_filter="${filters[$i]}" --gtest_brief=1 >"$OUT/tests_$name.log" 2>&1 &
      pids+=($!)
    done
  done
  for i in "${!names[@]}"; do
    wait "${pids[$i]}"; rc=$?
    f=$OUT/tests_${names[$i]}.log
    echo "== tests ${labels[$i]}: rc=$rc ($((SECONDS - start)) s since start), $(grep -c 'Failure' "$f") failures; $(tail -1 "$f")"
    grep -E "^\[  (FAILED|PASSED)|Failure|rel_l2=" "$f" | grep -v "^\[  PASSED" | cut -c1-260 | head -12
    (( rc == 0 )) || fail=1
  done
}

# One sanitized `fa4jit check` within the set's time (san_deadline): TUNE TOOL ARCH CONFIG-JSON CHECK-ARGS...
san_check() {
  local tune=$1 tool=$2 arch=$3 cfg=$4 rc left=$((san_deadline - SECONDS))
  shift 4
  if (( left < 10 )); then echo "NOT RUN (SAN_LIMIT): ${tune:-default} $arch $cfg $* | $tool"; fail=1; return; fi
  echo "$cfg" > /tmp/gpu_san.json
  FA4JIT_TUNE=$tune timeout $((left < 120 ? left : 120)) compute-sanitizer --tool "$tool" --error-exitcode 9 $F check \
    --require-gpu --config /tmp/gpu_san.json --arch "$arch" "$@" > /tmp/gpu_san.log 2>&1
  rc=$?
  echo "${tune:-default} $arch $cfg $* | $tool rc=$rc: $(tail -3 /tmp/gpu_san.log | tr '\n' ' ' | tail -c 200)"
  cat /tmp/gpu_san.log >> "$OUT/sanitize.log"
  (( rc == 0 )) || fail=1
}

# TUNE FIELDS CASE...: each CASE "MASK CHECK-ARGS..." under memcheck, racecheck and synccheck, on
# the sm_90a config {FIELDS,"mask":"MASK"}.
san_masks() {
  local tune=$1 fields=$2 c m rest tool
  shift 2
  for c in "$@"; do
    read -r m rest <<<"$c"
    for tool in memcheck racecheck synccheck; do
      san_check "$tune" $tool sm_90a "{$fields,\"mask\":\"$m\"}" $rest
    done
  done
}

# Each case 'CONFIG_JSON|FLAGS' under memcheck, racecheck and synccheck on ARCH.
san_cases() {
  local arch=$1 c tool
  shift
  for c in "$@"; do
    for tool in memcheck racecheck synccheck; do
      san_check "" $tool "$arch" "${c%%|*}" ${c#*|}
    done
  done
}

sanitize() {
  need
  local sets=("$@") s c tune d m tool t rc gtest
  [[ ${#sets[@]} -gt 0 ]] || sets=(prefill decode)
  san_deadline=$((SECONDS + ${SAN_LIMIT:-400}))  # for the whole verb
  for s in "${sets[@]}"; do
    local start=$SECONDS
    echo "== sanitize $s"
    case $s in
      prefill)  # "FA4JIT_TUNE depth mask check-args" ('-': the default tuning; varlen cases pass the
        # longest key length as max_seqlen_k, the schedule's model, unless --max-seqlen-k 0)
        local cases=(
          '- 128 causal --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700'
          'persistent=1 128 none --batch 1 --heads 4 --seqlen-q 200 --seqlen-k 3000 --splits 3'
          '- 64 causal --batch 2 --heads 4 --seqlen-q 500 --seqlen-k 900'
          '- 128 causal --heads 4 --seqlens-q 300 0 129 --seqlens-k 300 50 700'
          '- 128 causal --heads 4 --seqlens-q 300 0 129 --seqlens-k 300 50 700 --max-seqlen-k 0'
          '- 128 causal --heads 4 --seqlens-q 900 97 512 --seqlens-k 900 97 512'
          'persistent=1 128 none --batch 67 --heads 2 --seqlen-q 121 --seqlen-k 637'
          '- 128 causal --batch 3 --heads 16 --seqlen-q 384 --seqlen-k 384'
          '- 128 causal --batch 2 --heads 40 --seqlen-q 400 --seqlen-k 150'
          'wg_spans=1 128 causal --batch 2 --heads 4 --seqlen-q 515 --seqlen-k 579'
          'persistent=0 128 causal --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700'
          '- 256 causal --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700'
          '- 192 causal --heads 4 --seqlens-q 300 0 129 --seqlens-k 300 50 700'
          '- 96 none --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 900 --splits 3'
          '- 96 causal --heads 4 --seqlens-q 300 0 129 --seqlens-k 300 50 700'
          '- 96 causal --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700')
        for c in "${cases[@]}"; do
          read -r tune d m rest <<<"$c"
          [[ $tune == - ]] && tune=""
          for tool in memcheck racecheck synccheck; do
            san_check "$tune" $tool sm_90a "{\"depth\":$d,\"mask\":\"$m\"}" $rest
          done
        done ;;
      dynamic)  # the dynamic walk (persistent=3: units claimed from a counter, handed to the consumers in
        # shared memory with Q): the walk's end, varlen tails, keyless tiles, splits, TMA and gathered pages
        local cases=(
          'causal --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700'
          'none --batch 1 --heads 4 --seqlen-q 200 --seqlen-k 3000 --splits 3'
          'causal --heads 4 --seqlens-q 300 0 129 --seqlens-k 300 50 700'
          'causal --batch 3 --heads 4 --seqlen-q 700 --seqlen-k 250'
          'causal --batch 3 --heads 4 --seqlen-q 300 --seqlens-k 900 64 333 --page-size 64'
          'causal --batch 3 --heads 4 --seqlen-q 300 --seqlens-k 900 64 333 --page-size 16'
          'none --batch 3 --heads 4 --seqlen-q 300 --seqlens-k 900 64 333 --page-size 3')
        san_masks persistent=3 '"depth":128' "${cases[@]}" ;;
      depthv)  # V narrower than Q and K (depth 192, depth_v 128): every tile walk (causal's default: dynamic), varlen, paged, split, packed
        local cases=(
          '- causal --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700'
          'persistent=1 causal --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700'
          'persistent=1 none --batch 1 --heads 4 --seqlen-q 200 --seqlen-k 3000 --splits 3'
          'persistent=2 causal --batch 2 --heads 8 --seqlen-q 1 --seqlen-k 3000'
          '- causal --heads 4 --seqlens-q 300 0 129 --seqlens-k 300 50 700'
          '- causal --batch 2 --heads 4 --seqlen-q 500 --seqlen-k 900 --page-size 64 --splits 3'
          '- causal --batch 3 --heads 8 --seqlen-q 2 --seqlens-k 900 64 333 --page-size 64 --pack-gqa --splits 3')
        for c in "${cases[@]}"; do
          read -r tune m rest <<<"$c"
          [[ $tune == - ]] && tune=""
          for tool in memcheck racecheck synccheck; do
            san_check "$tune" $tool sm_90a "{\"depth\":192,\"depth_v\":128,\"mask\":\"$m\"}" $rest
          done
        done ;;
      mla)  # MLA's absorbed decode (depth 576, depth_v 512: latent KV, O split over two warpgroups sharing P),
        # over a 16-bit and an e4m3 latent cache ("kv": the converters' 64-byte e4m3 rows, BN 32)
        local cases=(
          'causal - --batch 3 --heads 16 --kv-heads 1 --seqlen-q 1 --seqlens-k 900 64 333 --page-size 64 --pack-gqa'
          'causal - --batch 2 --heads 128 --kv-heads 1 --seqlen-q 4 --seqlen-k 700 --pack-gqa --splits 3'
          'none - --batch 2 --heads 32 --kv-heads 1 --seqlen-q 2 --seqlens-k 300 1000 --page-size 16 --pack-gqa --splits 0'
          'causal e4m3 --batch 3 --heads 16 --kv-heads 1 --seqlen-q 1 --seqlens-k 900 64 333 --page-size 64 --pack-gqa'
          'causal e4m3 --batch 2 --heads 128 --kv-heads 1 --seqlen-q 4 --seqlen-k 700 --pack-gqa --splits 3'
          'none e4m3 --batch 2 --heads 32 --kv-heads 1 --seqlen-q 2 --seqlens-k 300 1000 --page-size 16 --pack-gqa --splits 0')
        for c in "${cases[@]}"; do
          read -r m kv rest <<<"$c"
          local cfg="{\"depth\":576,\"depth_v\":512,\"mask\":\"$m\"}"
          [[ $kv == - ]] || cfg="{\"depth\":576,\"depth_v\":512,\"mask\":\"$m\",\"kv_dtype\":\"$kv\"}"
          for tool in memcheck racecheck synccheck; do
            san_check "" $tool sm_90a "$cfg" $rest
          done
        done ;;
      poles)  # long-pole splits (GridWalk::long_pole_split): a packed continuous-batching step whose
        # short sequences split their one tile into pieces by their own keys (partial slots,
        # split_count / split_row) beside whole tiles, an empty sequence and one of 9 queries;
        # contiguous, then the batch reversed over pages of 16 (stale slots, which one process's second
        # launch meets, are GpuPackGqa.LongPoleSplitsMatchReference's); and the decode rows alone over
        # packed keys, which split by the max_seqlen_k hint (every listed tile in even shares)
        local cases=(
          'causal --heads 14 --kv-heads 2 --seqlens-q 1 1 5 8 9 0 300 --seqlens-k 3000 5000 4000 2000 2000 50 700 --pack-gqa'
          'causal --heads 14 --kv-heads 2 --seqlens-q 300 0 9 8 5 1 1 --seqlens-k 700 50 2000 2000 4000 5000 3000 --page-size 16 --pack-gqa'
          'causal --heads 14 --kv-heads 2 --seqlens-q 1 1 1 1 1 --seqlens-k 3000 5000 4000 2000 50 --pack-gqa')
        san_masks "" '"depth":128' "${cases[@]}" ;;
      tiles)  # sm_90a's tiles beside its defaults (jit::choose_kernel): the packed prefill tile (BM 128; 192
        # at d64) on an uneven prefill batch and a continuous-batching step; the unpacked decode tile (BM 64),
        # also an MHA step's (docs/PERF.md run 100: its decode rows split as long poles; page 1 gathers)
        local cases=('causal --heads 10 --kv-heads 2 --seqlens-q 700 1 300 129 0 64 5 --seqlens-k 700 1 450 129 50 64 5 --pack-gqa'
          'causal --heads 14 --kv-heads 2 --seqlens-q 1 1 5 8 9 0 300 --seqlens-k 3000 5000 4000 2000 2000 50 700 --pack-gqa')
        san_masks "" '"depth":128,"BM":128' "${cases[@]}"
        san_masks "" '"depth":64,"BM":192' "${cases[@]}"
        cases=('causal --batch 3 --heads 4 --kv-heads 4 --seqlen-q 5 --seqlens-k 900 1 333 --page-size 16 --splits 3 --sinks'
          'causal --heads 4 --kv-heads 4 --seqlens-q 5 1 64 --seqlens-k 777 40 300 --splits 0'
          'causal --heads 4 --kv-heads 4 --seqlens-q 1 1 1 1 1 1 5 8 200 0 1 --seqlens-k 1500 3000 2200 4000 900 2600 1800 2500 700 50 3300 --page-size 1')
        san_masks "" '"depth":128,"BM":64' "${cases[@]}" ;;
      d512)  # head dim 512 (O split over two warpgroups sharing P; K and V rings of BN 32): GQA prefill,
        # its persistent walk over more units than SMs (causal; unmasked with the split tail), a
        # window, varlen, packed paged decode with splits, on sm_90a
        local cases=(
          'causal --batch 2 --heads 4 --kv-heads 2 --seqlen-q 150 --seqlen-k 200'
          'causal --batch 2 --heads 16 --kv-heads 4 --seqlen-q 300 --seqlen-k 333'
          'none --batch 1 --heads 16 --kv-heads 4 --seqlen-q 600 --seqlen-k 333'
          'sliding_window --batch 1 --heads 2 --seqlen-q 300 --seqlen-k 300 --window 70,0'
          'causal --heads 4 --seqlens-q 100 0 1 --seqlens-k 100 50 129'
          'causal --batch 3 --heads 8 --kv-heads 2 --seqlen-q 1 --seqlens-k 900 64 333 --page-size 16 --pack-gqa --splits 3')
        san_masks "" '"depth":512' "${cases[@]}" ;;
      gather)  # pages no TMA box takes (page 1, 3): the producer warp's cp.async gather, on sm_90a (MLA's
        # latent rows of 16 bits and of e4m3 too; the persistent walks of head dims 256, (192, 128), 512;
        # an FP8 KV cache's decode and prefill)
        local cases=(
          '{"depth":128,"mask":"causal"}|--batch 2 --heads 4 --seqlen-q 300 --seqlens-k 300 517 --page-size 1'
          '{"depth":256,"mask":"causal"}|--batch 2 --heads 4 --kv-heads 2 --seqlen-q 300 --seqlens-k 300 517 --page-size 1'
          '{"depth":192,"depth_v":128,"mask":"causal"}|--batch 2 --heads 4 --seqlen-q 260 --seqlens-k 700 260 --page-size 3'
          '{"depth":512,"mask":"causal"}|--batch 2 --heads 16 --kv-heads 4 --seqlen-q 300 --seqlens-k 333 300 --page-size 1'
          '{"depth":128,"mask":"causal","group":7,"pack_gqa":true}|--batch 3 --heads 14 --seqlen-q 5 --seqlens-k 900 1 333 --page-size 3 --splits 3'
          '{"depth":128,"mask":"causal","group":8,"pack_gqa":true,"kv_dtype":"e4m3"}|--batch 2 --heads 16 --seqlen-q 1 --seqlens-k 700 64 --page-size 1'
          '{"depth":128,"mask":"causal","kv_dtype":"e4m3"}|--batch 2 --heads 4 --kv-heads 2 --seqlen-q 300 --seqlens-k 300 517 --page-size 1'
          '{"depth":576,"depth_v":512,"mask":"causal"}|--batch 2 --heads 16 --kv-heads 1 --seqlen-q 2 --seqlens-k 300 65 --page-size 1 --pack-gqa'
          '{"depth":576,"depth_v":512,"mask":"causal","kv_dtype":"e4m3"}|--batch 2 --heads 16 --kv-heads 1 --seqlen-q 2 --seqlens-k 300 65 --page-size 1 --pack-gqa --splits 3')
        san_cases sm_90a "${cases[@]}" ;;
      anygroup)  # packed GQA of groups that do not divide 64 rows (padded spans) and above (slices)
        for tool in memcheck racecheck synccheck; do
          for arch in sm_90a sm_90; do
            san_check "" $tool $arch '{"depth":128,"mask":"causal"}' --seqlens-q 5,1,16 --seqlens-k 300,17,777 \
              --page-size 16 --heads 14 --kv-heads 2 --pack-gqa --splits 3 --sinks
            san_check "" $tool $arch '{"depth":128,"mask":"causal"}' --batch 3 --seqlen-q 5 --seqlen-k 777 \
              --heads 24 --kv-heads 2 --pack-gqa --splits 0
          done
          san_check "" $tool sm_90a '{"depth":128,"mask":"causal"}' --batch 2 --seqlen-q 1 --seqlen-k 777 \
            --heads 128 --kv-heads 1 --pack-gqa --splits 0
        done ;;
      decode)
        for tool in memcheck racecheck synccheck; do
          san_check persistent=2 $tool sm_90a '{"depth":128,"mask":"causal","group":4,"pack_gqa":true}' \
            --batch 5 --seqlen-q 1 --seqlen-k 4100 --heads 8 --kv-heads 2 --pack-gqa --splits 0
          for arch in sm_90a sm_90; do
            san_check "" $tool $arch '{"depth":128,"mask":"causal"}' --seqlens-q 5,0,40 --seqlens-k 300,17,130 \
              --page-size 64 --heads 8 --kv-heads 2 --pack-gqa --splits 3 --sinks
          done
        done ;;
      snippets)  # reads past an aux array must be seen: pad every allocation where supported
        local pad=()
        compute-sanitizer --help 2>/dev/null | grep -q -- '--padding' && pad=(--padding 4096)
        for t in IssueReproducerReadsOnlyTheAuxArrays PrefillSnippetsSeeOnlyTheSequence PackedGqaSnippetsSeeOnlyTheSequence; do
          timeout $((san_deadline - SECONDS > 10 ? san_deadline - SECONDS : 10)) compute-sanitizer --tool memcheck "${pad[@]}" --error-exitcode 9 --print-limit 20 \
            .device/fa4jit_tests --gtest_filter="GpuSnippetBounds.$t" > /tmp/gpu_snip.log 2>&1
          rc=$?
          gtest=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' /tmp/gpu_snip.log | tr '\n' ' ')
          echo "$t | memcheck ${pad[*]} rc=$rc invalid global reads: $(grep -c 'Invalid __global__' /tmp/gpu_snip.log)" \
            "| $(grep -E 'ERROR SUMMARY' /tmp/gpu_snip.log | tail -1) | $gtest"
          cat /tmp/gpu_snip.log >> "$OUT/sanitize.log"
          if [[ $rc -ne 0 || $gtest != *PASSED* ]]; then fail=1; grep -E -A4 'Invalid __global__|Failure' /tmp/gpu_snip.log | head -40; fi
        done ;;
      fp8)  # the FP8 kernels: V transposers, the Vt ring; persistent (default: causal, unmasked + split
        # tail, varlen; BM 128) and grid walks, GQA, varlen+paged+split+packed
        for tool in memcheck racecheck synccheck; do
          san_check "" $tool sm_90a '{"dtype":"e4m3","depth":128,"mask":"causal"}' --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700
          san_check "" $tool sm_90a '{"dtype":"e4m3","depth":64}' --batch 1 --heads 8 --kv-heads 2 --seqlen-q 300 --seqlen-k 1000
          # depth 64 unmasked: BN 160, a Vt stage of two blocks; paged (boxes of gcd(64, 160) = 32 rows) and varlen
          san_check "" $tool sm_90a '{"dtype":"e4m3","depth":64}' --page-size 64 --heads 4 --kv-heads 2 \
            --seqlens-q 300 0 129 --seqlens-k 300 50 700
          san_check "" $tool sm_90a '{"dtype":"e4m3","depth":128}' --batch 67 --heads 2 --kv-heads 2 --seqlen-q 200 --seqlen-k 637
          san_check "" $tool sm_90a '{"dtype":"e4m3","depth":128,"mask":"causal"}' --heads 4 --kv-heads 2 \
            --seqlens-q 300 0 129 --seqlens-k 300 50 700
          san_check "" $tool sm_90a '{"dtype":"e4m3","depth":128,"BM":128}' --batch 3 --heads 4 --seqlen-q 300 --seqlen-k 900
          san_check persistent=0 $tool sm_90a '{"dtype":"e4m3","depth":128,"mask":"causal"}' --batch 2 --heads 4 --seqlen-q 700 --seqlen-k 700
          san_check "" $tool sm_90a '{"dtype":"e4m3","depth":128,"mask":"causal"}' --seqlens-q 5,0,40 --seqlens-k 300,17,130 \
            --page-size 64 --heads 8 --kv-heads 2 --pack-gqa --splits 3 --sinks
        done ;;
      kvfp8)  # FP8 KV caches: sm_90a's converters and e4m3 rings, the portable kernel's e4m3 staging
        for tool in memcheck racecheck synccheck; do
          for arch in sm_90a sm_90; do
            san_check "" $tool $arch '{"depth":128,"kv_dtype":"e4m3","group":4,"pack_gqa":true}' --batch 3 --seqlen-q 1 \
              --seqlens-k 2100,1,777 --page-size 64 --heads 8 --kv-heads 2 --pack-gqa --splits 3 --sinks
            san_check "" $tool $arch '{"depth":64,"kv_dtype":"e4m3","mask":"causal","dtype":"fp16"}' --batch 2 --heads 4 \
              --kv-heads 2 --seqlen-q 300 --seqlen-k 500
          done
          # sm_90a's persistent walk with pages (the producer's per-tile branch on c.pages) and varlen
          san_check "" $tool sm_90a '{"depth":128,"kv_dtype":"e4m3","mask":"causal"}' --page-size 64 \
            --seqlens-q 300 0 129 --seqlens-k 300 50 700 --heads 4 --kv-heads 2
        done ;;
      d96)  # head dim 96 on the portable kernel (sm_90 here), padded to 128: one head whose last key
        # row ends the allocation (a read past column 96 would leave it), a window, varlen + paged +
        # split-KV, and an FP8 KV cache
        local cases=(
          '{"depth":96,"mask":"causal"}|--batch 1 --heads 1 --kv-heads 1 --seqlen-q 77 --seqlen-k 131'
          '{"depth":96,"mask":"sliding_window"}|--batch 2 --heads 4 --kv-heads 2 --seqlen-q 300 --seqlen-k 300 --window 70,0'
          '{"depth":96,"mask":"causal"}|--heads 2 --seqlens-q 100 0 1 --seqlens-k 100 50 129 --page-size 16 --splits 3'
          '{"depth":96,"mask":"causal","kv_dtype":"e4m3"}|--batch 1 --heads 1 --kv-heads 1 --seqlen-q 1 --seqlen-k 333')
        san_cases sm_90 "${cases[@]}" ;;
      window)  # sm_90a's windowed prefill at head dims 64 and 96 (docs/PERF.md runs 88, 89): the 64-row
        # tile a small window takes (three CTAs per SM claiming their tiles: runs 92, 94) with sinks,
        # varlen rows (units without Q rows claimed past) and gathered page-1 rows, the persistent
        # walk at d64 (BM 192), d96 (padded 128; the dynamic walk since run 95, varlen too), and d128
        # (Q in registers since run 107: S = Q K^T an RS wgmma)
        local cases=(
          '{"depth":64,"mask":"sliding_window","BM":64}|--batch 2 --heads 8 --kv-heads 2 --seqlen-q 400 --seqlen-k 400 --window 127,0 --sinks'
          '{"depth":64,"mask":"sliding_window","BM":64}|--batch 2 --heads 4 --kv-heads 2 --seqlen-q 300 --seqlen-k 300 --window 127,0 --page-size 1'
          '{"depth":64,"mask":"sliding_window","BM":64}|--heads 4 --kv-heads 2 --seqlens-q 300 1 129 --seqlens-k 300 50 700 --window 63,5'
          '{"depth":64,"mask":"sliding_window","BM":64}|--heads 4 --kv-heads 2 --seqlens-q 1 1 700 65 64 0 3 --seqlens-k 500 1 700 900 64 10 3 --window 127,0 --page-size 1'
          '{"depth":64,"mask":"sliding_window"}|--batch 2 --heads 4 --kv-heads 2 --seqlen-q 700 --seqlen-k 700 --window 300,0 --sinks'
          '{"depth":96,"mask":"sliding_window"}|--batch 2 --heads 4 --kv-heads 2 --seqlen-q 500 --seqlen-k 500 --window 200,0'
          '{"depth":96,"mask":"sliding_window"}|--heads 4 --kv-heads 2 --seqlens-q 1 300 0 129 --seqlens-k 50 300 10 700 --window 63,5 --page-size 1'
          '{"depth":128,"mask":"sliding_window"}|--batch 2 --heads 4 --kv-heads 2 --seqlen-q 700 --seqlen-k 900 --window 300,0'
          '{"depth":128,"mask":"sliding_window"}|--heads 4 --kv-heads 2 --seqlens-q 1 300 0 129 --seqlens-k 50 300 10 700 --window 63,5 --page-size 16')
        san_cases sm_90a "${cases[@]}" ;;
      *) echo "sanitize: unknown set '$s' (see tools/gpu.sh --help)"; exit 2 ;;
    esac
    echo "(sanitize $s: $((SECONDS - start)) s)"
  done
}

fp8() {
  need
  local c
  for c in '{"dtype":"e4m3","depth":128}|--batch 2 --seqlen 1024 --heads 8 --kv-heads 8' \
           '{"dtype":"e4m3","depth":128,"mask":"causal"}|--batch 2 --seqlen 1000 --heads 16 --kv-heads 4' \
           '{"dtype":"e4m3","depth":64,"mask":"causal","output_dtype":"fp16"}|--batch 2 --seqlen-q 300 --seqlen-k 777 --heads 4 --kv-heads 4'; do
    echo "${c%%|*}" > /tmp/gpu_fp8.json
    echo "== check ${c%%|*} ${c#*|}: $(timeout 120 $F check --require-gpu --config /tmp/gpu_fp8.json --arch sm_90a ${c#*|} 2>&1 | tail -2 | tr '\n' ' ')" || fail=1
  done
  TEST_LIMIT=${TEST_LIMIT:-300} tests 'GpuFp8*'
}

kvfp8() {  # FP8 KV caches: `fa4jit check` on both backends (speed: the zoo's fp8kv rows)
  need
  local c arch
  for c in '{"depth":128,"kv_dtype":"e4m3","group":4,"pack_gqa":true}|--batch 4 --seqlen-q 1 --seqlen-k 5000 --heads 32 --kv-heads 8 --pack-gqa --page-size 64' \
           '{"depth":128,"kv_dtype":"e4m3","mask":"causal","dtype":"fp16"}|--batch 2 --seqlen 1000 --heads 16 --kv-heads 4'; do
    echo "${c%%|*}" > /tmp/gpu_kvfp8.json
    for arch in sm_90a sm_90; do
      echo "== check $arch ${c%%|*} ${c#*|}: $(timeout 120 $F check --require-gpu --config /tmp/gpu_kvfp8.json --arch $arch ${c#*|} 2>&1 | tail -2 | tr '\n' ' ')"
      timeout 120 $F check --require-gpu --config /tmp/gpu_kvfp8.json --arch $arch ${c#*|} >/dev/null 2>&1 || fail=1
    done
  done
}

py_env() {  # fa4jit importable in this shell: the wheel in .whl/ if carried, else python/ over .device's library
  local whl
  set +f; whl=(.whl/fa4jit-*.whl); set -f
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
  if [[ -f ${whl[0]} ]]; then
    rm -rf /tmp/site
    python3 -m pip install -q --no-deps --no-index --target /tmp/site "${whl[0]}" 2>&1 | tail -2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
  else
    [[ -f .device/libfa4jit.so.0 ]] || { echo "py_env: neither .whl/fa4jit-*.whl nor .device/libfa4jit.so.0 (pack)"; exit 2; }
    export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} FA4JIT_LIBRARY=$PWD/.device/libfa4jit.so.0 FA4JIT_CLI=$PWD/$F
  fi
}

zoo() {  # the benchmark zoo (bench/zoo.py): fa4jit and its peers in this one process, at steady state
  py_env
  peer_sites
  local name=${ZOO_NAME:-zoo}  # several zoo runs in one call: ZOO_NAME names each one's files
  timeout "${BENCH_LIMIT:-570}" python3 bench/zoo.py --out "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1 || fail=1
  grep -v "^[a-z].*: fa4jit .* ms, best" "$OUT/$name.log" | tail -150
}

ab() {  # the same rows through two fa4jit arms, alternating ABBA (no peers: a change's own effect)
  need
  local A=${1:-fa4jit_base} B=${2:-fa4jit} rows pass row b h s d m t ta sa tb sb
  local ROWS=${ROWS:-16,16,2048,128,none;16,16,2048,128,causal;4,16,8192,128,none;4,16,8192,128,causal}
  tflops() {  # arm B H[/Hkv] S D[/Dv] mask[+score_mod] dtype -> "per-call stream" TFLOP/s
    local bin tune args flops mask=${6%%+*} mod=identity hq=${3%/*} hkv=${3#*/} dq=${5%/*} dv=${5#*/}
    [[ $6 == *+* ]] && mod=${6#*+}
    IFS=: read -r bin tune args <<<"$1"
    echo "{\"depth\":$dq,\"depth_v\":$dv,\"mask\":\"$mask\",\"score_mod\":\"$mod\",\"dtype\":\"${7:-bf16}\"}" > /tmp/gpu_ab.json
    flops=$(python3 -c "print(2*$2*$hq*$4*$4*($dq+$dv)*(0.5 if '$mask'=='causal' else 1.0))")
    FA4JIT_TUNE=$tune timeout 60 ".device/$bin" bench --json --config /tmp/gpu_ab.json --arch "${ARCH:-sm_90a}" --batch "$2" \
      --heads "$hq" --kv-heads "$hkv" --seqlen-q "$4" --seqlen-k "$4" --iters 20 ${args//+/ } $([[ $mod == softcap ]] && echo --softcap 30) 2>/dev/null | tail -1 |
      python3 -c "import json,sys; j=json.load(sys.stdin); print(f\"{$flops/(j['ms']*1e9):.0f} {$flops/(j['ms_stream']*1e9):.0f}\")" \
      2>/dev/null || echo "0 0"
  }
  echo "| row | pass | A: $A (call stream) | B: $B (call stream) | B / A call | B / A stream |"
  echo "|---|---|---|---|---|---|"
  IFS=';' read -ra rows <<<"$ROWS"
  for pass in $(seq 1 "${PASSES:-2}"); do
    for row in "${rows[@]}"; do
      IFS=, read -r b h s d m t <<<"$row"
      if (( pass % 2 )); then  # odd passes A then B, even B then A: drift falls on both arms
        read -r ta sa <<<"$(tflops "$A" "$b" "$h" "$s" "$d" "$m" "$t")"; read -r tb sb <<<"$(tflops "$B" "$b" "$h" "$s" "$d" "$m" "$t")"
      else
        read -r tb sb <<<"$(tflops "$B" "$b" "$h" "$s" "$d" "$m" "$t")"; read -r ta sa <<<"$(tflops "$A" "$b" "$h" "$s" "$d" "$m" "$t")"
      fi
      echo "| $b,$h,$s,$d $m ${t:-bf16} | $pass | $ta $sa | $tb $sb | $(python3 -c "print(f'{$tb / max($ta, 1):.3f} | {$sb / max($sa, 1):.3f}')") |"
    done
  done
}

decode() {  # `decode sweep`: fa4jit bench over configs, splits and layouts (fa4jit alone; peers: the zoo)
  need
  [[ ${1:-} == sweep ]] || { echo "decode: only 'decode sweep' is left; decode against peers is 'zoo --rows decode'"; exit 2; }
  local cfg cases shape sp case_ B SQ SK splits lay out
  IFS='|' read -ra cfgs <<<"${CFGS:-{\"depth\":128,\"mask\":\"none\"\}}"
  for cfg in "${cfgs[@]}"; do
    echo "$cfg" > /tmp/gpu_dc.json
    cases=""  # every shape x SPLITS (0: automatic); K/V layout bhsd (the peers') or bshd
    for shape in "8,1,32768" "64,1,4096" "1,1,131072" "8,16,32768"; do
      for sp in ${SPLITS:-0}; do cases="$cases $shape,$sp"; done
    done
    for case_ in $cases; do
      IFS=, read -r B SQ SK splits <<<"$case_"
      for lay in ${LAYOUTS:-bhsd}; do
        out=$($F bench --json --config /tmp/gpu_dc.json --arch "${ARCH:-sm_90a}" --batch "$B" --heads 32 --kv-heads 8 \
              --seqlen-q "$SQ" --seqlen-k "$SK" --iters 50 --splits "$splits" --pack-gqa ${PAGE:+--page-size $PAGE} \
              $([[ $lay == bhsd ]] && echo --kv-bhsd) 2>&1 | tail -1)
        python3 -c '
import json, sys
cfg, shape, t = sys.argv[1:]
try:
    j = json.loads(t)
    print(cfg, shape, j.get("kv_bhsd"), "splits", j["num_splits"], "%.0f us" % (j["ms"] * 1e3), "%.2f TB/s" % j["kv_TBps"],
          "stream %.0f us" % (j["ms_stream"] * 1e3), "%.2f TB/s" % j["kv_TBps_stream"],
          "host %.1f us/launch" % j["host_launch_us"])
except Exception:
    print(cfg, shape, t[:200])' "$cfg" "$B $SQ $SK" "$out"
      done
    done
  done
}

python_() {
  local cmd
  py_env
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch, fa4jit; print("python", sys.version.split()[0], "torch", torch.__version__, "fa4jit", fa4jit.__version__, fa4jit.library_path); print(fa4jit.runtime_info())' 2>&1 | tee "$OUT/python_info.log"
  cmd=(python3 -m pytest -q -rs -p no:cacheprovider -W ignore::UserWarning --rootdir tests/python tests/python -s)
  [[ ${1:-} == -k ]] && cmd+=(-k "${2:?-k EXPR}")
  timeout 480 "${cmd[@]}" 2>&1 | tee "$OUT/python_tests.log" |
    grep -E "passed|failed|error|max \|logit|agreement|frames compiled|graph\(s\)|FAILED|SKIPPED" | tail -60
  echo "pytest rc=${PIPESTATUS[0]}"; (( PIPESTATUS[0] == 0 )) || fail=1
  [[ ${1:-} == -k ]] && return  # a selection of tests: no overhead table
  timeout 120 python3 bench/python_overhead.py --json "$OUT/python_overhead.json" 2>&1 | tee "$OUT/python_overhead.log"
}

# ncu on our timed fa4_fwd (launches: first, warm-up, timed, stream) and on cuDNN through SDPA.
sdpa_call() {  # B H HKV SQ SK D [causal] [cudnn|fa4]: warm-up, then one call inside cudaProfilerStart/Stop
  cat > /tmp/gpu_sdpa_call.py <<'EOF'
import os
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
B, H, Hkv, Sq, Sk, D = (int(x) for x in sys.argv[1:7])
causal = len(sys.argv) > 7 and sys.argv[7] == "causal"
peer = sys.argv[8] if len(sys.argv) > 8 else "cudnn"
q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
if peer == "fa4":  # FlashAttention-4 (FA4_SITE: ../shared/bench/fa4_peer.sh), (B, S, H, D) layout
    import site
    site.addsitedir(os.environ["FA4_SITE"])
    from flash_attn.cute import flash_attn_func
    q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    call = lambda: flash_attn_func(q, k, v, causal=causal)
else:
    def call():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=H != Hkv)
for _ in range(3):
    call()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
call()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
EOF
  echo /tmp/gpu_sdpa_call.py
}

stall_metrics() {  # warp stall reasons, cycles per issued instruction (WarpStateStats' breakdown)
  local r m=""
  for r in barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle \
           membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait; do
    m+="${m:+,}smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  echo "$m"
}

profile() {
  need
  peer_sites
  local what=${1:-} py args B H S D SQ SK shape
  py=$(sdpa_call)
  local sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
    --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats"
  local keys="^  [a-zA-Z_].*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Grid Size|Block Size|Dynamic Shared|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L2 Hit Rate|Waves Per SM"
  case $what in
    prefill)  # SHAPE=B,H,S,D[,Hkv]; FlashAttention-4 too when FA4_SITE is set (stage B of fa4_peer.sh);
              # PEERS='cudnn fa4' (default: both where present; none: ours alone); OPCODES=1: the
              # instruction mix instead; PAGE=rows: ours over paged K/V (the peers run contiguous)
      local HKV tag peer peers=${PEERS:-cudnn ${FA4_SITE:+fa4}}
      [[ $peers == none ]] && peers=""
      IFS=, read -r B H S D HKV <<<"${SHAPE:-16,16,2048,128}"
      HKV=${HKV:-$H}
      tag=${B}_${H}_${HKV}_${S}_${D}_${MASK:-causal}${PAGE:+_p$PAGE}
      if [[ ${OPCODES:-0} == 1 ]]; then  # instruction mix only: executed warp instructions per SASS opcode
        sections="--metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum,sm__cycles_elapsed.max --print-metric-instances details"
        keys="sass__inst_executed_per_opcode|inst_executed.sum|cycles_elapsed"
      elif [[ ${SOURCE:-0} == 1 ]]; then  # stall samples per SASS instruction (ncu's source page, CSV)
        sections="--section SourceCounters --metrics group:smsp__pcsamp_warp_stall_reasons --page source --csv --print-source sass"
        keys="\"Kernel Name\""
      else
        sections="$sections --metrics $(stall_metrics)"
        keys="$keys|issue_stalled"
      fi
      echo "{\"depth\":$D,\"mask\":\"${MASK:-causal}\"}" > /tmp/gpu_pp.json
      args="bench --config /tmp/gpu_pp.json --arch sm_90a --batch $B --heads $H --kv-heads $HKV --seqlen-q $S --seqlen-k $S
            --warmup 1 --iters 1${PAGE:+ --page-size $PAGE}"
      $F $args >/dev/null  # compile outside the profiler
      timeout 200 ncu --clock-control none --kernel-name regex:^fa4_fwd_ --launch-skip 2 --launch-count 1 $sections \
        $F $args > "$OUT/ncu_${tag}_ours.txt" 2>&1
      for peer in $peers; do
        timeout 200 ncu --clock-control none --profile-from-start off $sections \
          python3 "$py" "$B" "$H" "$HKV" "$S" "$S" "$D" "${MASK:-causal}" "$peer" > "$OUT/ncu_${tag}_$peer.txt" 2>&1
      done
      for f in ours $peers; do echo "== $f $B,$H/$HKV,$S,$D ${MASK:-causal}"; grep -E "$keys" "$OUT/ncu_${tag}_$f.txt" | head -60; done
      if [[ ${SOURCE:-0} == 1 ]]; then
        for peer in $peers; do python3 dev/stall_samples.py "$OUT/ncu_${tag}_ours.txt" "$OUT/ncu_${tag}_$peer.txt"; done
        for f in ours $peers; do gzip -f "$OUT/ncu_${tag}_$f.txt"; done  # MBs of CSV otherwise
      fi ;;
    decode)  # SHAPES="B,Sq,Sk ..." HEADS=H,Hkv (32,8) PAGE=rows (paged K/V; cuDNN runs contiguous)
             # PEERS=cudnn|none; SOURCE=1: warp-stall samples per SASS instruction (dev/stall_samples.py)
      local H HKV kv tag
      IFS=, read -r H HKV <<<"${HEADS:-32,8}"
      echo "${CFG:-{\"depth\":128,\"mask\":\"none\"\}}" > /tmp/gpu_pd.json
      if [[ ${SOURCE:-0} == 1 ]]; then
        sections="--section SourceCounters --metrics group:smsp__pcsamp_warp_stall_reasons --page source --csv --print-source sass"
        keys="\"Kernel Name\""
      fi
      kv="--kv-bhsd"
      [[ -n ${PAGE:-} ]] && kv="--page-size $PAGE"
      for shape in ${SHAPES:-8,1,32768 1,1,131072}; do
        IFS=, read -r B SQ SK <<<"$shape"
        tag=${B}_${SQ}_${SK}_${H}_${HKV}${PAGE:+_p$PAGE}
        args="bench --config /tmp/gpu_pd.json --arch sm_90a --batch $B --heads $H --kv-heads $HKV --seqlen-q $SQ --seqlen-k $SK
              --pack-gqa $kv --warmup 1 --iters 1"
        $F $args >/dev/null
        timeout 240 ncu --clock-control none --kernel-name regex:^fa4_fwd_ --launch-skip 2 --launch-count 1 $sections \
          $F $args > "$OUT/ncu_ours_$tag.txt" 2>&1
        [[ ${PEERS:-cudnn} == cudnn ]] && timeout 240 ncu --clock-control none --profile-from-start off $sections \
          python3 "$py" "$B" "$H" "$HKV" "$SQ" "$SK" 128 > "$OUT/ncu_cudnn_$tag.txt" 2>&1
        for f in "$OUT/ncu_ours_$tag.txt" "$OUT/ncu_cudnn_$tag.txt"; do [[ -f $f ]] || continue; echo "== $f"; grep -E "$keys" "$f" | head -40; done
        if [[ ${SOURCE:-0} == 1 ]]; then
          python3 dev/stall_samples.py "$OUT/ncu_ours_$tag.txt"
          for f in "$OUT/ncu_ours_$tag.txt" "$OUT/ncu_cudnn_$tag.txt"; do [[ -f $f ]] && gzip -f "$f"; done
        fi
      done ;;
    *) echo "profile: prefill or decode"; exit 2 ;;
  esac
}

sweep() {  # each line of FILE: <FA4JIT_TUNE or -> <config json> <bench flags...>
  need
  local tune cfg flags
  while read -r tune cfg flags; do
    [[ -z $tune || ${tune:0:1} == "#" ]] && continue
    echo "$cfg" > /tmp/gpu_sweep.json
    [[ $tune == - ]] && tune=""
    printf '%-40s %-50s ' "$tune" "$cfg"
    FA4JIT_TUNE=$tune $F bench --config /tmp/gpu_sweep.json $flags 2>&1 | tail -1
  done < "${1:-bench/sweep.txt}"
}

# The peers reach the GPU machine in parts: FA4's CUDA 13 DSL library (~61 MiB packed) and FlashInfer's
# wheel (~60 MiB) each pass the 64 MiB a call carries once the working tree travels beside them.
# peers-pack (here) puts every file of the two recipes in one stream cut into .stage/cN/part;
# peers-stage (there, one call per part, back to back) gathers the parts in $HOME/stage and, with the
# last, unpacks them (the recipes' stage steps).
PEER_HOME=${HOME:-/root}
PEER_PIP=${PEER_PIP:-python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir}  # tools/gpu_sh_test.sh: a stand-in
peers_pack() {
  local mib=${1:-50} whl=() parts names=() n=0 f
  [[ -f .fa4/big/cu13.tar.xz && -d .fa4/small ]] || { echo "peers-pack: no .fa4/ (bash ../shared/bench/fa4_peer.sh prepare)"; exit 2; }
  set +f; whl=(.fi/a/flashinfer_python-*.whl); set -f
  rm -rf .stage && mkdir -p .stage/tmp
  tar -C .fa4 -cf .stage/tmp/fa4small.tar small
  names=(cu13.tar.xz fa4small.tar)
  parts=(.fa4/big/cu13.tar.xz .stage/tmp/fa4small.tar)
  if [[ -f ${whl[0]} && -d .fi/b ]]; then
    tar -C .fi -cf .stage/tmp/fib.tar b
    names+=("$(basename "${whl[0]}")" fib.tar); parts+=("${whl[0]}" .stage/tmp/fib.tar)
  else
    echo "peers-pack: no .fi/ (bash ../shared/bench/flashinfer_peer.sh prepare): FA4 only"
  fi
  for f in "${!parts[@]}"; do echo "${names[$f]} $(stat -c %s "${parts[$f]}")"; done > .stage/tmp/manifest
  cat "${parts[@]}" | split -b "${mib}M" -d -a 2 - .stage/tmp/part
  set +f
  for f in .stage/tmp/part*; do
    mkdir -p ".stage/c$n" && mv "$f" ".stage/c$n/" && cp .stage/tmp/manifest ".stage/c$n/"
    n=$((n + 1))
  done
  for f in .stage/c*/; do echo "$n" > "${f}count"; done
  set -f
  rm -rf .stage/tmp
  grep -qx '/.stage/' .git/info/exclude 2>/dev/null || echo "peers-pack: add /.stage/ to .git/info/exclude"
  echo "peers-pack: $n calls, back to back, each: carry [\".stage/cK\"], command tools/gpu.sh peers-stage (K = 0..$((n - 1)))"
}

peers_stage() {
  local dir f want have name size at=0
  set +f  # globs below are the shell's (the script's set -f is for gtest filters)
  dir=(.stage/c*)
  [[ -d ${dir[0]} ]] || { echo "peers-stage: no .stage/cN carried (tools/gpu.sh peers-pack here)"; exit 2; }
  mkdir -p "$PEER_HOME/stage"
  for f in "${dir[@]}"; do cp "$f"/part* "$f"/manifest "$f"/count "$PEER_HOME/stage/"; done
  want=$(cat "$PEER_HOME/stage/count")
  have=$(ls "$PEER_HOME"/stage/part* | wc -l)
  echo "peers-stage: $have of $want parts on this machine"
  (( have == want )) || return 0
  cd "$PEER_HOME/stage" || exit 1
  cat part* > stream
  while read -r name size; do  # the manifest's files, in the stream's order
    tail -c +$((at + 1)) stream | head -c "$size" > "$name"
    at=$((at + size))
  done < manifest
  rm -rf "$PEER_HOME/fa4_cu13" "$PEER_HOME/fa4site" "$PEER_HOME/fisite" small b && mkdir -p "$PEER_HOME/fa4_cu13"
  tar -xJf cu13.tar.xz -C "$PEER_HOME/fa4_cu13" && tar -xf fa4small.tar || { echo "peers-stage: FA4 unpack failed"; exit 1; }
  $PEER_PIP --target "$PEER_HOME/fa4site" small/*.whl &&
    cp -r "$PEER_HOME/fa4_cu13"/. "$PEER_HOME/fa4site"/ && echo "peers-stage: FA4 in $PEER_HOME/fa4site"
  if [[ -f fib.tar ]]; then  # FlashInfer beside FA4's DSL libraries (flashinfer_peer.sh's stages 1-3)
    tar -xf fib.tar
    $PEER_PIP --target "$PEER_HOME/fisite" flashinfer_python-*.whl &&
      $PEER_PIP --upgrade --target "$PEER_HOME/fisite" b/*.whl \
        small/apache_tvm_ffi*.whl small/nvidia_cutlass_dsl-*.whl small/nvidia_cutlass_dsl_libs_base*.whl \
        small/nvidia_cutlass_dsl_libs_core*.whl &&
      cp -r "$PEER_HOME/fa4_cu13"/. "$PEER_HOME/fisite"/ && echo "peers-stage: FlashInfer in $PEER_HOME/fisite"
  fi
  rm -f stream part*
}

# FA4_SITE / FI_SITE from peers-stage's installs where the caller set none.
peer_sites() {
  [[ -z ${FA4_SITE:-} && -d $PEER_HOME/fa4site/flash_attn ]] && export FA4_SITE=$PEER_HOME/fa4site
  [[ -z ${FI_SITE:-} && -d $PEER_HOME/fisite/flashinfer ]] && export FI_SITE=$PEER_HOME/fisite MAX_JOBS=${MAX_JOBS:-16}
  [[ -n ${FA4_SITE:-} ]] || echo "gpu.sh: FA4_SITE unset: FlashAttention-4 is not a peer (tools/gpu.sh peers-pack, peers-stage)"
}

stage() {  # NAME COMMAND...: runs it and says how long it took
  local name=$1 start=$SECONDS
  shift
  echo "######## $name"
  "$@"
  echo "######## $name took $((SECONDS - start)) s"
}

fail=0
verb=${1:-}
shift || true
case $verb in
  pack) pack "$@"; exit $? ;;
  peers-pack) peers_pack "$@"; exit $? ;;
  peers-stage) peers_stage; exit $? ;;
  -h|--help|help|"") usage; [[ -n $verb ]]; exit $? ;;
esac
mkdir -p "$OUT"
case $verb in
  info) info ;;
  tests) tests "$@" ;;
  sanitize) sanitize "$@" ;;
  zoo) zoo "$@" ;;
  ab) ab "$@" ;;
  decode) decode "$@" ;;
  python) python_ "$@" ;;
  profile) profile "$@" ;;
  sweep) sweep "$@" ;;
  fp8) fp8 "$@" ;;
  kvfp8) kvfp8 "$@" ;;
  all)  # stage limits that keep the call under 600 s: about 20 + 220 + 150 + 170
    stage info info
    TEST_LIMIT=${TEST_LIMIT:-220} stage tests tests
    SAN_LIMIT=${SAN_LIMIT:-150} stage sanitize sanitize prefill decode
    BENCH_LIMIT=${BENCH_LIMIT:-170} stage zoo zoo --rows decode --models llama3_8b,qwen2_5_7b
    echo "all: total $SECONDS s, $([[ $fail == 0 ]] && echo ok || echo FAILED)" ;;
  *) echo "gpu.sh: unknown verb '$verb'"; usage; exit 2 ;;
esac
exit $fail
