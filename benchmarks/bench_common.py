"""Shapes, FLOP counting, the implementations under test and the CUDA-event timer for the
benchmark suite (benchmarks/test_attention.py). See docs/benchmarks.md.

Everything above the "GPU side" line is plain Python (no torch at import), so the CPU tests
(tests/infra/test_report.py) can check the grids and the FLOP counting on any machine.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
import weakref
from dataclasses import dataclass, replace

# --------------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------------

CAUSAL_NONE = "none"
CAUSAL_TOP_LEFT = "top_left"  # query i sees keys j <= i              (SDPA's is_causal)
CAUSAL_BOTTOM_RIGHT = "bottom_right"  # query i sees keys j <= i + Sk - Sq (FlashAttention)


@dataclass(frozen=True)
class Shape:
    grid: str  # "latency" | "latency-graph" | "standard" | "decode"
    dtype: str  # "bf16" | "fp16"
    b: int
    hq: int
    hk: int
    sq: int
    sk: int
    d: int
    causal: bool
    quick: bool = False  # part of the quick subset (`-m "bench and quick"`)
    pass_: str = "fwd"  # "fwd", "bwd" (the backward alone) or "fwd+bwd" (a training step's attention)

    @property
    def causal_mode(self) -> str:
        # The main grids go through the SDPA API (top-left). Decode has Sq=1 and sees the whole
        # cache, so it is run non-causal (top-left causal would let the one query see one key).
        return CAUSAL_TOP_LEFT if self.causal else CAUSAL_NONE

    @property
    def group(self) -> str:
        """pytest-benchmark group, e.g. "bf16 D=128 S=4096 B=4 H=16 causal"."""
        if self.grid == "decode":
            return f"{self.dtype} D={self.d} Sq={self.sq} Sk={self.sk} B={self.b} H={self.hq}/{self.hk} decode"
        seq = f"S={self.sq}" if self.sq == self.sk else f"Sq={self.sq} Sk={self.sk}"
        heads = f"H={self.hq}" if self.hq == self.hk else f"H={self.hq}/{self.hk}"
        group = f"{self.dtype} D={self.d} {seq} B={self.b} {heads} {'causal' if self.causal else 'noncausal'}"
        if self.grid == "latency-graph":
            group += " graph"
        return group if self.pass_ == "fwd" else f"{group} {self.pass_}"

    @property
    def id(self) -> str:
        """Test-id fragment, for -k: e.g. "bf16-D128-S4096-B4-H16-causal", "bf16-D128-S4096-B4-H16kv4-causal"
        (GQA: the standard grid has both at the same D, S and B, so the K/V heads tell them apart)."""
        if self.grid == "decode":
            return f"{self.dtype}-D{self.d}-Sk{self.sk}-B{self.b}-H{self.hq}kv{self.hk}-decode"
        seq = f"S{self.sq}" if self.sq == self.sk else f"Sq{self.sq}-Sk{self.sk}"
        heads = f"H{self.hq}" if self.hq == self.hk else f"H{self.hq}kv{self.hk}"
        base = f"{self.dtype}-D{self.d}-{seq}-B{self.b}-{heads}-{'causal' if self.causal else 'full'}"
        if self.grid == "latency-graph":
            base += "-graph"
        return base if self.pass_ == "fwd" else f"{base}-{self.pass_}"

    @property
    def flops(self) -> int:
        return pass_flops(attention_flops(self.b, self.hq, self.sq, self.sk, self.d, self.causal_mode), self.pass_)

    @property
    def io_bytes(self) -> int:
        """Bytes that must cross HBM at least once (2-byte dtypes): the forward reads Q, K, V and
        writes O; the backward reads Q, K, V, O, dO and writes dQ, dK, dV."""
        q_side, kv_side = self.b * self.hq * self.sq, self.b * self.hk * self.sk
        fwd = 2 * self.d * (2 * q_side + 2 * kv_side)
        bwd = 2 * self.d * (4 * q_side + 4 * kv_side)
        return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[self.pass_]


def _sum_clamped_ramp(start: int, n: int, hi: int) -> int:
    """sum_{i=0}^{n-1} clamp(start + i, 0, hi), in closed form."""
    total = 0
    lo, up = max(start, 0), min(start + n, hi + 1)  # values x in [lo, up) count as x
    if up > lo:
        total += (lo + up - 1) * (up - lo) // 2
    lo2 = max(start, hi + 1)  # values above hi count as hi
    if start + n > lo2:
        total += hi * (start + n - lo2)
    return total


def visible_pairs(sq: int, sk: int, causal_mode: str = CAUSAL_NONE) -> int:
    """Number of (query, key) pairs the mask lets through, per batch and head.

    none: Sq*Sk. top_left: row i sees min(i+1, Sk) keys. bottom_right: row i sees
    clamp(i + Sk - Sq + 1, 0, Sk) keys (rows with none left see nothing). With Sq == Sk both
    causal modes give S*(S+1)/2 (the usual "halve" convention, S^2/2, is low by a factor
    1 + 1/S: 0.2% at S=512, 3% at S=32; every implementation is counted the same way).
    """
    if causal_mode == CAUSAL_NONE:
        return sq * sk
    if causal_mode == CAUSAL_TOP_LEFT:
        return _sum_clamped_ramp(1, sq, sk)
    if causal_mode == CAUSAL_BOTTOM_RIGHT:
        return _sum_clamped_ramp(sk - sq + 1, sq, sk)
    raise ValueError(f"unknown causal mode {causal_mode!r}")


def attention_flops(b: int, h: int, sq: int, sk: int, d: int, causal_mode: str = CAUSAL_NONE) -> int:
    """Forward FLOPs: 2*D for a row of QK^T and 2*D for P@V per visible (query, key) pair."""
    return 4 * b * h * d * visible_pairs(sq, sk, causal_mode)


# Passes: the forward, the backward alone, and both (a training step's attention). The backward
# does 2.5x the forward's matmul work (recomputing Q K^T, then dV = P^T dO, dP = dO V^T,
# dQ = dS K, dK = dS^T Q: 5 matmuls of the forward's 2), so fwd+bwd is 3.5x; causal masking halves
# every pass alike (visible_pairs), the FlashAttention convention.
PASSES = ("fwd", "bwd", "fwd+bwd")
_PASS_FLOPS_HALVES = {"fwd": 2, "bwd": 5, "fwd+bwd": 7}  # FLOPs = forward FLOPs * n / 2, exactly


def pass_flops(forward_flops: int, pass_: str = "fwd") -> int:
    """FLOPs of a pass from the forward's: x1 fwd, x2.5 bwd, x3.5 fwd+bwd (exact integers)."""
    if pass_ not in _PASS_FLOPS_HALVES:
        raise ValueError(f"unknown pass {pass_!r}; expected one of {PASSES}")
    return forward_flops * _PASS_FLOPS_HALVES[pass_] // 2


