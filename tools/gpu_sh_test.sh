#!/usr/bin/env bash
# ctest tools.GpuDriverParsesAndDocumentsEveryVerb: tools/gpu.sh (the lent GPU's driver, never run
# by CI on a GPU) parses, its --help names every verb it dispatches, a bad verb is a usage error, and
# peers-pack / peers-stage carry the peers' files through calls of a few MiB each and rebuild them.
set -uo pipefail
cd "$(dirname "$0")/.."
bash -n tools/gpu.sh || { echo "FAIL: tools/gpu.sh does not parse"; exit 1; }
help=$(bash tools/gpu.sh --help) || { echo "FAIL: --help exit status $?"; exit 1; }
verbs=$(sed -n '/^case \$verb in/,/^esac/p' tools/gpu.sh | grep -oE '^  [a-z0-9-]+\)' | tr -d ' )' | sort -u)
[[ $(wc -w <<<"$verbs") -ge 10 ]] || { echo "FAIL: found only these verbs: $verbs"; exit 1; }
for v in $verbs; do
  grep -qE "^  $v( |$)" <<<"$help" || { echo "FAIL: --help does not describe the verb '$v'"; exit 1; }
done
bash tools/gpu.sh no-such-verb >/dev/null 2>&1
rc=$?
[[ $rc == 2 ]] || { echo "FAIL: an unknown verb exits $rc, not 2"; exit 1; }

# peers: stand-ins of FA4's and FlashInfer's prepared files (a 2.5 MiB DSL library), packed in 1 MiB
# parts; each part staged from a tree holding it alone, as one device call carries it, into one $HOME.
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/repo/tools" "$t/repo/.fa4/big" "$t/repo/.fa4/small" "$t/repo/.fi/a" "$t/repo/.fi/b" "$t/lib/nvidia_cutlass_dsl" "$t/home"
cp tools/gpu.sh "$t/repo/tools/"
head -c 2600000 /dev/urandom > "$t/lib/nvidia_cutlass_dsl/lib.so"
tar -C "$t/lib" -cJf "$t/repo/.fa4/big/cu13.tar.xz" .
echo small > "$t/repo/.fa4/small/flash_attn_4-0-py3-none-any.whl"
head -c 300000 /dev/urandom > "$t/repo/.fi/a/flashinfer_python-0-py3-none-any.whl"
echo b > "$t/repo/.fi/b/cuda_tile-0-py3-none-any.whl"
(cd "$t/repo" && bash tools/gpu.sh peers-pack 1) > "$t/pack.log" 2>&1 || { cat "$t/pack.log"; echo "FAIL: peers-pack"; exit 1; }
parts=$(cd "$t/repo/.stage" && ls -d c*)
[[ $(wc -w <<<"$parts") -ge 3 ]] || { echo "FAIL: peers-pack made $parts, not 1 MiB parts"; exit 1; }
for c in $parts; do
  rm -rf "$t/call" && mkdir -p "$t/call/tools" "$t/call/.stage" && cp tools/gpu.sh "$t/call/tools/" && cp -r "$t/repo/.stage/$c" "$t/call/.stage/"
  (cd "$t/call" && HOME=$t/home OUT=$t/out PEER_PIP=true bash tools/gpu.sh peers-stage) > "$t/stage.log" 2>&1 ||
    { cat "$t/stage.log"; echo "FAIL: peers-stage of $c"; exit 1; }
done
cmp -s "$t/home/stage/cu13.tar.xz" "$t/repo/.fa4/big/cu13.tar.xz" &&
  cmp -s "$t/home/stage/flashinfer_python-0-py3-none-any.whl" "$t/repo/.fi/a/flashinfer_python-0-py3-none-any.whl" &&
  cmp -s "$t/home/stage/b/cuda_tile-0-py3-none-any.whl" "$t/repo/.fi/b/cuda_tile-0-py3-none-any.whl" &&
  cmp -s "$t/home/fa4site/nvidia_cutlass_dsl/lib.so" "$t/lib/nvidia_cutlass_dsl/lib.so" &&
  cmp -s "$t/home/fisite/nvidia_cutlass_dsl/lib.so" "$t/lib/nvidia_cutlass_dsl/lib.so" ||
  { cat "$t/stage.log"; echo "FAIL: peers-stage did not rebuild the peers' files"; exit 1; }
grep -q "FA4 in $t/home/fa4site" "$t/stage.log" && grep -q "FlashInfer in $t/home/fisite" "$t/stage.log" ||
  { cat "$t/stage.log"; echo "FAIL: peers-stage did not install both peers"; exit 1; }
echo "tools/gpu.sh: parses; --help covers" $verbs"; peers-pack / peers-stage rebuild the peers from" $parts
