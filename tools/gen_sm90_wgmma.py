#!/usr/bin/env python3
"""Generates csrc/common/sm90/wgmma_ops.cuh: inline-PTX wrappers for the wgmma.mma_async shapes
the Hopper forward path uses (m64nNk16, f32 accumulators, f16/bf16 operands).

  WgmmaSS<Element, N>::mma(d, desc_a, desc_b, scale_d)   A and B from shared memory, both K-major
                                                         (S = Q K^T: Q [M, D], K [N, D], D contiguous)
  WgmmaRS<Element, N>::mma(d, a, desc_b, scale_d)        A from registers, B from shared memory,
                                                         B MN-major (O += P V: V [keys, D], D contiguous,
                                                         so imm-trans-b = 1)
  WgmmaSSTrans<Element, N>::mma(d, desc_a, desc_b, scale_d)
                                                         A and B from shared memory, both MN-major
                                                         (the backward's dQ = dS K: dS stored as
                                                         dS^T [keys, queries], K [keys, D]: imm-trans-a
                                                         = imm-trans-b = 1)
  WgmmaSSTransB<Element, N>::mma(d, desc_a, desc_b, scale_d)
                                                         A and B from shared memory, A K-major, B
                                                         MN-major (the D = 256 backward's dV += P^T dO:
                                                         P^T [keys, queries], dO [queries, D]:
                                                         imm-trans-b = 1)
  WgmmaSSTransA<Element, N>::mma(d, desc_a, desc_b, scale_d)
                                                         A and B from shared memory, A MN-major, B
                                                         K-major (the 80-query D = 128 backward's
                                                         dQ^T = K^T dS^T: K [keys, D] read as K^T,
                                                         dS [queries, keys]: imm-trans-a = 1)

d is the warpgroup's m64nN accumulator fragment, N/2 floats per thread; scale_d = 0 overwrites d
(D = A B), 1 accumulates (D += A B). Run after editing the shape lists: python3 tools/gen_sm90_wgmma.py

It also writes csrc/common/sm90/wgmma_fp8_ops.cuh, the FP8 forward's m64nNk32 e4m3 x e4m3 shapes
(f32 accumulators). 8-bit wgmma has no transpose immediates: both operands are K-major, so V
enters P V transposed (V^T [D, keys], the binding's transpose kernel writes it):
  WgmmaSS<__nv_fp8_e4m3, N>::mma(d, desc_a, desc_b, scale_d)   S = Q K^T, N = block N
  WgmmaRS<__nv_fp8_e4m3, N>::mma(d, a, desc_b, scale_d)        O += P V, N = head dim; a: the
                                                               m64k32 A fragment, 4 x 4 e4m3
"""

from __future__ import annotations

import pathlib

SS_N = (64, 80, 96, 112, 128, 144, 160, 176, 192)
RS_N = (64, 96, 128, 192, 256)
SST_N = (32, 64, 96, 128)
SSTB_N = (96, 128)
SSTA_N = (64, 80)
TYPES = (("__half", "f16"), ("__nv_bfloat16", "bf16"))
FP8_SS_N = (128, 192)
FP8_RS_N = (128, 256)


def regs(first: int, count: int) -> str:
    return ", ".join(f"%{i}" for i in range(first, first + count))


def d_operands(n: int) -> str:
    return ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))


def ss(ctype: str, ptx: str, n: int, name: str = "WgmmaSS", trans_a: int = 0, trans_b: int = 0) -> str:
    """A and B from shared memory; trans_a / trans_b: the operand is MN-major (imm-trans = 1)."""
    nd = n // 2
    return f"""template <>
struct {name}<{ctype}, {n}> {{
  static __device__ __forceinline__ void mma(float (&d)[{nd}], uint64_t desc_a, uint64_t desc_b, int scale_d) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{regs(0, nd)}}}, %{nd}, %{nd + 1}, p, 1, 1, {trans_a}, {trans_b};\\n}}\\n"
        : {d_operands(n)}
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }}
}};
"""


