"""The launch schema: every field of fa4jit_launch_args (include/fa4jit/c_api.h), jit::LaunchArgs
(include/fa4jit/kernel.hpp) and the ctypes packing of _lib.py, and the launch checks that C++
(runtime/launch_args.cpp: pack_params) and Python (_checks.py, on real and fake tensors) both run.

This file is data only (Python literals, no imports): tools/gen_launch.py reads it with
ast.literal_eval at build time and generates the C struct, the C++ struct and the C -> C++ copy
and the C++ check function; the Python package imports it. Adding a launch argument is one row
in FIELDS (appended: the C struct's layout is an ABI, fields are only ever appended, and the
C API version grows) plus its device use. docs/ARCHITECTURE.md ("where do I change X").

FIELDS rows, in C struct order:
  name     the C field name (and the Python name)
  c        C type: int32_t, uint32_t, int64_t, uint64_t, float, a pointer (T*), fa4jit_tensor, or an
           array "T[4]"
  cpp      the jit::LaunchArgs member it maps to ("block_mask.data": a member of the nested struct
           LaunchArgs::BlockMask); None: C only (size, device)
  cpp_type the member's C++ type where it is not the C type's usual spelling
  default  the value fa4jit_launch_args_init and LaunchArgs give it (0 / NULL when absent)
  since    the C API version that added it
  variants the launch variants that use it (documentation): all, varlen, paged, fp8, split, mask,
           score
  doc      one line, copied into both headers

CHECKS: each a rule the launch arguments must satisfy and the message when they do not, in a small
Python subset (names, numbers, q.shape[i] / q.stride[i] / q.itemsize, and/or/not, comparisons, + - * // %,
x if c else y) over the fields (a pointer is 0 when null, else nonzero) and the LETS, which are
evaluated first, in order. `when` guards the rule. Messages name the field; `{expr}` placeholders
are formatted with the expression's value (integers only). `each` ({"t": "q,k,v,o", ...}) makes one
check per combination of the values, with {t} (...) replaced in when, rule and msg first.
"""

# The custom ops' arguments, in order: ops.Call's fields and the torch.library schemas of fa4jit::fwd
# (all but out and lse) and fa4jit::fwd_out (all but return_lse and out_bhsd; out mutated), as
# (name, schema type, default). What the public functions pass down to the launch: tensors are
# (B, S, H, D) views (varlen: (1, total, H, D)), snippets str, window_left -2 = no window, pack_gqa
# -1/0/1 (auto/off/on), block_mask uint8 (B or 1, Hq or 1, q blocks, kv blocks) (the run-time tile map,
# LaunchArgs::block_mask; blocks of block_mask_q rows and block_mask_k keys). Arguments past out_bhsd
# were appended (descale_* with C API version 3, max_seqlen_k with 5, block_mask later, page_descale with 8,
# top_left later) and keep schema defaults, so callers written before them call the ops unchanged.
# top_left: the causal / window mask aligned top-left (query i's diagonal at key i, the config's
# mask.top_left), which traced FlexAttention bands lower to (fa4jit.flex.Band); the public functions'
# causal and window stay bottom-right. mask_prefix: keys [0, mask_prefix) visible to every query too
# (the config's mask.prefix; 0 none), which traced prefix-LM masks lower to (fa4jit.flex.Band.prefix).
OP_ARGS = [
    ("q", "Tensor", None), ("k", "Tensor", None), ("v", "Tensor", None),
    ("out", "Tensor?", None), ("lse", "Tensor?", None),
    ("cu_seqlens_q", "Tensor?", None), ("cu_seqlens_k", "Tensor?", None), ("seqused_k", "Tensor?", None),
    ("page_table", "Tensor?", None), ("sinks", "Tensor?", None), ("alibi_slopes", "Tensor?", None),
    ("aux", "Tensor[]", []), ("scalars", "float[]", []), ("aux_names", "str", ""),
    ("causal", "bool", False), ("window_left", "SymInt", -2), ("window_right", "SymInt", -2),
    ("chunk_size", "SymInt", 0), ("mask_mod", "str", ""), ("block_mask_mod", "str", ""), ("score_mod", "str", ""),
    ("softcap", "float", 0.0), ("softmax_scale", "float", 0.0), ("max_seqlen_q", "SymInt", 0),
    ("num_splits", "SymInt", 0), ("pack_gqa", "SymInt", -1), ("return_lse", "bool", False),
    ("out_bhsd", "bool", False),
    ("descale_q", "Tensor?", None), ("descale_k", "Tensor?", None), ("descale_v", "Tensor?", None),
    ("max_seqlen_k", "SymInt", 0),
    ("block_mask", "Tensor?", None), ("block_mask_q", "SymInt", 128), ("block_mask_k", "SymInt", 128),
    ("page_descale", "Tensor?", None), ("top_left", "bool", False), ("mask_prefix", "SymInt", 0),
]

