#!/usr/bin/env python3
"""The instruction mix of a kernel's main loop from `cuobjdump -sass` output: the backward branch
whose body holds the most tensor-core instructions (HMMA/HGMMA), its length and an opcode
histogram, so that two kernels doing the same MMAs can be compared per step (which non-MMA
instructions one issues more of). Run where cuobjdump is (the GPU machine's CUDA toolkit):

  nvcc -std=c++17 -O3 --expt-relaxed-constexpr -Icsrc -gencode=arch=compute_90a,code=sm_90a -cubin \\
      -o ours.cubin csrc/flash_bwd/instantiations/bwd_bf16_hdim128_large.cu
  cuobjdump -sass ours.cubin > ours.sass
  # FlashAttention-2 as torch ships it (a few minutes: every sm_90 kernel of the library):
  cuobjdump -sass -arch sm_90 .../torch/lib/libtorch_cuda.so | awk '/Function : /{p = /flash_bwd_dq_dk_dv/} p' > fa2.sass
  python3 lab/sass_loop_mix.py ours.sass flash_bwd_kernel fa2.sass 'Li128ELi64ELi128E'

usage: python3 lab/sass_loop_mix.py [--loops] [--range LO:HI] [--waits] SASS NAME_REGEX [SASS NAME_REGEX ...]
(the first function whose mangled name matches NAME_REGEX in each file)
  --loops        also list every backward branch whose body holds an MMA (target-branch addresses,
                 length, MMAs): a kernel with a tile loop around a key-block loop has both, and the
                 one with the most MMAs is the outer one
  --range LO:HI  the mix of the instructions at addresses LO..HI (hex) instead of the main loop, e.g.
                 a per-block loop from --loops; a range holds every runtime branch's code (a softcap
                 or mask path behind a uniform branch), so the executed count is smaller

  --waits        list the function's wgmma waits (WARPGROUP.DEPBAR.LE gsb0, N) in code order, each
                 with the MUFU (by function: EX2, TANH, ...) and HGMMA instructions laid out since
                 the wait before it: where ptxas put the work meant to run under a GEMM (the work
                 between two waits runs while the later wait's GEMMs may still be in flight)

The Hopper backward's score pass against its dP^T wait (docs/perf-notes.md, "The backward's dP^T
wait hoisted by ptxas"):
  nvcc ... -cubin -o bwd.cubin csrc/flash_bwd_sm90/instantiations/bwd_sm90_bf16_hdim64_softcap.cu
  cuobjdump -sass bwd.cubin > bwd.sass
  python3 lab/sass_loop_mix.py --waits bwd.sass flash_bwd_sm90_kernel

The Hopper forward against FlashAttention-3 (its wheel's library holds one cubin per instantiation
file; the nvidia-cuda-cuobjdump wheel has a cuobjdump where the CUDA toolkit has none):
  nvcc ... -cubin -o ours.cubin csrc/flash_fwd_sm90/instantiations/fwd_sm90_bf16_hdim128_dynamic.cu
  cuobjdump -xelf flash_fwd_hdim128_bf16_sm90.sm_90a.cubin .../flash_attn_3/_C.abi3.so
  cuobjdump -sass flash_fwd_hdim128_bf16_sm90.sm_90a.cubin > fa3.sass
  python3 lab/sass_loop_mix.py --loops ours.sass flash_fwd_sm90_kernel fa3.sass 'Lb1ELb0ELb0ELb0ELb0ELb0ELb0ELb1ELb1E'
"""

from __future__ import annotations

import collections
import re
import sys


def functions(path: str) -> dict[str, list[tuple[int, str]]]:
    """Mangled name -> [(address, instruction)] in file order."""
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    with open(path) as f:
        for line in f:
            m = re.search(r"Function : (\S+)", line)
            if m:
                current = m.group(1)
                out[current] = []
                continue
            m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m and current is not None:
                out[current].append((int(m.group(1), 16), m.group(2).strip()))
    return out


def unguarded(instruction: str) -> str:
    """The instruction without its predicate guard: `@!P0 MUFU.EX2 R1, R1` -> `MUFU.EX2 R1, R1`."""
    return re.sub(r"^@!?U?P[T0-9]+\s+", "", instruction)