def rs(ctype: str, ptx: str, n: int) -> str:
    nd = n // 2
    return f"""template <>
struct WgmmaRS<{ctype}, {n}> {{
  static __device__ __forceinline__ void mma(float (&d)[{nd}], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 5}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{regs(0, nd)}}}, {{{regs(nd, 4)}}}, %{nd + 4}, p, 1, 1, 1;\\n}}\\n"
        : {d_operands(n)}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }}
}};
"""


def fp8_ss(n: int) -> str:
    """A and B from shared memory, both K-major (8-bit wgmma takes no transpose immediates)."""
    nd = n // 2
    return f"""template <>
struct WgmmaSS<__nv_fp8_e4m3, {n}> {{
  static __device__ __forceinline__ void mma(float (&d)[{nd}], uint64_t desc_a, uint64_t desc_b, int scale_d) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{regs(0, nd)}}}, %{nd}, %{nd + 1}, p, 1, 1;\\n}}\\n"
        : {d_operands(n)}
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }}
}};
"""


def fp8_rs(n: int) -> str:
    """A from registers (4 x .b32, 4 e4m3 each), B K-major in shared memory."""
    nd = n // 2
    return f"""template <>
struct WgmmaRS<__nv_fp8_e4m3, {n}> {{
  static __device__ __forceinline__ void mma(float (&d)[{nd}], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 5}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{regs(0, nd)}}}, {{{regs(nd, 4)}}}, %{nd + 4}, p, 1, 1;\\n}}\\n"
        : {d_operands(n)}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }}
}};
"""


def fp8_file() -> str:
    out = [
        "// GENERATED by tools/gen_sm90_wgmma.py; do not edit by hand.",
        "// FP8 (e4m3) wgmma.mma_async wrappers of the FP8 Hopper forward (sm_90a only: include from code",
        "// compiled under FLASHATTN_SM90A_ENABLED). Both operands K-major: 8-bit wgmma has no transpose.",
        "#pragma once",
        "",
        "#include <cuda_fp8.h>",
        "",
        "#include <cstdint>",
        "",
        '#include "wgmma_ops.cuh"',
        "",
        "namespace flashattn {",
        "namespace sm90 {",
        "",
    ]
    for n in FP8_SS_N:
        out.append(fp8_ss(n))
    for n in FP8_RS_N:
        out.append(fp8_rs(n))
    out += ["}  // namespace sm90", "}  // namespace flashattn", ""]
    return "\n".join(out)


def main() -> None:
    out = [
        "// GENERATED by tools/gen_sm90_wgmma.py; do not edit by hand.",
        "// wgmma.mma_async wrappers (sm_90a only: include from code compiled under FLASHATTN_SM90A_ENABLED).",
        "#pragma once",
        "",
        "#include <cuda_bf16.h>",
        "#include <cuda_fp16.h>",
        "",
        "#include <cstdint>",
        "",
        "namespace flashattn {",
        "namespace sm90 {",
        "",
        "template <typename Element, int N>",
        "struct WgmmaSS;",
        "template <typename Element, int N>",
        "struct WgmmaRS;",
        "template <typename Element, int N>",
        "struct WgmmaSSTrans;",
        "template <typename Element, int N>",
        "struct WgmmaSSTransB;",
        "template <typename Element, int N>",
        "struct WgmmaSSTransA;",
        "",
    ]
    for ctype, ptx in TYPES:
        for n in SS_N:
            out.append(ss(ctype, ptx, n))
        for n in RS_N:
            out.append(rs(ctype, ptx, n))
        for n in SST_N:
            out.append(ss(ctype, ptx, n, "WgmmaSSTrans", 1, 1))
        for n in SSTB_N:
            out.append(ss(ctype, ptx, n, "WgmmaSSTransB", 0, 1))
        for n in SSTA_N:
            out.append(ss(ctype, ptx, n, "WgmmaSSTransA", 1, 0))
    out += ["}  // namespace sm90", "}  // namespace flashattn", ""]
    path = pathlib.Path(__file__).resolve().parents[1] / "csrc" / "common" / "sm90" / "wgmma_ops.cuh"
    path.write_text("\n".join(out))
    print(f"wrote {path}")
    fp8 = path.with_name("wgmma_fp8_ops.cuh")
    fp8.write_text(fp8_file())
    print(f"wrote {fp8}")


if __name__ == "__main__":
    main()
