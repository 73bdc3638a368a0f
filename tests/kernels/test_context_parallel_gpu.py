"""flashattn under PyTorch's context parallelism on several GPUs: NCCL, one process per visible GPU.

Every rank activates flashattn and runs `F.scaled_dot_product_attention` under
`torch.distributed.tensor.experimental.context_parallel` and `sdpa_kernel(SDPBackend.FLASH_ATTENTION)`,
forward and backward, so torch's ring attention calls flashattn's kernels once per step and
key/value chunk (docs/context-parallel.md says how the ring uses the ops). One launch of the
workers runs every case; the outputs and the gradients of q, k, v, unsharded, come back to this
process, which checks, per case:

* the ring's output and gradients meet the suite's criterion against the float64 reference over
  the whole sequence (tests/numerics.py: `assert_attention_matches`, `assert_gradients_match`),
  the same criterion every kernel of the suite meets;
* one GPU's flashattn on the whole sequence (the same SDPA call, no ring) meets it on the same
  inputs, the control that tells a ring problem from a kernel problem; the largest difference
  between the ring's results and one GPU's, relative to one GPU's largest value, is recorded in
  the measurements summary. There is no tolerance between the two of them: the ring rounds each
  chunk's output and gradients to the input dtype before merging them in float32, so its error may
  exceed one GPU's by more than a fixed factor (a CPU simulation of the rounding saw 2.3x on dk)
  while both stay well inside the criterion (the ring's worst: 0.74 of the dv bound);
* each rank's per-chunk calls, forward and backward, reach flashattn's implementations with the
  query/key lengths, causal flags and key/value heads of torch's ring (GQA K/V unrepeated).

Cases: causal with the head-tail load balancing (context_parallel's default for causal) and
without it, non-causal; MHA and GQA; head dims 64, 128, 256, each in bfloat16 and float16; both
rotate methods torch offers (`set_rotate_method`: allgather, alltoall). The sequence is
2 * world * 256 tokens (each rank holds two chunks of the load balancer's 2 * world), and 8192
for one case, whatever the number of GPUs (the float64 reference of a longer one would not fit).

The workers are this file run as a script (`--worker`), started with subprocess, bounded by
WORKER_TIMEOUT_S in all (NCCL's own timeout below it); the first worker to fail stops the others.
The same workers run on the CPU with gloo and the CPU stand-in kernels (`--mode cpu`:
tests/kernels/test_context_parallel_harness_cpu.py), which proves this harness without a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import flashattn
from numerics import assert_attention_matches, assert_gradients_match

ROOT = Path(__file__).resolve().parents[2]
CP_MODULE = "torch.distributed.tensor.experimental._context_parallel._attention"
DONE = "context-parallel worker done:"  # a worker's last line, after its group is destroyed
WORKER_TIMEOUT_S = 300
COLLECTIVE_TIMEOUT_S = 120
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}
# NVLink multicast is never needed by the ring; kept off, also where the machine does not set it.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass(frozen=True)
class Case:
    name: str
    causal: bool
    load_balance: bool  # torch's head-tail load balancing (causal only)
    hq: int
    hk: int
    d: int
    dtype: str
    rotate: str  # set_rotate_method: "allgather" or "alltoall"
    chunk: int = 256  # tokens per load-balancer chunk: the sequence is 2 * world * chunk ...
    seq: int = 0  # ... unless this is set: the sequence, whatever the world (its reference must fit)
    b: int = 2  # two sequences: the load balancer's unshard restores each batch row on its own

    def seqlen(self, world: int) -> int:
        """Whole chunks of the load balancer (which torch turns off, silently, otherwise)."""
        step = 2 * world * (64 if self.seq else self.chunk)
        return (self.seq or step) // step * step


CASES = (
    Case("causal-balanced-d128-bf16-allgather", True, True, 8, 8, 128, "bf16", "allgather"),
    Case("causal-balanced-gqa-d128-bf16-alltoall", True, True, 8, 2, 128, "bf16", "alltoall"),
    Case("causal-balanced-d64-fp16-allgather", True, True, 4, 4, 64, "fp16", "allgather"),
    Case("causal-balanced-gqa-d256-bf16-allgather", True, True, 4, 1, 256, "bf16", "allgather"),
    Case("causal-balanced-d256-fp16-alltoall", True, True, 4, 4, 256, "fp16", "alltoall"),
    Case("causal-unbalanced-d128-fp16-allgather", True, False, 8, 8, 128, "fp16", "allgather"),
    Case("causal-unbalanced-gqa-d64-bf16-alltoall", True, False, 8, 2, 64, "bf16", "alltoall"),
    Case("full-d128-fp16-allgather", False, False, 8, 8, 128, "fp16", "allgather"),
    Case("full-gqa-d64-bf16-alltoall", False, False, 8, 4, 64, "bf16", "alltoall"),
    Case("full-gqa-d256-bf16-allgather", False, False, 4, 2, 256, "bf16", "allgather"),
    # longer chunks (1024 tokens on 4 GPUs): many of the kernels' tiles per chunk and per half chunk
    Case("causal-balanced-gqa-d128-bf16-long", True, True, 4, 1, 128, "bf16", "allgather", seq=8192, b=1),
)
CPU_CHUNK = 8


def cases_for(mode: str) -> tuple[Case, ...]:
    """CASES on the GPU. On the CPU the same cases on short chunks in float64: the stand-in kernels
    are the float64 reference, and on a few keys the ring's rounding of each chunk's result to
    bf16/fp16 can exceed the criterion (a 32-token GQA dv summed from two rounded halves did),
    which the GPU sizes leave far behind (see the module docstring)."""
    return CASES if mode == "cuda" else tuple(replace(c, chunk=CPU_CHUNK, seq=0, dtype="fp64") for c in CASES)


def expected_calls(case: Case, rank: int, world: int) -> list[list]:
    """The (is_causal, query length, key length, key heads) of each per-chunk call torch's ring
    makes on `rank` of `world`, forward and backward alike (torch's _templated_ring_attention):
    step 0 is the rank's own chunk, causal for causal attention (Sq = Sk); step i the keys of rank
    (rank - i) mod world, all of them visible, or, without load balancing, none where that rank
    comes after this one (skipped); with load balancing (two chunks per rank, r and 2 world - 1 - r)
    steps i <= rank use the first half of the keys, later ones the second half of the queries."""
    local = case.seqlen(world) // world
    half = local // 2
    if not case.causal:
        return [[False, local, local, case.hk]] * world
    calls = [[True, local, local, case.hk]]
    for i in range(1, world):
        if not case.load_balance:
            if (rank - i) % world < rank:
                calls.append([False, local, local, case.hk])
        elif i <= rank:
            calls.append([False, local, half, case.hk])
        else:
            calls.append([False, half, local, case.hk])
    return calls


def make_inputs(case: Case, world: int) -> tuple[torch.Tensor, ...]:
    """q [B, Hq, S, D], k/v [B, Hk, S, D], dout [B, Hq, S, D] on the CPU, the same in every process
    and in this one (drawn in float32 on the CPU, then rounded to the case's dtype)."""
    s = case.seqlen(world)
    gen = torch.Generator().manual_seed(4321 + [c.name for c in CASES].index(case.name))
    b = case.b
    shapes = ((b, case.hq, s, case.d), (b, case.hk, s, case.d), (b, case.hk, s, case.d), (b, case.hq, s, case.d))
    return tuple(torch.randn(*shape, generator=gen).to(DTYPES[case.dtype]) for shape in shapes)


# ---- the worker (one per rank) -----------------------------------------------------------------------


def _recording(impl, calls: list):
    """impl, recording (is_causal, query length, key length, key heads) of every call."""
    signature = inspect.signature(impl)

    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        calls.append([bool(a["is_causal"]), a["query"].shape[2], a["key"].shape[2], a["key"].shape[1]])
        return impl(*args, **kwargs)

    return wrapper


def _attend(q, k, v, case: Case, mesh, mode: str) -> torch.Tensor:
    """The forward on this rank's chunks, inside context_parallel. On CUDA: SDPA's flash backend, as
    a model calls it (context_parallel's SDPA wrapper makes DTensors of the chunks, GQA passes K/V
    with their Hk heads). On the CPU, SDPA calls aten::_scaled_dot_product_flash_attention_for_cpu,
    which context parallelism does not handle: the same wrapping, then the op SDPA's flash backend
    calls on CUDA."""
    if mode == "cuda":
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=case.causal, enable_gqa=case.hq != case.hk)
    from torch.distributed.tensor import DTensor, Shard

    dq, dk, dv = (DTensor.from_local(t, mesh, [Shard(2)], run_check=False) for t in (q, k, v))
    return torch.ops.aten._scaled_dot_product_flash_attention(dq, dk, dv, 0.0, case.causal, scale=None)[0].to_local()


def no_restore(cp, buffers: list) -> dict:
    """context_parallel's argument that spares it a copy of the buffers to restore on exit, where
    the installed torch has it."""
    if "no_restore_buffers" in inspect.signature(cp.context_parallel).parameters:
        return {"no_restore_buffers": set(buffers)}
    return {}


def _run_case(case: Case, world: int, mesh, cp, device: torch.device, mode: str, calls: dict) -> dict:
    cp.set_rotate_method(case.rotate)
    q, k, v, dout = (t.to(device) for t in make_inputs(case, world))
    cp._cp_options.enable_load_balance = case.load_balance  # context_parallel restores it on exit
    buffers = [q, k, v, dout]
    with cp.context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2] * 4, **no_restore(cp, buffers)):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]  # this rank's chunks
        out = _attend(*leaves, case, mesh, mode)
        out.backward(dout)
        local = [out.detach(), *(t.grad for t in leaves)]
        full = cp.context_parallel_unshard(mesh, local, [2] * len(local))  # with the same load balancer
    mine = {kind: list(c) for kind, c in calls.items()}
    for c in calls.values():
        c.clear()
    per_rank = [None] * world
    dist.all_gather_object(per_rank, mine)
    return {"tensors": {name: t.cpu() for name, t in zip(("out", "dq", "dk", "dv"), full)}, "calls": per_rank}


