#!/usr/bin/env python3
"""The backward with the logit softcap (c = 30) on both paths, against the same call without it:
bf16, B*S = 16k tokens, H*D = 2048, D 64/128/256, S 4k and 16k, causal off/on; ms per call (the
op alone, triton do_bench) and the softcap's cost on the Hopper backward (same FLOPs, so the time
ratio is the cost per useful FLOP).
--flex: FlexAttention's backward beside them (compiled flex_attention, the softcap as a score_mod, a
causal block mask; through autograd after one forward), with and without the softcap: its own
softcap cost, i.e. what a peer pays for the tanh and its derivative on the same shapes.
usage: python lab/bwd_softcap_time.py [--hopper-only] [--flex]   (--hopper-only: no portable column)"""

from __future__ import annotations

import sys

import torch
import triton.testing

import flashattn  # noqa: F401  (registers torch.ops.flashattn)

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def main() -> None:
    hopper_only = "--hopper-only" in sys.argv[1:]
    with_flex = "--flex" in sys.argv[1:]
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'hopper ms':>10} {'+softcap':>9} {'portable+softcap':>17} {'softcap cost':>13}"
          + (f" {'flex ms':>8} {'+softcap':>9} {'flex cost':>10} {'ours/flex +cap':>15}" if with_flex else ""))
    for d in (64, 128, 256):
        for s in (4096, 16384):
            b, h = 16384 // s, 2048 // d
            scale = d**-0.5
            q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            for causal in (0, 1):
                t = {}
                for name, backend, cap in (("dense", "hopper", 0.0), ("cap", "hopper", 30.0), ("port", "portable", 30.0)):
                    if hopper_only and name == "port":
                        t[name] = float("nan")
                        continue
                    out, lse = FWD(q, k, v, scale, causal, "auto", -1, -1, cap)
                    t[name] = triton.testing.do_bench(
                        lambda: BWD(dout, q, k, v, out, lse, scale, causal, False, backend, -1, -1, cap),
                        warmup=20, rep=150, return_mode="median")
                flex = ""
                if with_flex:
                    f0, f1 = flex_bwd_ms(q, k, v, dout, causal, 0.0), flex_bwd_ms(q, k, v, dout, causal, 30.0)
                    flex = f" {f0:8.3f} {f1:9.3f} {f1 / f0:10.2f} {t['cap'] / f1:15.2f}"
                print(f"{d:>4} {s:>6} {causal:>6} {t['dense']:10.3f} {t['cap']:9.3f} {t['port']:17.3f} "
                      f"{t['cap'] / t['dense']:13.2f}" + flex)


_FLEX: dict = {}


def flex_bwd_ms(q, k, v, dout, causal: int, cap: float) -> float:
    """FlexAttention's backward (ms, median) on [B, S, H, D] inputs: causal (Sq = Sk) as a block mask,
    the softcap c * tanh(s / c) of the scaled score as a score_mod (FlashAttention's order, as ours),
    through autograd after one forward."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if "fn" not in _FLEX:
        # A compiled graph per shape and mask (the window or cap is a constant of it): past dynamo's
        # default of 8 recompiles flex would fall back to eager, which materializes every score.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    s = q.shape[1]
    block_mask = create_block_mask(causal_mask, B=None, H=None, Q_LEN=s, KV_LEN=s, device=q.device) if causal else None
    qt, kt, vt = (x.transpose(1, 2).contiguous().requires_grad_(True) for x in (q, k, v))
    out = _FLEX["fn"](qt, kt, vt, block_mask=block_mask, score_mod=softcap if cap else None)
    grad = dout.transpose(1, 2).contiguous()
    return triton.testing.do_bench(lambda: torch.autograd.grad(out, (qt, kt, vt), grad, retain_graph=True),
                                   warmup=20, rep=150, return_mode="median")


if __name__ == "__main__":
    main()
