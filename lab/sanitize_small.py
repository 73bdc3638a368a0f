#!/usr/bin/env python3
"""Small odd-shaped calls of every path (forward portable and Hopper, decode, backward default and
deterministic) for compute-sanitizer: `compute-sanitizer --tool memcheck python lab/sanitize_small.py`
(also racecheck, initcheck, synccheck). Exits non-zero on a Python-level error; the sanitizer's
own summary says whether the kernels were clean."""

from __future__ import annotations

import os

import torch

import flashattn

# SANITIZE_BACKENDS=portable (or auto) narrows the forward paths, to tell which path a report is from.
BACKENDS = os.environ.get("SANITIZE_BACKENDS", "portable,auto").split(",")

dev = "cuda"
torch.manual_seed(0)
for dtype in (torch.float16, torch.bfloat16):
    for b, sq, sk, hq, hk, d, causal in ((1, 37, 53, 4, 2, 40, True), (2, 70, 33, 2, 1, 128, True), (1, 17, 130, 3, 3, 256, False)):
        q = torch.randn(b, sq, hq, d, device=dev, dtype=dtype, requires_grad=True)
        k = torch.randn(b, sk, hk, d, device=dev, dtype=dtype, requires_grad=True)
        v = torch.randn(b, sk, hk, d, device=dev, dtype=dtype, requires_grad=True)
        for backend in BACKENDS:
            for deterministic in (False, True):
                with flashattn.use_backend(backend):
                    flashattn.set_deterministic(deterministic)
                    out = flashattn.flash_attn_func(q, k, v, causal=causal)
                    flashattn.set_deterministic(False)
                out.float().sum().backward()
        with torch.no_grad():
            kc = torch.randn(b, sk + 8, hk, d, device=dev, dtype=dtype)
            vc = torch.randn_like(kc)
            flashattn.flash_attn_with_kvcache(q[:, :3].detach(), kc, vc, k[:, :2].detach(), v[:, :2].detach(),
                                              cache_seqlens=sk - 2, causal=True)
torch.cuda.synchronize()
print("sanitize_small: all calls returned")
