#!/usr/bin/env python3
"""GPU check of flash_attn_with_kvcache (split-KV decoding): numerics grid, then speed.

1. Numerics: a grid over dtype, head dim, GQA ratio, batch, Sq, cache lengths (varying per
   batch), causal, appending new k/v, forced split counts; every batch against the float64
   reference with the suite's criterion (tests/numerics.py: max err <= 2 x SDPA-math same-dtype
   error + 1e-5, LSE, rows that see no key), the in-place append checked bitwise, cache rows past
   each sequence filled with NaN (must not leak), fresh allocations poisoned with NaN.
2. Speed, decode shapes (bf16, D=128, Hq=32 : Hk=8, Sq=1, B in {1, 8, 64}, Sk 1k..128k): ours
   (split heuristic) vs torch SDPA's default path (enable_gqa=True on [B, H, S, D] views of the
   same cache), median of CUDA-event rounds of back-to-back calls, plus both replayed from CUDA
   graphs (kernel time without Python/launch overhead). Memory-bandwidth floor = K/V bytes /
   device-to-device copy bandwidth measured here.
   Targets (issue 7): geomean speedup over SDPA default >= 1.5x; at Sk >= 32k, time <= 1.2 x floor.
3. Split sweep on three shapes: the heuristic's time next to forced split counts.

Exit status: 0 all good; 1 a numerics failure (each failure is printed with its inputs);
2 numerics fine but a speed target missed (--no-perf-gate: report only).
usage: python3 lab/decode_check.py [--numerics-only | --speed-only] [--no-perf-gate] [--quick]
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the suite's criterion (numerics.py) and NaN poisoning

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
from gpu_helpers import nan_filled_allocations  # noqa: E402
from gpu_timing import _bench_common, interleaved_ms  # noqa: E402

BF16, F16, I32 = torch.bfloat16, torch.float16, torch.int32


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


# ---- 1. numerics --------------------------------------------------------------------------------


class CaseError(Exception):
    """The call itself failed: after a CUDA error the context is unusable, so the grid stops."""


def numerics_case(gen, dtype, b, sq, hq, hk, d, sk_max, lens, sq_new, causal, splits, bhsd_cache, scale=None):
    """Returns None when the case passes, else a message naming the case and what is wrong."""
    from numerics import assert_attention_matches

    name = (f"{str(dtype)[6:]} B={b} Sq={sq} Hq={hq} Hk={hk} D={d} Sk_max={sk_max} lens={lens} Sq_new={sq_new} "
            f"causal={causal} splits={splits} cache={'bhsd' if bhsd_cache else 'bshd'} scale={scale}")
    q = torch.randn(b, sq, hq, d, generator=gen, device="cuda").to(dtype)

    def cache():
        if bhsd_cache:
            return torch.randn(b, hk, sk_max, d, generator=gen, device="cuda").to(dtype).transpose(1, 2)
        return torch.randn(b, sk_max, hk, d, generator=gen, device="cuda").to(dtype)

    kc, vc = cache(), cache()
    k = v = None
    if sq_new:
        k = torch.randn(b, sq_new, hk, d, generator=gen, device="cuda").to(dtype)
        v = torch.randn(b, sq_new, hk, d, generator=gen, device="cuda").to(dtype)
    per_batch = lens if isinstance(lens, list) else [sk_max if lens is None else lens] * b
    for i in range(b):
        kc[i, per_batch[i] + sq_new :] = float("nan")
        vc[i, per_batch[i] + sq_new :] = float("nan")
    ek, ev = kc.clone(), vc.clone()
    for i in range(b):
        if sq_new:
            ek[i, per_batch[i] : per_batch[i] + sq_new] = k[i]
            ev[i, per_batch[i] : per_batch[i] + sq_new] = v[i]
    seqlens = torch.tensor(lens, dtype=I32, device="cuda") if isinstance(lens, list) else lens
    try:
        out, lse = flashattn.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, softmax_scale=scale,
                                                     causal=causal, num_splits=splits, return_lse=True)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        raise CaseError(f"{name}: raised {type(exc).__name__}: {exc}") from exc
    for what, got, want in (("k_cache", kc, ek), ("v_cache", vc, ev)):
        nd = int((bits(got) != bits(want)).sum())
        if nd:
            return f"{name}: {what} append wrong: {nd} elements differ from the expected in-place append"
    mode = flashattn.CAUSAL_BOTTOM_RIGHT if causal else flashattn.CAUSAL_NONE
    for i in range(b):
        n = per_batch[i] + sq_new
        try:
            assert_attention_matches(out[i : i + 1], lse[i : i + 1], q[i : i + 1], ek[i : i + 1, :n], ev[i : i + 1, :n],
                                     scale, mode, context=f"batch {i} (seqlen_k {n})")
        except AssertionError as exc:
            return f"{name}:\n    {exc}"
    return None


def numerics(quick: bool) -> int:
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = []
    for dtype in (BF16, F16):
        dims = (64, 128, 256) + ((40, 96, 200) if dtype == BF16 and not quick else ())
        for d in dims:
            for (hq, hk) in ((32, 8), (8, 8), (16, 1), (6, 2)):
                for (b, sq, sk_max, lens, sq_new) in (
                    (1, 1, 1, None, 0),
                    (2, 1, 1000, [999, 1], 1),
                    (3, 1, 4097, [4097, 0, 2048], 0),
                    (2, 4, 300, [296, 100], 4),
                    (2, 16, 777, 500, 16),
                    (1, 40, 129, [89], 40),
                    (2, 3, 40000, [39997, 12345], 3),
                ):
                    if sk_max == 40000 and (d not in (64, 128) or (quick and d != 128)):
                        continue
                    for causal in (False, True):
                        for splits in ((0, 1, 5, 128) if (hq, hk) == (32, 8) else (0, 3)):
                            cases.append((dtype, b, sq, hq, hk, d, sk_max, lens, sq_new, causal, splits, len(cases) % 3 == 0))
    cases.append((BF16, 2, 1, 8, 2, 128, 500, [400, 499], 1, True, 0, False, 0.0))
    cases.append((F16, 2, 2, 8, 2, 64, 500, [400, 3], 0, True, 3, False, -0.7))
    print(f"numerics: {len(cases)} cases (each batch vs the float64 reference, suite criterion)")
    failures = []
    for c in cases:
        try:
            msg = numerics_case(gen, *c)
        except CaseError as exc:
            failures.append(str(exc))
            print(f"  FAIL {exc}")
            if "CUDA" in str(exc) or "cuda" in str(exc):
                print("  stopping: a CUDA error leaves the context unusable; rerun this case alone with "
                      "CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to locate it")
                break
            continue
        if msg is not None:
            failures.append(msg)
            print(f"  FAIL {msg}")
    print(f"numerics: {len(cases) - len(failures)}/{len(cases)} passed")
    return len(failures)


# ---- 2. speed -----------------------------------------------------------------------------------


def graphed(fn):
    """fn replayed from a CUDA graph (kernel time without Python and launch overhead; the benchmark
    suite's capture, bench_common.graphed), or None where it cannot be captured."""
    try:
        return _bench_common().graphed(fn)
    except Exception as exc:  # noqa: BLE001
        print(f"    (CUDA graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]})")
        return None


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (as lab/ceilings.py)."""
    x = torch.empty(1 << 28, device="cuda", dtype=BF16)  # 512 MiB
    y = torch.empty_like(x)
    ms = interleaved_ms({"copy": lambda: y.copy_(x)}, round_ms=20.0, rounds=11)["copy"]
    return 2 * (1 << 28) * 2 / (ms * 1e-3)


def speed(quick: bool, gate: bool) -> tuple[bool, int]:
    """(targets met or not gated, number of shapes whose result disagrees with SDPA)."""
    props = torch.cuda.get_device_properties(0)
    bw = copy_bandwidth()
    print(f"\nspeed: {props.name}, {props.multi_processor_count} SMs, copy bandwidth {bw / 1e9:.0f} GB/s (read + write)")
    print("  bf16, D=128, Hq=32 : Hk=8, Sq=1, full caches; ms = median GPU ms per call")
    hdr = (f"  {'B':>3} {'Sk':>7} {'ours ms':>9} {'sdpa ms':>9} {'speedup':>8} {'ours graph':>10} {'sdpa graph':>10} "
           f"{'graph x':>8} {'floor ms':>9} {'ours/floor':>10} {'GB/s':>7}")
    print(hdr)
    total = props.total_memory
    speedups, graph_speedups, floor_misses, wrong = [], [], [], []
    batches = (1, 8, 64)
    seqlens = (1024, 4096, 16384, 32768, 65536, 131072) if not quick else (4096, 32768, 131072)
    for b in batches:
        for sk in seqlens:
            hq, hk, d = 32, 8, 128
            kv_bytes = 2 * b * sk * hk * d * 2
            if kv_bytes > 0.45 * total:
                print(f"  {b:>3} {sk:>7}  skipped: the caches need {kv_bytes / 2**30:.0f} GiB (> 45% of this GPU)")
                continue
            torch.cuda.empty_cache()
            gen = torch.Generator(device="cuda").manual_seed(1)
            q = torch.randn(b, 1, hq, d, generator=gen, device="cuda").to(BF16)
            kc = torch.randn(b, sk, hk, d, generator=gen, device="cuda").to(BF16)
            vc = torch.randn(b, sk, hk, d, generator=gen, device="cuda").to(BF16)
            qt, kt, vt = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)

            def ours():
                return flashattn.flash_attn_with_kvcache(q, kc, vc)

            def sdpa():
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

            o1 = ours()
            try:
                o2 = sdpa().transpose(1, 2)
                rel = float((o1.float() - o2.float()).norm() / o2.float().norm())
                if not rel < 0.05:
                    print(f"  {b:>3} {sk:>7}  WRONG: relative L2 difference to SDPA {rel:.3g} (expected ~1e-3)")
                    wrong.append((b, sk))
                    continue
                sdpa_ok = True
            except Exception as exc:  # noqa: BLE001
                sdpa_ok = False
                print(f"    SDPA default failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                torch.cuda.empty_cache()
            g_ours, g_sdpa = graphed(ours), graphed(sdpa) if sdpa_ok else None
            fns = {"ours": ours, "sdpa": sdpa if sdpa_ok else None, "g_ours": g_ours, "g_sdpa": g_sdpa}
            t = interleaved_ms({k: f for k, f in fns.items() if f is not None})
            t_ours, t_sdpa, tg_ours, tg_sdpa = (t.get(k) for k in ("ours", "sdpa", "g_ours", "g_sdpa"))
            floor = kv_bytes / bw * 1e3  # K/V bytes read / copy bandwidth (issue 7's definition), ms
            sp = t_sdpa / t_ours if t_sdpa else None
            gx = tg_sdpa / tg_ours if (tg_sdpa and tg_ours) else None
            if sp:
                speedups.append(sp)
            if gx:
                graph_speedups.append(gx)
            best = min(t for t in (t_ours, tg_ours) if t)
            ratio = best / floor
            if sk >= 32768 and ratio > 1.2:
                floor_misses.append((b, sk, ratio))

            def f(x, w=9, p=4):
                return f"{x:>{w}.{p}f}" if x is not None else f"{'n/a':>{w}}"

            print(f"  {b:>3} {sk:>7} {f(t_ours)} {f(t_sdpa)} {f(sp, 7, 2)}x {f(tg_ours, 10)} {f(tg_sdpa, 10)} "
                  f"{f(gx, 7, 2)}x {f(floor)} {ratio:>9.2f}x {kv_bytes / (best * 1e-3) / 1e9:>7.0f}")
            q = kc = vc = qt = kt = vt = o1 = g_ours = g_sdpa = None  # free before the next shape
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else float("nan")
    ggeo = math.exp(sum(math.log(s) for s in graph_speedups) / len(graph_speedups)) if graph_speedups else float("nan")
    print(f"\n  geomean speedup over SDPA default (eager): {geo:.2f}x over {len(speedups)} shapes (target >= 1.5x)")
    print(f"  geomean speedup over SDPA default (both CUDA-graph replayed, kernel time only): {ggeo:.2f}x "
          f"over {len(graph_speedups)} shapes")
    print(f"  floor target (Sk >= 32k: best of eager/graph time <= 1.2 x K/V bytes / copy bandwidth): "
          f"{'met' if not floor_misses else 'MISSED at ' + ', '.join(f'B={b} Sk={s} ({r:.2f}x)' for b, s, r in floor_misses)}")
    ok = geo >= 1.5 and not floor_misses
    print(f"  speed targets: {'PASS' if ok else 'MISS'}{'' if gate else ' (report only: --no-perf-gate)'}")
    if wrong:
        print(f"  WRONG results vs SDPA at {wrong}: counted as a numerics failure")
    return (ok or not gate), len(wrong)


def split_sweep() -> None:
    print("\nsplit sweep (ms per call, eager; 'auto' = heuristic): is the heuristic near the best forced count?")
    for b, sk in ((1, 8192), (1, 131072), (8, 32768)):
        hq, hk, d = 32, 8, 128
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=BF16)
        kc = torch.randn(b, sk, hk, d, device="cuda", dtype=BF16)
        vc = torch.randn(b, sk, hk, d, device="cuda", dtype=BF16)
        times = interleaved_ms({"auto" if s == 0 else s: (lambda s=s: flashattn.flash_attn_with_kvcache(q, kc, vc, num_splits=s))
                                for s in (0, 1, 2, 4, 8, 16, 32, 48, 64, 96, 128)}, rounds=11)
        best = min((t, s) for s, t in times.items() if s != "auto")
        cells = " ".join(f"{s}:{t:.4f}" for s, t in times.items())
        print(f"  B={b} Sk={sk}: {cells}  | best forced {best[1]} ({best[0]:.4f}); auto/best = {times['auto'] / best[0]:.2f}")
        q = kc = vc = None
        torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--numerics-only", action="store_true")
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--no-perf-gate", action="store_true", help="report speed targets without failing on a miss")
    ap.add_argument("--quick", action="store_true", help="smaller grids")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("decode_check: no CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 1
    if not flashattn.extension_available():
        print(f"decode_check: {flashattn.extension_error()}", file=sys.stderr)
        return 1
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} CUDA {torch.version.cuda} | flashattn build {flashattn.build_info()}")
    failed = 0
    if not args.speed_only:
        try:
            with nan_filled_allocations():  # fresh outputs start as NaN: an unwritten element fails
                failed = numerics(args.quick)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failed = 1
    perf_ok = True
    if not args.numerics_only:
        perf_ok, wrong = speed(args.quick, gate=not args.no_perf_gate)
        failed += wrong
        split_sweep()
    if failed:
        print(f"\ndecode_check: FAILED ({failed} numerics case(s))")
        return 1
    if not perf_ok:
        print("\ndecode_check: numerics OK, speed targets MISSED")
        return 2
    print("\ndecode_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
