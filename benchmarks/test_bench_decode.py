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
  decode-paged   the same full caches contiguous ("flashattn") and paged ("flashattn-pagedP",
                 page size P = 16, 64, 256: the pages in a random order in a pool, read through
                 block_table), and sdpa-default: the report's "vs flashattn-pagedP" columns are
                 time(paged) / time(contiguous).

    python -m pytest benchmarks/test_bench_decode.py -m bench --benchmark-json=decode.json
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common as bc  # noqa: E402


@dataclass(frozen=True)
class DecodeCase:
    kind: str  # "step" | "splits" | "graph" | "ragged" | "paged"
    b: int
    sk: int  # cache capacity (Sk_max)
    hq: int = 32
    hk: int = 8
    d: int = 128
    dtype: str = "bf16"
    quick: bool = False

    @property
    def grid(self) -> str:
        return f"decode-{self.kind}"

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
    "paged": ("flashattn", "flashattn-paged16", "flashattn-paged64", "flashattn-paged256", "sdpa-default"),
}
PAGED_PREFIX = "flashattn-paged"


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
    for b in (1, 8, 64):
        for sk in (4096, 32768 if b < 64 else 16384):  # B=64: the 3 pools and the caches within 40% of 80 GB
            out.append(DecodeCase("paged", b, sk, quick=(b == 8 and sk == 32768)))
    return out


def _params():
    for case in cases():
        for impl in IMPLS[case.kind]:
            marks = [pytest.mark.bench, pytest.mark.decode]
            if case.quick:
                marks.append(pytest.mark.quick)
            yield pytest.param(case, impl, id=f"{case.id}-{impl}", marks=marks)


_CACHE: dict = {}


def _inputs(case: DecodeCase):
    """q [B,1,Hq,D], caches [B,Sk,Hk,D], new k/v [B,1,Hk,D], cache_seqlens int32 [B]; kept for
    the current case only (all its implementations share them)."""
    import torch

    if _CACHE.get("case") != case:
        _CACHE.clear()
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(0).total_memory
        # A paged case also holds one pool (a permuted copy of the caches) per page size.
        need = case.cache_bytes * (1 + len(IMPLS["paged"]) - 2 if case.kind == "paged" else 1)
        if need > 0.4 * total:
            raise bc.Unavailable(f"caches need ~{need / 2**30:.0f} GiB, over 40% of this GPU's {total / 2**30:.0f} GiB")
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
        _CACHE.update(case=case, tensors=(q, kc, vc, k, v, seqlens))
    return _CACHE["tensors"]


def _paged(kc, vc, page_size: int):
    """(k_pool, v_pool, block_table) holding the caches in pages of page_size rows, the pages in a
    random order (a serving cache's pages are rarely in sequence)."""
    import torch

    b, sk, hk, d = kc.shape
    n = sk // page_size
    perm = torch.randperm(b * n, generator=torch.Generator().manual_seed(page_size)).to(kc.device)
    table = perm.view(b, n).to(torch.int32)
    pools = []
    for c in (kc, vc):
        pool = torch.empty(b * n, page_size, hk, d, device=c.device, dtype=c.dtype)
        pool[perm] = c.reshape(b * n, page_size, hk, d)
        pools.append(pool)
    return pools[0], pools[1], table


def _graphed(fn):
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay():
        graph.replay()
        return out

    return replay


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
            return _graphed(fn)
        except RuntimeError as exc:
            raise bc.Unavailable(f"{impl} cannot be captured in a CUDA graph: {str(exc).splitlines()[0]}") from exc

    if case.kind == "paged":
        if impl == "flashattn":
            return lambda: flashattn.flash_attn_with_kvcache(q, kc, vc)
        if impl.startswith(PAGED_PREFIX):
            k_pool, v_pool, table = _paged(kc, vc, int(impl.removeprefix(PAGED_PREFIX)))
            return lambda: flashattn.flash_attn_with_kvcache(q, k_pool, v_pool, block_table=table)
        return lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)

    # ragged
    if impl == "flashattn":
        return lambda: flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens)
    if impl == "flashattn-full":
        return lambda: flashattn.flash_attn_with_kvcache(q, kc, vc)
    mask = (torch.arange(case.sk, device="cuda")[None, :] < seqlens[:, None])[:, None, None, :]  # [B,1,1,Sk]
    return lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True).transpose(1, 2)


def _reference(case: DecodeCase):
    """SDPA's default path on the case's inputs (after the step's append: every cache is full)."""
    import torch
    import torch.nn.functional as F

    q, kc, vc, k, v, seqlens = _inputs(case)
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
    except (RuntimeError, ValueError, TypeError) as exc:
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise bc.Unavailable(f"{impl} cannot run {case.group}: {msg}") from exc
    ref = _reference(case)
    err = None
    if ref is not None and impl != "flashattn-full":
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
        page_size=int(impl.removeprefix(PAGED_PREFIX)) if impl.startswith(PAGED_PREFIX) else None,
        timer="cuda_event",
        rel_err_vs_sdpa_default=outcome.rel_err,
    )
    bc.add_timing_info(benchmark, outcome.timing, flops, io_bytes)
