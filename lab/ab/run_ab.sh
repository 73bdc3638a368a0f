#!/usr/bin/env bash
# A/B of a kernel change on one GPU machine: two builds, this tree and a copy of it with
# lab/ab/$PATCH applied (REVERSE=0: B is the patched copy) or reversed (REVERSE=1, the default:
# A is the copy, the tree before the change), then lab/bench_method_check.py alternated A B A B
# on the given shapes (single calls, ten back to back, do_bench; ours and cuDNN's), or AB_CMD (a
# command line run in each side's tree, e.g. AB_CMD="python3 lab/bwd_check.py --time-only --time
# --lean --dims 128,256": deterministic mode's cost) in its place.
#   PATCH=lse_log2_early_loads.diff REVERSE=0 bash lab/ab/run_ab.sh D:S:causal ...
# With AB_CMD lab/fwd_time.py or lab/fp8_time.py, python3 lab/ab_summary.py LOG reads the log's rounds
# back as B / A per cell and its geomean.
# lse_log2_early_loads.diff: the backward's lse stored in log2 units and the row statistics read
# before the score GEMMs (measured 2026-11-26: D=128 +1%, D=64 -2%; not adopted).
# dq_store_after_next_s.diff: D <= 128 stores step t's dQ after step t+1's S^T GEMM is issued
# (measured 2026-11-26: 0-1% slower; not adopted). Both apply to commit 7a2a2e5's csrc.
# portable_bwd_swizzle_qdo_d128.diff: the portable backward's D=128 large tile with Q and dO rows dense and
# XOR-swizzled (Traits::kSwizzleQdO, as the D=64 large tile has them): REVERSE=0 AB_CMD="python3
# lab/bwd_check.py --time-only --time --portable --dtype bf16 --dims 64,128" (bash lab/gpu_run.sh
# portableswizzle; measured 2026-11-29 on an H200 together with D=64: D=64 +4.4-7.7%, landed; D=128
# +1.3-3.7% but ptxas spills 8-16 bytes on every target; not adopted).
# portable_bwd_d128_a4x2.diff: the portable backward's D=128 large tile with phase A as 4 x 2 warps (keys x
# queries), its k-steps unrolled two at a time (0 spills on sm_80/89/90a; fully unrolled it spilled 44 B):
# REVERSE=0 on commit 62ab7b0 (bash lab/gpu_run.sh portabled128a4x2; measured 2026-11-30 on an H200: D=128
# +2.3-3.6% from S=2k, landed in ce2272d).
# portable_bwd_dq_before_dk.diff (dV, then dQ and its reductions, then dK; bash lab/gpu_run.sh portabledqorder),
# portable_bwd_dq_first_d128.diff (D=128: phase C before phase B) and portable_bwd_l2_128.diff (the portable
# backward's copies with the 128-byte L2 hint): REVERSE=0 with the AB_CMD above, on commit e0906e1; measured
# 2026-11-30 on an H200: 6-8% slower, 2-5% slower, +-1%; none adopted.
# fwd_packed_mean_keys.diff: the packed Hopper forward's config by the sequences' mean key count (total_k / B)
# instead of max_seqlen_k: REVERSE=0 AB_CMD="python3 lab/varlen_time.py" (bash lab/gpu_run.sh fwdpackedkeys;
# measured 2026-12-02 on an H200: no change, not adopted).
# portable_bwd_dq_defer.diff: the last dQ reductions of an unmasked step issued after the next step's
# barrier (REVERSE=0 on commit e0906e1; measured 2026-11-30 on an H200: D=128 +3-6%, D=64 +1-2%; landed in
# 0487442 with sm_89 left out). portable_bwd_dq_defer_more.diff: more of them (D=64 6, D=128 8), the Q/dO
# loader's offsets derived again each step (REVERSE=0; bash lab/gpu_run.sh portabledefermore; measured
# 2026-11-30 on an H200: D=64 1-4% slower, D=128 1-5%; not adopted).
# bwd_softcap_ex2_fma.diff: the Hopper backward's one-pass D=64 softcap with one slice of exponentials in
# four on the FMA pipe: REVERSE=0 AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only" (bash lab/gpu_run.sh
# softcapex2fma; measured 2026-11-30 on an H200: D=64 softcap 3-4% slower; not adopted).
# portable_bwd_plan_q_do.diff: the portable backward's D=64 swizzled tile plans the next step's Q/dO copy
# (addresses, the division by the query-block count) before phase B instead of after the barrier that ends
# it; every tile's lse/dpsum rows planned with the copy: REVERSE=0 on commit 19632f5 with AB_CMD="python3
# lab/bwd_check.py --time-only --time --portable --dtype bf16 --dims 64,128,256" (bash lab/gpu_run.sh
# portableplan; measured 2026-11-30 on an H200: D=64 +1.0-1.7% from S=2k, D=256 +0.4-1.7%; landed, with
# the early plan on the compact tiles too). portable_bwd_plan_ahead_d128.diff: the D=128 two-stage tile plans
# the copy its next step starts with before phase C of this one (REVERSE=0 with the same AB_CMD at
# --dims 64,128; bash lab/gpu_run.sh portableplanahead; measured 2026-11-30 on an H200 at --dims 128: 0.6-1.8%
# slower from S=1k; not adopted).
# portable_bwd_dq_defer_base_early.diff: the deferred reductions' base set before phase C's reductions, not
# after them (REVERSE=0 with AB_CMD="python3 lab/bwd_check.py --time-only --time --portable --dtype bf16
# --dims 64,128"; bash lab/gpu_run.sh portabledeferbase; measured 2026-11-30 on an H200: 0.3-1.5% slower; not
# adopted). portable_bwd_dq_halves_d128.diff (D=128's dQ GEMM in two column halves, the first half's reductions
# before the second's MMAs; --dims 128; bash lab/gpu_run.sh portabledqhalves) and portable_bwd_dq_bulk_d128.diff
# (D=128's dQ tile staged in shared memory and added by bulk reduce-adds, lane 0 of each warp issuing; its first
# form portable_bwd_dq_bulk_d128_row_lanes.diff, a row a thread; bash lab/gpu_run.sh portabledqbulk): measured
# 2026-11-30 on an H200: 2-4% and 4-6% slower; not adopted.
# bwd_dq_writer_lanes.diff: the Hopper backward's D=256 dQ writer with a lane a stage (REVERSE=0, AB_CMD="python3
# lab/bwd_check.py --time-only --time --lean --dtype bf16 --dims 256"; bash lab/gpu_run.sh detwriterlanes;
# measured 2026-11-30 on an H200: deterministic mode's cost unchanged, the default 0-6% slower at S <= 4k; not
# adopted); bwd_dq_writer_lanes_handback.diff: lanes in deterministic mode only, each stage handed back once
# read (measured on that build alone: the mode's cost unchanged).
# portable_bwd_swizzle_d128_lean.diff: that D=128 tile swizzled without a spill (the epilogue's indices derived
# again; in the tree: REVERSE=1; bash lab/gpu_run.sh portableswz128ab; measured 2026-11-30 on an H200 with the
# re-derivation in the D=64 tile too: D=128 +1-5%, landed; D=64 8% slower from it, hence D=128's alone).
# portable_bwd_b4x2_sm90.diff: the portable backward's D=64 large tile with phase B's warps as 4 x 2 on sm90,
# Q's phase-B address from dO's and the deterministic ticket as an index in the swizzled tile (in the
# tree: REVERSE=1 on commit 85cf3ba times the tree before it; bash lab/gpu_run.sh portableb4x2ab; measured 2026-11-30 on
# an H200 in a form that applied the last two to every tile: D=64 +4-7%, landed; D=128 1-4% slower from
# its changed schedule, hence the swizzled tile alone).
# decode_swizzle_l2_128.diff: kHopperSplit and kHopperStream on dense swizzled K/V rows with a 128-byte
# L2 prefetch hint instead of padded rows with 256 (2026-11-29, from the decode lab's split-l2-128-sw /
# stream-l2-128-sw, +4-11% on an H200; in the tree: REVERSE=1 times the tree before it; bash
# lab/gpu_run.sh decodeswab).
# tma_l2_128.diff: the Hopper paths' TMA maps (forward, backward, FP8) with 128-byte L2 promotion
# instead of 256: REVERSE=0 AB_CMD="python3 lab/fp8_time.py" (bash lab/gpu_run.sh tmal2ab; measured
# 2026-11-29 on an H200: the FP8 forward within +-0.7%; not adopted).
# fp8_vt_in_kernel.diff: the FP8 D=128 forward transposing V inside the kernel (warps 1-3 of the producer
# warpgroup, ldmatrix.trans + byte permutes + stmatrix from a row-major staging ring; three stages; the
# binding's transpose kernel and V^T scratch gone at D <= 128), with its CPU test of the lane map in
# tests/kernels/test_fp8_cpu.py: REVERSE=0 AB_CMD="python3 lab/fp8_time.py" (bash lab/gpu_run.sh
# fp8vtkab; measured 2026-11-30 on an H200: D=128 10-14% slower, D=256 unchanged; not adopted).
# fp8_vt_in_kernel_4_in_flight.diff, on top of it: four transpose steps in flight a warp at 40 producer
# registers and 232 per consumer (measured the same day: 17-21% slower than the tree).
# fp8_vt_in_kernel_lean.diff: the same transpose (on the tree, not on top) with its addresses in the
# lean form (a lane constant, one operation a step: ~8 instructions a step instead of ~30), which
# the CPU test checks against the first form's offsets: REVERSE=0 AB_CMD="python3 lab/fp8_time.py"
# (bash lab/gpu_run.sh fp8vtkab; measured 2026-11-30 on an H200: D=128 -0.4..-10.8% against the
# tree, predicted -6..-3%; not adopted). It applies to commit 24e6e7b's csrc.
# fwd_d128_noncausal_n176.diff: non-causal D=128 calls from 8192 keys on a 128 x 176 tile (the O tile
# streamed through one plane buffer; Sm90NonCausalConfig<128>, two new static instantiations; the
# configs without a mask lose their never-launched dynamic kernels): REVERSE=0 AB_CMD="python3
# lab/fwd_time.py 128:4096:0 128:8192:0 128:16384:0" (bash lab/gpu_run.sh fwdnc176ab; from the lab's
# d128-n176-otma, +2.4-3.5% at S=16k on an H100 2026-11-26; measured 2026-11-30 on an H200: 8k -0.3%,
# 16k +0.5-1.1%, predicted +2-3%; not adopted).
# portable_bwd_dq_scalar.diff / portable_bwd_dq_vec4.diff: the portable backward's dQ reductions as
# scalar or float4 (kDqVec4) instead of float2 ones: REVERSE=0 AB_CMD="python3 lab/bwd_check.py
# --time-only --time --portable --dtype bf16 --dims 64,128" (measured 2026-11-29 on an H200: 15%
# and 3-4% slower; not adopted).
# dq_release_early.diff: deterministic mode hands the dQ tile (or stage) back once the bulk additions
# have read it, before waiting for them to complete (measured 2026-11-26 with the count-down order
# and 2026-11-27 with the rotated walks: no gain either time; docs/perf-notes.md).
# bwd_mask_all.diff: every step of the Hopper backward through the masked step's code (the same
# results without a mask), to price a masked step: REVERSE=0 on unmasked shapes, e.g. 128:16384:0
# 128:4096:0 256:4096:0 (2026-11-27's csrc; measured 2026-11-27: the main kernel +3% at D=128/256,
# +7% at D=64; docs/perf-notes.md).
# portable_bwd_lean_dq.diff: the portable backward's dQ reductions in an unmasked step at the full
# head dim from one base with compile-time offsets (no predicates, no divergent branches), lse and
# dpsum read as float2: REVERSE=0 AB_CMD="python3 lab/bwd_check.py --time-only --time --portable
# --dtype bf16 --dims 64,128" (measured 2026-11-27: D=128 1.4-2.3% faster, D=64 unchanged; landed,
# so REVERSE=1 now undoes it; bash lab/gpu_run.sh portableab ran it).
# fwd_tile_ahead.diff: the Hopper forward's dynamic schedule claims a CTA's next tile as the loads of
# the current one begin (FlashAttention-3's one tile ahead) and publishes it after the tile's first
# loads; lab variants d128-tile-behind / d256-tile-behind keep the old claim. Apply it (patch -p1)
# and run bash lab/sm90_lab.sh variants d128-tile-behind d256-tile-behind (measured 2026-11-27:
# causal 1.5-2.7% slower at D=128, 5-16% at D=256; not adopted; docs/perf-notes.md).
# fwd_wait_sleep.diff: the Hopper forward's mbarrier waits with a suspend-time hint (a sleeping retry
# instead of a spinning one) behind Sm90FwdTraits::kWaitSleep, lab variants d128-wait-sleep /
# d256-wait-sleep: apply it and run bash lab/sm90_lab.sh variants d128-wait-sleep d256-wait-sleep
# (measured 2026-11-27: neutral, 1.004 / 1.006; not adopted).
# fwd_rescale_late.diff: the Hopper forward rescales O for a new row maximum after the step's P V
# completes (FlashAttention-3's order) instead of inside the ping-pong turn before the next P V is
# issued, behind Sm90FwdTraits::kRescaleLate, lab variants d64/d128/d256-rescale-late (0 spills):
# apply it and run bash lab/sm90_lab.sh variants d64-rescale-late d128-rescale-late d256-rescale-late
# (measured 2026-11-27: D=128 +1-1.8% from 2k keys, -1.5-1.9% causal at 512-1k; D=64 -2-15%;
# D=256 mixed; not adopted as such: Sm90FwdTraits::kStepOrder's lab variants take it further).
# fwd_lean_step.diff: the Hopper forward's key-block step without the score-mode decisions re-derived
# from the parameter bank (keep_in_register, since then common/ptx.cuh's opaque) and with each
# stage's wgmma descriptors computed once per GEMM (measured 2026-11-27 with REVERSE=1
# AB_CMD="python3 lab/fwd_time.py" on commit 37628d7, where REVERSE=1 undoes it: D=128 +2-7%, D=256
# +0-2%, D=64 within noise; landed; later commits changed the same lines, so it reverses on 37628d7).
# bwd_fastdiv.diff: the Hopper backward's walk (block.h BwdBlock::m_block, head_q) divides by its query
# block count with a multiply and a shift (FastDiv, exact for every int >= 0, its CPU test in the
# diff) instead of the compiler's integer division at every step: REVERSE=0 AB_CMD="python3
# lab/bwd_check.py --time-only --time --lean --dims 64,128,256" (measured 2026-11-27: geomean 0.998,
# D=256 non-causal 2-3% slower from 2k keys; not adopted; docs/perf-notes.md).
# decode_score_factors.diff: the decode kernel's score factors (scale, or the softcap's two) held in
# registers across its key blocks (opaque) instead of reloaded from the parameter bank for
# every score (48 constant loads a 64-key block -> 16, all predicated off without a softcap):
# AB_CMD="python3 lab/decode_layers_time.py" (measured 2026-11-27 with REVERSE=0: +1.2% geomean, the
# small rows +1.3-3.2%; landed, so REVERSE=1 now undoes it).
# fp8_block192.diff: the FP8 forward at D=128 on 128 x 192 tiles, V^T in 64-key planes (64-byte
# swizzle): apply it (patch -p1) and run python3 lab/fp8_time.py (measured 2026-11-27: non-causal
# +1%, causal -3% against FlashAttention-3's ratio before; landed 2026-11-30 with the softmax
# reductions in 4 chains, so it no longer applies; docs/perf-notes.md).
# fp8_d128_variants.diff: four lab variants of the D=128 FP8 config in one build (4 chains; step
# order 2; 192-key blocks with 4 chains; the same with order 2), FLASHATTN_LAB_FP8 picking one:
# REVERSE=0 AB_CMD="bash lab/fp8_lab_variants.sh" on commit 24e6e7b's csrc (bash lab/gpu_run.sh
# fp8variants; measured 2026-11-30 on an H200: 192 keys with 4 chains +1.5-7.1%, landed).
# fp8_d128_variants_224.diff: three more D=128 FP8 lab variants in one build, as above: 224-key blocks
# (FlashAttention-3's) with 4 chains, 192 with 8, 160 with 4; 224 and 160 take V^T in 32-key planes
# (the 32-byte swizzle, make_smem_desc_sw32): REVERSE=0 AB_CMD="bash lab/fp8_lab_variants.sh" (bash
# lab/gpu_run.sh fp8variants; measured 2026-11-30 on an H200 in one build without A: 224/4 -6..-11%,
# 192/8 within 0.4%, 160/4 -4..-6% against the landed 192/4; not adopted).
# fp8_d256_chains4.diff: the FP8 D=256 config with the softmax reductions in 4 chains: REVERSE=1
# AB_CMD="python3 lab/fp8_time.py" (measured 2026-11-30 on an H200 with REVERSE=0: +0.9-2.9%
# without a mask, causal unchanged; landed, so REVERSE=1 now undoes it).
# softcap_keep_grad.diff: the softcap backward keeps 1 - t^2 per score (two float16 a register)
# instead of recovering it from P with lg2: REVERSE=1 AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only".
# det_poll_sleep.diff: deterministic mode's dQ writer sleeps 64 ns between polls of its ticket instead
# of spinning: REVERSE=0 AB_CMD="python3 lab/bwd_check.py --time-only --time --lean --dims 256"
# (measured 2026-11-28: neutral; not adopted).
# det_dq_planes.diff: deterministic mode under a mask and in packed batches with two dq_accum planes
# and ticket arrays (key block n adds into plane n % 2, the conversion sums the planes; its CPU test
# of the tickets in the diff; FLASHATTN_BWD_DQ_PLANES=1 keeps one plane in the patched build, so
# one build times both): REVERSE=0 with the AB_CMD above (measured 2026-11-28 in one build: D=256
# causal det cost 1.12-1.42 -> 1.39-2.06, the main kernel DRAM-bound: the second plane doubles the
# accumulating dQ that L2 holds; not adopted; docs/perf-notes.md).
# det_dq_pieces.diff: deterministic mode's D=256 dQ tile added as four 16 KB pieces with a ticket each
# (kBwdSm90DetTicketPieces arrays), so the next key block's piece j waits only for this one's piece j:
# REVERSE=0 with AB_CMD="python3 lab/bwd_check.py --time-only --time --lean --dims 128,256"
# (measured 2026-11-28 on an H200: D=256 det cost 1.17-1.33 -> 1.42-1.70, causal and not; not adopted).
# bwd_softcap_d64_q128.diff: the D=64 softcap backward on 128-query steps in two passes (P packed at
# once, P (1 - t^2) kept as float16; ptxas spills 112 B), against commit 0207bdf: REVERSE=0
# AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only" (measured 2026-11-28: cost 1.36-1.42 ->
# 1.22-1.24; superseded by the one-pass form).
# bwd_softcap_onepass.diff: the D=64 softcap backward on 128-query steps in one pass, the mask as
# selects afterwards (0 spills): REVERSE=1 with the AB_CMD above (measured 2026-11-28: cost 1.37-1.44
# -> 1.19-1.23; landed, so REVERSE=1 undoes it).
# bwd_softcap_wide.diff: dense D=128 softcap calls on the wide config (80-query steps, the one-pass
# form): REVERSE=1 with the AB_CMD above (bash lab/gpu_run.sh softcapwide).
# bwd_dq_cluster_pair_d256.diff: the D=256 Hopper backward in two-CTA clusters (key blocks 2j, 2j + 1)
# summing their dQ tiles over distributed shared memory, each CTA bulk-adding half the tile
# (dense calls without a mask, even key blocks, both modes; FLASHATTN_BWD_PAIR=0 turns it off in
# the same build): bash lab/gpu_run.sh dqpair (AB_ROUNDS=0 here builds the two sides; measured
# 2026-11-30 on an H200: correct, 1.005x from 2k keys, 0.68-0.73x at S <= 1k; not adopted).
# lab_dq_half_traffic_d256.diff / lab_dq_half_traffic_d64_d128.diff: measurements only (wrong results):
# the Hopper backward's dQ writers add half of each step's tile, to price the L2's reduction traffic:
# REVERSE=0 AB_CMD="python3 lab/bwd_check.py --time-only --time --lean --dtype bf16 --dims 256" (or
# 64,128) (bash lab/gpu_run.sh dqtraffic; measured 2026-11-30 on an H200 for D=256: +8.4% geomean,
# +9-11% from 2k keys, deterministic mode's cost 1.30 -> 1.10; D=64/128 +2.2% / +2.5%).
# lab_dq_pair_cost_d256.diff: also a measurement (wrong results): rank 0's part of
# bwd_dq_cluster_pair_d256.diff in one CTA (each warpgroup stores its dO-side piece, reads the other
# warpgroup's through the shared::cluster window and adds it into its Q-side piece as it stores it;
# the writer adds the Q-side pieces alone): the pair's work less the handshake and the remote latency,
# the same AB_CMD at D=256
# (DQ_TRAFFIC=pair_cost_d256 bash lab/gpu_run.sh dqtraffic; measured 2026-11-30 on an H200: +5.4%).
# AB_COPY_ONLY=1 (with AB_ROUNDS=0): the patched copy alone is built, for a caller that times only it.
# AB_REUSE=1: the copy in AB_COPY as an earlier run on the same machine patched and built it (the same
# PATCH and REVERSE, recorded in its .ab_patch), for a second A/B on other shapes without a second build.
# fwd_step_order2.diff / fwd_d128_order2.diff / fwd_order2_two_consumers.diff: the 16-bit forward in step
# order 2 (traits.h kStepOrder; a ping-pong turn issues the GEMMs alone) at every head dim / at D=128 alone /
# in every two-consumer config: REVERSE=0 (bash lab/gpu_run.sh fwdorder2, FWD_ORDER_DIFF; measured 2026-12-01
# on an H200: 1.005 either way, short cells up, D=128 from 4k keys down; landed for D=64's two-consumer
# config alone, so the three apply to commit ad6e730's csrc, not the tree's).
# fwd_wg0_waits.diff: only consumer warpgroup 0 waits for K and V: REVERSE=0 (bash lab/gpu_run.sh fwdwg0waits;
# measured 2026-12-01 on an H200: 0.997, FP8 0.983; not adopted).
# fwd_order2_p_first.diff (with fwd_p_first_swap_only.diff, fwd_order2_all_p_first.diff and the FP8 form
# fwd_fp8_order2_p_first.diff): step order 2 with P converted before O's rescale, so that the conversions
# share the exponentials' basic block: REVERSE=0 (bash lab/gpu_run.sh fwdpfirst, FWD_PFIRST_DIFF; the FP8
# one through fp8ab; prepared 2026-12-01, not yet run).
# fwd_dynamic_lean.diff (the csrc of commits 8b08062..4e3735c, RegisterSplit's unused head-dim parameter
# dropped with it, and 219c81c's removal of the FP8 traits' kDynamicSchedule flag that it made dead): the Hopper forward's dynamic schedule without a key split (16-byte tile slots),
# the producer's rings as counts (PipeCount), the LSE stored before O: the D=64 dynamic kernels on 24 /
# 240 / 240 registers (were 32 / 232 / 232) and an FP8 D=256 dynamic kernel (causal calls ran the static
# snake): bash lab/gpu_run.sh fwddynlean, then fwddynleanfp8 on the same machine (measured 2026-12-01 on an
# H200 with REVERSE=0: the 16-bit forward 1.003, FP8 D=256 causal +4-5%; landed, so REVERSE=1 now undoes it).
# AB_SMOKE: a command (e.g. a few GPU tests) run in the patched copy before any round, 90 s at most.
# host_fwd_bhsd_no_views.diff: flashattn::fwd_bhsd reads q, k, v [B, H, S, D] through their strides (set_dense's
# s_dim/h_dim) instead of taking a transposed view of each, three dispatcher ops a call fewer,
# AB_CMD="python3 lab/host_profile_gpu.py --no-profiler" (bash lab/gpu_run.sh hostbhsd; measured 2026-12-02 on an
# H200 with REVERSE=0: the seed shapes' single calls 1.24 -> 1.32-1.33x SDPA's; landed; REVERSE=1 undoes it on a
# tree up to commit 2041474, host_fwd_outputs.diff having rewritten its lines since).
# host_fwd_outputs.diff: the dense forward's outputs from at::detail::empty_cuda, lse shaped in place,
# fwd_bhsd's out allocated in its final layout, the same AB_CMD (bash lab/gpu_run.sh hostoutputs; measured
# 2026-12-02 on an H200 with REVERSE=0: 1.5-2.5 us less a call; landed, so REVERSE=1 now undoes it).
# fwd_d64_o_tma.diff: D=64's default config with O through shared memory and TMA stores (bash lab/gpu_run.sh
# fwdd64otma; measured 2026-12-02 on an H200 with REVERSE=0: causal S=512 +3.2-3.6% against cuDNN, 1k
# +1.1-1.3%, 2k -0.3..-2.4%; landed, so REVERSE=1 now undoes it). fwd_d64_noncausal_o_tma.diff: the same on
# D=64's three-warpgroup non-causal config (bash lab/gpu_run.sh fwdd64widetma; measured 2026-12-02 on an H200
# with REVERSE=0: S=512 +1.3-3.1%, 1k +1.8-3.4%, 4k-16k within +-3%; landed, so REVERSE=1 now undoes it).
# fwd_d64_long_keys_o_tma.diff: the same on D=64's long-keys causal config: REVERSE=0 (measured 2026-12-02:
# 4k -1.2..-3.2%, 16k -4.8..-6.1%; not adopted).
# fwd_d64_long_keys_2k.diff: D=64 causal calls of 2048-4095 keys on the long-keys config where their grid fills
# more than half the SMs, a lab form: REVERSE=0 (measured 2026-12-02 on an H200: the standard grid's 2k +2.9-4.8%,
# 3k +10.2-10.9%, B=2 H=16 2k -1.6..-2.8%). fwd_d64_long_keys_full_grid.diff: the same from 8 waves of those
# tiles, as landed (the rule, the balance model, a test; bash lab/gpu_run.sh fwdd64longkeys2k, measured
# 2026-12-02 on an H200 with REVERSE=0: 2k +5.5-6.0%, 3k +10.8-12.9%; landed, so REVERSE=1 undoes it on trees
# up to commit 6e2a873, after which the 1536-key bound rewrote its lines).
# fwd_partial_tile_first.diff: the Hopper forward's query tiles shifted (Sm90Params::q_row_shift) so that under a
# causal mask or a local window the partial tile is the first, not the last, on the long-keys config (bash
# lab/gpu_run.sh fwdpartialfirst, measured 2026-12-03 on an H200 with REVERSE=0: D=64 causal 2k +4.7-6.0%, 4k
# +5.4-9.4%, 8k +1.4-2.0%; landed, so REVERSE=1 now undoes it).
# fwd_d64_long_keys_512.diff: the long-keys rule's key bound at 512 instead of 2048 (full grids of 8 waves), a lab
# form: REVERSE=0 (bash lab/gpu_run.sh fwdd64longkeys512; measured 2026-12-03 on an H200: 1.5k +3.8-6.0%, 1k
# -0.6..-2.4%, 768 -3..-5%, 512 -9..-11%). fwd_d64_long_keys_1536.diff: the bound at 1536 (bash
# lab/gpu_run.sh fwdd64longkeys1536, measured 2026-12-03 on an H200 with REVERSE=0: 1.5k +4.7%, 1.75k +5.6%;
# landed, so REVERSE=1 undoes it on trees up to commit e71d8c0, after which the 1.5-wave rule rewrote its lines).
# fwd_d64_long_keys_few_waves_default.diff: D=64 causal calls from 4096 keys on the default config where the
# long-keys tiles fill more than half the SMs but under 8 waves, a lab form: REVERSE=0 (bash lab/gpu_run.sh
# fwdd64fewwaves; measured 2026-12-03 on an H200: -5..-12%, not adopted).
# fwd_d64_long_keys_one_wave.diff: the long-keys rule from one wave of its tiles instead of 8, a lab form:
# REVERSE=0 (bash lab/gpu_run.sh fwdd64longkeysonewave, measured 2026-12-03 on an H200 on commit 05e1645: 1.9-5.3
# waves +2.2-7.2%, 1.3 waves -6.1%). fwd_d64_long_keys_1_5_waves.diff: the rule from 1.5 waves, as landed
# (kSm90LongKeysGridHalfWaves, the model, the tests): REVERSE=1 undoes it.
# lab_softcap_no_tanh.diff: a measurement only (wrong results): the one-pass softcap kernels without
# their tanh, to price the second SFU operation a score: REVERSE=0 with the AB_CMD above (measured
# 2026-11-28: D=64 cost 1.18-1.22 -> 1.06-1.11).
# bwd_softcap_exp2_fma.diff: the D=64 one-pass softcap kernels take every second score's exponential
# on the FMA pipe (exp2_fma: a degree-4 polynomial, 3.1e-6): REVERSE=0 with the AB_CMD above
# (measured 2026-11-28: 1-6% slower; not adopted).
# bwd_softcap_tanh_first.diff: the one-pass softcap kernels (D=64, the D=128 wide config) take the
# tanh of every score in place while the dP GEMM runs, then P and dS in one pass: REVERSE=1 with the
# AB_CMD above (bash lab/gpu_run.sh softcaptanh).
# fwd_combine_plain_launch.diff: the Hopper forward's split calls launch the combine kernel plainly
# instead of as a programmatic dependent launch: REVERSE=0 AB_CMD="python3 lab/split_call_time.py
# --calls 1000" (bash lab/gpu_run.sh combineab; measured 2026-11-29 on an H200: no difference beyond
# the host's noise; not adopted).
# fwd_cluster_merge_batched.diff: the split merged in a cluster loads 4 (row, 4 columns) items a
# thread (2 with three consumer warpgroups) before any sum, one round trip a batch: apply it and
# run python3 lab/fwd_split_time.py --counts, comparing each count's cluster time with its combine
# time (measured 2026-11-29 on an H200: the cluster's extra 1.2-1.5 us at 2 splits unchanged; not
# adopted).
# fwd_small_grid_default_config.diff: small non-causal D=64 grids (192-row tiles filling at most half
# the SMs) on the default config's 128-row tiles of two consumer warpgroups instead of the
# non-causal config's three: AB_CMD="python3 lab/fwd_split_time.py" (measured 2026-11-29 on an H200
# with a first form of the diff: kernel geomean 1.33x -> 1.37x SDPA's, S=256 0.89x -> 1.02x; landed,
# REVERSE=1 undoes it on commit c270b0a's csrc; docs/perf-notes.md "Small grids on the default config").
# fwd_split_fallback_one_block.diff: the split plan takes fewer splits to fit in clusters only where
# each then holds at most one key block more (was: down to half the splits):
# AB_CMD="python3 lab/fwd_split_time.py" (measured 2026-11-29, H200: S=4096 non-causal 20.0 -> 18.4 us,
# S=8192 causal 55.1 -> 43.4, the rest unchanged; landed: REVERSE=1 undoes it on commit 4224c7b's
# csrc; the rule has since moved to csrc/flash_fwd_sm90/split_rule.h).
# fwd_tiny_portable.diff: backend 'auto' runs a tiny call (Sq, Sk <= 64, D <= 64, B*Hq filling at most
# half the SMs) on the portable forward instead of the Hopper one, with its test:
# AB_CMD="python3 lab/fwd_split_time.py" (measured 2026-11-29 with REVERSE=0: S=32/64 kernels
# 4.8-5.0 -> 3.9-4.1 us; landed, so REVERSE=1 now undoes it; docs/perf-notes.md).
# combine_wide_rows.diff: the split combine gives a row with more than 32 splits a CTA of 16 warps
# (each warp's 8 partials loaded at once) instead of 4 warps walking 32 each, and its LSE arithmetic
# moves to common/lse_merge.cuh, shared with the Hopper forward's cluster merge: REVERSE=1
# AB_CMD="python3 lab/decode_layers_time.py --heads 8:1,32:8 1:16384 1:32768 1:131072 2:32768 4:65536"
# (MQA at B=1-4 splits one tile 32-128 ways; measured 2026-11-29 on an H200: MQA B=1 Sk=16k 11.1 ->
# 8.4 us, the ten rows 0.934 -> 1.002x SDPA's; landed; docs/perf-notes.md).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-build}
mkdir -p "$out"
root=$PWD
copy=${AB_COPY:-/tmp/flashattn-ab-copy}  # the other side's tree (AB_COPY: where; a caller may test in it afterwards)
# AB_REUSE=1: a copy that an earlier run on this machine built with the same PATCH and REVERSE is used
# as it is (no copy, patch or build of it; the tree's own build is brought up to date as usual).
reuse=0
[ "${AB_REUSE:-0}" = 1 ] && [ -f "$copy/.ab_patch" ] && [ "$(cat "$copy/.ab_patch")" = "${PATCH:?} ${REVERSE:-1}" ] && reuse=1
if [ $reuse = 0 ]; then
  rm -rf "$copy" && mkdir -p "$copy"
  tar --exclude=./build --exclude='*.so' --exclude=./.git -cf - . | tar -C "$copy" -xf -
