#!/usr/bin/env python3
"""Context-parallelism benchmark: a causal attention step (forward, backward, both) under PyTorch's
ring attention (`torch.distributed.tensor.experimental.context_parallel`, head-tail load balancing,
NCCL) on 1, 2, 4 ... GPUs, flashattn activated against torch's own FlashAttention-2 and cuDNN
kernels under the same ring. See docs/context-parallel.md.

usage: python3 benchmarks/bench_context_parallel.py [--gpus 1,2,4] [--seqlens 32k,64k,...,1M]
           [--impls flashattn,sdpa-flash,sdpa-cudnn] [--heads 32] [--kv-heads 8] [--dim 128]
           [--dtype bf16] [--rotate allgather] [--budget-s 300] [--out DIR]

For each number of GPUs N (default: 1, 2, 4, 8 up to what is visible) one set of N processes,
one per GPU, runs every sequence length (ascending) and implementation:

* N = 1 is SDPA on the whole sequence (no ring): the baseline of the scaling efficiency
  t(1 GPU) / (N * t(N GPUs)), same implementation and pass, wherever one GPU ran that length;
* N > 1 is SDPA inside `context_parallel` (q, k, v are each rank's two chunks of the 2N);
* flashattn: `flashattn.activate()` and SDPA's flash backend; sdpa-flash: torch's
  FlashAttention-2 kernels (the flash backend, flashattn not activated); sdpa-cudnn: torch's
  cuDNN kernels (the cuDNN backend). The same SDPA call, the same ring, the same inputs' shapes.

A step: all ranks synchronized (barrier), then CUDA events around the forward and around the
backward (torch.autograd.grad of q, k, v) on each rank; a step's time is its slowest rank's. One
warm-up step, then `iters` timed steps (about 1.5 s of them, 1..10); the medians are reported.

Budget: the whole run gets --budget-s seconds of wall time, shared between the numbers of GPUs in
proportion to N (one GPU as 1.5; what one leaves is the next one's). A configuration runs only when its predicted
time fits what is left, from the same implementation at the previous length: t * (S / S_prev)^2
(causal attention's work), and when its predicted peak memory, peak * S / S_prev (linear in S),
stays below 90% of the GPU's; torch's kernels run only when flashattn's remaining lengths still fit
after them. What did not run is listed with the reason, never extrapolated into the tables.
A failure on one rank of several stops that set of processes (its peers would wait in a collective):
what it measured so far stays.

Writes to --out: cp_results.json (every configuration: status, per-step times, peak memory, the
machine), cp_bench.json (pytest-benchmark's layout, for `python3 benchmarks/bench_report.py
cp_bench.json`: per-shape speedups of flashattn, TFLOP/s per GPU), cp_report.md (the tables,
scaling efficiency, the acceptance lines of issue 30), raw/ (each set's JSON lines and logs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_common import CAUSAL_TOP_LEFT, attention_flops, pass_flops  # noqa: E402  (benchmarks/ first)

IMPLS = ("flashattn", "sdpa-flash", "sdpa-cudnn")
IMPL_TITLES = {"flashattn": "flashattn", "sdpa-flash": "FA2 (sdpa-flash)", "sdpa-cudnn": "cuDNN (sdpa-cudnn)"}
OURS = "flashattn"
PASSES = ("fwd", "bwd", "fwd+bwd")
DEFAULT_SEQLENS = "32k,64k,128k,256k,512k,1M"
DEFAULT_BUDGET_S = 300.0
TARGET_TIMED_S = 1.5  # timed steps per configuration: about this long in all ...
MAX_ITERS = 10  # ... within 1..MAX_ITERS
FIRST_ITERS = 3  # where nothing predicts the time (a set's first length)
MEMORY_FRACTION = 0.9
SETUP_S = 1.0  # allocating a configuration's inputs, entering the ring: added to each prediction
GRACE_S = 45.0  # past its deadline, a set of processes is stopped
# NVLink multicast is never needed by the ring; kept off, also where the machine does not set it.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# issue 30's acceptance
EFFICIENCY_TARGET = 0.90
EFFICIENCY_FROM_S = 256 * 1024
FA2_TARGET, CUDNN_TARGET = 1.2, 1.0
MILLION = 1 << 20
TIMING = ("CUDA events around the forward and the backward of each step on every rank after a barrier; a step's time "
          "is its slowest rank's; median of 1..10 timed steps after one warm-up (bench_context_parallel.py)")


# ==== arguments ==================================================================================


def parse_seqlen(text: str) -> int:
    """'32k' -> 32768, '1M' -> 1048576, '4096' -> 4096 (k and M are powers of two)."""
    t = text.strip()
    mult = {"k": 1024, "K": 1024, "m": MILLION, "M": MILLION}.get(t[-1:], 1)
    digits = t[:-1] if mult != 1 else t
    if not digits.isdigit() or int(digits) <= 0:
        raise argparse.ArgumentTypeError(
            f"sequence length {text!r}: expected a positive integer, optionally with k or M")
    return int(digits) * mult


def parse_list(text: str, item) -> list:
    values = [item(x) for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"empty list: {text!r}")
    return values


def seqlen_label(s: int) -> str:
    if s % MILLION == 0:
        return f"{s // MILLION}M"
    return f"{s // 1024}k" if s % 1024 == 0 else str(s)


def default_gpus(visible: int) -> list[int]:
    """1, 2, 4, 8 up to the GPUs visible, and that count itself where it is none of those."""
    out = [n for n in (1, 2, 4, 8) if n <= visible]
    if visible > 1 and visible not in out:
        out.append(visible)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=lambda t: parse_list(t, int), default=None,
                   help="numbers of GPUs to run on (default: 1, 2, 4, 8 up to the visible ones)")
    p.add_argument("--seqlens", type=lambda t: parse_list(t, parse_seqlen), default=DEFAULT_SEQLENS,
                   help=f"sequence lengths, k = 1024, M = 1024^2 (default {DEFAULT_SEQLENS})")
    p.add_argument("--impls", type=lambda t: parse_list(t, str), default=",".join(IMPLS),
                   help=f"implementations, flashattn first (default {','.join(IMPLS)})")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8, help="K/V heads (GQA when below --heads; default 8)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--rotate", choices=("allgather", "alltoall"), default="allgather",
                   help="torch's K/V rotation (set_rotate_method; default allgather, torch's default)")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="wall-clock budget of the whole run")
    p.add_argument("--out", type=Path, default=Path("results/context-parallel"))
    # the benchmark's own machinery on the CPU: gloo, the CPU stand-in kernels, float64, host timers
    p.add_argument("--cpu-standin", action="store_true", help=argparse.SUPPRESS)
    return p


def check_args(ns: argparse.Namespace, visible: int) -> None:
    """Fills the defaults that depend on the machine; raises SystemExit with the reason where the
    request cannot run."""
    if isinstance(ns.seqlens, str):
        ns.seqlens = parse_list(ns.seqlens, parse_seqlen)
    if isinstance(ns.impls, str):
        ns.impls = parse_list(ns.impls, str)
    unknown = [i for i in ns.impls if i not in IMPLS]
    if unknown:
        raise SystemExit(f"--impls: unknown {unknown}; known: {', '.join(IMPLS)}")
    if ns.cpu_standin and ns.impls != [OURS]:
        ns.impls = [OURS]  # the stand-ins are flashattn's ops; torch has no CPU kernels under the ring
    if ns.gpus is None:
        ns.gpus = default_gpus(visible)
    too_many = [n for n in ns.gpus if n > visible or n < 1]
    if too_many or not ns.gpus:
        where = "processes (--cpu-standin)" if ns.cpu_standin else "GPUs visible"
        raise SystemExit(f"--gpus {ns.gpus}: {visible} {where}")
    if ns.heads % ns.kv_heads:
        raise SystemExit(f"--heads {ns.heads} must be a multiple of --kv-heads {ns.kv_heads}")
    ns.gpus = sorted(set(ns.gpus))
    ns.seqlens = sorted(set(ns.seqlens))


# ==== the plan: what runs, within the budget ===================================================


@dataclass
class Measured:
    """The last configuration that ran, per implementation, in this set of processes."""

    s: int
    step_s: float
    peak_bytes: int | None


@dataclass(frozen=True)
class Decision:
    run: bool
    iters: int = 0
    reason: str = ""


def predicted_step_s(last: Measured | None, s: int) -> float | None:
    return None if last is None else last.step_s * (s / last.s) ** 2


def iters_for(step_s: float | None) -> int:
    if step_s is None:
        return FIRST_ITERS
    return max(1, min(MAX_ITERS, round(TARGET_TIMED_S / max(step_s, 1e-9))))


def cost_s(step_s: float | None, iters: int) -> float:
    """Wall seconds of one configuration: the warm-up and the timed steps, and the setup."""
    return SETUP_S + (1 + iters) * (step_s or 0.0)


def decide(impl: str, s: int, later: list[int], history: dict[str, Measured], remaining_s: float,
           memory_bytes: int | None) -> Decision:
    """Whether (impl, s) runs, with how many timed steps: it must fit the time left, and for
    torch's kernels leave enough for flashattn's later lengths (`later`, those after s); its
    predicted peak memory must stay below MEMORY_FRACTION of the GPU's."""
    last = history.get(impl)
    step = predicted_step_s(last, s)
    if memory_bytes and last is not None and last.peak_bytes:
        peak = last.peak_bytes * s / last.s
        if peak > MEMORY_FRACTION * memory_bytes:
            return Decision(False, reason=f"predicted peak memory {peak / 2**30:.1f} GiB > {MEMORY_FRACTION:.0%} of "
                                          f"{memory_bytes / 2**30:.1f} GiB (from {seqlen_label(last.s)})")
    iters = iters_for(step)
    need = cost_s(step, iters)
    reserve = 0.0
    if impl != OURS and OURS in history:
        ours = history[OURS]
        for t in later:
            if ours.peak_bytes and memory_bytes and ours.peak_bytes * t / ours.s > MEMORY_FRACTION * memory_bytes:
                break  # flashattn will not run there (memory): nothing to keep for it
            st = predicted_step_s(ours, t)
            reserve += cost_s(st, iters_for(st))
    if need + reserve > remaining_s:
        kept = f" and {reserve:.0f} s kept for {OURS} at longer sequences" if reserve else ""
        return Decision(False, reason=f"time budget: predicted {need:.0f} s{kept}, {max(remaining_s, 0):.0f} s left")
    return Decision(True, iters)


