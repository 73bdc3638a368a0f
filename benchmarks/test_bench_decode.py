"""Decode benchmarks beyond the shared decode grid (benchmarks/test_attention.py::test_decode,
which times flash_attn_with_kvcache on full caches against every SDPA backend).

Same conventions as test_attention.py (see docs/benchmarks.md): the implementations of a case
timed together in interleaved rounds of N back-to-back calls (CUDA events), the same extra_info
fields, markers `bench` and `decode` (so conftest skips them until flash_attn_with_kvcache
exists) and `quick` for a subset.
Each variant is its own grid, so benchmarks/bench_report.py reports it as its own category and the
headline decode geomean stays the shared grid's:

  decode-step    a whole decode step: append one token per sequence (in place, at per-batch
                 cache_seqlens) and attend, causal. sdpa-default does the same with index_put_
                 into the caches, then SDPA (enable_gqa) over the [B, H, S, D] views.
  decode-splits  the split-KV heuristic vs num_splits=1 ("flashattn-nosplit"): what splitting buys.
  decode-graph   flashattn and sdpa-default each replayed from a CUDA graph: kernel time without
                 Python, dispatcher and launch overhead.
  decode-ragged  B=8 sequences of lengths spread over 1/8..1 of the cache: flashattn with
                 cache_seqlens (reads only valid keys), "flashattn-full" (the whole cache), and
                 sdpa-default with a boolean key-padding mask.
  decode-kv      the decode grid (B 1/8/64, Sk 1k..128k, D=128, bf16, GQA 32:8 and 8:1, Sq=1, full
  decode-kv-graph caches given as cache_seqlens), called eagerly (decode-kv) and replayed from CUDA
                 graphs (decode-kv-graph: every implementation captured, so kernel time without
                 Python, dispatcher and launch overhead). On the same tensors:
                   flashattn            the contiguous cache [B, Sk, Hk, D]
                   flashattn-pagedP     the same buffer as a pool of pages of P = 16, 64, 256 rows
                                        ([B*Sk/P, P, Hk, D]) through a block_table that puts every
                                        sequence's pages in a random order (the pages are read in
                                        another order than the contiguous cache's rows, the bytes
                                        are the same; no second copy of the caches)
                   sdpa-default         SDPA (enable_gqa) over [B, H, S, D] views of the caches
                   fa3, fa3-pagedP      FlashAttention-3's flash_attn_with_kvcache (the
                                        tokenspeed-fa3 wheel, module flash_attn_interface) on the
                                        contiguous cache and with page_table = the same table;
                                        optional: absent (skipped with the reason) where it does
                                        not import or cannot run (it is built for Hopper only)
                   copy-floor           a device-to-device copy of the K cache's bytes: it reads and
                                        writes as many bytes as the decode reads, so its time is the
                                        copy floor (K/V bytes / copy bandwidth)
  decode-kv-small  the same at B=2 and 4, Sk 32k..128k (eager and replayed, as decode-kv-small-graph):
                 the small-batch long-cache shapes, whose time is to be within 1.10x of the copy
                 floor, in a grid of their own so that decode-kv's geomeans are the grid's.
                 The report's "vs flashattn-pagedP" columns are time(paged) / time(contiguous), "vs
                 copy-floor" floor / time, "vs sdpa-default" and "vs fa3" the speedups; each result's
                 extra_info also holds time_over_copy_floor.

    python -m pytest benchmarks/test_bench_decode.py -m bench --benchmark-json=decode.json
    python -m pytest benchmarks/test_bench_decode.py -m bench -k "decode-kv" --benchmark-json=kv.json
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common as bc  # noqa: E402


@dataclass(frozen=True)
class DecodeCase:
    kind: str  # "step" | "splits" | "graph" | "ragged" | "kv" | "kv-small"
    b: int
    sk: int  # cache capacity (Sk_max)
    hq: int = 32
    hk: int = 8
    d: int = 128
    dtype: str = "bf16"
    quick: bool = False
    graph: bool = False  # kinds "kv", "kv-small": every implementation replayed from a CUDA graph

    @property
    def is_kv(self) -> bool:
        return self.kind in ("kv", "kv-small")

    @property
    def grid(self) -> str:
        return f"decode-{self.kind}" + ("-graph" if self.graph else "")

    @property
    def tensors_key(self) -> DecodeCase:
        """Cases with equal keys share one set of inputs: a kv shape's eager and graph cases."""
        return replace(self, graph=False, quick=False) if self.is_kv else self

    @property
    def group(self) -> str:
        return f"{self.dtype} D={self.d} Sq=1 Sk={self.sk} B={self.b} H={self.hq}/{self.hk} {self.grid}"

    @property
    def id(self) -> str:
        return f"{self.dtype}-D{self.d}-Sk{self.sk}-B{self.b}-H{self.hq}kv{self.hk}-{self.grid}"

    def lengths(self) -> list[int]:
        """Valid keys per sequence seen by the attention."""
        if self.kind == "ragged":
            return [max(1, self.sk * (i + 1) // self.b) for i in range(self.b)]
        return [self.sk] * self.b

    @property
    def cache_bytes(self) -> int:
        return 2 * self.b * self.sk * self.hk * self.d * 2

    def flops_and_bytes(self, full: bool = False) -> tuple[int, int]:
        lens = [self.sk] * self.b if full else self.lengths()
        keys = sum(lens)
        flops = 4 * self.hq * self.d * keys  # Sq = 1: every key visible
        io = 2 * self.d * (2 * self.b * self.hq + 2 * self.hk * keys)  # Q, O, and the K/V read
        return flops, io


IMPLS = {
    "step": ("flashattn", "sdpa-default"),
    "splits": ("flashattn", "flashattn-nosplit"),
    "graph": ("flashattn", "sdpa-default"),
    "ragged": ("flashattn", "flashattn-full", "sdpa-default"),
}
PAGED_PREFIX, FA3_PAGED_PREFIX = bc.PAGED_PREFIX, bc.FA3_PAGED_PREFIX
IMPLS["kv"] = IMPLS["kv-small"] = ("flashattn", *bc.DECODE_PAGED_IMPLS, "sdpa-default", "fa3", *bc.FA3_PAGED_IMPLS,
                                   "copy-floor")
KV_SEQLENS = (1024, 4096, 16384, 32768, 65536, 131072)
KV_HEADS = ((32, 8), (8, 1))


def page_size_of(impl: str) -> int | None:
    for prefix in (PAGED_PREFIX, FA3_PAGED_PREFIX):
        if impl.startswith(prefix):
            return int(impl.removeprefix(prefix))
    return None


def cases() -> list[DecodeCase]:
    out = []
    for b in (1, 8, 64):
        for sk in (4096, 32768, 131072):
            out.append(DecodeCase("step", b, sk, quick=(b == 8 and sk == 32768)))
    for b in (1, 8):
        for sk in (4096, 32768, 131072):
            out.append(DecodeCase("splits", b, sk, quick=(b == 1 and sk == 32768)))
    for b in (1, 8, 64):
        for sk in (1024, 16384, 131072):
            out.append(DecodeCase("graph", b, sk, quick=(b == 8 and sk == 16384)))
    for sk in (16384, 131072):
        out.append(DecodeCase("ragged", 8, sk, quick=(sk == 16384)))
    for hq, hk in KV_HEADS:
        for b in (1, 8, 64):
            for sk in KV_SEQLENS:
                for graph in (False, True):
                    quick = hk == 8 and b in (1, 8) and sk == 32768
                    out.append(DecodeCase("kv", b, sk, hq=hq, hk=hk, quick=quick, graph=graph))
    # The batches between (B=2, 4) at Sk >= 32k, the small-batch long-cache case that must be
    # within 1.10x of the copy floor: a grid of their own, so decode-kv's geomeans stay the grid's.
    for hq, hk in KV_HEADS:
        for b in (2, 4):
            for sk in (s for s in KV_SEQLENS if s >= 32768):
                for graph in (False, True):
                    out.append(DecodeCase("kv-small", b, sk, hq=hq, hk=hk, graph=graph))
    return out


def _params():
    for case in cases():
        for impl in bc.selected_impls(IMPLS[case.kind]):
            marks = [pytest.mark.bench, pytest.mark.decode]
            if case.quick:
                marks.append(pytest.mark.quick)
            yield pytest.param(case, impl, id=f"{case.id}-{impl}", marks=marks)


_CACHE: dict = {}


def _inputs(case: DecodeCase):
    """q [B,1,Hq,D], caches [B,Sk,Hk,D], new k/v [B,1,Hk,D], cache_seqlens int32 [B]; kept for
    the current case only (all its implementations share them)."""
    import torch

    if _CACHE.get("case") != case.tensors_key:
        _CACHE.clear()
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(0).total_memory
        # kv: the paged implementations read the same buffer (no pools of their own), and copy-floor
        # checks its own scratch against the free memory.
        share = 0.45 if case.is_kv else 0.4
        if case.cache_bytes > share * total:
            raise bc.Unavailable(f"caches need ~{case.cache_bytes / 2**30:.0f} GiB, over {share:.0%} of this GPU's "
                                 f"{total / 2**30:.0f} GiB")
        dt = bc.torch_dtype(case.dtype)
        gen = torch.Generator(device="cuda").manual_seed(1234)
        q = torch.randn(case.b, 1, case.hq, case.d, device="cuda", dtype=dt, generator=gen)
        kc = torch.randn(case.b, case.sk, case.hk, case.d, device="cuda", dtype=dt, generator=gen)
        vc = torch.randn(case.b, case.sk, case.hk, case.d, device="cuda", dtype=dt, generator=gen)
        k = torch.randn(case.b, 1, case.hk, case.d, device="cuda", dtype=dt, generator=gen)
        v = torch.randn(case.b, 1, case.hk, case.d, device="cuda", dtype=dt, generator=gen)
        if case.kind == "step":  # the new token goes to the last row: afterwards every cache is full
            seqlens = torch.full((case.b,), case.sk - 1, dtype=torch.int32, device="cuda")
        else:
            seqlens = torch.tensor(case.lengths(), dtype=torch.int32, device="cuda")
        _CACHE.update(case=case.tensors_key, tensors=(q, kc, vc, k, v, seqlens))
    return _CACHE["tensors"]


def _paged(kc, vc, page_size: int):
    """(k_pool, v_pool, block_table): the caches' own buffers as pools of pages of page_size rows
    ([B * Sk / P, P, Hk, D] views, no copy), and a table that gives every sequence a random
    permutation of all the pages (a serving cache's pages are rarely in sequence). Sequence b of
    the paged cache is then another sequence than the contiguous cache's b (its pages gathered
    from everywhere), with the same bytes read in total."""
    import torch

    key = ("paged", page_size)
    if key not in _CACHE:
        b, sk, hk, d = kc.shape
        n = sk // page_size
        perm = torch.randperm(b * n, generator=torch.Generator().manual_seed(page_size))
        table = perm.view(b, n).to(torch.int32).to(kc.device)
        _CACHE[key] = (kc.view(b * n, page_size, hk, d), vc.view(b * n, page_size, hk, d), table)
    return _CACHE[key]


def _paged_reference(case: DecodeCase, page_size: int):
    """(rows, SDPA default's output on them) for the paged caches of page_size: the first and last
    sequence, gathered from their pages (the whole batch would need a second copy of the caches)."""
    import torch.nn.functional as F

    key = ("paged_ref", page_size)
    if key not in _CACHE:
        q, kc, vc, *_ = _inputs(case)
        k_pool, v_pool, table = _paged(kc, vc, page_size)
        rows = sorted({0, case.b - 1})
        idx = table[rows].long()
        kg = k_pool[idx].reshape(len(rows), case.sk, case.hk, case.d)
        vg = v_pool[idx].reshape(len(rows), case.sk, case.hk, case.d)
        try:
            ref = F.scaled_dot_product_attention(q[rows].transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2),
                                                 enable_gqa=True).transpose(1, 2)
        except (RuntimeError, TypeError):
            ref = None
        _CACHE[key] = (rows, ref)
    return _CACHE[key]


def make_callable(case: DecodeCase, impl: str):
    """fn() runs one call of `impl` on the case's inputs and returns its [B, 1, Hq, D] output."""
    import torch
    import torch.nn.functional as F

    import flashattn

    if impl.startswith("flashattn"):
        if not flashattn.extension_available():
            raise bc.Unavailable(f"flashattn extension not built: {flashattn.extension_error()}")
    q, kc, vc, k, v, seqlens = _inputs(case)
    kt, vt, qt = kc.transpose(1, 2), vc.transpose(1, 2), q.transpose(1, 2)

    if case.kind == "step":
        if impl == "flashattn":
            return lambda: flashattn.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, causal=True)
        rows = torch.arange(case.b, device="cuda")

        def sdpa_step():
            pos = seqlens.long()
            kc.index_put_((rows, pos), k[:, 0])
            vc.index_put_((rows, pos), v[:, 0])
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)

        return sdpa_step

    if case.kind == "splits":
        splits = 1 if impl == "flashattn-nosplit" else 0
        return lambda: flashattn.flash_attn_with_kvcache(q, kc, vc, num_splits=splits)

    if case.kind == "graph":
        if impl == "flashattn":
            fn = lambda: flashattn.flash_attn_with_kvcache(q, kc, vc)  # noqa: E731
        else:
            fn = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)  # noqa: E731
        try:
            return bc.graphed(fn)
        except RuntimeError as exc:
            raise bc.Unavailable(f"{impl} cannot be captured in a CUDA graph: {str(exc).splitlines()[0]}") from exc

    if case.is_kv:
        fn = _kv_callable(case, impl, q, kc, vc, seqlens)
        if not case.graph:
            return fn
        try:
            return bc.graphed(fn)
        except RuntimeError as exc:
            raise bc.Unavailable(f"{impl} cannot be captured in a CUDA graph: {str(exc).splitlines()[0]}") from exc

    # ragged
    if impl == "flashattn":
        return lambda: flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens)
    if impl == "flashattn-full":
        return lambda: flashattn.flash_attn_with_kvcache(q, kc, vc)
    mask = (torch.arange(case.sk, device="cuda")[None, :] < seqlens[:, None])[:, None, None, :]  # [B,1,1,Sk]
    return lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True).transpose(1, 2)