def _worker(rank: int, world: int, mode: str, store: str, result: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from flashattn import torch_impl

    if mode == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S), device_id=device)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        cp = importlib.import_module(CP_MODULE)
        mesh = init_device_mesh(device.type, (world,))
        calls = {"forward": [], "backward": []}
        # Wrapped before activation: registration reads IMPLEMENTATIONS then.
        for op, kind in (("_scaled_dot_product_flash_attention", "forward"),
                         ("_scaled_dot_product_flash_attention_backward", "backward")):
            torch_impl.IMPLEMENTATIONS[op] = _recording(torch_impl.IMPLEMENTATIONS[op], calls[kind])
        results = {}
        if mode == "cuda":
            flashattn.activate()
            try:
                for case in cases_for(mode):
                    results[case.name] = _run_case(case, world, mesh, cp, device, mode, calls)
            finally:
                flashattn.deactivate()
        else:
            from standin_kernels import _check_tensor_any_device, cpu_standin_kernels

            # the stand-ins take CPU tensors (what allow_cpu_entry_points relaxes in the suite)
            flashattn._validate.tensor = _check_tensor_any_device
            with cpu_standin_kernels(saved_out_lse=True):
                handle = torch_impl.register_kernels("CPU")
                try:
                    for case in cases_for(mode):
                        results[case.name] = _run_case(case, world, mesh, cp, device, mode, calls)
                finally:
                    handle.remove()
        if rank == 0:
            torch.save({"world": world, "mode": mode, "results": results}, result)
    finally:
        dist.destroy_process_group()
    print(f"{DONE} {rank}", flush=True)


