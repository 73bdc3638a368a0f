#!/usr/bin/env python3
"""Writes every kernel path's explicit instantiations, one small file each, and its registry, so
that ninja compiles them in parallel, a change to one config recompiles one file, and no path keeps
a hand-written list that can drift from what is compiled:
  csrc/flash_fwd/instantiations/       the portable forward: (dtype, head dim, tile variant), each
                                       config dense (fwd_*) and for packed batches (fwd_varlen_*)
  csrc/flash_fwd_sm90/instantiations/  the Hopper forward: (dtype, config kind, head dim), each in
                                       both tile schedules (_static, _dynamic; the small-grid config
                                       static only); its packed flavour
                                       (the same rows; fwd_sm90_packed_*, registry_packed.inc); and
                                       the FP8 forward's (head dim; fwd_sm90_fp8_*, registry_fp8.inc)
  csrc/flash_bwd/instantiations/       the portable backward: (dtype, head dim, tile variant), dense
                                       and, where the compact route picks it, packed
  csrc/flash_bwd_sm90/instantiations/  the Hopper backward: (dtype, head dim, softcap, wide), dense
                                       (bwd_sm90_*) and for packed batches (bwd_sm90_packed_*)
  csrc/flash_decode/instantiations/    the split-KV decoding kernel: (dtype, head dim, variant)

Every path gets the same two things: its .cu files, each including the path's launcher header and
explicitly instantiating its entry points, and `registry.inc`, one macro call per registry entry,
which the path's dispatch (and, for the portable paths, registry.h) expands into its launcher table.
So the table a dispatcher searches and the set of compiled files come from the same rows here.

The tile configs themselves live in the traits.h of each path's folder; these tables only say which
combinations exist. Run it after changing a table; `--check` (run by the CPU suite) fails when the
committed files are stale, or when an instantiations/ folder under csrc/ is not one of these.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import sys
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"

DTYPES = {"fp16": "__half", "bf16": "__nv_bfloat16"}
# head dim -> variants with a config in traits.h (kCompact only where kLarge exceeds sm89's 99 KB)
HEAD_DIMS = {
    32: ["kLarge"],
    64: ["kLarge"],
    96: ["kLarge"],
    128: ["kLarge"],
    160: ["kLarge"],
    192: ["kLarge", "kCompact"],
    256: ["kLarge", "kCompact"],
}

# Hopper path: head dims with a Sm90DefaultConfig (smaller dims run on the next one up), each in
# both tile schedules (schedule.cuh).
SM90_HEAD_DIMS = (64, 96, 128, 192, 256)
SM90_SCHEDULES = {"static": "false", "dynamic": "true"}
# file-name infix -> (config template, Sm90ConfigKind, head dims); the long-keys and non-causal
# configs only for head dims where they are distinct (Sm90LongKeysConfig<D>::kDistinct,
# Sm90NonCausalConfig<D>::kDistinct, traits.h; dispatch.cu asserts the others are not).
SM90_CONFIGS = {
    "": ("Sm90DefaultConfig", "kDefault", SM90_HEAD_DIMS),
    "_longk": ("Sm90LongKeysConfig", "kLongKeys", (64,)),
    "_noncausal": ("Sm90NonCausalConfig", "kNonCausal", (64,)),
    "_smallgrid": ("Sm90SmallGridConfig", "kSmallGrid", (64,)),
}
# Configs that serve dense calls only (find_launcher picks kSmallGrid by the dense grid's size):
# no packed flavour.
SM90_DENSE_ONLY = {"_smallgrid"}
# Configs whose grids fit in one wave (kSmallGrid: its tiles fill at most half the SMs), which the
# dynamic schedule never serves (it pays only past one wave, tile_scheduler.h dynamic_schedule_pays):
# the static schedule only, registered with FLASHATTN_FWD_SM90_STATIC_INSTANCE.
SM90_STATIC_ONLY = {"_smallgrid"}

# FP8 Hopper forward (issue 29): instantiated head dims of Sm90Fp8Config (traits.h; smaller multiples
# of 16 run on the next one up), each in both tile schedules. Its own registry (registry_fp8.inc) in
# the same folder, so the 16-bit files stay as they are.
SM90_FP8_HEAD_DIMS = (128, 256)

# Backward (portable path): head dim -> variants with a config in csrc/flash_bwd/traits.h.
BWD_HEAD_DIMS = {
    32: ["kLarge"],
    64: ["kLarge", "kCompact"],
    96: ["kLarge"],
    128: ["kLarge", "kCompact"],
    160: ["kLarge", "kCompact"],
    192: ["kLarge", "kCompact"],
    256: ["kLarge", "kCompact"],
}

# Backward (Hopper path): head dims with a Sm90BwdTraits (smaller dims run on the next one up;
# the others on the portable backward).
BWD_SM90_HEAD_DIMS = (64, 96, 128, 192, 256)

# Decoding: head dim (kDecodeHeadDims) -> variants with a DecodeTileConfig in
# csrc/flash_decode/decode_traits.h. kHopper, kHopperSplit and kHopperStream exist where
# decode_hopper_smem(), decode_hopper_split_smem() and decode_hopper_stream_smem() are non-zero;
# decode_dispatch.cu asserts every config the planner can pick has its entry.
DECODE_HEAD_DIMS = {
    64: ["kPortable"],
    128: ["kPortable", "kHopper", "kHopperSplit", "kHopperStream"],
    256: ["kPortable"],
}

HEADER = "// Generated by tools/gen_instantiations.py; do not edit.\n"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registry row and the translation units that define what it points to."""
    registry: str                 # the macro call in registry.inc
    files: dict[str, list[str]]   # file name -> its explicit instantiations