def shares(worlds: list[int], budget_s: float) -> list[float]:
    """Each set's share of the budget, in proportion to its number of GPUs, one GPU counted as 1.5
    (it runs every length it can for the efficiency's baseline, the slowest). The launcher uses
    the first share and recomputes the next ones from what is left."""
    weights = [max(n, 1.5) for n in worlds]
    return [budget_s * w / sum(weights) for w in weights]


# ==== the worker (one per rank) =================================================================


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


class Device:
    """What differs between a GPU run and the CPU check of this machinery."""

    def __init__(self, cpu: bool, rank: int, world: int, store: str) -> None:
        import torch
        import torch.distributed as dist

        self.cpu, self.rank, self.world = cpu, rank, world
        self.torch, self.dist = torch, dist
        if cpu:
            torch.set_num_threads(1)
            self.device = torch.device("cpu")
        else:
            torch.cuda.set_device(rank)
            self.device = torch.device("cuda", rank)
        self.mesh = None
        if world > 1:
            from datetime import timedelta

            from torch.distributed.device_mesh import init_device_mesh

            kw = {} if cpu else {"device_id": self.device}
            dist.init_process_group("gloo" if cpu else "nccl", init_method=f"file://{store}", rank=rank,
                                    world_size=world, timeout=timedelta(seconds=120), **kw)
            self.mesh = init_device_mesh(self.device.type, (world,))

    def memory_bytes(self) -> int | None:
        if self.cpu:
            return None
        return self.torch.cuda.get_device_properties(self.device).total_memory

    def reset_peak(self) -> None:
        if not self.cpu:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int | None:
        return None if self.cpu else self.torch.cuda.max_memory_allocated()

    def sync(self) -> None:
        if not self.cpu:
            self.torch.cuda.synchronize()
        if self.world > 1:
            self.dist.barrier()
        if not self.cpu:
            self.torch.cuda.synchronize()

    def timer(self) -> "StepTimer":
        return StepTimer(self.torch, self.cpu)

    def gather(self, obj):
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        self.dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj):
        if self.world == 1:
            return obj
        box = [obj]
        self.dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        if self.world > 1:
            self.dist.destroy_process_group()


