"""Where a packed batch's sequence differs from the same sequence called alone, and why.

The packed tests (tests/kernels/test_varlen_gpu.py _check_each_sequence_alone) ask each sequence's
rows of a packed forward to be bitwise those of a packed call of that sequence alone under the same
bounds. When one is not, this prints, per sequence: whether repeated calls agree (a race shows as a
call that disagrees with itself), the rows and heads that differ from the call alone and by how
much, each side's error against a float64 reference, and two calls in between: the sequence alone
with the packed neighbours' rows after it in the same tensors ("in place": the rows a tile reads
past the sequence's end are real data rather than the map's zero fill), and the sequence after an
empty one (batch 2). The kernels each call ran are listed.

    python3 lab/packed_alone_probe.py --lens 1700,1537,250,1,0,900,192,191 --hq 22 --hk 1 --d 64 --causal
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "tests")]
import flashattn  # noqa: E402
from gpu_helpers import poison_cuda_allocator  # noqa: E402
from strategies import Layout, VarlenSpec  # noqa: E402


def call(q, k, v, cu_q, cu_k, max_q, max_k, causal):
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    return out, lse


def kernels(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name[:110] for e in prof.events() if "flash" in e.name})


def ranges(idx: list[int]) -> str:
    out, start, prev = [], None, None
    for i in idx:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out) if out else "none"


def reference(q, k, v, causal: bool):
    """float64 attention of one sequence [S, H, D] (bottom-right causal), GQA by repetition."""
    hq, hk = q.shape[1], k.shape[1]
    k = k.repeat_interleave(hq // hk, dim=1)
    v = v.repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.double(), k.double()) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[0], k.shape[0]
        keep = torch.arange(sk, device=q.device)[None, :] <= torch.arange(sq, device=q.device)[:, None] + (sk - sq)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1).nan_to_num(0.0), v.double())


def describe(name: str, a, b, lse_a, lse_b) -> str:
    rows_o = (a != b).flatten(1).any(1)
    rows_l = (lse_a != lse_b).any(0)
    heads = (a != b).any(2).any(0)
    diff = (a.float() - b.float()).abs().max().item() if rows_o.any() else 0.0
    return (f"  {name}: out rows differing {ranges(rows_o.nonzero().flatten().tolist())} "
            f"heads {ranges(heads.nonzero().flatten().tolist())} max|diff| {diff:.3g}; "
            f"lse rows differing {ranges(rows_l.nonzero().flatten().tolist())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lens", default="1700,1537,250,1,0,900,192,191")
    ap.add_argument("--hq", type=int, default=22)
    ap.add_argument("--hk", type=int, default=1)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="calls of each kind, to see a call disagree with itself")
    a = ap.parse_args()
    lens = [int(x) for x in a.lens.split(",")]
    spec = VarlenSpec(tuple(lens), tuple(lens), a.hq, a.hk, a.d, getattr(torch, a.dtype),
                      flashattn.CAUSAL_BOTTOM_RIGHT if a.causal else flashattn.CAUSAL_NONE, (-1, -1), 0.0, None, Layout("contiguous"),
                      Layout("contiguous"), 1.0, seed=0)
    print(spec)
    x = spec.make("cuda")
    poison_cuda_allocator()  # as the tests: every new allocation NaN
    mq, mk = spec.max_seqlen_q, spec.max_seqlen_k
    packed = [call(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, mq, mk, a.causal) for _ in range(a.repeat)]
    print("packed call kernels:", kernels(lambda: call(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, mq, mk,
                                                      a.causal)))
    for i in range(1, a.repeat):
        print(f"packed call {i} == call 0: out {torch.equal(packed[i][0], packed[0][0])} "
              f"lse {torch.equal(packed[i][1], packed[0][1])}")
    out, lse = packed[0]
    dev = x.q.device
    for b in range(len(lens)):
        q0, q1, k0, k1 = x.cu_q[b], x.cu_q[b + 1], x.cu_k[b], x.cu_k[b + 1]
        if q1 == q0:
            continue
        n_q, n_k = q1 - q0, k1 - k0
        cq, ck = (torch.tensor([0, n], dtype=torch.int32, device=dev) for n in (n_q, n_k))
        alone = [call(x.q[q0:q1], x.k[k0:k1], x.v[k0:k1], cq, ck, mq, mk, a.causal) for _ in range(a.repeat)]
        # The neighbours' rows follow the sequence in the tensors (real data past its end).
        in_place = call(x.q[q0:], x.k[k0:], x.v[k0:], cq, ck, mq, mk, a.causal)
        zero_first = torch.tensor([0, 0, n_q], dtype=torch.int32, device=dev)
        ref = reference(x.q[q0:q1], x.k[k0:k1], x.v[k0:k1], a.causal)
        o_p, l_p = out[q0:q1], lse[:, q0:q1]
        o_a, l_a = alone[0]
        same = all(torch.equal(al[0], o_a) and torch.equal(al[1], l_a) for al in alone[1:])
        err = lambda o: (o.double() - ref).abs().max().item()  # noqa: E731
        print(f"sequence {b} ({n_q} x {n_k}): alone calls agree with each other {same}; "
              f"packed == alone: out {torch.equal(o_p, o_a)} lse {torch.equal(l_p, l_a)}; "
              f"|err| vs float64 packed {err(o_p):.3g} alone {err(o_a):.3g}")
        if not (torch.equal(o_p, o_a) and torch.equal(l_p, l_a)):
            print(describe("packed vs alone", o_p, o_a, l_p, l_a))
            print("  alone kernels:", kernels(lambda: call(x.q[q0:q1], x.k[k0:k1], x.v[k0:k1], cq, ck, mq, mk,
                                                            a.causal)))
            o_i, l_i = in_place
            print(describe("in place vs alone", o_i[:n_q], o_a, l_i[:, :n_q], l_a))
            print(describe("in place vs packed", o_i[:n_q], o_p, l_i[:, :n_q], l_p))
            # Zero-length sequence first, the sequence's rows from its packed address onwards.
            o_z, l_z = call(x.q[q0:q1], x.k[k0:k1], x.v[k0:k1], zero_first, torch.tensor(
                [0, 0, n_k], dtype=torch.int32, device=dev), mq, mk, a.causal)
            print(describe("after an empty sequence vs alone", o_z, o_a, l_z, l_a))


if __name__ == "__main__":
    main()