def _kv_callable(case: DecodeCase, impl: str, q, kc, vc, seqlens):
    """One eager call of `impl` on the decode-kv inputs; every implementation gets the same tensors
    (flashattn and FA3 the same cache_seqlens, and with pages the same pools and table)."""
    import torch
    import torch.nn.functional as F

    import flashattn

    page_size = page_size_of(impl)
    if impl == "flashattn":
        return lambda: flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens)
    if impl.startswith(PAGED_PREFIX):
        k_pool, v_pool, table = _paged(kc, vc, page_size)
        return lambda: flashattn.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=seqlens, block_table=table)
    if impl == "sdpa-default":
        qt, kt, vt = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)
        return lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)
    if impl == "fa3":
        fa3 = bc.fa3_kvcache()
        return lambda: fa3(q, kc, vc, cache_seqlens=seqlens)
    if impl.startswith(FA3_PAGED_PREFIX):
        fa3 = bc.fa3_kvcache()
        k_pool, v_pool, table = _paged(kc, vc, page_size)
        return lambda: fa3(q, k_pool, v_pool, cache_seqlens=seqlens, page_table=table)
    if impl == "copy-floor":
        free, _ = torch.cuda.mem_get_info()
        if kc.numel() * kc.element_size() > 0.9 * free:
            raise bc.Unavailable(f"copy-floor: a scratch of the K cache's {kc.numel() * kc.element_size() / 2**30:.1f} "
                                 f"GiB does not fit in the {free / 2**30:.1f} GiB free")
        scratch = torch.empty_like(kc)
        return lambda: scratch.copy_(kc)
    raise ValueError(f"unknown decode-kv implementation {impl!r}")


