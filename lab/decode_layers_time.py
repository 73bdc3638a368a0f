#!/usr/bin/env python3
"""Decode as a model runs it: one call per layer, each layer with a KV cache of its own, against the
graph grids' one call replayed over one cache. A layer's cache that fits in L2 (50 MB on an H100)
stays there between replays of a single call, so the benchmark suite's decode-kv-graph rows with
small caches (B=8 Sk=1k: 32 MiB) time an L2-resident regime; in a model each layer's cache is read
once per token, from DRAM once the layers together exceed L2. Here, per shape and implementation
(flashattn's flash_attn_with_kvcache, SDPA's default, FlashAttention-3 where tokenspeed-fa3
imports; lab/decode_profile.py's inputs: bf16, D=128, Sq=1, full caches), two CUDA graphs: "warm",
the same call on one cache L times, and "layers", one call on each of L caches, L chosen so that
the caches total >= 3x the L2 (at most 512 layers, at least 4). Time per call, median of replays;
ratio = SDPA's (or FA3's) time / ours.
usage: python3 lab/decode_layers_time.py [--heads 32:8,8:1] [B:Sk ...]"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from decode_profile import graph_us, implementations, make_inputs


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", default="32:8,8:1", help="Hq:Hk pairs, comma-separated")
    ap.add_argument("shapes", nargs="*", default=["1:1024", "1:4096", "1:16384", "8:1024", "8:4096", "64:1024"])
    args = ap.parse_args(argv)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"{torch.cuda.get_device_name()} | L2 {l2 / 2**20:.0f} MiB | torch {torch.__version__} | bf16 D=128 Sq=1")
    print(f"{'Hq:Hk':>6} {'B':>3} {'Sk':>7} {'MiB':>6} {'L':>3} {'impl':>13} {'warm us':>8} {'layers us':>9} "
          f"{'warm x':>7} {'layers x':>8}")
    ratios: dict[str, dict[str, list[float]]] = {}
    for heads in args.heads.split(","):
        hq, hk = (int(x) for x in heads.split(":"))
        for shape in args.shapes:
            b, sk = (int(x) for x in shape.split(":"))
            cache_bytes = 2 * b * sk * hk * 128 * 2
            layers = max(4, min(512, math.ceil(3 * l2 / cache_bytes)))
            caches = [make_inputs(b, sk, hq, hk) for _ in range(layers)]
            per_layer = [implementations(*c) for c in caches]
            times = {}
            for name in per_layer[0]:
                warm = graph_us([per_layer[0][name]] * layers)
                cold = graph_us([impls[name] for impls in per_layer])
                times[name] = (warm, cold)
            ours = times["flashattn"]
            for name, (warm, cold) in times.items():
                xw, xc = (warm / ours[0], cold / ours[1]) if name != "flashattn" else (1.0, 1.0)
                if name != "flashattn":
                    r = ratios.setdefault(name, {"warm": [], "layers": []})
                    r["warm"].append(xw)
                    r["layers"].append(xc)
                print(f"{heads:>6} {b:>3} {sk:>7} {cache_bytes / 2**20:6.1f} {layers:>3} {name:>13} {warm:8.1f} "
                      f"{cold:9.1f} {xw:7.3f} {xc:8.3f}")
            del caches, per_layer
            torch.cuda.empty_cache()
    for name, r in ratios.items():
        gw = math.exp(sum(map(math.log, r["warm"])) / len(r["warm"]))
        gc = math.exp(sum(map(math.log, r["layers"])) / len(r["layers"]))
        print(f"geomean {name}'s time / ours: warm {gw:.3f}, layers {gc:.3f} ({len(r['warm'])} shapes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