def opcode(instruction: str) -> str:
    """The opcode without its predicate guard or modifiers: `@!P0 REDG.E.ADD...` -> REDG."""
    return unguarded(instruction).split()[0].split(".")[0]


def backward_branches(code: list[tuple[int, str]]):
    """(target, branch address, body [target, branch], MMAs in the body) of every backward branch,
    in code order."""
    index = {a: i for i, (a, _) in enumerate(code)}
    for i, (address, instruction) in enumerate(code):
        if opcode(instruction) != "BRA":
            continue
        m = re.search(r"0x([0-9a-f]+)", instruction)
        target = int(m.group(1), 16) if m else None
        if target is None or target >= address or target not in index:
            continue
        body = code[index[target]:i + 1]
        yield target, address, body, sum(1 for _, x in body if opcode(x) in ("HMMA", "HGMMA"))


def main_loop(code: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The body [target, branch] of the backward branch holding the most MMA instructions (the first
    such one on a tie)."""
    best: list[tuple[int, str]] = []
    best_mma = -1
    for _, _, body, mma in backward_branches(code):
        if mma > best_mma:
            best, best_mma = body, mma
    return best


def mma_loops(code: list[tuple[int, str]]) -> list[tuple[int, int, int, int]]:
    """(target, branch address, length, MMAs) of every backward branch whose body holds an MMA."""
    return [(target, address, len(body), mma) for target, address, body, mma in backward_branches(code) if mma]


def wait_segments(code: list[tuple[int, str]]) -> list[tuple[int, int, collections.Counter]]:
    """(address, groups allowed pending, counts) of every wgmma wait in code order; counts: the
    MUFU instructions by function (`MUFU.EX2`, ...) and the HGMMA ones laid out between the wait
    before it (or the function's start) and this one."""
    out = []
    counts: collections.Counter = collections.Counter()
    for address, instruction in code:
        text = unguarded(instruction)
        m = re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)", text)
        if m:
            out.append((address, int(m.group(1), 16), counts))
            counts = collections.Counter()
        elif text.startswith("MUFU."):
            counts[text.split()[0]] += 1
        elif opcode(instruction) == "HGMMA":
            counts["HGMMA"] += 1
    return out


def main(argv: list[str]) -> int:
    argv = list(argv)
    list_loops = "--loops" in argv
    if list_loops:
        argv.remove("--loops")
    list_waits = "--waits" in argv
    if list_waits:
        argv.remove("--waits")
    address_range = None
    if "--range" in argv:
        i = argv.index("--range")
        lo, hi = argv[i + 1].split(":")
        address_range = (int(lo, 16), int(hi, 16))
        del argv[i:i + 2]
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    for path, pattern in zip(argv[::2], argv[1::2]):
        funcs = functions(path)
        names = [n for n in funcs if re.search(pattern, n)]
        if not names:
            print(f"{path}: no function matches {pattern!r}", file=sys.stderr)
            return 1
        code = funcs[names[0]]
        if address_range is not None:
            body = [(a, x) for a, x in code if address_range[0] <= a <= address_range[1]]
        else:
            body = main_loop(code)
        mix = collections.Counter(opcode(x) for _, x in body)
        mma = mix["HMMA"] + mix["HGMMA"]
        print(f"{path}: {names[0][:140]}")
        what = "range" if address_range is not None else "main loop"
        print(f"  {len(code)} instructions; {what} {len(body)} instructions, {mma} MMA, "
              f"{len(body) - mma} other ({(len(body) - mma) / max(mma, 1):.2f} a MMA)")
        print("  " + " ".join(f"{op}:{n}" for op, n in mix.most_common(40)))
        if list_loops:
            for target, address, length, mma in mma_loops(code):
                print(f"  loop {target:x}-{address:x}: {length} instructions, {mma} MMA")
        if list_waits:
            for address, pending, counts in wait_segments(code):
                since = ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "nothing counted"
                print(f"  wait {address:x} (<= {pending} pending): since the wait before, {since}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