def _reference(case: DecodeCase):
    """SDPA's default path on the case's inputs (after the step's append: every cache is full)."""
    import torch
    import torch.nn.functional as F

    q, kc, vc, k, v, seqlens = _inputs(case)
    if case.is_kv:  # one reference for the shape's implementations and both of its cases
        if "ref" not in _CACHE:
            try:
                _CACHE["ref"] = F.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2),
                                                               vc.transpose(1, 2), enable_gqa=True).transpose(1, 2)
            except (RuntimeError, TypeError):
                _CACHE["ref"] = None
        return _CACHE["ref"]
    if case.kind == "ragged":
        mask = (torch.arange(case.sk, device="cuda")[None, :] < seqlens[:, None])[:, None, None, :]
        kw = {"attn_mask": mask}
    else:
        kw = {}
    if case.kind == "step":
        rows = torch.arange(case.b, device="cuda")
        kc.index_put_((rows, seqlens.long()), k[:, 0])
        vc.index_put_((rows, seqlens.long()), v[:, 0])
    try:
        return F.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2),
                                              enable_gqa=True, **kw).transpose(1, 2)
    except (RuntimeError, TypeError):
        return None


_BENCH = bc.CaseBench()


def _prepare(case: DecodeCase, impl: str):
    """impl ready to time on the case's shared inputs: built, run once, checked against SDPA."""
    import torch

    try:
        fn = make_callable(case, impl)
        out = fn()
        torch.cuda.synchronize()
    except (RuntimeError, ValueError, TypeError, AssertionError) as exc:
        if isinstance(exc, AssertionError) and not impl.startswith("fa3"):
            raise  # FlashAttention-3 asserts on inputs it refuses; flashattn and SDPA raise errors
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise bc.Unavailable(f"{impl} cannot run {case.group}: {msg}") from exc
    err = None
    if impl == "copy-floor":
        return bc.Runnable(fn), err
    if case.is_kv and page_size_of(impl) is not None:
        rows, ref = _paged_reference(case, page_size_of(impl))
        out = out[rows]
    else:
        ref = _reference(case) if impl != "flashattn-full" else None
    if ref is not None:
        err = bc.rel_err(out, ref)
        if not err <= bc.MAX_REL_ERR:
            raise bc.BenchFailure(f"{impl} on {case.group}: relative L2 error {err:.3g} vs SDPA default exceeds {bc.MAX_REL_ERR}")
    return bc.Runnable(fn), err