class StepTimer:
    """start(), mark() between the passes, stop() -> (fwd ms, bwd ms): CUDA events on the current
    stream, waited for at stop (on the CPU, where the work is synchronous, the host clock)."""

    def __init__(self, torch, cpu: bool) -> None:
        self.cpu = cpu
        self.events = [] if cpu else [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        self.marks: list[float] = []

    def _mark(self) -> None:
        if self.cpu:
            self.marks.append(time.perf_counter())
        else:
            self.events[len(self.marks)].record()
            self.marks.append(0.0)

    start = mark = _mark

    def stop(self) -> tuple[float, float]:
        self._mark()
        if self.cpu:
            return (self.marks[1] - self.marks[0]) * 1e3, (self.marks[2] - self.marks[1]) * 1e3
        self.events[2].synchronize()
        return self.events[0].elapsed_time(self.events[1]), self.events[1].elapsed_time(self.events[2])


class Attention:
    """One implementation's step on this rank's chunks: (q, k, v) -> out, then their gradients."""

    def __init__(self, impl: str, dev: Device, causal: bool, gqa: bool) -> None:
        self.impl, self.dev, self.causal, self.gqa = impl, dev, causal, gqa

    def select(self) -> None:
        """flashattn's kernels behind torch's flash ops, or torch's own (process-wide)."""
        import flashattn

        if self.dev.cpu:
            return  # the stand-ins are registered once for the whole run
        if self.impl == OURS:
            flashattn.activate()
        else:
            flashattn.deactivate()

    def forward(self, q, k, v):
        torch = self.dev.torch
        if self.dev.cpu:  # CPU SDPA never reaches the flash op: call it, on DTensors under the ring
            if self.dev.mesh is None:
                return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, self.causal, scale=None)[0]
            from torch.distributed.tensor import DTensor, Shard

            d = [DTensor.from_local(t, self.dev.mesh, [Shard(2)], run_check=False) for t in (q, k, v)]
            return torch.ops.aten._scaled_dot_product_flash_attention(*d, 0.0, self.causal, scale=None)[0].to_local()
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = SDPBackend.CUDNN_ATTENTION if self.impl == "sdpa-cudnn" else SDPBackend.FLASH_ATTENTION
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=self.gqa)