FIELDS = [
    dict(name="size", c="uint32_t", cpp=None, default="sizeof", since=1, variants="all",
         doc="sizeof(fa4jit_launch_args) of the caller's header: set by fa4jit_launch_args_init"),
    dict(name="device", c="int32_t", cpp=None, default=-1, since=1, variants="all",
         doc="-1 (default): the calling thread's current CUDA context (else device 0's primary context); >= 0: "
             "that device's primary context (PyTorch's), made current for the call and the previous context "
             "restored after it"),
    dict(name="q", c="fa4jit_tensor", since=1, variants="all", doc="(B, Sq, Hq, D)"),
    dict(name="k", c="fa4jit_tensor", since=1, variants="all",
         doc="(B, Sk, Hkv, D); paged: (num_pages, page_size, Hkv, D)"),
    dict(name="v", c="fa4jit_tensor", since=1, variants="all", doc="as k"),
    dict(name="o", c="fa4jit_tensor", since=1, variants="all", doc="(B, Sq, Hq, D)"),
    dict(name="lse", c="float*", since=1, variants="all",
         doc="optional float32 [B][Hq][Sq] (varlen: [Hq][total_q]), natural log"),
    dict(name="softmax_scale", c="float", since=1, variants="all", doc="0: 1/sqrt(head_dim)"),
    dict(name="window_left", c="int32_t", default=-1, since=1, variants="mask",
         doc="sliding window: keys visible down to q - window_left; -1: unbounded (default)"),
    dict(name="window_right", c="int32_t", default=-1, since=1, variants="mask",
         doc="... and up to q + window_right; -1: unbounded (default)"),
    dict(name="chunk_size", c="int32_t", since=1, variants="mask", doc="chunked masks"),
    dict(name="softcap", c="float", since=1, variants="score", doc="softcap score-mod"),
    dict(name="alibi_slopes", c="const float*", since=1, variants="score",
         doc="[Hq] float32; NULL: the standard slopes"),
    dict(name="aux_ptr", c="const void*[4]", since=1, variants="mask,score",
         doc="custom snippets read these as aux[i]"),
    dict(name="aux_scalar", c="float[4]", since=1, variants="mask,score", doc="... and scalars[i]"),
    dict(name="cu_seqlens_q", c="const int32_t*", since=1, variants="varlen",
         doc="varlen: int32 [B + 1] on the device; q/k/v/o packed (1, total, H, D)"),
    dict(name="cu_seqlens_k", c="const int32_t*", since=1, variants="varlen", doc="varlen: int32 [B + 1]"),
    dict(name="seqused_k", c="const int32_t*", since=1, variants="varlen,paged",
         doc="int32 [B]: keys used per sequence"),
    dict(name="batch", c="int32_t", since=1, variants="varlen", doc="varlen: number of sequences"),
    dict(name="max_seqlen_q", c="int32_t", since=1, variants="varlen", doc="varlen: longest query sequence"),
    dict(name="sinks", c="const float*", since=1, variants="all", doc="float32 [Hq] attention-sink logits"),
    dict(name="page_table", c="const int32_t*", since=1, variants="paged",
         doc="paged KV: int32 [batch][max_pages]; sequence b's key row r is row r % page_size of page "
             "page_table[b * max_pages + r / page_size]; with varlen queries pass cu_seqlens_q only"),
    dict(name="max_pages", c="int32_t", since=1, variants="paged", doc="page_table's row length"),
    dict(name="num_splits", c="int32_t", since=1, variants="split",
         doc="split-KV: 0 automatic (from the SM count), 1 none, at most 256"),
    dict(name="block_mask", c="const uint8_t*", cpp="block_mask.data", since=1, variants="mask",
         doc="run-time block mask (custom masks): one byte per (batch, q head, q block, k block), 0 = no key "
             "visible (tile skipped), 1 = all visible, 2 = partial; NULL: none"),
    dict(name="block_mask_q", c="int32_t", cpp="block_mask.block_q", default=128, since=1, variants="mask",
         doc="block mask rows per q block"),
    dict(name="block_mask_k", c="int32_t", cpp="block_mask.block_k", default=128, since=1, variants="mask",
         doc="block mask keys per k block"),
    dict(name="block_mask_batch_stride", c="int64_t", cpp="block_mask.batch_stride", since=1, variants="mask",
         doc="bytes; 0 broadcasts"),
    dict(name="block_mask_head_stride", c="int64_t", cpp="block_mask.head_stride", since=1, variants="mask",
         doc="bytes; 0 broadcasts"),
    dict(name="block_mask_row_stride", c="int64_t", cpp="block_mask.row_stride", since=1, variants="mask",
         doc="bytes per q block; 0 broadcasts"),
    dict(name="workspace", c="void*", since=1, variants="split",
         doc="scratch for split-KV and the dynamic walk's tile counter (workspace_bytes); NULL: a "
             "stream-ordered per-device pool (pass it when capturing CUDA graphs)"),
    dict(name="workspace_bytes", c="uint64_t", cpp_type="std::size_t", since=1, variants="split",
         doc="the workspace's size"),
    dict(name="descale_q", c="const float*", since=3, variants="fp8",
         doc="FP8 (dtype e4m3): float32 [B][Hkv] contiguous, the kernel computes with descale_q[b][h_kv] * q "
             "(FlashAttention-3's convention); NULL: 1; e4m3 q only"),
    dict(name="descale_k", c="const float*", since=3, variants="fp8",
         doc="as descale_q, for k (dtype or kv_dtype e4m3)"),
    dict(name="descale_v", c="const float*", since=3, variants="fp8",
         doc="as descale_q, for v (dtype or kv_dtype e4m3)"),
    dict(name="max_seqlen_k", c="int32_t", since=5, variants="varlen,paged",
         doc="varlen keys and paged caches: the longest key sequence (FlashAttention's max_seqlen_k); 0: unknown. "
             "A hint, never read as a length (any value is correct; one below the real longest costs speed only)"),
    dict(name="page_descale", c="const float*", since=8, variants="paged,fp8",
         doc="an e4m3 latent cache (MLA: kv_dtype e4m3, depth 576, depth_v 512), paged: float32 [num_pages] "
             "contiguous, the kernel reads the rows of page p as page_descale[p] * stored value (times "
             "descale_k / descale_v where set); NULL: 1"),
    dict(name="mask_prefix", c="int32_t", since=10, variants="mask",
         doc="a causal or sliding-window mask with mask.prefix: keys [0, mask_prefix) are visible to every query "
             "as well (prefix LM; a window's sink tokens); 0: none"),
]