@pytest.mark.parametrize("case,impl", list(_params()))
def test_decode_variant(benchmark, case: DecodeCase, impl: str) -> None:
    outcome = _BENCH.outcome(case, impl, lambda name: _prepare(case, name), bc.settings_for("decode"))
    bc.record_outcome(benchmark, outcome, case.group)

    flops, io_bytes = case.flops_and_bytes(full=impl == "flashattn-full" or (case.kind == "ragged" and impl != "flashattn"))
    info = benchmark.extra_info
    info.update(
        impl=impl,
        grid=case.grid,
        dtype=case.dtype,
        b=case.b,
        hq=case.hq,
        hk=case.hk,
        sq=1,
        sk=case.sk,
        d=case.d,
        causal=case.kind == "step",
        causal_mode="bottom_right" if case.kind == "step" else "none",
        flops=flops,
        io_bytes=io_bytes,
        seqlens=case.lengths(),
        page_size=page_size_of(impl),
        cuda_graph=case.graph,
        timer="cuda_event",
        rel_err_vs_sdpa_default=outcome.rel_err,
    )
    floor = _BENCH.outcomes.get("copy-floor")
    if case.is_kv and floor is not None and floor.timing is not None:
        # Both medians from the same interleaved rounds: the acceptance's "within 1.10x of the copy floor".
        info["time_over_copy_floor"] = bc.median(outcome.timing.samples_ms) / bc.median(floor.timing.samples_ms)
    bc.add_timing_info(benchmark, outcome.timing, flops, io_bytes)
