#!/usr/bin/env bash
# ctest tools.GpuDriverParsesAndDocumentsEveryVerb: tools/gpu.sh (the lent GPU's driver, never run
# by CI on a GPU) parses, its --help names every verb it dispatches, and a bad verb is a usage error.
set -uo pipefail
cd "$(dirname "$0")/.."
bash -n tools/gpu.sh || { echo "FAIL: tools/gpu.sh does not parse"; exit 1; }
help=$(bash tools/gpu.sh --help) || { echo "FAIL: --help exit status $?"; exit 1; }
verbs=$(sed -n '/^case \$verb in/,/^esac/p' tools/gpu.sh | grep -oE '^  [a-z0-9]+\)' | tr -d ' )' | sort -u)
[[ $(wc -w <<<"$verbs") -ge 10 ]] || { echo "FAIL: found only these verbs: $verbs"; exit 1; }
for v in $verbs; do
  grep -qE "^  $v( |$)" <<<"$help" || { echo "FAIL: --help does not describe the verb '$v'"; exit 1; }
done
bash tools/gpu.sh no-such-verb >/dev/null 2>&1
rc=$?
[[ $rc == 2 ]] || { echo "FAIL: an unknown verb exits $rc, not 2"; exit 1; }
echo "tools/gpu.sh: parses; --help covers" $verbs