# Values derived from the fields, for the checks (C++: const locals; Python: the same expressions).
LETS = [
    ("paged", "page_table != 0"),
    ("varlen", "cu_seqlens_q != 0 or cu_seqlens_k != 0"),
    ("B", "batch if varlen else q.shape[0]"),
    ("Hq", "q.shape[2]"),
    ("Hkv", "k.shape[2]"),
]

CHECKS = [
    # Every tensor field ("each": one rule per value, {t} and {i} replaced in when, rule and msg):
    # TMA (and sm80's 16-byte vector loads) step rows, heads and batches in 16-byte units, 8 elements
    # of a 16-bit type and 16 of e4m3 (itemsize: the tensor's bytes per element).
    dict(each=dict(t="q,k,v,o"), rule="{t}.stride[3] == 1",
         msg="{t}.stride[3] is {{t}.stride[3]}: head_dim must be contiguous (stride 1)"),
    dict(each=dict(t="q,k,v,o", i="0,1,2"), rule="{t}.shape[{i}] >= 0",
         msg="{t}.shape[{i}] is negative ({{t}.shape[{i}]})"),
    dict(each=dict(t="q,k,v,o", i="0,1,2"), rule="{t}.shape[{i}] <= 2147483647",
         msg="{t}.shape[{i}] = {{t}.shape[{i}]} exceeds 2^31-1"),
    dict(each=dict(t="q,k,v,o", i="0,1,2"), rule="{t}.stride[{i}] >= 0 and {t}.stride[{i}] % (16 // {t}.itemsize) == 0",
         msg="{t}.stride[{i}] = {{t}.stride[{i}]} must be a non-negative multiple of {16 // {t}.itemsize} elements "
             "(16 bytes)"),
    dict(when="paged", rule="cu_seqlens_k == 0",
         msg="cu_seqlens_k with page_table: paged keys are located by the page table (pass seqused_k)"),
    dict(when="varlen and not paged", rule="cu_seqlens_q != 0 and cu_seqlens_k != 0",
         msg="cu_seqlens_q and cu_seqlens_k go together (varlen without a page table needs both)"),
    dict(rule="mask_prefix >= 0", msg="mask_prefix is {mask_prefix}: a count of keys, 0 for none"),
    dict(rule="max_seqlen_k >= 0",
         msg="max_seqlen_k is {max_seqlen_k}: pass the longest key sequence, or 0 (None) when it is not known"),
    dict(when="varlen", rule="batch > 0", msg="batch is {batch}: varlen launches need the number of sequences"),
    dict(when="varlen", rule="max_seqlen_q > 0",
         msg="max_seqlen_q is {max_seqlen_q}: varlen needs the longest query length"),
    dict(when="varlen", rule="q.shape[0] == 1 and o.shape[0] == 1",
         msg="q has batch {q.shape[0]}: varlen q and o are packed (1, total_q, heads, head_dim)"),
    dict(when="varlen and not paged", rule="k.shape[0] == 1 and v.shape[0] == 1",
         msg="k has batch {k.shape[0]}: varlen k and v are packed (1, total_k, heads, head_dim)"),
    dict(when="not varlen", rule="q.shape[0] >= 1", msg="q.shape[0] (batch) is {q.shape[0]}"),
    dict(when="not varlen and not paged", rule="k.shape[0] == B and v.shape[0] == B",
         msg="q has batch {B}, k/v {k.shape[0]} (v {v.shape[0]}): batch sizes must agree"),
    dict(when="not varlen", rule="o.shape[0] == B", msg="o has batch {o.shape[0]}, q {B}"),
    dict(when="paged", rule="max_pages > 0", msg="max_pages is {max_pages}: a page table needs its row length"),
    dict(when="paged", rule="k.shape[0] >= 1", msg="k.shape[0] (num_pages) is {k.shape[0]}"),
    dict(when="paged", rule="max_pages * k.shape[1] <= 2147483647",
         msg="max_pages * page_size = {max_pages * k.shape[1]} exceeds 2^31-1 keys"),
    dict(when="not paged", rule="max_pages == 0", msg="max_pages is {max_pages} without a page_table"),
    dict(when="not paged", rule="page_descale == 0",
         msg="page_descale without a page_table: per-page factors are for a paged cache"),
    # V's head dim may differ from K's (FA4Config::depth_v); the kernel checks both against its own.
    dict(rule="k.shape[0] == v.shape[0] and k.shape[1] == v.shape[1] and k.shape[2] == v.shape[2]",
         msg="k ({k.shape[0]}, {k.shape[1]}, {k.shape[2]}, {k.shape[3]}) and v ({v.shape[0]}, {v.shape[1]}, "
             "{v.shape[2]}, {v.shape[3]}) must agree in all but head_dim"),
    dict(rule="q.shape[1] >= 1", msg="q.shape[1] (seqlen_q) is {q.shape[1]}"),
    dict(rule="(max_pages * k.shape[1] if paged else k.shape[1]) >= 1",
         msg="k.shape[1] (seqlen_k) is {k.shape[1]}"),
    dict(rule="o.shape[1] == q.shape[1] and o.shape[2] == Hq",
         msg="o.shape ({o.shape[1]}, {o.shape[2]}) must match q's (seqlen {q.shape[1]}, heads {Hq})"),
    dict(rule="o.shape[3] == v.shape[3]", msg="o has head_dim {o.shape[3]}, v {v.shape[3]}: O is as wide as V"),
    dict(rule="Hq >= 1 and Hkv >= 1 and Hq % Hkv == 0",
         msg="q has {Hq} heads, k/v {Hkv}: the q heads must be a positive multiple of the k/v heads (GQA)"),
    dict(rule="B <= 65535 and Hq <= 65535", msg="batch ({B}) and heads ({Hq}) must be at most 65535"),
]
