#!/usr/bin/env python3
"""Is a kernel's code unchanged by a commit? Compares the PTX of csrc/ at a base revision with the
working tree's, kernel by kernel, with no GPU.

A change that adds a feature behind a compile-time switch (a packed-batch or paged-cache flavour of
a kernel) should leave every existing instantiation bit-for-bit the same; that proves the measured
speed and the tested numerics of those kernels still hold, without a GPU run. Kernels are matched
by their body, not their names, so a new template parameter that renames a kernel (`..., false>`)
does not hide an identical body. Identical PTX from the same nvcc assembles to identical machine
code; PTX that differs only where ptxas would erase the difference reads as changed (the safe side).

Every .cu file under csrc/ whose path contains one of --only is compiled to PTX at both revisions
(the flags of tools/check_resources.py, for each target's virtual architecture) and split into
kernels, each body with its own name replaced by a placeholder. Each base kernel is reported as `same` (an identical body exists in the working tree) or
`CHANGED` (none does; the nearest by name is diffed). Exit status 1 when any base kernel changed.

usage: tools/kernel_identity.py --only flash_fwd/ [--only ...] [--base main] [--archs sm_80,sm_90a] [--jobs 2]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import difflib
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from check_resources import ARCH_GENCODE  # noqa: E402

# ".visible .entry NAME(": a kernel's first line; its body runs to the next one (or the file's end).
_ENTRY = re.compile(r"^\.(?:visible|weak)\s+\.entry\s+(\S+)\($", re.MULTILINE)
_PARAM_SIZE = re.compile(r"\[\d+\]")


def extract_csrc(rev: str, dest: pathlib.Path) -> pathlib.Path:
    """csrc/ of `rev` under dest (git archive: no worktree, no checkout of the caller's tree)."""
    tar = dest / "csrc.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "csrc"], stdout=f, check=True)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    return dest / "csrc"


@dataclasses.dataclass(frozen=True)
class Kernel:
    body: tuple[str, ...]  # PTX lines, the kernel's own name replaced, the parameter block's size too
    param_bytes: str       # that size: it follows the params struct, which may grow at its end for a
                           # new flavour without moving a field this kernel reads, so it is compared apart


def compile_ptx(nvcc: str, csrc: pathlib.Path, src: pathlib.Path, arch: str, outdir: pathlib.Path) -> dict[str, Kernel]:
    """{kernel name: Kernel} of one translation unit for one target."""
    ptx = outdir / f"{src.stem}.{arch}.{hashlib.sha1(str(src).encode()).hexdigest()[:8]}.ptx"
    virtual = ARCH_GENCODE[arch].split(",")[0].removeprefix("arch=")
    cmd = [nvcc, "-std=c++17", "-O3", "--expt-relaxed-constexpr", f"-I{csrc}", f"-arch={virtual}", "-ptx", str(src),
           "-o", str(ptx)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{src}: nvcc failed for {arch}:\n{r.stdout}{r.stderr}")
    text = ptx.read_text()
    starts = list(_ENTRY.finditer(text))
    kernels: dict[str, Kernel] = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        body = text[m.start():end].replace(m.group(1), "KERNEL")
        head, brace, rest = body.partition("{")
        lines = [f"{_PARAM_SIZE.sub('[?]', head)}{brace}".replace("\n", " ")]
        lines += [line.strip() for line in rest.splitlines() if line.strip() and not line.lstrip().startswith("//")]
        kernels[m.group(1)] = Kernel(tuple(lines), ",".join(_PARAM_SIZE.findall(head)))
    return kernels


def sources(csrc: pathlib.Path, only: list[str]) -> list[pathlib.Path]:
    return sorted(p for p in csrc.rglob("*.cu") if any(o in str(p.relative_to(csrc)) for o in only))


def collect(nvcc: str, csrc: pathlib.Path, only: list[str], archs: list[str], outdir: pathlib.Path,
            jobs: int) -> dict[tuple[str, str], Kernel]:
    out: dict[tuple[str, str], Kernel] = {}
    work = [(s, a) for s in sources(csrc, only) for a in archs]
    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        for (s, a), ks in zip(work, pool.map(lambda w: compile_ptx(nvcc, csrc, w[0], w[1], outdir), work)):
            for name, k in ks.items():
                out[(a, name)] = k
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="main", help="the revision to compare against (default: main)")
    ap.add_argument("--only", action="append", required=True, help="path substring under csrc/ (repeatable)")
    ap.add_argument("--archs", default="sm_80", help="comma-separated targets (default: sm_80)")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    args = ap.parse_args()
    archs = args.archs.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = pathlib.Path(tmp)
        (tmpd / "base").mkdir()
        (tmpd / "head").mkdir()
        base = collect(args.nvcc, extract_csrc(args.base, tmpd / "base"), args.only, archs, tmpd / "base", args.jobs)
        head = collect(args.nvcc, ROOT / "csrc", args.only, archs, tmpd / "head", args.jobs)
    if not base:
        print(f"kernel_identity: no kernels under csrc/ match {args.only} at {args.base}", file=sys.stderr)
        return 2
    by_body = {(a, k.body): (n, k) for (a, n), k in head.items()}
    changed = 0
    for (arch, name), k in sorted(base.items()):
        found = by_body.get((arch, k.body))
        if found is not None:
            twin, now = found
            notes = ([] if twin == name else [f"now {twin}"]) + \
                    ([] if now.param_bytes == k.param_bytes else [f"param block {k.param_bytes} -> {now.param_bytes} B"])
            print(f"same     {arch} {len(k.body):6d} lines  {name}{'  (' + '; '.join(notes) + ')' if notes else ''}")
            continue
        changed += 1
        near = difflib.get_close_matches(name, [n for (a, n) in head if a == arch], n=1, cutoff=0.0)
        print(f"CHANGED  {arch} {len(k.body):6d} lines  {name}")
        if near:
            other = head[(arch, near[0])].body
            delta = sum(1 for line in difflib.unified_diff(k.body, other, lineterm="", n=0)
                        if line[:1] in "+-" and line[:3] not in ("+++", "---"))
            print(f"         nearest now: {near[0]} ({len(other)} lines, {delta} lines differ)")
    base_bodies = {(a, k.body) for (a, _), k in base.items()}
    new = sorted(f"{a} {n}" for (a, n), k in head.items() if (a, k.body) not in base_bodies)
    for n in new:
        print(f"new      {n}")
    print(f"kernel_identity: {len(base) - changed} of {len(base)} kernels at {args.base} unchanged, {changed} changed, "
          f"{len(new)} new ({', '.join(archs)})")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
