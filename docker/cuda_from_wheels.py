#!/usr/bin/env python3
"""Lay NVIDIA's CUDA wheels (nvidia-cuda-nvcc, nvidia-cuda-runtime, ...) out as a CUDA toolkit
folder with the layout of NVIDIA's own packages, for docker/local_base.sh:

    PREFIX/bin/            nvcc, ptxas, fatbinary, nvlink, cuobjdump, ...
    PREFIX/nvvm/           cicc, libdevice, lib64/libnvvm.so*
    PREFIX/targets/x86_64-linux/include/   headers (cccl/ included)
    PREFIX/targets/x86_64-linux/lib/       libraries, with the unversioned .so links a linker needs
    PREFIX/include -> targets/x86_64-linux/include
    PREFIX/lib64   -> targets/x86_64-linux/lib

usage: docker/cuda_from_wheels.py --prefix /usr/local/cuda-13.0 WHEEL...

A wheel keeps its files under nvidia/<cuXX>/{bin,include,lib,nvvm}; zip archives do not carry
symlinks, and store the Unix mode in each member's external attributes (restored here, so bin/
stays executable). Files that are not part of a toolkit (the wheels' .metadata) are left out.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
import zipfile

TARGET = "targets/x86_64-linux"
_MEMBER = re.compile(r"^nvidia/cu\d+/(?P<top>[^/]+)/(?P<rest>.+)$")
_VERSIONED_SO = re.compile(r"^(lib[^/]+\.so)\.\d+(\.\d+)*$")


def destination(member: str) -> str | None:
    """Where a wheel member goes, relative to the prefix; None for what a toolkit does not hold."""
    m = _MEMBER.match(member)
    if not m or member.endswith("/"):
        return None
    top, rest = m.group("top"), m.group("rest")
    if top == "bin" or top == "nvvm":
        return f"{top}/{rest}"
    if top == "include":
        return f"{TARGET}/include/{rest}"
    if top == "lib":
        if rest.startswith("libnvvm.so"):
            return f"nvvm/lib64/{rest}"  # where the toolkit installer puts it
        return f"{TARGET}/lib/{rest}"
    return None  # .metadata and the like


def extract(wheel: str, prefix: str) -> list[str]:
    written = []
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            rel = destination(info.filename)
            if rel is None:
                continue
            path = os.path.join(prefix, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(info) as src, open(path, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            mode = (info.external_attr >> 16) & 0o7777
            if rel.startswith("bin/") or rel.startswith("nvvm/bin/"):
                mode |= 0o755  # some wheels store tools as 0744; other users must run them too
            os.chmod(path, mode or 0o644)
            written.append(rel)
    return written


def link_libraries(prefix: str) -> list[str]:
    """lib<x>.so -> lib<x>.so.N for every versioned library without its unversioned name (what
    `-l<x>` looks for), in the library folders."""
    made = []
    for d in (os.path.join(prefix, TARGET, "lib"), os.path.join(prefix, "nvvm", "lib64")):
        if not os.path.isdir(d):
            continue
        names = sorted(os.listdir(d))
        for name in names:
            m = _VERSIONED_SO.match(name)
            if not m:
                continue
            plain = os.path.join(d, m.group(1))
            if not os.path.lexists(plain):
                # the shortest versioned name (libcudart.so.13 rather than .so.13.0.96)
                candidates = sorted((n for n in names if _VERSIONED_SO.match(n) and _VERSIONED_SO.match(n).group(1) == m.group(1)), key=len)
                os.symlink(candidates[0], plain)
                made.append(os.path.relpath(plain, prefix))
    return made


def assemble(prefix: str, wheels: list[str]) -> None:
    os.makedirs(prefix, exist_ok=True)
    for w in wheels:
        extract(w, prefix)
    link_libraries(prefix)
    for name, target in (("include", f"{TARGET}/include"), ("lib64", f"{TARGET}/lib")):
        os.makedirs(os.path.join(prefix, target), exist_ok=True)
        link = os.path.join(prefix, name)
        if not os.path.lexists(link):
            os.symlink(target, link)
    missing = [p for p in ("bin/nvcc", "bin/ptxas", "nvvm/bin/cicc", "include/cuda_runtime.h") if not os.path.exists(os.path.join(prefix, p))]
    if missing:
        raise SystemExit(f"cuda_from_wheels: the wheels gave no {', '.join(missing)}: not a complete toolkit")
    for p in ("bin/nvcc", "nvvm/bin/cicc"):
        if not os.stat(os.path.join(prefix, p)).st_mode & stat.S_IXOTH:
            raise SystemExit(f"cuda_from_wheels: {p} is not executable")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("wheels", nargs="+")
    args = ap.parse_args(argv)
    assemble(args.prefix, args.wheels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
