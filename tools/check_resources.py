#!/usr/bin/env python3
"""Compile-and-resource check of every kernel (forward, decode, backward) for every target, with no GPU.

1. Builds tools/print_configs.cpp (plain C++) and reads every compiled tile config and the one
   each architecture's shared-memory limit selects per head dim.
2. Compiles every .cu under csrc/ (what setup.py builds) to PTX for each target and assembles it
   with nvcc's ptxas -v (the report `nvcc -c -Xptxas -v` prints; host code is left to the real
   build), then parses the report per kernel. --also-ptxas assembles the same PTX with a second
   ptxas (CUDA 12.8's), so the other toolkit's check costs no second front-end pass.
3. Fails unless, for every kernel and target: 0 spill bytes, 0 stack frame, no wgmma serialized by
   ptxas (its C751x warnings), registers <= 255 and registers x threads <= 64K (the launch
   bounds), and every head dim 8..256 selects a config whose shared memory fits the target's
   per-block limit (L4/sm89: 99 KB).

usage: tools/check_resources.py [--nvcc PATH] [--archs sm_80,sm_89,sm_90a] [--jobs N] [--only PATH_PART] [--json OUT]
                               [--progress] [--ptxas PATH [--ptx-isa X.Y]]
                               [--also-ptxas PATH [--also-ptx-isa X.Y] [--also-archs sm_89,sm_90a]]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
ARCH_GENCODE = {
    "sm_80": "arch=compute_80,code=sm_80",
    "sm_86": "arch=compute_86,code=sm_86",
    "sm_89": "arch=compute_89,code=sm_89",
    "sm_90a": "arch=compute_90a,code=sm_90a",
}
MAX_REGS_PER_THREAD = 255
REGS_PER_SM = 65536

_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_TRAITS = re.compile(r"FwdKernelTraitsILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E")
# Backward main kernel: D, block N, block M, warps, then the phase warp layouts and stages.
_BWD_TRAITS = re.compile(r"BwdKernelTraitsILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E")
# Hopper kernel (also read by tools/sm90_ptxas_report.py): groups D, block N, stages, ping-pong,
# Q buffers, O through TMA, softmax reduction chains, consumer warpgroups, element type, dynamic
# schedule. Threads = 128 x (1 + consumers), query rows = 64 x consumers.
SM90_KERNEL = re.compile(
    r"Sm90FwdTraitsILi(\d+)ELi(\d+)ELi(\d+)ELb([01])ELi(\d+)ELb([01])ELi(\d+)ELi(\d+)E(?:Lb[01]E)?EE\d+(\w+?)Lb([01])E")
# The FP8 Hopper forward (flash_fwd_sm90_fp8_kernel): D, block N, stages, dynamic schedule; two consumer
# warpgroups (384 threads, 128 query rows).
SM90_FP8_KERNEL = re.compile(r"flash_fwd_sm90_fp8_kernelINS0_16Sm90Fp8FwdTraitsILi(\d+)ELi(\d+)ELi(\d+)EEELb([01])E")
# ptxas's warning that it serialized a kernel's wgmma instructions (C7510-C7515: an accumulator
# defined or read by another instruction while a wgmma is in flight, a spill, a call...): the
# kernel then waits for each wgmma before the next, a silent large slowdown.
_WGMMA_SERIAL = re.compile(r"\((C75\d\d)\)[^\n]*wgmma\.mma_async instructions are serialized[^\n]*?function '(\S+?)'")
_PTX_VERSION = re.compile(r"^\.version\s+(\d+\.\d+)\s*$", re.MULTILINE)


def parse_ptxas(text: str) -> list[dict]:
    """Per-kernel records from `nvcc -Xptxas -v` output."""
    kernels: list[dict] = []
    cur: dict | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            cur = {"name": m.group(1), "arch": m.group(2), "regs": None, "stack": 0, "spill_st": 0, "spill_ld": 0, "smem": 0}
            kernels.append(cur)
        elif cur is not None and (m := _FRAME.search(line)):
            cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
        elif cur is not None and (m := _REGS.search(line)):
            cur["regs"] = int(m.group(1))
            if s := _SMEM.search(line):
                cur["smem"] = int(s.group(1))
    serialized = {m.group(2): m.group(1) for m in _WGMMA_SERIAL.finditer(text)}
    for k in kernels:
        if k["name"] in serialized:
            k["wgmma_serialized"] = serialized[k["name"]]
        if t := _TRAITS.search(k["name"]):
            k["head_dim"], k["block_m"], k["block_n"], k["warps"] = map(int, t.groups())
            k["threads"] = k["warps"] * 32
        elif t := _BWD_TRAITS.search(k["name"]):
            k["head_dim"], k["block_n"], k["block_m"], k["warps"] = map(int, t.groups()[:4])
            k["threads"] = k["warps"] * 32
            k["stages"] = int(t.group(8))
            k["path"] = "bwd"
        elif t := SM90_KERNEL.search(k["name"]):
            k["head_dim"], k["block_n"] = int(t.group(1)), int(t.group(2))
            consumers = int(t.group(8))
            k["block_m"], k["warps"], k["threads"] = 64 * consumers, 4 * (1 + consumers), 128 * (1 + consumers)
            k["schedule"] = "dynamic" if t.group(10) == "1" else "static"
        elif t := SM90_FP8_KERNEL.search(k["name"]):
            k["head_dim"], k["block_n"] = int(t.group(1)), int(t.group(2))
            k["block_m"], k["warps"], k["threads"] = 128, 12, 384
            k["schedule"] = "dynamic" if t.group(4) == "1" else "static"
            k["path"] = "fwd_fp8"
    return kernels


def lower_ptx_isa(ptx: str, isa: str) -> str:
    """`ptx` with its `.version` directive lowered to `isa` ("8.7") when it declares a newer one.
    Safe to try: ptxas checks every instruction and directive against the declared version and
    rejects any the lower version lacks ("Feature '...' requires PTX ISA .version 9.0 or later"),
    so a rewrite can make the check fail, never pass by accepting what it does not know."""
    want = tuple(int(x) for x in isa.split("."))

    def sub(m: re.Match) -> str:
        have = tuple(int(x) for x in m.group(1).split("."))
        return f".version {isa}" if have > want else m.group(0)

    return _PTX_VERSION.sub(sub, ptx, count=1)


# The ISA gate that makes lower_ptx_isa safe, checked on the assembler at hand: elect.sync needs
# PTX ISA 8.0, so a ptxas that gates features by the declared version rejects this under 7.8 and
# takes it under 8.0. If that ever stopped holding, lowering .version would no longer be safe.
_CANARY_PTX = """.version {isa}
.target sm_90
.address_size 64
.visible .entry canary(.param .u64 out)
{{
  .reg .b32 r<2>;
  .reg .pred p<2>;
  .reg .b64 a<2>;
  elect.sync r0|p0, 0xffffffff;
  ld.param.u64 a0, [out];
  cvta.to.global.u64 a1, a0;
  st.global.u32 [a1], r0;
  ret;
}}
"""


def isa_gate_canary(ptxas: str) -> str | None:
    """None when `ptxas` refuses a feature newer than the declared PTX ISA and takes it once the
    ISA is new enough; else why lowering .version is unsafe with it."""
    with tempfile.TemporaryDirectory() as d:
        def run(isa: str) -> subprocess.CompletedProcess:
            src = os.path.join(d, f"canary{isa}.ptx")
            pathlib.Path(src).write_text(_CANARY_PTX.format(isa=isa))
            return subprocess.run([ptxas, "-arch=sm_90", src, "-o", src + ".cubin"], capture_output=True, text=True)

        old = run("7.8")
        if old.returncode == 0:
            return f"{ptxas} took elect.sync under .version 7.8: it does not gate features by PTX ISA"
        if "requires PTX ISA .version 8.0" not in old.stdout + old.stderr:
            return f"unexpected canary rejection by {ptxas}: {old.stdout}{old.stderr}"
        new = run("8.0")
        if new.returncode != 0:
            return f"{ptxas} rejected the canary under .version 8.0: {new.stdout}{new.stderr}"
    return None


def compile_one(nvcc: str, src: pathlib.Path, arch: str, outdir: str,
                ptxas: str | None = None, ptx_isa: str | None = None,
                also: tuple[str, str | None] | None = None) -> list[tuple[str, str, str, int, str]]:
    """Compiles `src` for `arch` once to PTX (nvcc's front end, no host code: the image build
    compiles that) and assembles the PTX with -v: by nvcc's own ptxas (`nvcc -cubin`, the same
    report as `nvcc -c -Xptxas -v`), or by `ptxas` alone; with `also` (a ptxas and the PTX ISA its
    release takes), by that one too, from the same PTX. One (source, arch, assembler, returncode,
    output) per assembly."""
    base = [nvcc, "-std=c++17", "-O3", "--expt-relaxed-constexpr", f"-I{CSRC}"]
    stem = os.path.join(outdir, f"{src.stem}.{arch}")
    rel = str(src.relative_to(ROOT))
    virtual = ARCH_GENCODE[arch].split(",")[0].removeprefix("arch=")
    r = subprocess.run(base + [f"-arch={virtual}", "-ptx", str(src), "-o", stem + ".ptx"], capture_output=True, text=True)
    if r.returncode != 0:
        return [(rel, arch, "front end", r.returncode, r.stdout + r.stderr)]

    def assemble(tool: str | None, isa: str | None, tag: str) -> tuple[str, str, str, int, str]:
        ptx = pathlib.Path(stem + ".ptx")
        if isa:
            ptx = pathlib.Path(f"{stem}.{tag}.ptx")
            ptx.write_text(lower_ptx_isa(pathlib.Path(stem + ".ptx").read_text(), isa))
        cubin = f"{stem}.{tag}.cubin"
        cmd = ([nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", str(ptx), "-o", cubin] if tool is None
               else [tool, "-v", f"-arch={arch}", str(ptx), "-o", cubin])
        a = subprocess.run(cmd, capture_output=True, text=True)
        return rel, arch, tag, a.returncode, r.stdout + r.stderr + a.stdout + a.stderr

    out = [assemble(ptxas, ptx_isa, "ptxas" if ptxas else "nvcc")]
    if also is not None:
        out.append(assemble(also[0], also[1], "also"))
    return out


def config_report() -> dict:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise SystemExit("check_resources: no C++ compiler (g++) found")
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "print_configs")
        subprocess.run([cxx, "-std=c++17", f"-I{CSRC}", str(ROOT / "tools" / "print_configs.cpp"), "-o", exe], check=True)
        return json.loads(subprocess.run([exe], capture_output=True, text=True, check=True).stdout)


def check(kernels: list[dict], configs: dict, archs: list[str]) -> list[str]:
    errors: list[str] = []
    for k in kernels:
        where = (f"{k['arch']} {k.get('head_dim')}x{k.get('block_m')}x{k.get('block_n')}x{k.get('warps')}w"
                 f"{' ' + k['schedule'] if 'schedule' in k else ''} ({k['source'] if 'source' in k else k['name'][:60]})")
        if k["regs"] is None:
            errors.append(f"{where}: no register report")
            continue
        if k["spill_st"] or k["spill_ld"]:
            errors.append(f"{where}: spills {k['spill_st']} B stores / {k['spill_ld']} B loads")
        if k["stack"]:
            errors.append(f"{where}: {k['stack']} B stack frame (local memory)")
        if k.get("wgmma_serialized"):
            errors.append(f"{where}: ptxas serialized its wgmma instructions ({k['wgmma_serialized']})")
        if k["regs"] > MAX_REGS_PER_THREAD or k["regs"] * k.get("threads", 32) > REGS_PER_SM:
            errors.append(f"{where}: {k['regs']} registers x {k.get('threads')} threads exceeds the launch bounds")
    for arch in archs:
        sel = configs["selection"].get(arch)
        if sel is None:
            errors.append(f"{arch}: no selection report")
            continue
        for table, what in (("by_head_dim", "forward"), ("bwd_by_head_dim", "backward"),
                            ("bwd_window_by_head_dim", "backward (window/softcap)")):
            if table not in sel:
                errors.append(f"{arch}: no {what} selection report")
                continue
            for d, c in sel[table].items():
                if c is None:
                    errors.append(f"{arch}: {what} head dim {d} selects no config within {sel['smem_limit']} B")
                elif c["smem_bytes"] > sel["smem_limit"]:
                    errors.append(f"{arch}: {what} head dim {d} selects {c} over the {sel['smem_limit']} B limit")
        if not any(k["arch"] == arch for k in kernels):
            errors.append(f"{arch}: no kernel was compiled")
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", shutil.which("nvcc") or "/usr/local/bin/nvcc"))
    ap.add_argument("--archs", default="sm_80,sm_89,sm_90a")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", default="", help="substring filter on the source paths under csrc/ (flash_fwd, "
                    "fwd_varlen_, decode), as tools/kernel_identity.py's --only")
    ap.add_argument("--json", help="write the per-kernel records here")
    ap.add_argument("--ptxas", help="assemble with this ptxas instead of nvcc's own: nvcc emits PTX (-ptx), then "
                    "PTXAS -v -arch=sm_XX assembles it (e.g. CUDA 12.8's ptxas from the nvidia-cuda-nvcc-cu12 wheel)")
    ap.add_argument("--ptx-isa", help="with --ptxas: lower the PTX .version directive to this ISA (e.g. 8.7 for "
                    "CUDA 12.8) when nvcc emits a newer one; ptxas rejects any feature the lower ISA lacks")
    ap.add_argument("--also-ptxas", help="assemble the same PTX with this ptxas too, for the --also-archs targets, "
                    "and check its report the same way (tests/infra/test_build_checks.py: CUDA 12.8's ptxas)")
    ap.add_argument("--also-ptx-isa", help="with --also-ptxas: the PTX ISA its release takes (--ptx-isa's rule)")
    ap.add_argument("--also-archs", default="sm_89,sm_90a", help="with --also-ptxas: the targets it assembles")
    ap.add_argument("--progress", action="store_true", help="print a line 'progress: DONE/TOTAL SECONDS ARCH SOURCE' "
                    "to stderr as each compile ends (the whole check takes minutes on 2 cores)")
    args = ap.parse_args()
    if args.ptx_isa and not args.ptxas:
        ap.error("--ptx-isa needs --ptxas")
    if args.also_ptx_isa and not args.also_ptxas:
        ap.error("--also-ptx-isa needs --also-ptxas")

    def release(tool: str) -> str:
        v = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
        return next((line for line in v.splitlines() if "release" in line), v.strip() or "unknown version")

    for tool, isa in ((args.ptxas, args.ptx_isa), (args.also_ptxas, args.also_ptx_isa)):
        if tool and isa and (why := isa_gate_canary(tool)):
            print(f"check_resources: FAIL: lowering the PTX ISA is unsafe: {why}", file=sys.stderr)
            return 1
    def lowered(isa: str | None) -> str:
        return f"; PTX .version lowered to {isa} where newer (canary ok)" if isa else ""

    if args.ptxas:
        print(f"assembling with {args.ptxas} ({release(args.ptxas)}){lowered(args.ptx_isa)}")
    archs = args.archs.split(",")
    also_archs = set(args.also_archs.split(",")) & set(archs) if args.also_ptxas else set()
    also_release = release(args.also_ptxas) if args.also_ptxas else None
    if args.also_ptxas:
        print(f"also assembling {','.join(sorted(also_archs))} with {args.also_ptxas} ({also_release})"
              f"{lowered(args.also_ptx_isa)}")
    configs = config_report()
    # Every kernel translation unit the extension builds (setup.py compiles the same set).
    sources = [p for p in sorted(CSRC.rglob("*.cu")) if args.only in str(p.relative_to(CSRC))]
    kernels: list[dict] = []
    kernels_also: list[dict] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as outdir, cf.ThreadPoolExecutor(args.jobs) as pool:
        futs = [pool.submit(compile_one, args.nvcc, s, a, outdir, args.ptxas, args.ptx_isa,
                            (args.also_ptxas, args.also_ptx_isa) if a in also_archs else None)
                for s in sources for a in archs]
        t0 = time.monotonic()
        for done, f in enumerate(cf.as_completed(futs), 1):
            results = f.result()
            src, arch = results[0][:2]
            if args.progress:
                print(f"progress: {done}/{len(futs)} {time.monotonic() - t0:.0f} {arch} {src}", file=sys.stderr, flush=True)
            for _, _, tag, rc, out in results:
                if rc != 0:
                    by = f", {also_release}" if tag == "also" else ""
                    failures.append(f"{src} [{arch}{by}] failed to compile:\n{out}")
                for k in parse_ptxas(out):
                    k["source"] = src
                    (kernels_also if tag == "also" else kernels).append(k)
    errors = failures + check(kernels, configs, archs)
    if args.also_ptxas:
        errors += [f"{also_release}: {e}" for e in check(kernels_also, configs, sorted(also_archs))]
    kernels.sort(key=lambda k: (k["arch"], k.get("head_dim", 0), k["name"]))
    print(f"{'arch':7} {'D':>4} {'BM':>4} {'BN':>4} {'warps':>5} {'regs':>5} {'spill':>6} {'stack':>6} {'smem KB':>8}  source")
    smem = {(c["head_dim"], c["block_m"], c["block_n"], c["warps"]): c["smem_bytes"] for c in configs["configs"]}
    smem_bwd = {(c["head_dim"], c["block_m"], c["block_n"], c["warps"], c["stages"]): c["smem_bytes"]
                for c in configs["bwd_configs"]}
    for k in kernels:
        key = (k.get("head_dim"), k.get("block_m"), k.get("block_n"), k.get("warps"))
        kb = smem_bwd.get(key + (k.get("stages"),), 0) if k.get("path") == "bwd" else smem.get(key, 0)
        print(f"{k['arch']:7} {k.get('head_dim', '-'):>4} {k.get('block_m', '-'):>4} {k.get('block_n', '-'):>4} "
              f"{k.get('warps', '-'):>5} {k['regs']:>5} {k['spill_st'] + k['spill_ld']:>6} {k['stack']:>6} "
              f"{kb / 1024:>8.1f}  {k['source']}")
    if args.json:
        report = {"kernels": kernels, "configs": configs}
        if args.also_ptxas:
            report["also"] = {"ptxas": also_release, "archs": sorted(also_archs), "kernels": kernels_also}
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    if errors:
        print(f"\n{len(errors)} problem(s):", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        return 1
    also = f", and {len(kernels_also)} assembled by {also_release}" if args.also_ptxas else ""
    print(f"\nOK: {len(kernels)} kernels x targets{also}, no spills, within launch bounds and shared-memory limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