class Ring:
    """context_parallel around a block, with load balancing; nothing on one process."""

    def __init__(self, dev: Device, rotate: str) -> None:
        self.dev, self.cp = dev, None
        if dev.world > 1:
            import importlib

            self.cp = importlib.import_module("torch.distributed.tensor.experimental._context_parallel._attention")
            self.cp.set_rotate_method(rotate)

    def __call__(self, s: int):
        import contextlib

        if self.cp is None:
            return contextlib.nullcontext()
        # The inputs are made as this rank's chunks directly (a whole-sequence tensor per rank
        # would not fit at 1M tokens); the one buffer given to context_parallel sets its sequence
        # length and with it the head-tail load balancer that the ring's causal steps assume.
        marker = self.dev.torch.zeros(s, dtype=self.dev.torch.int8, device=self.dev.device)
        self.cp._cp_options.enable_load_balance = True
        return self.cp.context_parallel(self.dev.mesh, buffers=[marker], buffer_seq_dims=[0])


def _inputs(dev: Device, ns, s: int):
    torch = dev.torch
    dtype = torch.float64 if dev.cpu else {"bf16": torch.bfloat16, "fp16": torch.float16}[ns.dtype]
    local = s // dev.world
    gen = torch.Generator(device=dev.device).manual_seed(1000 + dev.rank)

    def t(h):
        return torch.randn(ns.batch, h, local, ns.dim, generator=gen, device=dev.device, dtype=dtype)

    q, k, v = t(ns.heads).requires_grad_(True), t(ns.kv_heads).requires_grad_(True), t(ns.kv_heads).requires_grad_(True)
    return q, k, v, t(ns.heads)


def _time_config(dev: Device, attn: Attention, ring: Ring, ns, s: int, iters: int) -> dict:
    torch = dev.torch
    attn.select()
    dev.reset_peak()
    q, k, v, dout = _inputs(dev, ns, s)
    samples = []
    with ring(s):
        for _ in range(1 + iters):
            dev.sync()
            timer = dev.timer()
            timer.start()
            out = attn.forward(q, k, v)
            timer.mark()
            torch.autograd.grad(out, (q, k, v), dout)
            samples.append(timer.stop())
            del out
    peak = dev.peak()
    del q, k, v, dout
    return {"samples": samples[1:], "peak": peak}


def _probe(dev: Device, attn: Attention, ring: Ring, ns) -> str | None:
    """Whether the implementation runs these shapes at all (a short sequence through the ring),
    the same answer on every rank; its first call also sets up what the timed ones reuse. A
    refusal comes from SDPA's backend selection, before any collective, on every rank alike."""
    s = 2 * dev.world * (16 if dev.cpu else 256)
    try:
        _time_config(dev, attn, ring, ns, s, 1)
        err = None
    except RuntimeError as e:
        err = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    errors = [e for e in dev.gather(err) if e]
    return errors[0] if errors else None