fi
# PATCH may name several diffs (space-separated): applied in order, or reversed in the reverse order.
read -r -a patches <<< "${PATCH:?}"
: > "$out/ab_patch.log"
if [ $reuse = 1 ]; then
  echo "reusing the patched copy $copy" >> "$out/ab_patch.log"
  if [ "${REVERSE:-1}" = 1 ]; then side_a=$copy side_b=$root; else side_a=$root side_b=$copy; fi
elif [ "${REVERSE:-1}" = 1 ]; then
  for ((i = ${#patches[@]} - 1; i >= 0; i--)); do
    (cd "$copy" && patch -R -p1 < "$root/lab/ab/${patches[i]}") >> "$out/ab_patch.log" 2>&1 || { echo "patch failed"; exit 2; }
  done
  side_a=$copy side_b=$root
else
  for p in "${patches[@]}"; do
    (cd "$copy" && patch -p1 < "$root/lab/ab/$p") >> "$out/ab_patch.log" 2>&1 || { echo "patch failed"; exit 2; }
  done
  side_a=$root side_b=$copy
fi
[ $reuse = 1 ] || echo "${PATCH} ${REVERSE:-1}" > "$copy/.ab_patch"
for side in a b; do
  dir=$side_b; [ $side = a ] && dir=$side_a
  [ "${AB_COPY_ONLY:-0}" = 1 ] && [ "$dir" != "$copy" ] && continue
  [ $reuse = 1 ] && [ "$dir" = "$copy" ] && continue
  (cd "$dir" && MAX_JOBS=8 bash lab/gpu_build.sh > "$out/ab_build_$side.log" 2>&1) &
done
wait
tail -n 1 "$out"/ab_build_?.log
# AB_SMOKE: a command run first in the patched copy (90 s at most); if it fails (a wrong result, a
# hang) no round is timed and the script fails.
if [ -n "${AB_SMOKE:-}" ]; then
  echo "=== smoke in the patched copy: $AB_SMOKE"
  # shellcheck disable=SC2086  # AB_SMOKE is a command line, split into words on purpose
  (cd "$copy" && PYTHONPATH=$copy timeout 90 $AB_SMOKE 2>&1) || { echo "smoke failed: no rounds timed"; exit 3; }
fi
for round in $(seq 1 "${AB_ROUNDS:-2}"); do  # AB_ROUNDS: 2 unless said (1 for a profiler run)
  for side in A B; do
    dir=$side_b; [ $side = A ] && dir=$side_a
    echo "=== round $round side $side"
    if [ -n "${AB_CMD:-}" ]; then
      # shellcheck disable=SC2086  # AB_CMD is a command line, split into words on purpose
      (cd "$dir" && PYTHONPATH=$dir timeout 300 $AB_CMD 2>&1)
    else
      (cd "$dir" && PYTHONPATH=$dir timeout 200 python3 lab/bench_method_check.py "$@" 2>&1 | grep -E "flashattn|sdpa|shape")
    fi
  done
done