@dataclasses.dataclass(frozen=True)
class KernelPath:
    folder: str                   # under csrc/
    launcher: str                 # the header, relative to instantiations/, that defines the entry points
    namespaces: tuple[str, ...]
    macro: str                    # registry.inc's second line: the macro and its arguments
    entries: list[Entry]
    registry_name: str = "registry.inc"  # two paths may share a folder, each with its own registry

    def render(self) -> dict[str, str]:
        opens = "".join(f"namespace {ns} {{\n" for ns in self.namespaces)
        closes = "".join(f"}}  // namespace {ns}\n" for ns in reversed(self.namespaces))
        files: dict[str, str] = {}
        registry = [HEADER, f"// {self.macro}\n"]
        for e in self.entries:
            for name, lines in e.files.items():
                assert name not in files, name
                files[name] = HEADER + f'#include "{self.launcher}"\n\n' + opens + "".join(lines) + closes
            registry.append(e.registry + "\n")
        files[self.registry_name] = "".join(registry)
        return files


# The kernel's flavours (kVarlen, csrc/flash_fwd/kernel.cuh): file-name prefix -> template argument.
# Every config gets both, in files of their own, so the dense files, and their kernels' code, do
# not change with the packed flavour (tools/kernel_identity.py).
FWD_FLAVOURS = {"fwd": "false", "fwd_varlen": "true"}


def fwd() -> KernelPath:
    entries = []
    for dname, ctype in DTYPES.items():
        for d, variants in HEAD_DIMS.items():
            for v in variants:
                traits = f"FwdTileConfig<{d}, TileVariant::{v}>::Traits"
                entries.append(Entry(f"FLASHATTN_FWD_INSTANCE({ctype}, {d}, {v})", {
                    f"{prefix}_{dname}_hdim{d}_{v[1:].lower()}.cu": [
                        f"template cudaError_t run_fwd<{traits}, {ctype}, {varlen}>(\n",
                        "    const FwdParams&, cudaStream_t);\n",
                    ]
                    for prefix, varlen in FWD_FLAVOURS.items()
                }))
    return KernelPath("flash_fwd", "../launch.cuh", ("flashattn",),
                      "FLASHATTN_FWD_INSTANCE(element type, head dim, tile variant): dense and packed flavours", entries)


def sm90_configs() -> Iterator[tuple[str, str, str, str, str, int]]:
    """Every 16-bit Hopper forward config: (dtype name, C++ type, file-name infix, config template,
    config kind, head dim)."""
    for dname, ctype in DTYPES.items():
        for infix, (config, kind, head_dims) in SM90_CONFIGS.items():
            for d in head_dims:
                yield dname, ctype, infix, config, kind, d