# ---- the launcher -----------------------------------------------------------------------------------


class RingFailure(Exception):
    """The workers failed, ran past their time, or did not finish; the message holds their logs.
    `signalled`: a worker was killed by a signal (an abort or a fault inside the process, not a
    failed check, which exits with a status)."""

    def __init__(self, message: str, signalled: bool = False) -> None:
        super().__init__(message)
        self.signalled = signalled


def worker_env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    # PYTHONFAULTHANDLER: a worker that aborts or faults leaves every thread's Python stack in its log
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1",
                **MULTICAST_OFF)


def worker_command(rank: int, world: int, mode: str, store: Path, result: Path) -> list[str]:
    return [sys.executable, __file__, "--worker", str(rank), "--world", str(world), "--mode", mode, str(store),
            str(result)]


def run_ring(world: int, mode: str, tmp: Path, timeout_s: float = WORKER_TIMEOUT_S) -> dict:
    """Runs every case on `world` worker processes (one per GPU for mode "cuda"); returns rank 0's
    results: {"world", "mode", "results": {case name: {"tensors": unsharded out/dq/dk/dv, "calls":
    per rank {"forward": [...], "backward": [...]}}}}. Raises RingFailure with the workers' logs."""
    store, result = tmp / "store", tmp / "result.pt"
    logs = [tmp / f"rank{rank}.log" for rank in range(world)]
    procs = []
    for rank, log in enumerate(logs):
        with open(log, "w") as f:
            procs.append(subprocess.Popen(worker_command(rank, world, mode, store, result), env=worker_env(),
                                          stdout=f, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout_s
    problem, signalled = None, False
    try:
        while problem is None:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:  # the others wait on it in a collective until their timeout: stop them now
                signalled = any(c < 0 for _, c in failed)
                problem = "; ".join(f"rank {r} exited with {c}" for r, c in failed)
            elif all(c == 0 for c in codes):
                break
            elif time.monotonic() > deadline:
                problem = f"the workers ran past {timeout_s:.0f} s"
            else:
                time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    texts = [log.read_text(errors="replace") for log in logs]
    if problem is None:
        unfinished = [r for r, text in enumerate(texts) if f"{DONE} {r}" not in text]
        if unfinished:
            problem = f"ranks {unfinished} exited 0 without finishing their cases"
    if problem is not None:
        tails = "\n".join(f"--- rank {r} ---\n{text[-4000:]}" for r, text in enumerate(texts))
        raise RingFailure(f"{world} context-parallel workers ({mode}): {problem}\n{tails}", signalled)
    return torch.load(result)


# ---- the tests ---------------------------------------------------------------------------------------


def missing_context_parallel() -> str | None:
    """Why torch's ring cannot run flashattn here (beyond GPUs and NCCL, which the multigpu marker
    checks), or None."""
    if not flashattn.torch_impl.registry_available():
        return f"torch {torch.__version__} has no torch.nn.attention flash-attention implementation registry"
    if not dist.is_available():
        return f"torch {torch.__version__} has no torch.distributed"
    try:
        cp = importlib.import_module(CP_MODULE)
    except ImportError as e:
        return f"torch {torch.__version__} has no context parallelism ({CP_MODULE}: {e})"
    needed = ("context_parallel", "context_parallel_unshard", "set_rotate_method", "_cp_options")
    absent = [n for n in needed if not hasattr(cp, n)]
    if absent:
        return f"torch {torch.__version__}'s {CP_MODULE} lacks {', '.join(absent)}"
    return None


MISSING = missing_context_parallel()
pytestmark = [pytest.mark.multigpu, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every case once on one worker per visible GPU."""
    try:
        return run_ring(torch.cuda.device_count(), "cuda", tmp_path_factory.mktemp("context_parallel_gpu"))
    except RingFailure as e:
        pytest.fail(str(e), pytrace=False)


def criterion_inputs(case: Case, world: int, device) -> tuple[torch.Tensor, ...]:
    """The case's q, k, v, dout in the numerics criterion's layout [B, S, H, D], on `device`."""
    return tuple(t.to(device).transpose(1, 2) for t in make_inputs(case, world))


def assert_meets_criterion(got: dict, case: Case, world: int, device, what: str, partial_sums: int = 1) -> None:
    """got's out, dq, dk, dv ([B, H, S, D]) against the float64 reference with the suite's criterion;
    partial_sums: the ring's ranks (numerics.assert_gradients_match), 1 for one process."""
    q, k, v, dout = criterion_inputs(case, world, device)
    causal_mode = flashattn.CAUSAL_BOTTOM_RIGHT if case.causal else flashattn.CAUSAL_NONE  # Sq = Sk: also top-left
    out, dq, dk, dv = (got[n].to(device).transpose(1, 2) for n in ("out", "dq", "dk", "dv"))
    context = f"{what}, {case.name}, S={case.seqlen(world)}"
    assert_attention_matches(out, None, q, k, v, None, causal_mode, context=context)
    # Under the ring each rank's partial dK/dV (and dQ) is rounded to the dtype and torch adds them:
    # world partial sums (measured 2026-11-26 on 4 H200s, fp16 D=64: dv one fp16 ulp from the
    # reference, 0.0038 at |dv| = 4.1, where SDPA on one GPU rounded the other way).
    assert_gradients_match(dq, dk, dv, q, k, v, dout, None, causal_mode, context=context, partial_sums=partial_sums)


def one_gpu_whole_sequence(case: Case, world: int, device) -> dict:
    """flashattn activated, SDPA's flash backend on the whole sequence on one GPU: out, dq, dk, dv."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, dout = (t.to(device) for t in make_inputs(case, world))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    flashattn.activate()
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=case.causal, enable_gqa=case.hq != case.hk)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    finally:
        flashattn.deactivate()
    return {"out": out.detach(), "dq": dq, "dk": dk, "dv": dv}

IDS = [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_ring_meets_the_criterion(ring: dict, case: Case) -> None:
    got = ring["results"][case.name]["tensors"]
    assert_meets_criterion(got, case, ring["world"], torch.device("cuda", 0), f"{ring['world']}-GPU ring",
                           partial_sums=ring["world"])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_one_gpu_on_the_whole_sequence_meets_it_too(ring: dict, case: Case, measure) -> None:
    device = torch.device("cuda", 0)
    world = ring["world"]
    one = one_gpu_whole_sequence(case, world, device)
    assert_meets_criterion(one, case, world, device, "one GPU")
    got = ring["results"][case.name]["tensors"]
    for name in ("out", "dq", "dk", "dv"):
        diff = (got[name].to(device).float() - one[name].float()).abs().max()
        scale = one[name].float().abs().max().clamp_min(1e-30)
        measure(f"{case.name} {world}-GPU ring vs one GPU: max |diff| / max |one GPU| of {name}", float(diff / scale))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_ring_runs_flashattn_per_chunk(ring: dict, case: Case) -> None:
    world = ring["world"]
    for rank, calls in enumerate(ring["results"][case.name]["calls"]):
        want = expected_calls(case, rank, world)
        assert calls["forward"] == want, f"rank {rank} of {world}: forward calls"
        assert calls["backward"] == want, f"rank {rank} of {world}: backward calls"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="one rank of the context-parallel multi-GPU check")
    parser.add_argument("--worker", type=int, required=True, metavar="RANK")
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--mode", choices=("cuda", "cpu"), required=True)
    parser.add_argument("store")
    parser.add_argument("result")
    ns = parser.parse_args()
    _worker(ns.worker, ns.world, ns.mode, ns.store, ns.result)
    # Everything is written and the group destroyed; skip the interpreter's teardown, where
    # torch's process-group threads can still drop their last tensors and abort the process.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
