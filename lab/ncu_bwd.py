#!/usr/bin/env python3
"""One backward call of flashattn and of SDPA's FlashAttention-2 and cuDNN backends per shape,
inside a profiler range, for Nsight Compute to compare side by side (lab/ncu_bwd.sh runs it under
ncu). Shapes: the standard grid's (bf16, B*S = 16k, H = 2048/D), given as D:S:causal, or
D:S:causal:Hk for a GQA/MQA call with Hk key/value heads (cuDNN through enable_gqa; FlashAttention-2
left out there).
usage: python lab/ncu_bwd.py 128:4096:0 64:4096:0 128:16384:1:4 ...
NCU_BWD_BACKEND=portable (default auto) picks flashattn's backward path, e.g. the portable one
against FlashAttention-2 on an H100. NCU_BWD_DET=1 adds flashattn's deterministic call per shape
(its cost against the default, kernel by kernel); NCU_BWD_PEERS=0 leaves out FA2 and cuDNN.
NCU_BWD_SPLITS="2 4" profiles flashattn's GQA calls once per FLASHATTN_BWD_GROUP_SPLIT value (the
GQA group split, read at every call) instead of once as is.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import env_vars

FWD = torch.ops.flashattn.fwd.default
BWD = torch.ops.flashattn.bwd.default


def main(argv: list[str]) -> int:
    specs = [tuple(int(x) for x in a.split(":")) for a in argv] or [(128, 4096, 0)]
    calls: list[tuple[str, object, str | None]] = []
    backend = os.environ.get("NCU_BWD_BACKEND", "auto")
    det_too = os.environ.get("NCU_BWD_DET", "0") == "1"
    peers = os.environ.get("NCU_BWD_PEERS", "1") == "1"
    splits = os.environ.get("NCU_BWD_SPLITS", "").split() or [None]
    for spec in specs:
        d, s, causal = spec[:3]
        b, h = 16384 // s, 2048 // d
        hk = spec[3] if len(spec) > 3 else h
        q, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        scale, cm = d**-0.5, int(bool(causal))
        out, lse = FWD(q, k, v, scale, cm, "auto")
        label = f"D={d} S={s} causal={cm}" + (f" Hq:Hk={h}:{hk}" if hk != h else "")
        for split in splits if hk != h else [None]:
            tag = f" split={split}" if split else ""
            calls.append((f"{label} flashattn {backend}{tag}", lambda q=q, k=k, v=v, o=out, l=lse, g=dout, sc=scale, c=cm:
                          BWD(g, q, k, v, o, l, sc, c, False, backend), split))
        if det_too:
            calls.append((f"{label} flashattn {backend} deterministic",
                          lambda q=q, k=k, v=v, o=out, l=lse, g=dout, sc=scale, c=cm:
                          BWD(g, q, k, v, o, l, sc, c, True, backend), None))
        peer_list = (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)) if peers else ()
        for name, be in peer_list:
            if hk != h and name == "fa2":
                continue
            qt, kt, vt = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal), enable_gqa=hk != h)
            g = dout.transpose(1, 2)
            calls.append((f"{label} {name}", lambda o=o, qt=qt, kt=kt, vt=vt, g=g:
                          torch.autograd.grad(o, (qt, kt, vt), g, retain_graph=True), None))

    for _, fn, split in calls:  # warm up outside the profiled range
        with env_vars(FLASHATTN_BWD_GROUP_SPLIT=split):
            for _ in range(2):
                fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for label, fn, split in calls:
        with env_vars(FLASHATTN_BWD_GROUP_SPLIT=split):
            torch.cuda.nvtx.range_push(label)
            fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled:", ", ".join(label for label, _, _ in calls))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