def fwd_sm90() -> KernelPath:
    entries = []
    for dname, ctype, infix, config, kind, d in sm90_configs():
        static_only = infix in SM90_STATIC_ONLY
        macro = "FLASHATTN_FWD_SM90_STATIC_INSTANCE" if static_only else "FLASHATTN_FWD_SM90_INSTANCE"
        entries.append(Entry(f"{macro}({config}, {kind}, {ctype}, {d})", {
            f"fwd_sm90_{dname}_hdim{d}{infix}_{sched}.cu": [
                f"template cudaError_t run_fwd_sm90<{config}<{d}>::Traits, {ctype}, {dynamic}>(\n",
                "    const FwdParams&, const DeviceLimits&, cudaStream_t);\n",
                f"template bool kernel_is_real<{config}<{d}>::Traits, {ctype}, {dynamic}>();\n",
            ] + ([] if dynamic == "true" else [
                f"template int max_active_clusters<{config}<{d}>::Traits, {ctype}>(int);\n"])
            for sched, dynamic in SM90_SCHEDULES.items()
            if not (static_only and dynamic == "true")
        }))
    return KernelPath("flash_fwd_sm90", "../launch.cuh", ("flashattn", "sm90"),
                      "FLASHATTN_FWD_SM90_INSTANCE(config, config kind, element type, head dim): static and dynamic "
                      "schedules; FLASHATTN_FWD_SM90_STATIC_INSTANCE: the static one only",
                      entries)


def fwd_sm90_packed() -> KernelPath:
    """The packed flavour of every 16-bit config (dynamic schedule only), in files and a registry of
    its own, so that the dense files and their kernels' code stay as they are."""
    entries = []
    for dname, ctype, infix, config, kind, d in sm90_configs():
        if infix in SM90_DENSE_ONLY:
            continue
        entries.append(Entry(f"FLASHATTN_FWD_SM90_PACKED_INSTANCE({config}, {kind}, {ctype}, {d})", {
            f"fwd_sm90_packed_{dname}_hdim{d}{infix}.cu": [
                f"template cudaError_t run_fwd_sm90_packed<{config}<{d}>::Traits, {ctype}>(\n",
                "    const FwdParams&, const DeviceLimits&, cudaStream_t);\n",
                f"template bool packed_kernel_is_real<{config}<{d}>::Traits, {ctype}>();\n",
            ]
        }))
    return KernelPath("flash_fwd_sm90", "../launch.cuh", ("flashattn", "sm90"),
                      "FLASHATTN_FWD_SM90_PACKED_INSTANCE(config, config kind, element type, head dim): packed batches",
                      entries, "registry_packed.inc")


def fwd_sm90_fp8() -> KernelPath:
    entries = []
    for d in SM90_FP8_HEAD_DIMS:
        entries.append(Entry(f"FLASHATTN_FWD_SM90_FP8_INSTANCE(Sm90Fp8Config, {d})", {
            f"fwd_sm90_fp8_hdim{d}_{sched}.cu": [
                f"template cudaError_t run_fwd_sm90_fp8<Sm90Fp8Config<{d}>::Traits, {dynamic}>(\n",
                "    const FwdParams&, const Fp8FwdArgs&, const DeviceLimits&, cudaStream_t);\n",
                f"template bool fp8_kernel_is_real<Sm90Fp8Config<{d}>::Traits, {dynamic}>();\n",
            ]
            for sched, dynamic in SM90_SCHEDULES.items()
        }))
    return KernelPath("flash_fwd_sm90", "../launch.cuh", ("flashattn", "sm90"),
                      "FLASHATTN_FWD_SM90_FP8_INSTANCE(config, head dim): static and dynamic schedules; "
                      "e4m3 in, bf16 out",
                      entries, "registry_fp8.inc")


def bwd() -> KernelPath:
    entries = []
    for dname, ctype in DTYPES.items():
        for d, variants in BWD_HEAD_DIMS.items():
            for v in variants:
                traits = f"BwdTileConfig<{d}, BwdTileVariant::{v}>::Traits"
                files = {f"bwd_{dname}_hdim{d}_{v[1:].lower()}.cu": [
                    f"template cudaError_t run_bwd<{traits}, {ctype}>(\n",
                    "    const BwdParams&, cudaStream_t);\n",
                ]}
                # The packed-batch flavour (flash_bwd_kernel's kVarlen) in files of its own, so that
                # the dense files hold exactly the kernels they held before it existed; only for the
                # configs the compact route picks (csrc/flash_bwd/registry.h,
                # bwd_has_window_kernels): a kCompact one, or the only one of its head dim.
                if v == "kCompact" or len(variants) == 1:
                    files[f"bwd_varlen_{dname}_hdim{d}_{v[1:].lower()}.cu"] = [
                        f"template cudaError_t run_bwd_varlen<{traits}, {ctype}>(\n",
                        "    const BwdParams&, cudaStream_t);\n",
                    ]
                entries.append(Entry(f"FLASHATTN_BWD_INSTANCE({ctype}, {d}, {v})", files))
    return KernelPath("flash_bwd", "../launch.cuh", ("flashattn",),
                      "FLASHATTN_BWD_INSTANCE(element type, head dim, tile variant)", entries)