def latency_shapes() -> list[Shape]:
    """The seed's shapes: fp16, D=64, B=1, H=1, S 32..2048, plus one multi-head case; latency-bound
    (a call's host work and launch matter), timed as called (host time included)."""
    out = []
    for causal in (False, True):
        for s in (32, 64, 128, 256, 512, 1024, 2048):
            out.append(Shape("latency", "fp16", 1, 1, 1, s, s, 64, causal, quick=(s in (128, 512))))
        out.append(Shape("latency", "fp16", 8, 16, 16, 512, 512, 64, causal, quick=True))
    return out


def latency_graph_shapes() -> list[Shape]:
    """The latency grid's shapes, each implementation replayed from a CUDA graph: kernel time,
    without the host's share."""
    return [replace(s, grid="latency-graph") for s in latency_shapes()]


def graphed(fn):
    """fn captured in a CUDA graph (after two warm-up calls on a side stream, as torch's capture
    wants): a callable that replays it and returns the captured output."""
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


STANDARD_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
STANDARD_HEADDIMS = (64, 128, 256)
STANDARD_TOKENS = 16384  # B * S
STANDARD_MODEL_DIM = 2048  # H * D
# The standard grid's GQA shapes, as the project's issues define its grids: D=128, Hq = 2048/D = 16
# and B*S = 16k like the grid's other shapes, with fewer K/V heads: (S, Hk), group 4 at S=4k and
# group 8 at S=16k.
STANDARD_GQA_HEADDIM = 128
STANDARD_GQA = ((4096, 4), (16384, 2))


def standard_shapes() -> list[Shape]:
    """bf16 and fp16, D in {64,128,256}, H = 2048/D, B*S = 16k, S 512..16k, causal on/off; then per
    dtype the GQA shapes (STANDARD_GQA: D=128, Hq=16, Hk 4 at S=4k and 2 at S=16k, causal on/off)."""
    out = []
    for dtype in ("bf16", "fp16"):
        for d in STANDARD_HEADDIMS:
            for causal in (False, True):
                for s in STANDARD_SEQLENS:
                    h, b = STANDARD_MODEL_DIM // d, STANDARD_TOKENS // s
                    quick = dtype == "bf16" and d in (64, 128) and s in (1024, 4096, 16384)
                    out.append(Shape("standard", dtype, b, h, h, s, s, d, causal, quick=quick))
        d = STANDARD_GQA_HEADDIM
        for causal in (False, True):
            for s, hk in STANDARD_GQA:
                h, b = STANDARD_MODEL_DIM // d, STANDARD_TOKENS // s
                quick = dtype == "bf16" and s == 4096  # one GQA shape a mask, beside its MHA twin
                out.append(Shape("standard", dtype, b, h, hk, s, s, d, causal, quick=quick))
    return out


def training_shapes() -> list[Shape]:
    """The standard grid's shapes, each as a "bwd" and a "fwd+bwd" case (marker `training`);
    the quick subset is the standard grid's."""
    from dataclasses import replace

    return [replace(shape, pass_=p) for shape in standard_shapes() for p in ("bwd", "fwd+bwd")]