def _environment(dev: Device) -> dict:
    torch = dev.torch
    import flashattn

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
           "flashattn": getattr(flashattn, "__version__", "?"), "flashattn_build": flashattn.build_info(),
           "flashattn_backend": flashattn.get_backend()}
    if not dev.cpu:
        p = torch.cuda.get_device_properties(dev.device)
        env.update(gpu=p.name, capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2**30, 1),
                   cudnn=torch.backends.cudnn.version(), visible_gpus=torch.cuda.device_count(), driver=_driver())
        try:
            nccl = torch.cuda.nccl.version()
            env["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except (RuntimeError, AttributeError):
            env["nccl"] = None
    else:
        env.update(gpu="CPU (gloo, stand-in kernels)", capability=None, memory_gib=None, cudnn=None, nccl=None,
                   visible_gpus=0)
    return env


def _driver() -> str | None:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = r.stdout.strip().splitlines()
    return lines[0].strip() if r.returncode == 0 and lines else None


def _cpu_standins(stack: contextlib.ExitStack) -> None:
    """flashattn's aten implementations as the CPU kernels, around the CPU stand-in kernels of the
    test suite (the float64 reference; the backward from the out and lse it is given)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import flashattn
    from flashattn import torch_impl
    from standin_kernels import _check_tensor_any_device, cpu_standin_kernels

    flashattn._validate.tensor = _check_tensor_any_device  # the stand-ins take CPU float64 tensors
    stack.enter_context(cpu_standin_kernels(saved_out_lse=True))
    stack.callback(torch_impl.register_kernels("CPU").remove)


def run_worker(ns, rank: int, world: int, store: str, out_path: str, deadline: float) -> None:
    dev = Device(ns.cpu_standin, rank, world, store)
    out = open(out_path, "a") if rank == 0 else None

    def emit(record: dict) -> None:
        if out is not None:
            out.write(json.dumps(record) + "\n")
            out.flush()

    stack = contextlib.ExitStack()
    try:
        if ns.cpu_standin:
            _cpu_standins(stack)
        emit({"kind": "environment", "world": world, **_environment(dev)})
        ring = Ring(dev, ns.rotate)
        memory = dev.memory_bytes()
        attns = {impl: Attention(impl, dev, True, ns.heads != ns.kv_heads) for impl in ns.impls}
        usable = []
        for impl, attn in attns.items():
            refused = _probe(dev, attn, ring, ns)
            if refused:
                for s in ns.seqlens:
                    emit({"kind": "config", "world": world, "impl": impl, "s": s, "status": "unsupported",
                          "reason": refused})
            else:
                usable.append(impl)
        history: dict[str, Measured] = {}
        stopped: dict[str, str] = {}  # implementation -> why it runs no longer sequence here
        seqlens = [s for s in ns.seqlens if s % (2 * world) == 0]
        for s in ns.seqlens:
            if s not in seqlens:
                for impl in usable:
                    emit({"kind": "config", "world": world, "impl": impl, "s": s, "status": "skipped",
                          "reason": f"not a multiple of {2 * world} (the load balancer's chunks)"})
        for i, s in enumerate(seqlens):
            later = seqlens[i + 1:]
            for impl in usable:
                decision = None
                if rank == 0:
                    decision = (Decision(False, reason=stopped[impl]) if impl in stopped else
                                decide(impl, s, later, history, deadline - time.time(), memory))
                decision = dev.broadcast(decision)
                record = {"kind": "config", "world": world, "impl": impl, "s": s}
                if not decision.run:
                    emit({**record, "status": "skipped", "reason": decision.reason})
                    continue
                t0 = time.time()
                try:
                    res = _time_config(dev, attns[impl], ring, ns, s, decision.iters)
                except dev.torch.OutOfMemoryError as e:
                    if world > 1:
                        raise  # the other ranks may be inside a collective: this set ends here
                    dev.torch.cuda.empty_cache()
                    emit({**record, "status": "oom", "reason": str(e).strip().splitlines()[0]})
                    stopped[impl] = f"out of memory at {seqlen_label(s)}"
                    continue
                per_rank = dev.gather(res)
                steps = [[max(r["samples"][j][p] for r in per_rank) for p in (0, 1)] for j in range(decision.iters)]
                fwd = [a for a, _ in steps]
                bwd = [b for _, b in steps]
                both = [a + b for a, b in steps]
                peaks = [r["peak"] for r in per_rank if r["peak"] is not None]
                peak = max(peaks) if peaks else None
                history[impl] = Measured(s, _median(both) / 1e3, peak)
                emit({**record, "status": "ok", "iters": decision.iters, "fwd_ms": _median(fwd),
                      "bwd_ms": _median(bwd), "step_ms": _median(both), "fwd_samples": fwd, "bwd_samples": bwd,
                      "step_samples": both, "peak_bytes": peak, "wall_s": time.time() - t0})
    finally:
        stack.close()
        if out is not None:
            out.close()
        dev.close()


# ==== the launcher ===============================================================================


@dataclass
class WorldRun:
    world: int
    status: str = "not run"
    seconds: float = 0.0
    log_tail: str = ""
    records: list = field(default_factory=list)


def worker_command(ns, rank: int, world: int, store: Path, out_path: Path, deadline: float) -> list[str]:
    args = [sys.executable, str(Path(__file__).resolve()), "--worker-rank", str(rank), "--worker-world", str(world),
            "--worker-store", str(store), "--worker-out", str(out_path), "--worker-deadline", repr(deadline),
            "--seqlens", ",".join(map(str, ns.seqlens)), "--impls", ",".join(ns.impls), "--batch", str(ns.batch),
            "--heads", str(ns.heads), "--kv-heads", str(ns.kv_heads), "--dim", str(ns.dim), "--dtype", ns.dtype,
            "--rotate", ns.rotate, "--gpus", str(world)]
    return args + (["--cpu-standin"] if ns.cpu_standin else [])


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a killed process
            continue
    return out


def run_world(ns, world: int, deadline: float, raw: Path) -> WorldRun:
    """One process per GPU (rank r on GPU r), all configurations; stopped GRACE_S after `deadline`
    or as soon as one process fails."""
    run = WorldRun(world)
    store, out_path = raw / f"store-{world}", raw / f"world{world}.jsonl"
    for p in (store, out_path):
        if p.exists():
            p.unlink()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **MULTICAST_OFF)
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # less fragmentation at 1M tokens
    logs = [raw / f"world{world}-rank{r}.log" for r in range(world)]
    t0 = time.time()
    procs = []
    for r, log in enumerate(logs):
        with open(log, "w") as f:
            procs.append(subprocess.Popen(worker_command(ns, r, world, store, out_path, deadline), env=env, stdout=f,
                                          stderr=subprocess.STDOUT))
    problem = None
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                problem = "; ".join(f"rank {r} exited with {c}" for r, c in failed)
                break
            if all(c == 0 for c in codes):
                break
            if time.time() > deadline + GRACE_S:
                problem = f"stopped {GRACE_S:.0f} s past its share of the budget"
                break
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    run.seconds = time.time() - t0
    run.status = "ok" if problem is None else problem
    if problem is not None:
        run.log_tail = "\n".join(f"--- rank {r} ---\n{log.read_text(errors='replace')[-3000:]}"
                                 for r, log in enumerate(logs))
    run.records = read_records(out_path)
    return run


def launch(ns) -> list[WorldRun]:
    raw = ns.out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    start = time.time()
    end = start + ns.budget_s
    runs = []
    for i, world in enumerate(ns.gpus):
        left = end - time.time()
        share = shares(ns.gpus[i:], max(left, 0.0))[0]
        deadline = time.time() + share
        print(f"cp-bench: {world} GPU(s): {share:.0f} s of the {left:.0f} s left", flush=True)
        run = run_world(ns, world, deadline, raw)
        runs.append(run)
        ok = sum(1 for r in run.records if r.get("status") == "ok")
        print(f"cp-bench: {world} GPU(s): {run.status}, {ok} configurations timed in {run.seconds:.0f} s", flush=True)
        if run.log_tail:
            print(run.log_tail, flush=True)
    return runs


# ==== results: tables, efficiency, the report's JSON ============================================


def efficiency(t1_ms: float | None, tn_ms: float | None, n: int) -> float | None:
    """t(1 GPU) / (N * t(N GPUs)): 1.0 is perfect scaling."""
    if t1_ms is None or tn_ms is None or not (t1_ms > 0 and tn_ms > 0):
        return None
    return t1_ms / (n * tn_ms)


def pass_ms(rec: dict, pass_: str) -> float:
    return {"fwd": rec["fwd_ms"], "bwd": rec["bwd_ms"], "fwd+bwd": rec["step_ms"]}[pass_]


def index(records: list[dict]) -> dict:
    """(world, impl, s) -> the configuration's record."""
    return {(r["world"], r["impl"], r["s"]): r for r in records if r.get("kind") == "config"}


def ok_ms(idx: dict, world: int, impl: str, s: int, pass_: str) -> float | None:
    rec = idx.get((world, impl, s))
    return pass_ms(rec, pass_) if rec is not None and rec.get("status") == "ok" else None


def _fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms:.1f}" if ms < 1000 else f"{ms / 1e3:.2f} s"