def bwd_sm90() -> KernelPath:
    entries = []
    for packed in ("false", "true"):
        for dname, ctype in DTYPES.items():
            for d in BWD_SM90_HEAD_DIMS:
                for softcap, wide in (("false", "false"), ("true", "false"), ("false", "true"), ("true", "true")):
                    # The wide config (traits.h): D = 96 and 128, dense.
                    if wide == "true" and (d not in (96, 128) or packed == "true"):
                        continue
                    suffix = ("_softcap" if softcap == "true" else "") + ("_wide" if wide == "true" else "")
                    prefix = "bwd_sm90_packed" if packed == "true" else "bwd_sm90"
                    config = f"{d}, {softcap}, true" if wide == "true" else f"{d}, {softcap}"
                    traits = f"Sm90BwdConfig<{config}>::Traits"
                    args = f"{traits}, {ctype}, {softcap}, {packed}"
                    entries.append(Entry(f"FLASHATTN_BWD_SM90_INSTANCE({ctype}, {d}, {softcap}, {packed}, {wide})", {
                        f"{prefix}_{dname}_hdim{d}{suffix}.cu": [
                            f"template cudaError_t run_bwd_sm90<{args}>(const BwdParams&, const DeviceLimits&, cudaStream_t);\n",
                            f"template bool bwd_kernel_is_real<{args}>();\n",
                        ]
                    }))
    return KernelPath("flash_bwd_sm90", "../launch.cuh", ("flashattn", "sm90"),
                      "FLASHATTN_BWD_SM90_INSTANCE(element type, head dim, softcap, packed, wide)", entries)


def decode() -> KernelPath:
    entries = []
    for dname, ctype in DTYPES.items():
        for d, variants in DECODE_HEAD_DIMS.items():
            for v in variants:
                traits = f"DecodeTileConfig<{d}, DecodeVariant::{v}>::Traits"
                suffix = "" if v == "kPortable" else "_" + re.sub(r"(?<!^)([A-Z])", r"_\1", v[1:]).lower()
                entries.append(Entry(f"FLASHATTN_DECODE_INSTANCE({ctype}, {d}, {v})", {
                    f"decode_{dname}_hdim{d}{suffix}.cu": [
                        f"template cudaError_t run_decode_split<{traits}, {ctype}>(\n",
                        "    const DecodeParams&, cudaStream_t);\n",
                        f"template cudaError_t decode_ctas_per_sm<{traits}, {ctype}>(int*, bool);\n",
                    ]
                }))
    return KernelPath("flash_decode", "../decode_launch.cuh", ("flashattn",),
                      "FLASHATTN_DECODE_INSTANCE(element type, head dim, variant)", entries)


def kernel_paths() -> list[KernelPath]:
    return [fwd(), fwd_sm90(), fwd_sm90_packed(), fwd_sm90_fp8(), bwd(), bwd_sm90(), decode()]


def sync(out_dir: pathlib.Path, files: dict[str, str], check: bool) -> list[str]:
    """Writes `files` into out_dir (removing others); with check, only lists what differs."""
    stale = [n for n, text in files.items() if not (out_dir / n).exists() or (out_dir / n).read_text() != text]
    extra = [p.name for p in out_dir.glob("*") if p.name not in files]
    if check:
        return [f"{out_dir.relative_to(ROOT)}/{n}" for n in stale + extra]
    out_dir.mkdir(parents=True, exist_ok=True)
    for p in out_dir.glob("*"):
        if p.name not in files:
            p.unlink()
    for n, text in files.items():
        (out_dir / n).write_text(text)
    print(f"wrote {len(files)} files to {out_dir.relative_to(ROOT)}")
    return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed files differ")
    args = ap.parse_args()
    paths = kernel_paths()
    bad: list[str] = []
    # Paths sharing a folder (the Hopper forward's 16-bit, packed and FP8 kernels) are written together.
    by_folder: dict[str, dict[str, str]] = {}
    for kp in paths:
        files = by_folder.setdefault(kp.folder, {})
        for name, text in kp.render().items():
            assert name not in files, name
            files[name] = text
    for folder, files in by_folder.items():
        bad += sync(CSRC / folder / "instantiations", files, args.check)
    # An instantiations/ folder this script does not write would be a hand-kept list again.
    owned = {CSRC / kp.folder / "instantiations" for kp in paths}
    bad += [f"{p.relative_to(ROOT)}/ (not generated)" for p in sorted(CSRC.rglob("instantiations")) if p not in owned]
    if bad:
        print(f"stale or unexpected: {bad}; run tools/gen_instantiations.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