# ============================================================================================
# DECODE GRID
# B in {1, 8, 64}, Sq = 1, Sk 1k..128k, D = 128, GQA 32 query heads : 8 KV heads, bf16.
# In this grid "flashattn" IS flash_attn_with_kvcache (the entry point for decode, so the report's
# speedups are the decode API's) and "flashattn-fwd" is the general forward
# (scaled_dot_product_attention).
# ============================================================================================
DECODE_BATCHES = (1, 8, 64)
DECODE_SEQLENS = (1024, 4096, 16384, 65536, 131072)


def decode_shapes() -> list[Shape]:
    out = []
    for b in DECODE_BATCHES:
        for sk in DECODE_SEQLENS:
            out.append(Shape("decode", "bf16", b, 32, 8, 1, sk, 128, False, quick=(b == 8 and sk in (4096, 65536))))
    return out


# Implementations. "flashattn" is the package's default ("auto") path; the others are timed on
# the same input tensors. "flashattn-hopper" runs only where that backend is built.
# fa3: FlashAttention-3 where it imports (optional: skipped with the reason where absent).
DEFAULT_IMPLS = ("flashattn", "flashattn-hopper", "sdpa-default", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "fa3")
DECODE_IMPLS = ("flashattn", "flashattn-fwd", "sdpa-default", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
# The backward: "flashattn" (backend auto: on an H100 the Hopper forward, then the portable
# backward) and "flashattn-portable" (both passes portable); no "flashattn-hopper": a forward with
# "hopper" forced has no backward yet. Every SDPA backend's own backward, on the same tensors.
TRAINING_IMPLS = ("flashattn", "flashattn-portable", "sdpa-default", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
# flex: torch's FlexAttention (flex_attention under torch.compile, a block mask for causal), a peer
# the mission names; opt-in (FLASHATTN_BENCH_IMPLS) because each shape compiles its own kernels
# (seconds a shape), which the default grids would pay on every run.
OPTIONAL_IMPLS = ("flashattn-portable", "sdpa-math", "flex")
# The decode variants' own implementations (benchmarks/test_bench_decode.py builds its grids from
# these): known names for FLASHATTN_BENCH_IMPLS, which every grid reads, so that one list can name
# them all. The paged ones run the same caches as pools of DECODE_PAGE_SIZES-row pages.
DECODE_PAGE_SIZES = (16, 64, 256)
PAGED_PREFIX = "flashattn-paged"
FA3_PAGED_PREFIX = "fa3-paged"
DECODE_PAGED_IMPLS = tuple(f"{PAGED_PREFIX}{p}" for p in DECODE_PAGE_SIZES)
FA3_PAGED_IMPLS = tuple(f"{FA3_PAGED_PREFIX}{p}" for p in DECODE_PAGE_SIZES)
DECODE_VARIANT_IMPLS = ("flashattn-nosplit", "flashattn-full", *DECODE_PAGED_IMPLS, *FA3_PAGED_IMPLS, "copy-floor")
FLASHATTN_BACKEND_OF = {
    "flashattn": "auto",
    "flashattn-fwd": "auto",
    "flashattn-hopper": "hopper",
    "flashattn-portable": "portable",
}


def selected_impls(default: tuple[str, ...]) -> list[str]:
    """FLASHATTN_BENCH_IMPLS=comma,list overrides which implementations run (order kept)."""
    env = os.environ.get("FLASHATTN_BENCH_IMPLS", "").strip()
    if not env:
        return list(default)
    known = set(DEFAULT_IMPLS) | set(DECODE_IMPLS) | set(TRAINING_IMPLS) | set(OPTIONAL_IMPLS) | set(DECODE_VARIANT_IMPLS)
    names = [n.strip() for n in env.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"FLASHATTN_BENCH_IMPLS: unknown implementation(s) {bad}; known: {sorted(known)}")
    return [n for n in names if n in default or n in OPTIONAL_IMPLS]


@dataclass(frozen=True)
class Settings:
    rounds: int
    warmup_rounds: int
    round_ms: float  # calls per round are chosen so one round takes at least this long
    max_calls_per_round: int
    latency_samples: int  # single-call latency samples (0: not measured)
    host_probe_calls: int = 16  # back-to-back calls whose host time measure_interleaved takes (0: none)


# An implementation whose host work per call (Python, dispatch, allocation, launch) is at least
# this fraction of its GPU time per call ran back to back at its launch rate, not its kernels':
# its ratio is then partly host time (the report marks it). Not 0.9: a host-bound call's
# back-to-back time is its host time plus the launch queue's jitter, which left FlashAttention-3's
# D=64 causal S=512 call unmarked at 0.86 (host 222 us, back to back 257 us, its kernel 158 us in
# the next run; H200, 2026-12-03).
HOST_BOUND_FRACTION = 0.8


def is_host_bound(host_ms: float | None, gpu_ms: float | None) -> bool:
    return host_ms is not None and gpu_ms is not None and gpu_ms > 0 and host_ms >= HOST_BOUND_FRACTION * gpu_ms


def settings_for(grid: str) -> Settings:
    """Per-grid timing settings; FLASHATTN_BENCH_ROUNDS / FLASHATTN_BENCH_ROUND_MS override."""
    base = {
        "latency": Settings(rounds=30, warmup_rounds=3, round_ms=1.0, max_calls_per_round=1000, latency_samples=50),
        "latency-graph": Settings(rounds=30, warmup_rounds=3, round_ms=1.0, max_calls_per_round=1000, latency_samples=0),
        "standard": Settings(rounds=20, warmup_rounds=2, round_ms=2.0, max_calls_per_round=1000, latency_samples=0),
        "decode": Settings(rounds=20, warmup_rounds=2, round_ms=1.0, max_calls_per_round=1000, latency_samples=30),
    }[grid]  # (the training passes run on the standard grid's shapes and settings)
    rounds = int(os.environ.get("FLASHATTN_BENCH_ROUNDS", base.rounds))
    round_ms = float(os.environ.get("FLASHATTN_BENCH_ROUND_MS", base.round_ms))
    return Settings(max(1, rounds), base.warmup_rounds, round_ms, base.max_calls_per_round, base.latency_samples)


def calls_per_round(est_ms_per_call: float, round_ms: float, max_calls: int) -> int:
    """Back-to-back calls per timed round, so that a round lasts >= round_ms."""
    if not (est_ms_per_call > 0) or not math.isfinite(est_ms_per_call):
        return max_calls
    return max(1, min(max_calls, math.ceil(round_ms / est_ms_per_call)))


# Largest relative L2 error (vs SDPA's default path on the same inputs) that still counts as
# "computed attention": a broken kernel gives ~1, a correct bf16 one ~5e-3. Not a tolerance test.
MAX_REL_ERR = 0.05


# --------------------------------------------------------------------------------------------
# GPU side (imports torch lazily)
# --------------------------------------------------------------------------------------------

_EVENTS: list = []  # one reused start/end pair: no cudaEventCreate inside a timed span


def host_calls_ms(fn, calls: int) -> float:
    """Host milliseconds to issue `calls` back-to-back calls of fn, starting from an idle GPU: a
    host clock around the calls alone (no wait on the GPU inside it). So few calls never fill the
    launch queue, so the host is not held back by the GPU: this is each call's own host work."""
    import time

    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e3


# A timed batch starts on an idle GPU (the previous batch was waited for), so without a lead the
# GPU would idle from the start event until the host had issued the first call, and that host
# time would count as the batch's: for a call longer than a round, all of its host work. That
# favoured implementations with a short host path: FlashAttention-3's ~0.25 ms a call read 6-7%
# slow at D=128 S=16k (3.45 ms a call; its kernel's rate held 3 s under the same power cap was 5%
# above ours, H200, 2026-12-03). So each batch is led by a spin on the GPU long enough for the host
# to issue the first call; after it, back-to-back calls run at the slower of the kernel's rate and
# the host's (the host-bound mark says which).
# The lead is 1.5 x the function's first-call host time in its previous batch, plus 50 us: long
# enough for the host's jitter, short enough that a host-bound call's batch still shows its launch
# rate (a lead of L hides L of the host's time: for N calls (host - kernel) less than that, spread
# over N; with 8+ calls a round for such calls, ~0.2 host / N).
LEAD_HOST_FACTOR = 1.5
LEAD_MARGIN_MS = 0.05
LEAD_FIRST_MS = 1.0  # before a function's host time is known (its first, untimed warm-up batch)
LEAD_MAX_MS = 20.0
_LEAD: dict = {"cycles_per_ms": None, "host_ms": weakref.WeakKeyDictionary()}


def lead_ms(first_call_host_ms: float | None) -> float:
    """The GPU spin before a timed batch, from the function's first-call host time in its previous
    batch (LEAD_FIRST_MS while none is known), at most LEAD_MAX_MS."""
    if first_call_host_ms is None:
        return LEAD_FIRST_MS
    return min(LEAD_MAX_MS, LEAD_HOST_FACTOR * first_call_host_ms + LEAD_MARGIN_MS)


def gpu_spin_ms(ms: float) -> None:
    """Keeps the current stream busy for about `ms` (torch.cuda._sleep: one thread spinning on the SM
    clock, no memory traffic); its cycles per ms are measured once, on the first use."""
    import torch

    if _LEAD["cycles_per_ms"] is None:
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # the first launch loads the kernel: not timed
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _LEAD["cycles_per_ms"] = cycles / max(start.elapsed_time(end), 1e-3)
    torch.cuda._sleep(int(ms * _LEAD["cycles_per_ms"]))


def time_calls_ms(fn, calls: int, lead: bool = True) -> float:
    """GPU milliseconds for `calls` back-to-back calls of fn: a CUDA event recorded before and
    after them on the current stream, then a wait for the second (never a host clock around
    asynchronous work). With `lead`, a GPU spin (lead_ms) before the first event lets the host
    issue the first call before the GPU reaches it, so no host time before the first kernel is
    counted; lead=False times a call from an idle GPU, host time included (the latency samples)."""
    import time

    import torch

    if not _EVENTS:
        _EVENTS.extend(torch.cuda.Event(enable_timing=True) for _ in range(2))
    start, end = _EVENTS
    seen = _LEAD["host_ms"]
    try:
        known = seen.get(fn)
    except TypeError:  # not weakly referenceable: every batch gets the default lead
        known = None
    if lead:
        gpu_spin_ms(lead_ms(known))
    start.record()
    t0 = time.perf_counter()
    fn()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(calls - 1):
        fn()
    end.record()
    end.synchronize()
    try:
        seen[fn] = first_ms
    except TypeError:
        pass
    return start.elapsed_time(end)


@dataclass
class Runnable:
    """One implementation ready to time: fn() runs one call; ctx() is entered around each timed
    batch of calls (a backend choice), outside the events, so it adds nothing to the GPU time."""

    fn: object
    ctx: object = None


@dataclass
class ImplTiming:
    samples_ms: list  # per-call GPU ms, one per timed round
    calls_per_round: int
    latency_ms: list  # single calls from an idle GPU (empty unless settings.latency_samples)
    host_ms: float | None = None  # host time per call, back to back (None unless settings.host_probe_calls)


def round_order(names: list, r: int) -> list:
    """Round r's order: the n rotations of the list, then the n rotations of the reversed list,
    and so on, so that over 2 n rounds every implementation runs first twice and follows each of
    its two neighbours (for n = 2: ab, ba, ba, ab)."""
    n = len(names)
    if n == 0:
        return []
    base = list(names) if (r // n) % 2 == 0 else list(reversed(names))
    k = r % n
    return base[k:] + base[:k]


def measure_interleaved(runnables: dict, settings: Settings, time_calls=None, synchronize=None, host_calls=None) -> dict:
    """Times every implementation of one case in interleaved rounds: round r times each of them
    once (settings.round_ms worth of back-to-back calls), in the order round_order(names, r).

    Why interleaved: an H100 under sustained tensor-core load moves its clocks by several percent
    within a second (power and thermal limits). Timing one implementation after another put that
    drift into the ratios: the same kernel, timed twice in a row, differed by up to 12%, and
    cuDNN timed as "sdpa-default" and as "sdpa-cudnn" by up to 16%. Interleaved, drift hits every
    implementation alike; the rotations keep any "who runs first" effect out of the medians, and
    the reversed cycles any "who runs after whom" effect (with rotation alone each implementation
    always followed the same one: the same kernel, listed twice, then measured a steady 2% apart).

    Then each implementation's host time per call (settings.host_probe_calls calls from an idle
    GPU): where it reaches HOST_BOUND_FRACTION of the GPU time per call, back-to-back calls ran
    at the host's launch rate, and the report says so instead of calling it kernel speed.

    time_calls(fn, n) -> GPU ms for n back-to-back calls (default: time_calls_ms, CUDA events
    behind a GPU spin that hides the first call's host time; the latency samples time theirs
    without it); synchronize() idles the GPU before a latency sample; host_calls(fn, n) -> host ms to issue n calls
    (default: host_calls_ms). All three are parameters so the schedule can be tested on a CPU.
    Returns {name: ImplTiming}.
    """
    import contextlib

    if time_calls is None:
        time_calls = time_calls_ms
        idle_call = functools.partial(time_calls_ms, lead=False)  # a latency sample: host time counted
    else:
        idle_call = time_calls
    if synchronize is None:
        import torch

        synchronize = torch.cuda.synchronize
    if host_calls is None:
        host_calls = host_calls_ms
    names = list(runnables)

    def timed(name: str, calls: int, clock=None) -> float:
        r = runnables[name]
        with r.ctx() if r.ctx is not None else contextlib.nullcontext():
            return (clock or time_calls)(r.fn, calls)

    calls = {}
    for name in names:  # warm-up (compilation, autotuning, caches), then the per-call estimate
        timed(name, 2)
        calls[name] = calls_per_round(timed(name, 3) / 3, settings.round_ms, settings.max_calls_per_round)
    samples = {name: [] for name in names}
    for r in range(settings.warmup_rounds + settings.rounds):
        for name in round_order(names, r):
            ms = timed(name, calls[name]) / calls[name]
            if r >= settings.warmup_rounds:
                samples[name].append(ms)
    latency = {name: [] for name in names}
    for r in range(settings.latency_samples):
        # Rotated too: a single call is mostly host work, and the host is faster right after the
        # same op ran (a fixed order left the second of two copies of one op 20% "faster").
        for name in round_order(names, r):
            synchronize()
            latency[name].append(timed(name, 1, idle_call))
    host = {name: None for name in names}
    if settings.host_probe_calls > 0:
        for name in names:
            host[name] = timed(name, settings.host_probe_calls, host_calls) / settings.host_probe_calls
    return {name: ImplTiming(samples[name], calls[name], latency[name], host[name]) for name in names}


class ReplayTimer:
    """A pytest-benchmark timer that replays measured durations: its (2i)th call returns a clock
    value t and its (2i+1)th t + samples[i]. With pedantic(iterations=1) pytest-benchmark then
    records exactly the interleaved measurements as its rounds (its stats, JSON and table), while
    the timing itself happened in measure_interleaved."""

    def __init__(self, samples_s):
        self._samples = list(samples_s)
        self._calls = 0
        self._clock = 0.0

    def __call__(self) -> float:
        if self._calls % 2 == 1:
            self._clock += self._samples[self._calls // 2]
        self._calls += 1
        return self._clock


def record_timing(benchmark, timing: ImplTiming, group: str) -> None:
    """Hands one implementation's interleaved samples to pytest-benchmark (see ReplayTimer)."""
    import pytest

    if not hasattr(benchmark, "_timer"):
        pytest.fail("this pytest-benchmark has no BenchmarkFixture._timer; the measured rounds cannot be recorded")
    benchmark.group = group
    benchmark._timer = ReplayTimer([ms * 1e-3 for ms in timing.samples_ms])
    benchmark.pedantic(lambda: None, rounds=len(timing.samples_ms), warmup_rounds=0, iterations=1)


class BenchFailure(Exception):
    """The implementation ran but its output is not attention (the test fails with this message)."""


@dataclass
class Outcome:
    skip: str | None = None  # why the implementation cannot run this case
    fail: str | None = None  # why its result is wrong
    rel_err: float | None = None  # vs SDPA default on the same inputs (None: no reference)
    timing: ImplTiming | None = None


# The implementations each case's tests ask for, in collection order, filled by
# benchmarks/conftest.py once collection is final (-m and -k applied): the first test of a case
# then times every one of them together.
PLAN: dict = {}


class CaseBench:
    """The tests of one case (one per implementation) share one measurement: the first of them
    prepares every planned implementation (callable, first call, error vs the reference), times
    the ready ones with measure_interleaved, and keeps the outcomes; each test reports its own.
    Only the current case is kept (its inputs are the only ones alive)."""

    def __init__(self):
        self.key = None
        self.outcomes: dict = {}

    def outcome(self, key, impl: str, prepare, settings: Settings, measure=measure_interleaved) -> Outcome:
        """prepare(name) -> (Runnable, rel_err or None); raises Unavailable or BenchFailure."""
        if key != self.key or impl not in self.outcomes:
            self.key, self.outcomes = key, {}
            names = list(PLAN.get(key, ()))
            if impl not in names:
                names.append(impl)
            ready = {}
            for name in names:
                try:
                    runnable, err = prepare(name)
                except Unavailable as exc:
                    self.outcomes[name] = Outcome(skip=str(exc))
                    continue
                except BenchFailure as exc:
                    self.outcomes[name] = Outcome(fail=str(exc))
                    continue
                self.outcomes[name] = Outcome(rel_err=err)
                ready[name] = runnable
            if ready:
                for name, timing in measure(ready, settings).items():
                    self.outcomes[name].timing = timing
        return self.outcomes[impl]


def record_outcome(benchmark, outcome: Outcome, group: str) -> None:
    """A test's end of CaseBench: skip with the implementation's reason, fail with its error, or
    record its timing (the caller then adds extra_info and add_timing_info)."""
    import pytest

    if outcome.skip is not None:
        pytest.skip(outcome.skip)
    if outcome.fail is not None:
        pytest.fail(outcome.fail)
    record_timing(benchmark, outcome.timing, group)


def add_timing_info(benchmark, timing: ImplTiming, flops: float, io_bytes: float) -> None:
    """The derived numbers the report reads, into benchmark.extra_info (after record_timing)."""
    info = benchmark.extra_info
    latency = timing.latency_ms
    info.update(calls_per_round=timing.calls_per_round, rounds=len(timing.samples_ms), timing="interleaved")
    if latency:
        info["latency_ms"] = median(latency)
    if timing.host_ms is not None:
        info["host_ms"] = timing.host_ms
    if benchmark.stats:  # None / empty with --benchmark-disable
        st = benchmark.stats.stats
        med_ms = st.median * 1e3
        info.update(
            median_ms=med_ms,
            min_ms=st.min * 1e3,
            iqr_ms=st.iqr * 1e3,
            tflops=flops / (med_ms * 1e-3) / 1e12,
            gbps=io_bytes / (med_ms * 1e-3) / 1e9,
        )
        if timing.host_ms is not None:
            info["host_bound"] = is_host_bound(timing.host_ms, med_ms)
            info["host_bound_fraction"] = HOST_BOUND_FRACTION  # the criterion the flag was taken with


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def make_inputs(shape: Shape, device="cuda", seed: int = 1234):
    """Q, K, V as the SDPA layout [B, H, S, D]. The main grids allocate them contiguous in that
    layout; decode allocates a KV-cache-like [B, S, H, D] buffer and hands out [B, H, S, D] views
    (flashattn takes either through strides, so both sides see the same memory)."""
    import torch

    dt = torch_dtype(shape.dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    if shape.grid == "decode":
        q = torch.randn(shape.b, shape.sq, shape.hq, shape.d, device=device, dtype=dt, generator=gen)
        k = torch.randn(shape.b, shape.sk, shape.hk, shape.d, device=device, dtype=dt, generator=gen)
        v = torch.randn(shape.b, shape.sk, shape.hk, shape.d, device=device, dtype=dt, generator=gen)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q = torch.randn(shape.b, shape.hq, shape.sq, shape.d, device=device, dtype=dt, generator=gen)
    k = torch.randn(shape.b, shape.hk, shape.sk, shape.d, device=device, dtype=dt, generator=gen)
    v = torch.randn(shape.b, shape.hk, shape.sk, shape.d, device=device, dtype=dt, generator=gen)
    return q, k, v


class Unavailable(Exception):
    """The implementation cannot run here or for this shape (the test skips with this reason)."""


def refusal_reason(what: str, exc: BaseException, caught=()) -> str:
    """A skip reason: `what`, the error's first line, then the warnings caught around the call.
    SDPA's "No available kernel" says nothing itself: its backend checks warn their reasons before
    it (e.g. a forced backend that takes no GQA), so those warnings are the reason."""
    msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    reason = f"{what}: {msg}"
    why = [str(w.message).strip().replace("\n", " ") for w in caught]
    if why:
        reason += " | " + " | ".join(why)[:400]
    return reason


def make_callable(impl: str, shape: Shape, q, k, v):
    """Returns (fn, context_manager_factory). fn() runs one forward on the given [B,H,S,D] tensors;
    the context (SDPA backend choice, flashattn backend) is entered once around the whole timing,
    not per call, so no per-call Python overhead is added to any implementation."""
    import contextlib

    import torch.nn.functional as F

    # GQA (Hq != Hk): K and V keep their Hk heads in every implementation; none is handed repeated
    # copies. SDPA takes them with enable_gqa=True: cuDNN and FlashAttention-2 natively (so
    # sdpa-default's GQA cells time the same backend as its MHA cells: on an H200 with torch 2.11 both
    # read 1.1-1.3x behind ours, 2026-12-06), math by repeating K/V; a backend that refuses GQA (the
    # memory-efficient one in older torch) raises "No available kernel", which becomes a skip with
    # torch's warnings as its reason (Unavailable). FlashAttention-3 and flex take GQA natively.
    gqa = shape.hq != shape.hk
    kw = {"is_causal": shape.causal}
    if gqa:
        kw["enable_gqa"] = True

    if impl.startswith("flashattn"):
        import flashattn

        if not flashattn.extension_available():
            raise Unavailable(f"flashattn extension not built: {flashattn.extension_error()}")

        if impl == "flashattn" and shape.grid == "decode":
            # q [B,1,Hq,D], caches [B,Sk,Hk,D], full cache; returns [B,1,Hq,D], handed back as a
            # [B,Hq,1,D] view like SDPA's output.
            qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

            def fn():
                return flashattn.flash_attn_with_kvcache(qb, kb, vb).transpose(1, 2)

            return fn, contextlib.nullcontext

        backend = FLASHATTN_BACKEND_OF[impl]

        def ctx():
            return flashattn.use_backend(backend)

        def fn():
            return flashattn.scaled_dot_product_attention(q, k, v, **kw)

        return fn, ctx

    if impl.startswith("sdpa-"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        which = impl[len("sdpa-") :]
        backends = {
            "flash": "FLASH_ATTENTION",
            "efficient": "EFFICIENT_ATTENTION",
            "cudnn": "CUDNN_ATTENTION",
            "math": "MATH",
        }
        if which == "default":
            ctx = contextlib.nullcontext
        else:
            be = getattr(SDPBackend, backends[which], None)
            if be is None:
                raise Unavailable(f"this torch has no SDPBackend.{backends[which]}")

            def ctx():
                return sdpa_kernel(be)

        def fn():
            return F.scaled_dot_product_attention(q, k, v, **kw)

        return fn, ctx

    if impl == "flex":
        if shape.grid == "decode":
            raise Unavailable("flex is not timed on the decode grid (a decode call there needs a block mask per "
                              "cache length)")
        flex, block_mask = flex_call(shape, q.device)

        def fn():
            return flex(q, k, v, block_mask=block_mask, enable_gqa=gqa)

        return fn, contextlib.nullcontext

    if impl == "fa3":
        fa3 = fa3_func()
        # The same memory as every other implementation: [B, S, H, D] views of the [B, H, S, D]
        # tensors (FlashAttention-3 takes any strides with a contiguous last dimension, and GQA).
        qs, ks, vs = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def fn():
            out = fa3(qs, ks, vs, causal=shape.causal)
            return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)

        return fn, contextlib.nullcontext

    raise ValueError(f"unknown implementation {impl!r}")


_FLEX: dict = {}


def compiled_flex():
    """flex_attention under torch.compile, compiled once per process (and specialized per shape and
    mask on first call; lab/gpu_timing.py's flex_backward_ms uses it too)."""
    if "compiled" not in _FLEX:
        import torch
        from torch.nn.attention.flex_attention import flex_attention

        # One compiled graph per shape (dynamic=False): past dynamo's default of 8 recompiles a
        # function falls back to eager, which for flex materializes every score (S=16k: GBs).
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        torch._dynamo.config.accumulated_cache_size_limit = max(
            torch._dynamo.config.accumulated_cache_size_limit, 1024)
        _FLEX["compiled"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["compiled"]


def flex_call(shape: Shape, device, compiled: bool = True):
    """(flex_attention, block mask) for `shape`: the function compiled once per process (torch.compile
    specializes it per shape on first call, as a user's model would), the mask built once per shape
    outside the timing (a model builds it once for all its layers). Causal is SDPA's is_causal, top
    left (query i sees keys j <= i); no mask otherwise. compiled=False: flex_attention eager (the
    reference math, for tests of this glue without a GPU)."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as exc:
        raise Unavailable(f"this torch has no FlexAttention: {exc}") from exc
    fn = compiled_flex() if compiled else flex_attention
    block_mask = None
    if shape.causal:

        def causal(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=shape.sq, KV_LEN=shape.sk, device=device)
    return fn, block_mask


# FlashAttention-3, an optional comparator of the forward and decode benchmarks: the tokenspeed-fa3 wheel installs
# its Python interface as the top-level module flash_attn_interface (kernels in flash_attn_3._C,
# built for Hopper). Absent where it does not import: its results are then skipped with the reason,
# never failed.
FA3_MODULE = "flash_attn_interface"
FA3_DISTRIBUTIONS = ("tokenspeed-fa3", "flash-attn-3", "flash_attn_3")
_FA3: dict = {}


def fa3_kvcache():
    """FlashAttention-3's flash_attn_with_kvcache, or Unavailable saying why it is absent."""
    if "fn" not in _FA3:
        import importlib
        import inspect

        try:
            fn = importlib.import_module(FA3_MODULE).flash_attn_with_kvcache
        except Exception as exc:  # noqa: BLE001 - ImportError, AttributeError, or its kernels' library failing to load
            _FA3["fn"], _FA3["why"] = None, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        else:
            params = inspect.signature(fn).parameters
            if "page_table" in params and "cache_seqlens" in params:
                _FA3["fn"] = fn
            else:
                _FA3["fn"], _FA3["why"] = None, f"{FA3_MODULE}.flash_attn_with_kvcache takes no page_table"
    if _FA3["fn"] is None:
        raise Unavailable(f"FlashAttention-3 absent ({_FA3['why']}): install the tokenspeed-fa3 wheel (Hopper) to "
                          f"compare against its flash_attn_with_kvcache")
    return _FA3["fn"]


def _fa3_entry(name: str):
    """FlashAttention-3's entry point `name`, or Unavailable saying why."""
    fa3_kvcache()  # the same module: absent for the same reason
    import importlib

    fn = getattr(importlib.import_module(FA3_MODULE), name, None)
    if fn is None:
        raise Unavailable(f"FlashAttention-3's {FA3_MODULE} has no {name}")
    return fn


def fa3_func():
    """FlashAttention-3's flash_attn_func (the forward grids' comparator), or Unavailable saying why."""
    return _fa3_entry("flash_attn_func")


def fa3_varlen_func():
    """FlashAttention-3's flash_attn_varlen_func (the packed-batch benchmark's comparator), or
    Unavailable saying why."""
    return _fa3_entry("flash_attn_varlen_func")


def fa3_status() -> str:
    """"<distribution> <version>" where FlashAttention-3 imports, else "absent (<why>)"."""
    try:
        fa3_kvcache()
    except Unavailable:
        return f"absent ({_FA3['why']})"
    from importlib import metadata

    for dist in FA3_DISTRIBUTIONS:
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "installed (distribution unknown)"


def rel_err(out, ref) -> float:
    """Relative L2 error; for tuples (dq, dk, dv) the largest of the pairs'."""
    if isinstance(out, (tuple, list)):
        return max(rel_err(o, r) for o, r in zip(out, ref, strict=True))
    diff = (out.float() - ref.float()).norm().item()
    den = ref.float().norm().item()
    return diff / den if den > 0 else diff


def make_training_callable(impl: str, shape: Shape, q, k, v, dout):
    """Returns (fn, context_manager_factory) for shape.pass_ "bwd" or "fwd+bwd". q, k, v require
    grad. fn() returns (dq, dk, dv).

    fwd+bwd: fn runs the forward and torch.autograd.grad of its output for dout. bwd: the forward
    runs once here (inside ctx, so that SDPA's backend choice and flashattn's backend apply; the
    backward SDPA records is that backend's own), and fn runs only
    torch.autograd.grad(out, (q, k, v), dout, retain_graph=True): the same autograd call for every
    implementation, so the same work is measured for each. A forward that refuses the shape
    raises Unavailable."""
    import torch

    forward, ctx = make_callable(impl, shape, q, k, v)
    inputs = (q, k, v)
    if shape.pass_ == "fwd+bwd":

        def fn():
            return torch.autograd.grad(forward(), inputs, dout)

        return fn, ctx
    if shape.pass_ != "bwd":
        raise ValueError(f"make_training_callable: pass {shape.pass_!r} is not a training pass")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with ctx():
                out = forward()
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            raise Unavailable(refusal_reason(f"{impl} cannot run this shape's forward", exc, caught)) from exc

    def fn():
        return torch.autograd.grad(out, inputs, dout, retain_graph=True)

    return fn, ctx