def _fmt_x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def _fmt_pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


def pass_table(idx: dict, settings: dict, pass_: str) -> list[str]:
    impls = settings["impls"]
    header = ["S", "GPUs"] + [f"{IMPL_TITLES[i]} ms" for i in impls]
    header += [f"{OURS} vs {IMPL_TITLES[i].split()[0]}" for i in impls if i != OURS]
    header += [f"efficiency {IMPL_TITLES[i].split()[0]}" for i in impls]
    rows = []
    for s in settings["seqlens"]:
        for n in settings["gpus"]:
            times = {i: ok_ms(idx, n, i, s, pass_) for i in impls}
            if all(t is None for t in times.values()):
                continue
            row = [seqlen_label(s), str(n)] + [_fmt_ms(times[i]) for i in impls]
            ours = times.get(OURS)
            row += [_fmt_x(times[i] / ours if times[i] and ours else None) for i in impls if i != OURS]
            row += [_fmt_pct(efficiency(ok_ms(idx, 1, i, s, pass_), times[i], n)) if n > 1 else "(baseline)"
                    for i in impls]
            rows.append(row)
    return _table(header, rows) if rows else ["not yet measured: no configuration ran for this pass"]


def acceptance(idx: dict, settings: dict, runs: dict) -> list[str]:
    """Issue 30's acceptance lines, computed from the records; "not measured" where they say nothing."""
    out = []
    multi = [n for n in settings["gpus"] if n > 1]
    for n in (2, 4):
        head = f"- scaling efficiency >= {EFFICIENCY_TARGET:.0%} at S >= {seqlen_label(EFFICIENCY_FROM_S)} on {n} GPUs"
        if n not in multi:
            out.append(f"{head}: not measured ({n} GPUs not in this run)")
            continue
        effs = [(s, efficiency(ok_ms(idx, 1, OURS, s, "fwd+bwd"), ok_ms(idx, n, OURS, s, "fwd+bwd"), n))
                for s in settings["seqlens"] if s >= EFFICIENCY_FROM_S]
        effs = [(s, e) for s, e in effs if e is not None]
        if not effs:
            out.append(f"{head}: not measured (no S >= {seqlen_label(EFFICIENCY_FROM_S)} timed on both 1 and {n} GPUs)")
            continue
        worst = min(e for _, e in effs)
        listed = ", ".join(f"{_fmt_pct(e)} at {seqlen_label(s)}" for s, e in effs)
        out.append(f"{head} (flashattn, fwd+bwd): {listed}: {'met' if worst >= EFFICIENCY_TARGET else 'NOT met'}")
    rec = idx.get((4, OURS, MILLION))
    if 4 not in multi:
        out.append("- S = 1M causal forward+backward on 4 GPUs: not measured (4 GPUs not in this run)")
    elif rec is None:
        out.append("- S = 1M causal forward+backward on 4 GPUs: not measured (1M not in the sequence lengths or the "
                   f"4-GPU set ended before it: {runs.get(4, 'not run')})")
    elif rec["status"] == "ok":
        out.append(f"- S = 1M causal forward+backward on 4 GPUs: ran, {_fmt_ms(rec['step_ms'])} per step "
                   f"(peak {rec['peak_bytes'] / 2**30:.1f} GiB per GPU): met" if rec.get("peak_bytes") else
                   f"- S = 1M causal forward+backward on 4 GPUs: ran, {_fmt_ms(rec['step_ms'])} per step: met")
    else:
        out.append(f"- S = 1M causal forward+backward on 4 GPUs: {rec['status']} ({rec.get('reason', '')}): "
                   + ("NOT met" if rec["status"] == "oom" else "not measured"))
    for other, target in (("sdpa-flash", FA2_TARGET), ("sdpa-cudnn", CUDNN_TARGET)):
        if other not in settings["impls"]:
            out.append(f"- flashattn >= {target:.1f}x {IMPL_TITLES[other]} under the ring: not measured "
                       "(not in --impls)")
            continue
        pairs = []
        for n in multi:
            for s in settings["seqlens"]:
                ours, theirs = ok_ms(idx, n, OURS, s, "fwd+bwd"), ok_ms(idx, n, other, s, "fwd+bwd")
                if ours and theirs:
                    pairs.append((n, s, theirs / ours))
        if not pairs:
            out.append(f"- flashattn >= {target:.1f}x {IMPL_TITLES[other]} under the ring: not measured (no multi-GPU "
                       "length timed for both)")
            continue
        long = [x for n, s, x in pairs if s >= EFFICIENCY_FROM_S]
        worst_all = min(x for _, _, x in pairs)
        geo = math.exp(sum(math.log(x) for _, _, x in pairs) / len(pairs))
        text = (f"- flashattn >= {target:.1f}x {IMPL_TITLES[other]} under the ring (fwd+bwd, {len(pairs)} multi-GPU "
                f"configurations): lowest {_fmt_x(worst_all)}, geometric mean {_fmt_x(geo)}")
        if long:
            text += f"; at S >= {seqlen_label(EFFICIENCY_FROM_S)} lowest {_fmt_x(min(long))}"
        verdict = min(long) if long else worst_all
        out.append(text + f": {'met' if verdict >= target else 'NOT met'}")
    return out


