export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/local/cuda/lib FA4JIT_CACHE_DIR=/tmp/fa4jit-cache
F=.device/fa4jit
run() { echo "$1" > /tmp/a.json; shift; echo "== $(cat /tmp/a.json) $*"; $F check --config /tmp/a.json --arch sm_90a "$@" 2>&1 | grep -o "rel_l2=[^ ]* max_abs=[^ ]* lse_max_abs=[^ ]*"; }
run '{"depth":128,"mask":"causal","score_mod":"softcap"}' --batch 1 --seqlen-q 12 --seqlen-k 1116 --heads 4 --kv-heads 1 --sinks --softcap 5
run '{"depth":128,"mask":"causal","score_mod":{"kind":"custom","snippet":"return score;"}}' --batch 1 --seqlen-q 12 --seqlen-k 1116 --heads 4 --kv-heads 1 --sinks
run '{"depth":128,"mask":"causal","score_mod":"alibi"}' --batch 1 --seqlen 300 --heads 4 --kv-heads 1 --sinks
run '{"depth":128,"mask":"none","score_mod":"alibi"}' --batch 1 --seqlen 300 --heads 1 --kv-heads 1 --sinks
run '{"depth":128,"mask":"none","score_mod":"alibi"}' --batch 1 --seqlen 100 --heads 1 --kv-heads 1 --sinks
run '{"depth":128,"mask":"none","score_mod":"alibi"}' --batch 1 --seqlen 100 --heads 1 --kv-heads 1
run '{"depth":128,"mask":"none","score_mod":"alibi"}' --batch 1 --seqlen 100 --heads 1 --kv-heads 1 --sinks --arch sm_90
