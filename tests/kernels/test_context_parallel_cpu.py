"""flashattn's aten implementations under PyTorch's context parallelism, on CPU: gloo, two processes.

`torch.distributed.tensor.experimental.context_parallel` shards q, k, v (and any other buffer) along
the sequence over the ranks of a device mesh and turns aten::_scaled_dot_product_flash_attention on
the resulting DTensors into ring attention: each rank calls the op on its query chunk and one
key/value chunk per step, merging the partial outputs by their log-sum-exps; the backward calls
aten::_scaled_dot_product_flash_attention_backward per chunk with the merged out and lse and passes
the key/value gradients around the ring. Here flashattn's implementations of both ops
(flashattn/torch_impl.py) are their CPU kernels, around the CPU stand-in kernels
(tests/standin_kernels.py: the float64 reference; the backward, with saved_out_lse=True, reads the
out and lse it is given, as the CUDA one does), and two processes run the ring over gloo. Checked:

* the ring's per-chunk calls reach flashattn's implementations, forward and backward, with the
  chunks and causal flags of torch's ring: the diagonal chunk causal (Sq = Sk, bottom-right is then
  top-left), the others full, halved or skipped by the load balancing;
* the merged output and lse, unsharded, equal `flashattn.attention_reference` over the whole
  sequence, and the gradients of q, k, v `flashattn.attention_reference_grads`', within
  TOLERANCE (float64 inputs; the ring merges and accumulates in float32, torch's default
  `_cp_options.convert_to_f32`), for: non-causal; causal with the head-tail load balancing
  (context_parallel's default for causal); causal without it; MHA and GQA (K/V with fewer heads, as
  SDPA's flash backend passes them with enable_gqa=True); both rotate methods (allgather, alltoall);
* what the ring's backward rests on, in the reference: key-chunk gradients from the whole rows' out
  and lse (`attention_reference_grads(..., out=, lse=)`) add up to the whole sequence's, from the
  chunk's own out and lse they do not;
* the lse convention: flashattn's -inf on a row that sees no key (torch's kernels write +inf) is
  what the ring's merge treats as a chunk that adds nothing. Torch's ring never makes such a call
  (its diagonal chunk is causal with Sq = Sk, every other chunk full), so the convention never
  reaches the merge there; the merge itself is checked on its own.

On CPU, F.scaled_dot_product_attention never reaches the flash op (CPU SDPA calls
aten::_scaled_dot_product_flash_attention_for_cpu, which context parallelism does not handle), so the
workers call aten::_scaled_dot_product_flash_attention on the DTensors inside context_parallel
themselves: the call SDPA's flash backend makes on CUDA. What needs GPUs: docs/context-parallel.md.

The two workers are this file run as a script (`--worker`), started with subprocess and bounded by
WORKER_TIMEOUT_S in all (gloo's own timeout below it), so that a stuck collective fails the test.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import flashattn

WORLD_SIZE = 2
B, S, D = 2, 16, 16  # S divisible by 2 * WORLD_SIZE: the head-tail load balancer's chunks
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}  # float32 merge and accumulation of float64 inputs
WORKER_TIMEOUT_S = 240
DONE = "context-parallel worker done:"  # a worker's last line, after its group is destroyed
GLOO_TIMEOUT_S = 120
CP_MODULE = "torch.distributed.tensor.experimental._context_parallel._attention"


@dataclass(frozen=True)
class Case:
    name: str
    causal: bool
    load_balance: bool  # torch's head-tail load balancing (causal only)
    hq: int
    hk: int
    rotate: str  # set_rotate_method: "allgather" or "alltoall"


CASES = (
    Case("full-mha-allgather", causal=False, load_balance=False, hq=4, hk=4, rotate="allgather"),
    Case("full-gqa-alltoall", causal=False, load_balance=False, hq=4, hk=2, rotate="alltoall"),
    Case("causal-balanced-gqa-allgather", causal=True, load_balance=True, hq=4, hk=2, rotate="allgather"),
    Case("causal-balanced-mha-alltoall", causal=True, load_balance=True, hq=2, hk=2, rotate="alltoall"),
    Case("causal-unbalanced-gqa-allgather", causal=True, load_balance=False, hq=4, hk=1, rotate="allgather"),
)

LOCAL, HALF = S // WORLD_SIZE, S // WORLD_SIZE // 2


def expected_calls(case: Case, rank: int) -> list[list]:
    """The (is_causal, query length, key length) of each per-chunk call torch's ring makes on
    `rank` (two ranks), forward and backward alike."""
    if not case.causal:
        return [[False, LOCAL, LOCAL], [False, LOCAL, LOCAL]]
    if not case.load_balance:  # rank 0's second chunk lies after all its queries: skipped
        return [[True, LOCAL, LOCAL]] if rank == 0 else [[True, LOCAL, LOCAL], [False, LOCAL, LOCAL]]
    # head-tail: rank 0 holds chunks (0, 3), rank 1 (1, 2) of four; the second step uses rank 0's
    # tail queries against all of rank 1's keys, and all of rank 1's queries against rank 0's head keys
    return [[True, LOCAL, LOCAL], [False, HALF, LOCAL] if rank == 0 else [False, LOCAL, HALF]]


def make_inputs(case: Case) -> tuple[torch.Tensor, ...]:
    """q [B, Hq, S, D], k/v [B, Hk, S, D], dout [B, Hq, S, D], float64, the same in every process."""
    gen = torch.Generator().manual_seed(1234 + CASES.index(case))
    shapes = ((B, case.hq, S, D), (B, case.hk, S, D), (B, case.hk, S, D), (B, case.hq, S, D))
    return tuple(torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in shapes)


# ---- the worker (one per rank) -----------------------------------------------------------------------


def _recording(name: str, impl, calls: list):
    """impl, recording (is_causal, query length, key length) of every call."""
    signature = inspect.signature(impl)

    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        calls.append([bool(a["is_causal"]), a["query"].shape[2], a["key"].shape[2]])
        return impl(*args, **kwargs)

    return wrapper


def _run_case(case: Case, mesh, cp, calls: dict) -> dict:
    from torch.distributed.tensor import DTensor, Shard

    cp.set_rotate_method(case.rotate)
    q, k, v, dout = (t.clone() for t in make_inputs(case))
    cp._cp_options.enable_load_balance = case.load_balance  # context_parallel restores it on exit
    with cp.context_parallel(mesh, buffers=[q, k, v, dout], buffer_seq_dims=[2, 2, 2, 2]):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]  # this rank's chunks
        dq, dk, dv = (DTensor.from_local(t, mesh, [Shard(2)], run_check=False) for t in leaves)
        res = torch.ops.aten._scaled_dot_product_flash_attention(dq, dk, dv, 0.0, case.causal, scale=None)
        out, lse = res[0], res[1]
        out.backward(DTensor.from_local(dout, mesh, [Shard(2)], run_check=False))
        local = [out.to_local().detach(), lse.to_local(), *(t.grad for t in leaves)]
        full = cp.context_parallel_unshard(mesh, local, [2] * len(local))  # with the same load balancer
    mine = {op: list(c) for op, c in calls.items()}
    for c in calls.values():
        c.clear()
    per_rank = [None] * WORLD_SIZE
    dist.all_gather_object(per_rank, mine)
    return {"tensors": dict(zip(("out", "lse", "dq", "dk", "dv"), full)), "calls": per_rank}


def _worker(rank: int, store: str, result: str) -> None:
    import importlib

    from torch.distributed.device_mesh import init_device_mesh

    from flashattn import torch_impl
    from standin_kernels import _check_tensor_any_device, cpu_standin_kernels

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD_SIZE,
                            timeout=timedelta(seconds=GLOO_TIMEOUT_S))
    try:
        cp = importlib.import_module(CP_MODULE)
        mesh = init_device_mesh("cpu", (WORLD_SIZE,))
        # the CPU stand-ins take float64 CPU tensors (what allow_cpu_entry_points relaxes in the suite)
        flashattn._validate.tensor = _check_tensor_any_device
        calls = {"forward": [], "backward": []}
        for op, kind in (("_scaled_dot_product_flash_attention", "forward"),
                         ("_scaled_dot_product_flash_attention_backward", "backward")):
            torch_impl.IMPLEMENTATIONS[op] = _recording(op, torch_impl.IMPLEMENTATIONS[op], calls[kind])
        results = {}
        with cpu_standin_kernels(saved_out_lse=True):
            handle = torch_impl.register_kernels("CPU")
            try:
                for case in CASES:
                    results[case.name] = _run_case(case, mesh, cp, calls)
            finally:
                handle.remove()
        if rank == 0:
            torch.save(results, result)
    finally:
        dist.destroy_process_group()
    print(f"{DONE} {rank}", flush=True)


# ---- the tests -----------------------------------------------------------------------------------------


def _missing() -> str | None:
    """Why the ring cannot run here, or None."""
    if not dist.is_available() or not dist.is_gloo_available():
        return f"torch {torch.__version__} has no torch.distributed with gloo"
    try:
        import importlib

        cp = importlib.import_module(CP_MODULE)
    except ImportError as e:
        return f"torch {torch.__version__} has no context parallelism ({CP_MODULE}: {e})"
    needed = ("context_parallel", "context_parallel_unshard", "set_rotate_method", "_cp_options", "_SDPAMerger")
    absent = [n for n in needed if not hasattr(cp, n)]
    if absent:
        return f"torch {torch.__version__}'s {CP_MODULE} lacks {', '.join(absent)}"
    return None


MISSING = _missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Runs every case once on two worker processes; rank 0's unsharded results and both ranks' calls."""
    tmp = tmp_path_factory.mktemp("context_parallel")
    store, result = tmp / "store", tmp / "result.pt"
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root), str(root / "tests"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen([sys.executable, __file__, "--worker", str(rank), str(store), str(result)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(WORLD_SIZE)
    ]
    outputs, deadline = [], time.monotonic() + WORKER_TIMEOUT_S  # one bound for both
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        logs = [p.communicate()[0] for p in procs]
        tails = "\n".join(x[-3000:] for x in logs)
        pytest.fail(f"the context-parallel workers ran past {WORKER_TIMEOUT_S} s:\n{tails}")
    failed = [(rank, p.returncode, out) for rank, (p, out) in enumerate(zip(procs, outputs)) if p.returncode != 0]
    assert not failed, "\n".join(f"rank {r} exited with {rc}:\n{out[-4000:]}" for r, rc, out in failed)
    unfinished = [r for r, out in enumerate(outputs) if f"{DONE} {r}" not in out]
    assert not unfinished, f"ranks {unfinished} exited 0 without finishing their cases"
    return torch.load(result)


def bhsd_reference(q, k, v, dout, causal: bool):
    """flashattn's float64 references over the whole sequence, in the torch layout [B, H, S, D]."""
    mode = flashattn.CAUSAL_BOTTOM_RIGHT if causal else flashattn.CAUSAL_NONE  # Sq = Sk: also top-left
    q, k, v, dout = (t.transpose(1, 2) for t in (q, k, v, dout))
    out, lse = flashattn.attention_reference(q, k, v, 1 / math.sqrt(D), mode)
    grads = flashattn.attention_reference_grads(q, k, v, dout, 1 / math.sqrt(D), mode)
    return out.transpose(1, 2), lse, *(g.transpose(1, 2) for g in grads)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_ring_equals_the_whole_sequence(ring: dict, case: Case) -> None:
    got = ring[case.name]["tensors"]
    want = dict(zip(("out", "lse", "dq", "dk", "dv"), bhsd_reference(*make_inputs(case), case.causal)))
    for name in ("out", "lse", "dq", "dk", "dv"):
        assert got[name].shape == want[name].shape, name
        torch.testing.assert_close(got[name].double(), want[name], **TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_ring_calls_flashattn_per_chunk(ring: dict, case: Case) -> None:
    for rank, calls in enumerate(ring[case.name]["calls"]):
        want = expected_calls(case, rank)
        assert calls["forward"] == want, f"rank {rank}"
        assert calls["backward"] == want, f"rank {rank}"


def test_chunk_gradients_from_the_whole_rows_out_and_lse_add_up() -> None:
    """What the ring's backward relies on, in the float64 reference: with the out and lse of the
    whole rows, the gradients of key chunks (attention_reference_grads(..., out=, lse=)) give dq
    as their sum and dk, dv chunk by chunk; with the chunk's own out and lse (the default) they
    do not."""
    q, k, v, dout = (t.transpose(1, 2) for t in make_inputs(CASES[1]))  # GQA
    scale = 1 / math.sqrt(D)
    out, lse = flashattn.attention_reference(q, k, v, scale)
    dq, dk, dv = flashattn.attention_reference_grads(q, k, v, dout, scale)
    parts = [flashattn.attention_reference_grads(q, kc, vc, dout, scale, out=out, lse=lse)
             for kc, vc in zip(k.chunk(2, dim=1), v.chunk(2, dim=1))]
    torch.testing.assert_close(parts[0][0] + parts[1][0], dq)
    torch.testing.assert_close(torch.cat([p[1] for p in parts], dim=1), dk)
    torch.testing.assert_close(torch.cat([p[2] for p in parts], dim=1), dv)
    own = [flashattn.attention_reference_grads(q, kc, vc, dout, scale)
           for kc, vc in zip(k.chunk(2, dim=1), v.chunk(2, dim=1))]
    assert not torch.allclose(own[0][0] + own[1][0], dq)


def test_the_merge_ignores_a_chunk_whose_lse_is_minus_inf() -> None:
    """torch's ring merge (_SDPAMerger: out - sigmoid(lse_c - lse) (out - out_c), lse - logsigmoid(lse -
    lse_c)) leaves a row unchanged when a chunk's lse is -inf, flashattn's value for a row that sees
    no key (its out 0), so such a chunk counts as no keys, as it should."""
    import importlib

    cp = importlib.import_module(CP_MODULE)
    gen = torch.Generator().manual_seed(0)
    out, lse = torch.randn(1, 2, 4, 8, generator=gen), torch.randn(1, 2, 4, generator=gen)
    empty_lse = lse.clone()
    empty_lse[:, :, 1:3] = float("-inf")  # rows 1 and 2 see no key of this chunk
    chunk_out = torch.randn(1, 2, 4, 8, generator=gen).masked_fill(torch.isinf(empty_lse)[..., None], 0.0)
    merger = cp._SDPAMerger(True, seq_dim=2)
    merger.step(out, lse, False)
    merger.step(chunk_out, empty_lse, False)
    merged_out, merged_lse = merger.results()
    torch.testing.assert_close(merged_out[:, :, 1:3], out[:, :, 1:3], atol=0, rtol=0)
    torch.testing.assert_close(merged_lse[:, :, 1:3], lse[:, :, 1:3], atol=0, rtol=0)
    # the other rows merge as two chunks do: lse = logaddexp, out weighted by exp(lse_i - lse)
    both = torch.logaddexp(lse, empty_lse)
    torch.testing.assert_close(merged_lse[:, :, [0, 3]], both[:, :, [0, 3]])
    weighted = out * torch.exp(lse - both)[..., None] + chunk_out * torch.exp(empty_lse - both)[..., None]
    torch.testing.assert_close(merged_out[:, :, [0, 3]], weighted[:, :, [0, 3]])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="one rank of the context-parallel CPU check")
    parser.add_argument("--worker", type=int, required=True, metavar="RANK")
    parser.add_argument("store")
    parser.add_argument("result")
    ns = parser.parse_args()
    _worker(ns.worker, ns.store, ns.result)
    # Everything is written and the group destroyed; skip the interpreter's teardown, where torch
    # 2.11's gloo threads can still drop their last tensors and abort the process ("terminate called
    # without an active exception", about one run in eight in the CUDA image).
    sys.stderr.flush()
    os._exit(0)