def environment_of(records: list[dict]) -> dict:
    envs = [r for r in records if r.get("kind") == "environment"]
    return max(envs, key=lambda e: e.get("world", 0)) if envs else {}


def markdown(settings: dict, records: list[dict], runs: list[WorldRun]) -> str:
    idx = index(records)
    env = environment_of(records)
    heads = f"H={settings['heads']}" + (f" (GQA {settings['heads']}:{settings['kv_heads']})"
                                        if settings["heads"] != settings["kv_heads"] else "")
    out = ["## Context parallelism: a causal attention step under torch's ring attention", ""]
    if env.get("capability"):
        out.append(f"- {env.get('visible_gpus', '?')} x {env.get('gpu', '?')} ({env.get('memory_gib', '?')} GiB), "
                   f"driver {env.get('driver')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, "
                   f"cuDNN {env.get('cudnn')}, NCCL {env.get('nccl')}; flashattn {env.get('flashattn')}, "
                   f"backend {env.get('flashattn_backend')}")
    elif env:
        out.append(f"- {env.get('gpu')}: the benchmark's machinery checked without a GPU (host timers), torch "
                   f"{env.get('torch')}: no GPU numbers")
    else:
        out.append("- not yet measured: no set of processes reported its machine")
    out += [
        f"- B={settings['batch']}, {heads}, D={settings['dim']}, {settings['dtype']}, causal; N > 1: "
        f"`context_parallel` with head-tail load balancing, K/V rotation {settings['rotate']}; "
        "1 GPU: SDPA on the whole sequence (no ring)",
        "- ms per step, the slowest rank's, median of the timed steps after one warm-up (CUDA events); "
        "efficiency = t(1 GPU) / (N x t(N GPUs)), same implementation and pass; "
        "flashattn vs X = t(X) / t(flashattn), > 1 is flashattn faster",
        "- sets of processes: " + "; ".join(f"{r.world} GPU(s) {r.status} in {r.seconds:.0f} s" for r in runs),
    ]
    for pass_ in ("fwd+bwd", "fwd", "bwd"):
        out += ["", f"### {pass_}", ""]
        out += pass_table(idx, settings, pass_)
    out += ["", "### Issue 30's acceptance, from the tables above", ""]
    out += acceptance(idx, settings, {r.world: r.status for r in runs})
    missing = [r for r in records if r.get("kind") == "config" and r.get("status") != "ok"]
    if missing:
        out += ["", "### Not measured", ""]
        for r in sorted(missing, key=lambda r: (r["world"], r["s"], IMPLS.index(r["impl"]))):
            where = f"{r['world']} GPU(s), S={seqlen_label(r['s'])}, {r['impl']}"
            out.append(f"- {where}: {r['status']}: {r.get('reason', '')}")
    return "\n".join(out) + "\n"


