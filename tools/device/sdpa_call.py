"""One shape of PyTorch SDPA (cuDNN backend) inside a cudaProfilerStart/Stop region, for
`ncu --profile-from-start off`: warm-up calls first, then ITERS profiled calls.
Usage: python3 tools/device/sdpa_call.py B H HKV SQ SK D [causal] [ITERS]"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, Hkv, Sq, Sk, D = (int(x) for x in sys.argv[1:7])
causal = len(sys.argv) > 7 and sys.argv[7] == "causal"
iters = int(sys.argv[8]) if len(sys.argv) > 8 else 1
q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=H != Hkv)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(iters):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=H != Hkv)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
