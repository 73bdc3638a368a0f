#!/usr/bin/env python3
"""Where the backward's time goes between the op and the benchmark suite's autograd call: the
flashattn::bwd op on [B, S, H, D] tensors, the op on [B, H, S, D] tensors viewed as [B, S, H, D]
(the torch layout the benchmark suite uses), and torch.autograd.grad through
flashattn.scaled_dot_product_attention, for D 64/128 at S 4k and 16k (bf16, B*S = 16k, H = 2048/D).
usage: python lab/bwd_layout_time.py"""

from __future__ import annotations

import torch
import triton.testing

import flashattn

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def main() -> None:
    print(f"{'D':>4} {'S':>6} {'op bshd':>9} {'op bhsd':>9} {'autograd':>9}  (ms)")
    for d in (64, 128):
        for s in (4096, 16384):
            b, h = 16384 // s, 2048 // d
            scale = d**-0.5
            q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            out, lse = FWD(q, k, v, scale, 0, "auto")
            t_bshd = ms(lambda: BWD(dout, q, k, v, out, lse, scale, 0, False, "auto"))
            qt, kt, vt, dt = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            q2, k2, v2, d2 = (x.transpose(1, 2) for x in (qt, kt, vt, dt))
            out2, lse2 = FWD(q2, k2, v2, scale, 0, "auto")
            t_bhsd = ms(lambda: BWD(d2, q2, k2, v2, out2, lse2, scale, 0, False, "auto"))
            qa, ka, va = (x.detach().requires_grad_() for x in (qt, kt, vt))
            o = flashattn.scaled_dot_product_attention(qa, ka, va)
            t_ag = ms(lambda: torch.autograd.grad(o, (qa, ka, va), dt, retain_graph=True))
            print(f"{d:>4} {s:>6} {t_bshd:9.3f} {t_bhsd:9.3f} {t_ag:9.3f}")


if __name__ == "__main__":
    main()