def bench_json(settings: dict, records: list[dict]) -> dict:
    """The timed configurations in pytest-benchmark's layout (benchmarks/bench_report.py reads it):
    grid "cpN" per number of GPUs, one shape per sequence length and pass; flops are per GPU
    (the whole causal step's divided by N), so the report's TFLOP/s are per GPU."""
    env = environment_of(records)
    benches = []
    b, hq, hk, d, dtype = settings["batch"], settings["heads"], settings["kv_heads"], settings["dim"], settings["dtype"]
    for r in records:
        if r.get("kind") != "config" or r.get("status") != "ok":
            continue
        n, s = r["world"], r["s"]
        for pass_, key in (("fwd", "fwd_samples"), ("bwd", "bwd_samples"), ("fwd+bwd", "step_samples")):
            ms = pass_ms(r, pass_)
            data = [x / 1e3 for x in r[key]]
            group = f"{dtype} D={d} S={s} B={b} H={hq}/{hk} causal {n}gpu" + ("" if pass_ == "fwd" else f" {pass_}")
            flops = pass_flops(attention_flops(b, hq, s, s, d, CAUSAL_TOP_LEFT), pass_) / n
            benches.append({
                "group": group, "name": f"cp[{n}gpu-{r['impl']}-S{s}-{pass_}]",
                "fullname": f"benchmarks/bench_context_parallel.py::cp[{n}gpu-{r['impl']}-S{s}-{pass_}]",
                "params": {"impl": r["impl"], "gpus": n, "s": s, "pass": pass_}, "param": f"{n}gpu-{r['impl']}-S{s}",
                "extra_info": {"impl": r["impl"], "grid": f"cp{n}", "dtype": dtype, "b": b, "hq": hq, "hk": hk,
                               "sq": s, "sk": s, "d": d, "causal": True, "flops": flops, "io_bytes": 0.0,
                               "median_ms": ms, "pass": pass_, "gpus": n},
                "options": {"timer": "cuda_event_timer", "warmup": 1},
                "stats": {"min": min(data), "max": max(data), "mean": sum(data) / len(data),
                          "median": ms / 1e3, "iqr": 0.0, "rounds": len(data), "data": data, "iterations": 1},
            })
    gpu = {"name": env.get("gpu", "?"), "count": env.get("visible_gpus"), "capability": env.get("capability"),
           "driver": env.get("driver", "?")}
    software = {k: env.get(k) for k in ("torch", "cuda", "cudnn", "nccl", "flashattn", "flashattn_build",
                                         "flashattn_backend")}
    return {"machine_info": {"gpu": gpu, "software": software, "python_version": env.get("python"), "timing": TIMING},
            "commit_info": {"id": _git_commit()}, "benchmarks": benches,
            "datetime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "version": "bench_context_parallel"}


def _git_commit() -> str:
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def settings_of(ns) -> dict:
    return {"gpus": ns.gpus, "seqlens": ns.seqlens, "impls": ns.impls, "batch": ns.batch, "heads": ns.heads,
            "kv_heads": ns.kv_heads, "dim": ns.dim, "dtype": "fp64" if ns.cpu_standin else ns.dtype,
            "rotate": ns.rotate, "budget_s": ns.budget_s, "cpu_standin": ns.cpu_standin}


def write_results(ns, runs: list[WorldRun]) -> str:
    settings = settings_of(ns)
    records = [rec for run in runs for rec in run.records]
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "cp_results.json").write_text(json.dumps(
        {"settings": settings, "worlds": [{k: v for k, v in asdict(r).items() if k != "records"} for r in runs],
         "records": records}, indent=1))
    (ns.out / "cp_bench.json").write_text(json.dumps(bench_json(settings, records), indent=1))
    text = markdown(settings, records, runs)
    (ns.out / "cp_report.md").write_text(text)
    return text


# ==== main =======================================================================================


def visible_devices(cpu: bool) -> int:
    if cpu:
        return 8  # processes, not GPUs
    import torch  # device_count does not create a context on any GPU

    return torch.cuda.device_count()


def main(argv=None) -> int:
    p = parser()
    for name in ("--worker-rank", "--worker-world", "--worker-store", "--worker-out", "--worker-deadline"):
        p.add_argument(name, help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    if ns.worker_rank is not None:
        check_args(ns, int(ns.worker_world))
        run_worker(ns, int(ns.worker_rank), int(ns.worker_world), ns.worker_store, ns.worker_out,
                   float(ns.worker_deadline))
        sys.stdout.flush()
        os._exit(0)  # past the group's teardown: torch's process-group threads can abort at exit
    visible = visible_devices(ns.cpu_standin)
    if visible == 0:
        print("cp-bench: no CUDA GPU visible: nothing to time (the benchmark runs on a GPU machine)", file=sys.stderr)
        return 2
    check_args(ns, visible)
    print(f"cp-bench: GPUs {ns.gpus}, S {[seqlen_label(s) for s in ns.seqlens]}, {', '.join(ns.impls)}, "
          f"budget {ns.budget_s:.0f} s, results in {ns.out}", flush=True)
    runs = launch(ns)
    print(write_results(ns, runs), flush=True)
    return 0 if all(r.status == "ok" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
