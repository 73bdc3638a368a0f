#!/usr/bin/env bash
# One batched run on a GPU machine, in stages of under 10 minutes each. Logs go to $OUT
# (or results/gpu-run), one file per step, plus a summary line per step in summary.txt.
#
#   bash lab/gpu_run.sh verify   build, Hopper lab correctness, quick_check numerics on both
#                                     paths, decode check                          (~6-8 min on an H100)
#   bash lab/gpu_run.sh suite    the kernel tests, ci profile, timed; the planted bugs (~95 s each;
#                                     PLANTED_BUGS picks them: all four outlast one 600 s call)
#   bash lab/gpu_run.sh planted  the planted bugs alone, PLANTED_BUGS (default fwd90_packed unaligned; ~2-4 min each)
#   bash lab/gpu_run.sh bench    benchmark suite + report (latency, standard and decode grids)
#   bash lab/gpu_run.sh check    verify + the GPU test suite (no planted bugs) in one call      (~7 min)
#   bash lab/gpu_run.sh hopper   after a Hopper-path change: lab check + schedule A/B, numerics, the
#                                     suite, the standard benchmark grid                  (~6 min)
#   bash lab/gpu_run.sh tune     a Hopper kernel experiment: lab check + all speed tables, the
#                                     suite's hopper part, the standard grid               (~8 min)
#   bash lab/gpu_run.sh decode   decode tile-config variants vs the default (lab/decode_lab.sh, ~2 min)
#   bash lab/gpu_run.sh decodecopy the decode lab's read probes (cp.async, bulk, TMA; L2 hints) and the
#                                     library's configs with other L2 hints and swizzled K/V rows (~6 min)
#   bash lab/gpu_run.sh decodesw  kHopperSplit/kHopperStream on swizzled rows with a 128-byte L2 hint: build, the decode tests,
#                                     memcheck/racecheck/synccheck/initcheck on the decode cases (~7 min)
#   bash lab/gpu_run.sh decodebench build, the suite's decode benchmark grids (eager and CUDA-graph replays) with SDPA
#                                     and FlashAttention-3 alongside, and their report (~7 min)
#   bash lab/gpu_run.sh decodeswab lab/ab/decode_swizzle_l2_128.diff's A/B against the tree before it as a model decodes (~5 min)
#   bash lab/gpu_run.sh explore  verify + the Hopper lab's variant A/B + the decode lab + the
#                                     machine ceilings: the experiments, proved correct first (~7 min)
#   bash lab/gpu_run.sh diagnose Nsight Compute on our forward kernel vs cuDNN's (lab/ncu_fwd.sh),
#                                     then the Hopper lab's variant A/B                    (~4 min)
#   bash lab/gpu_run.sh final    check, the matmul/copy ceilings, the whole benchmark suite and report
#                                     in one call                                         (~6 min)
#   bash lab/gpu_run.sh bwdlab   build, backward numerics and tests, the backward tile-config lab
#                                     (lab/bwd_lab.sh), ncu on the backward kernels, timing vs SDPA (~7 min)
#   bash lab/gpu_run.sh bwdwide  build, the backward's wide-config tests, its A/B timing vs the 64-query
#                                     config and cuDNN (lab/bwd_wide_time.py), memcheck  (~5 min)
#   bash lab/gpu_run.sh bwdwideshort measured, landed 2026-12-03: the backward's wide config against the 64-query one on calls of 512-2048 keys, causal
#                                     and not, with cuDNN; the kernel breakdown of D=128 S=512/1k (~4 min)
#   bash lab/gpu_run.sh bwdpersistent measured 2026-12-03, not adopted (non-causal 0.980, causal 0.817): the Hopper backward on a persistent grid (lab/ab/bwd_persistent.diff):
#                                     its tests, its timing against a CTA a block with cuDNN, the backward tests, sanitizers (~8 min)
#   bash lab/gpu_run.sh bwdwideland measured 2026-12-03 (bwd 1.06x, fwd+bwd 1.06x cuDNN, lowest cell 0.97x): after the wide rule's bounds: the backward tests, the training grid bf16 and fp16 vs cuDNN (~6 min)
#   bash lab/gpu_run.sh gqaraised measured 2026-12-07 on an H100 (4k causal GQA cells +2.6..+6.4%, the rest within noise): the default's split under a mask, the wave rule raised by the dispatch model, against the
#                                     wave rule alone; the backward tests; the training grid vs cuDNN, GQARAISED_K its dtypes (~7-9 min)
#   bash lab/gpu_run.sh causalsource measured 2026-12-07 (H200) but for its fabric step: ncu's source counters of the Hopper backward on D=128 S=16k causal and non-causal side by side:
#                                     where a causal step's 12.5% extra goes (~6 min)
#   bash lab/gpu_run.sh bwdprefetch measured 2026-12-07 (H200), not adopted (0.954 causal): the Hopper backward's load warp prefetching later steps' Q/dO, lse, dpsum (and dq_accum) into L2
#                                     (lab/ab/bwd_l2_prefetch.diff): its modes' A/B with cuDNN, in a copy; its tests (~8 min)
#   bash lab/gpu_run.sh bwdprefetchcheck moot, left unrun: after bwdprefetch: the backward, packed and public-gradient tests and the sanitizers
#                                     in its copy with the prefetch on (~7 min)
#   bash lab/gpu_run.sh zigzag   measured 2026-12-07 (H200), not adopted (1.000): the causal backward's walk alternating down/up by group of the grouped order
#                                     (lab/ab/bwd_zigzag_walk.diff) against today's, in a copy; tests, sanitizers (~8 min)
#   bash lab/gpu_run.sh causallevers measured 2026-12-07 (H200), neither adopted: both causal-step levers (bwd_l2_prefetch.diff, bwd_zigzag_walk.diff) in one copy: off,
#                                     prefetch, zigzag and both side by side with cuDNN; the step probe (~8 min)
#   bash lab/gpu_run.sh causalleverscheck moot, left unrun: after causallevers, in its copy with both on: the Hopper backward, packed and
#                                     public-gradient tests, the block CPU tests, the sanitizers (~8 min)
#   bash lab/gpu_run.sh headdims landed 2026-12-07 (H100): the forward's D=96/D=192 configs and the backward's D=192 form
#                                     on the tree: tests, times, sanitizers; HEADDIMS_PART=1 then 2 (~5 + ~2 min)
#   bash lab/gpu_run.sh bwd96    landed 2026-12-07 (H100): head dims 72..96 on Hopper backward configs of their own
#                                     (lab/ab/bwd_d96.diff, applied), on the tree: tests, time against D=128's kernel, sanitizers (~3 min)
#   bash lab/gpu_run.sh fwd192n  prepared, not yet run: the D=192 forward on 96- or 112-key blocks, or with the held row max
#                                     (FWD192N_DIFF: lab/ab/fwd_d192_n96.diff / _n112 / _held / _n96_held): its A/B, the forward checks in the copy (~8 min)
#   bash lab/gpu_run.sh fwd256held prepared, not yet run: the D=256 forward with the held row max at step order 0
#                                     (lab/ab/fwd_d256_held_order0.diff, a lab form): its A/B, the forward checks in the copy (~8 min)
#   bash lab/gpu_run.sh detlpt   prepared, not yet run: deterministic mode's D=256 cost with the causal grid in groups of
#                                     heads, key blocks counting down inside a group (lab/ab/bwd_det_lpt.diff, its switch
#                                     FLASHATTN_BWD_DET_LPT=<MiB> off / 8 / 64 in one build): A B C twice, then the det tests (~5 min)
#   bash lab/gpu_run.sh bwdidle  measured 2026-12-07 (H100), not adopted (causal 1.007, windows +1.4-2.2%): the D=128 Hopper backward's warpgroups skip a masked step none of
#                                     whose queries their 64 keys see (lab/ab/bwd_idle_warpgroup.diff): IDLE_PART=1 its A/B on
#                                     causal cells and narrow windows (~8 min), IDLE_PART=2 tests and sanitizers in its copy (~6 min)
#   bash lab/gpu_run.sh bwdtimeline measured 2026-12-07 (H100): where a Hopper backward CTA's time goes (SM clock stamps, lab/ab/lab_bwd_cta_timeline.diff):
#                                     its fixed part, the SMs' busy share, causal and not at 2 and 16 heads; ncu's L2/DRAM (~6 min)
#   bash lab/gpu_run.sh gqawalk  measured 2026-12-07, not adopted (1.001; 16k 16:4 causal 0.949): a GQA group's heads walked interleaved
#                                     under a mask (lab/ab/bwd_gqa_heads_interleaved.diff) against one head after another, in a copy (~5 min)
#   bash lab/gpu_run.sh gqancu   measured 2026-12-07 (the gap is the causal step, not GQA): ncu on the D=128 GQA causal backward
#                                     (16:4 at 16k and 4k) at splits 2 and 4, cuDNN's and the MHA twin alongside (~4 min)
#   bash lab/gpu_run.sh gqasplit the GQA causal backward's split count (issue 27, 16:4 at 4k 0.93x cuDNN, 2026-12-06): group_split.h's
#                                     dispatch model and a forced 4 against today's wave rule, cuDNN alongside; the group-split tests (~7 min)
#   bash lab/gpu_run.sh bwdgqa   build, the backward tests, the GQA group split's A/B against no split and
#                                     cuDNN, memcheck/racecheck/synccheck on small dense cases (~7 min)
#   bash lab/gpu_run.sh hostsplit build, the forward's split/attention tests, the latency grid, the GQA
#                                     split's wave-target A/B                             (~6 min)
#   bash lab/gpu_run.sh shortcalls build, the forward/window/backward tests, the D=64 causal forward grid vs
#                                     cuDNN and FlashAttention-3, memcheck/racecheck/synccheck on small dense cases (~4 min)
#   bash lab/gpu_run.sh tailsplit build, the backward tests, the split last wave's A/B vs no split and cuDNN (~5 min)
#   bash lab/gpu_run.sh portableab the portable backward: lab/ab/portable_bwd_lean_dq.diff's A/B with FA2 alongside (~8 min)
#   bash lab/gpu_run.sh portablelab the portable backward's D=64 tile lab and ncu against FA2 (~4 min)
#   bash lab/gpu_run.sh dqpair    measured, not adopted: the D=256 Hopper backward in two-CTA clusters summing their
#                                     dQ tiles (lab/ab/bwd_dq_cluster_pair_d256.diff): tests first, then pair off/on (~6 min)
#   bash lab/gpu_run.sh bwdmulticast measured, not adopted: the D=256 Hopper backward's Q/dO loaded once per two-CTA cluster by TMA
#                                     multicast (lab/ab/bwd_qdo_multicast_d256.diff): tests first, then off/on (~6 min)
#   bash lab/gpu_run.sh fwdd128q2 measured, not adopted (1.0005; S=512 non-causal 0.991): D=128's default config with two Q buffers
#                                     (lab/ab/fwd_d128_q_double_buffer.diff): its A/B on D=128 cells, the checks (~6 min)
#   bash lab/gpu_run.sh fwdvwait  measured 2026-12-03, not adopted (0.983): the consumers' wait for V before their ping-pong turn, not inside it
#                                     (lab/ab/fwd_v_wait_before_turn.diff): its A/B over D=64/128/256 cells, the checks (~6 min)
#   bash lab/gpu_run.sh fwdtoken  measured 2026-12-03, not adopted (0.997, D=256 -8%): each consumer K/V wait asked a step ahead by mbarrier.test_wait
#                                     (lab/ab/fwd_wait_token.diff): its A/B over D=64/128/256 cells, the checks (~6 min)
#   bash lab/gpu_run.sh fwdtokensel measured 2026-12-03, not adopted (0.995, FP8 1.000): fwdtoken on the step orders 0 and 1 only (lab/ab/fwd_wait_token_order01.diff):
#                                     its A/B, the checks and packed-batch tests, its FP8 A/B in the same copy (~7 min)
#   bash lab/gpu_run.sh fwdl2     ncu's breakdown of the L2's throughput and its sectors by operation, ours, cuDNN's and
#                                     FlashAttention-3's forward at D=128 S=4k non-causal (~3 min)
#   bash lab/gpu_run.sh fwdhalfkv measured 2026-12-04 (1.0095; D=128 4k +0.9%, 16k 0%; wrong results, timing only): half of each K/V tile's chunks
#                                     loaded, the upper bound of a 2-CTA K/V multicast (lab/ab/lab_fwd_half_kv_loads.diff) (~5 min)
#   bash lab/gpu_run.sh fwdclusterkv measured 2026-12-04, not adopted (clustered cells 0.71-0.72 with a cluster-scope release; 0.98-1.00 CTA-scoped): the static D=128 forward in 2-CTA clusters sharing K/V by TMA
#                                     multicast (lab/ab/fwd_cluster_kv.diff): its A/B on D=128 non-causal cells, the checks (~7 min)
#   bash lab/gpu_run.sh detcost   deterministic mode's cost against the default, D 64/128/256, with cuDNN (~3 min)
#   bash lab/gpu_run.sh fwdheld measured 2026-12-04, not adopted (0.987): the forward's exponentials against the held row max, the max reduced beside them
#   bash lab/gpu_run.sh fwdpvboundary measured 2026-12-07 on an H100, not adopted (0.986; D=64 causal 512 / 1k -4 / -5%): the step-order-2 forward (D=64 two consumers, D=256, FP8 D=256) with its softmax kept above the P V wait by a basic-block boundary
#   bash lab/gpu_run.sh fwdpvboundaryfp8 prepared 2026-12-05, left unrun (moot after fwdpvboundary's 0.986): fwdpvboundary's diff on the packed and FP8 forwards (tests, sanitizers, FP8 A/B), reusing its copy
#   bash lab/gpu_run.sh bwdboundary measured 2026-12-05 on an H100, not adopted (0.991, non-causal 2k+ 0.978): the Hopper backward's dP^T wait kept below the score pass in unmasked dense steps (a basic-block boundary ptxas does not hoist it across)
#   bash lab/gpu_run.sh softcapsplit measured 2026-12-05 on an H100, not adopted (D=64 softcap 0.967): the D=64 softcap backward's dP^T GEMM in two 64-query halves, the first half's pass under the second's GEMM
#   bash lab/gpu_run.sh fwdpackedfirst measured 2026-12-05 on an H100, landed (bench packing D=64 causal 1.15x, short-heavy 1.08x; FWD_PACKED_FIRST_REVERSE=1, the default, undoes it): packed causal D=64 on the long-keys config from 1536 keys, each sequence's partial tile first (~3 min)
#   bash lab/gpu_run.sh fwdpackedfirstcheck fwdpackedfirst's packed-batch tests and sanitizers in its copy (~5 min)
#   bash lab/gpu_run.sh packedprobe measured 2026-12-05: where fwdpackedfirst's packed call and a sequence's call alone differ (lab/packed_alone_probe.py, ~4 min): the config, from the clamped bounds
#   bash lab/gpu_run.sh packedbounds the packed Hopper forward's config from the caller's bounds and window: build, the packed-batch tests and public gradients (~6 min)
#   bash lab/gpu_run.sh fwdheldv5 measured 2026-12-04, landed (1.035, D=128 +3.6..+9.7%; FWD_HELD_REVERSE=1 undoes it): fwdheldv3 without the ~180 instructions ptxas put in its common case
#   bash lab/gpu_run.sh fwdheldv3 measured 2026-12-04 (correct, 0.906): fwdheldv2 with each row's arithmetic its own (the packed bitwise tests)
#   bash lab/gpu_run.sh fwdheldv2 measured 2026-12-04 (1.036, D=128 +6-7%; not landed: its warp-wide decisions break the packed bitwise tests): fwdheld with the check on the exponentials themselves
#   bash lab/gpu_run.sh fwdheldearly measured 2026-12-04 (0.982): fwdheld with K released before the softmax, timing only
#   bash lab/gpu_run.sh fwdnc176v2 measured 2026-12-04, not adopted (0.991; 8k/16k +1%, 1k -4%): D=128 non-causal on 128 x 176 tiles on today's step
#                                     (lab/ab/fwd_d128_noncausal_n176_v2.diff): its A/B on D=128 non-causal cells, the checks (~6 min)
#   bash lab/gpu_run.sh fwdclusterkvcount measured 2026-12-04 (66 clusters; CTA-scoped release 0.98-1.00, not adopted): fwdclusterkv's copy with the cluster count printed and
#                                     forced (lab/fwd_cluster_kv_time.py: unclustered, the query's count, 66/64/48 clusters) (~3 min)
#   bash lab/gpu_run.sh fwdrelease measured 2026-12-03, not adopted (0.990): the Q/K/V stages released with one arrival a consumer warp, not a thread
#                                     (lab/ab/fwd_release_one_lane.diff): its A/B over D=64/128/256 cells, the checks (~6 min)
#   bash lab/gpu_run.sh fwdunmasked measured 2026-12-03, not adopted (0.983): the key-block walk in three loops, the unmasked one with the mask
#                                     compiled out (lab/ab/fwd_unmasked_loop.diff): its A/B over D=64/128/256 cells, the checks (~6 min)
#   bash lab/gpu_run.sh powerprobe measured 2026-12-03 (fp16's lower rate is the power cap): each implementation's forward held 3 s a cell under nvidia-smi's clock, power and
#                                     clock-event samples (lab/power_probe.py): is fp16's lower rate the power limit (~2 min)
#   bash lab/gpu_run.sh fwddynlean measured, landed (16-bit 1.003, FP8 D=256 causal +4-5%): the Hopper forward's dynamic
#                                     schedule leaner (lab/ab/fwd_dynamic_lean.diff, applied in reverse since: no key
#                                     split, the producer's rings as counts, LSE before O; D=64 on 240 registers, an FP8
#                                     D=256 dynamic kernel): its A/B on the 16-bit forward, then the fwdq2 checks (~5 min)
#   bash lab/gpu_run.sh fwddynleanfp8 the same diff's A/B on lab/fp8_time.py, reusing fwddynlean's copy when the
#                                     machine still has it (~2 min then)
#   bash lab/gpu_run.sh fwdpfirst measured, landed in part (fwdpfirstsel): step order 2 with P converted before O's rescale, D=128 on order 2 too
#                                     (lab/ab/fwd_order2_p_first.diff): its A/B over D=64/128/256, the checks (~6 min)
#   bash lab/gpu_run.sh fwdpfirstsel P converted before O's rescale where it gained (lab/ab/fwd_pfirst_select.diff):
#                                     its A/B on the 16-bit forward, the checks, its A/B on lab/fp8_time.py (~9 min)
#   bash lab/gpu_run.sh fwdfinalize measured, not adopted (D=128 -2.5..-4%): the forward's finalize without the IEEE division's branch (both rows' sums first,
#                                     __fdividef, selects; lab/ab/fwd_finalize_fast.diff): its A/B on the 16-bit
#                                     forward, the checks, then its A/B on lab/fp8_time.py in the same copy (~10 min)
#   bash lab/gpu_run.sh fwdchains measured, not adopted (0 to -1.7%): the softmax's row max and sum in 4 chains on D=64's two-consumer and D=128's default configs
#                                     (lab/ab/fwd_softmax_chains.diff): its A/B on the 16-bit forward, then the checks (~7 min)
#   bash lab/gpu_run.sh fwdwg0waits measured, not adopted (0.997, FP8 0.983): only consumer warpgroup 0 of the ping-pong forward waits for K and V
#                                     (lab/ab/fwd_wg0_waits.diff): its A/B on the 16-bit forward, the checks, then its
#                                     A/B on lab/fp8_time.py in the same copy (~8 min)
#   bash lab/gpu_run.sh fwdorder2 measured, not adopted (1.005): the 16-bit forward in step order 2 at every head dim (FWD_ORDER_DIFF, default
#                                     lab/ab/fwd_step_order2.diff; fwd_d128_order2.diff: D=128 alone): a ping-pong turn
#                                     holds only the GEMMs' issue, as FlashAttention-3's: its A/B, the checks (~5 min)
#   bash lab/gpu_run.sh hostbhsd measured, landed (single calls +7% against SDPA's): fwd_bhsd without transposed views
#                                     of q, k, v (lab/ab/host_fwd_bhsd_no_views.diff, reverse up to 2041474): its A/B
#                                     on the host profile, the tests (~7 min)
#   bash lab/gpu_run.sh hostoutputs measured, landed (1.5-2.5 us less a call): the dense forward's outputs allocated without
#                                     a dispatcher op each, lse shaped in place, fwd_bhsd's out in its final layout
#                                     (lab/ab/host_fwd_outputs.diff, applied in reverse since): its A/B on the host
#                                     profile, the tests (~7 min)
#   bash lab/gpu_run.sh fwdd64otma measured, landed (D=64 causal S=512 +3-4%): D=64's default config with O through shared
#                                     memory and TMA stores (lab/ab/fwd_d64_o_tma.diff, applied in reverse since): its A/B
#                                     on D=64 cells, the checks (~5 min)
#   bash lab/gpu_run.sh fwdd64widetma measured, landed for the non-causal config (S=512 +1.3-3.1%, 1k +1.8-3.4%): D=64's
#                                     three-warpgroup non-causal config with O through shared memory and TMA stores
#                                     (lab/ab/fwd_d64_noncausal_o_tma.diff, applied in reverse since; the long-keys
#                                     causal config's lab/ab/fwd_d64_long_keys_o_tma.diff lost 1-6%): its A/B on D=64
#                                     cells, the checks (~5 min)
#   bash lab/gpu_run.sh fwdd64longkeys2k measured, landed (2k +5.5-6.0%, 3k +10.8-12.9%, 3.5k +8.5-10.4%, the 8-wave
#                                     cell -0.6..+0.9%; applied in reverse since): D=64 causal calls from 2048 keys
#                                     on the long-keys config where its tiles fill 8 waves
#                                     (lab/ab/fwd_d64_long_keys_full_grid.diff, FWD_LONG_KEYS_REVERSE=1 up to 6e2a873): its
#                                     A/B, fwdland's checks in the copy (~9 min)
#   bash lab/gpu_run.sh fwdpartialfirst measured, landed (D=64 causal 2k +4.7-6.0%, 4k +5.4-9.4%, 8k +1.4-2.0%; applied
#                                     in reverse since): the long-keys config's partial query tile first under a
#                                     causal mask or a window, where the last (longest) tile is otherwise partial
#                                     (lab/ab/fwd_partial_tile_first.diff, FWD_PARTIAL_FIRST_REVERSE=1 now): its A/B,
#                                     fwdland's checks in the copy (~7 min)
#   bash lab/gpu_run.sh fwdd64longkeys512 measured (1.5k +3.8-6.0%, 1k -0.6..-2.4%, 512 -9..-11%): D=64 causal calls
#                                     from 512 keys on the long-keys config where its tiles fill 8 waves
#                                     (lab/ab/fwd_d64_long_keys_512.diff): its A/B on 512-2k cells, the checks (~6 min)
#   bash lab/gpu_run.sh fwdd64longkeys1536 measured, landed (1.5k +4.7%, 1.75k +5.6%, controls -1.4..-0.3%; applied
#                                     in reverse since): the same rule's bound at 1536
#                                     (lab/ab/fwd_d64_long_keys_1536.diff, REVERSE=1 on trees up to e71d8c0): its A/B,
#                                     fwdland's checks in the copy (~8 min)
#   bash lab/gpu_run.sh fwdd64fewwaves measured, not adopted (the default config -5..-12% on 2.6-5.3 waves): D=64
#                                     causal calls from 4096 keys on the default config where the long-keys tiles
#                                     fill under 8 waves (lab/ab/fwd_d64_long_keys_few_waves_default.diff): its A/B
#                                     on few-wave cells, the checks (~5 min)
#   bash lab/gpu_run.sh fwdd64longkeysonewave measured, landed from 1.5 waves (1.9-5.3 waves +2.2-7.2%, 1.3 waves
#                                     -6.1%): the long-keys rule from 1.5 waves of its tiles instead of 8
#                                     (lab/ab/fwd_d64_long_keys_1_5_waves.diff, REVERSE=1 now; its one-wave lab form
#                                     FWD_ONE_WAVE_DIFF=fwd_d64_long_keys_one_wave.diff on commit 05e1645): its A/B on
#                                     1.3-5.3-wave cells of 1.5k-3k keys, the checks (~6 min); undone on 1.5-2.7 waves
#                                     2026-12-03 (-1.6..-3.8% for the rule), and its bound at 1.75 waves
#                                     (FWD_ONE_WAVE_DIFF=fwd_d64_long_keys_7_quarter_waves.diff FWD_ONE_WAVE_REVERSE=0):
#                                     measured, not adopted (-5.4..+7.6% by cell and machine, geomean 0.999)
#   bash lab/gpu_run.sh fwdncu   ncu on the forward of ours, cuDNN and FlashAttention-3 side by side (NCU_FWD_SHAPES) (~3 min)
#   bash lab/gpu_run.sh waveprobe what the last partial wave of non-causal tiles costs each implementation: the
#                                     standard cells beside B:H that fill whole waves of 132 SMs (lab/fwd_time.py) (~3 min)
#   bash lab/gpu_run.sh fwdwaitsuspend measured, not adopted (1.002): the Hopper forward's producer waits suspended,
#                                     not spinning (lab/ab/fwd_producer_wait_suspend.diff): its A/B, then the fwdq2 checks (~6 min)
#   bash lab/gpu_run.sh bwdmasklean measured, not adopted (+0.5%): the Hopper backward's masked steps as a compare with an
#                                     immediate and a select an entry (lab/ab/bwd_mask_lean.diff): its A/B on causal cells, then the checks (~4 min)
#   bash lab/gpu_run.sh fwdpacked packed batches on the Hopper forward's packed flavour: build, the packed-batch and
#                                     forward tests, the sanitizers on the small packed cases, the packed-batch
#                                     benchmark with FlashAttention-3's varlen alongside (~8 min)
#   bash lab/gpu_run.sh latencygrid the benchmarks' latency grids (the seed's shapes called as a user calls them, and
#                                     replayed from CUDA graphs: issue 28's two numbers) with every SDPA backend, then
#                                     the host profile (lab/host_profile_gpu.py)                     (~4 min)
#   bash lab/gpu_run.sh fwdsmallgrid D <= 64 small grids (at most 1024 keys) on the one-consumer config: build, the forward
#                                     tests, its A/B against FLASHATTN_FWD_SMALL_GRID=0 with SDPA beside, memcheck/racecheck/
#                                     synccheck on the small dense and split cases (~4 min)
#   bash lab/gpu_run.sh fwdsmallgridkeys the one-consumer small-grid config past 256 keys, split by the rule on its 64-row
#                                     tiles (FLASHATTN_FWD_SMALL_GRID=65536): the split tests with it, its A/B against the
#                                     bound of 256, memcheck/racecheck on the split cases with it (~4 min)
#   bash lab/gpu_run.sh varlenloop found the `misaligned address` of 2026-12-02 (fixed: inputs at unaligned addresses): packed
#                                     batches drawn as the padded-equivalence test draws them, each spec printed first (~1 min)
#   bash lab/gpu_run.sh fwdpackedkeys measured, not adopted (no change): the packed Hopper forward's config by the mean key count (lab/ab/fwd_packed_mean_keys.diff):
#                                     its A/B on lab/varlen_time.py, then the packed-batch tests in the copy (~6 min)
#   bash lab/gpu_run.sh flexgrid torch's FlexAttention (compiled, opt-in `flex`) beside ours, cuDNN and FlashAttention-3
#                                     on the quick shapes: forward, then backward and forward+backward (~8 min)
#   bash lab/gpu_run.sh windowflex the windowed and the softcapped backward's cost per useful FLOP, ours and
#                                     FlexAttention's, each against its own plain call (~8 min)
#   bash lab/gpu_run.sh fwdgrid  the forward grid against cuDNN and FlashAttention-3 (FWDGRID_K: bf16 | fp16), then the
#                                     FP8 forward's errors and speed against FlashAttention-3's, then packed
#                                     batches beside the dense call and FlashAttention-3's varlen (~5 min: build 2,
#                                     the grid 1, FP8 0.5, varlen ~1)
#   bash lab/gpu_run.sh fp8ab    FP8_AB_DIFF's A/B on the FP8 forward (lab/fp8_time.py; FP8_AB_REVERSE=1 for a landed diff) (~8 min)
#   bash lab/gpu_run.sh fwdmasklean measured, landed (1.020): the Hopper forward's masked blocks as a compare and a select an entry
#                                     (lab/ab/fwd_mask_lean.diff, applied in reverse since): its A/B, then the fwdq2 checks (~6 min)
#   bash lab/gpu_run.sh fwdsource the short causal D=64 forward and cuDNN's under ncu side by side, then each
#                                     kernel's source counters at D=64 S=512 causal, compared                (~1 min)
#   bash lab/gpu_run.sh fwdland  after a Hopper forward change lands: build, memcheck/racecheck/synccheck on the small
#                                     dense, split, FP8 and packed cases, the kernel tests whole            (~7 min)
#   bash lab/gpu_run.sh fwdstreamq2 measured, not adopted (0.938): fwdstream with two Q buffers (+ lab/ab/fwd_q_double_buffer.diff): its A/B, the checks (~8 min)
#   bash lab/gpu_run.sh fwdstream measured, not adopted (0.942): the Hopper forward's tiles streamed, a tile's last P V and the next tile's first
#                                     S in one step (lab/ab/fwd_stream_tiles.diff): its A/B, then the fwdq2 checks (~8 min)
#   bash lab/gpu_run.sh fwdostore measured, not adopted (1.000): the Hopper forward's register epilogue (D=64) storing O 16 bytes a lane after
#                                     a transpose across each quad (lab/ab/fwd_o_store_16b.diff): its A/B, then the fwdq2 checks (~8 min)
#   bash lab/gpu_run.sh fwdhalffirst measured, not adopted (0.995): the Hopper forward's first key block at half width for a warpgroup that sees
#                                     none of its later half (lab/ab/fwd_half_first_block.diff): its A/B, then the fwdq2 checks (~8 min)
#   bash lab/gpu_run.sh fwdtilework measured, landed: the Hopper forward's dynamic schedule publishing each tile's decoded
#                                     index (lab/ab/fwd_tile_decode_published.diff): its A/B, then the fwdq2 checks in the copy (~8 min)
#   bash lab/gpu_run.sh fwdq2     the Hopper forward with two Q buffers at D=64/128 (lab/ab/fwd_q_double_buffer.diff): its A/B
#                                     on short and long cells, then the forward/split/FP8 tests and sanitizers in the copy (~8 min)
#   bash lab/gpu_run.sh fwdtimeline the Hopper forward's phases per tile from SM clock stamps (lab/ab/
#                                     lab_fwd_tile_timeline.diff, lab/fwd_tile_timeline.py) on short causal cells (~4 min)
#   bash lab/gpu_run.sh detprobe  deterministic mode's cost under a probe diff (DET_PROBE_DIFF): its tickets in two chains
#                                     by key-block parity (measured: unchanged), + the stage handed back (measured:
#                                     unchanged), lab_det_no_tickets.diff (its schedule alone; measured: ~1.0) (~4 min)
#   bash lab/gpu_run.sh dqtraffic the Hopper backward with half its dQ reductions left out (a measurement, wrong
#                                     results): its A/B at D=64/128; DQ_TRAFFIC=half_traffic_d256 or pair_cost_d256
#                                     (+ a cluster pair's adds) at D=256, half_loads_d256: all measured (~4 min)
#   bash lab/gpu_run.sh detticketfirst measured, not adopted: the Hopper backward's dQ writers poll the deterministic ticket before
#                                     waiting for the tile (lab/ab/det_ticket_before_tile.diff): its A/B at D=128/256 with
#                                     the mode's cost, the Hopper backward tests and sanitizers in the copy (~9 min)
#   bash lab/gpu_run.sh detsource measured 2026-11-30: ncu's source counters of the Hopper D=256 backward kernel, default and
#                                     deterministic, at S=4k non-causal and S=8k causal, side by side (~4 min)
#   bash lab/gpu_run.sh detwriterlanes measured, not adopted: the Hopper backward's D=256 dQ writer with a lane a stage (lab/ab/
#                                     bwd_dq_writer_lanes.diff): its A/B with deterministic mode's cost, the Hopper backward
#                                     tests and the sanitizers in the copy (~7 min)
#   bash lab/gpu_run.sh portabledqbulk measured, not adopted: the portable backward's D=128 dQ tile staged in shared memory and added
#                                     by bulk reduce-adds (lab/ab/portable_bwd_dq_bulk_d128.diff): its A/B, the tests and
#                                     sanitizers in the copy, ncu of its kernel at S=4k (~5 min)
#   bash lab/gpu_run.sh portabledqhalves measured, not adopted: the portable backward's D=128 dQ in two column halves, the first
#                                     half's reductions before the second half's MMAs (lab/ab/portable_bwd_dq_halves_d128.diff):
#                                     its A/B, the tests and sanitizers in the copy, ncu of its kernel at S=4k (~5 min)
#   bash lab/gpu_run.sh portabledeferbase measured, not adopted: the portable backward's deferred-reduction base set before phase C's
#                                     reductions, not after them (lab/ab/portable_bwd_dq_defer_base_early.diff): its A/B,
#                                     the tests and sanitizers in the copy, ncu source counters of its D=64 kernel at S=8k (~6 min)
#   bash lab/gpu_run.sh portableplanahead measured, not adopted: the portable backward's D=128 two-stage tile plans the
#                                     copy its next step starts with before phase C (lab/ab/portable_bwd_plan_ahead_d128.diff):
#                                     its A/B, then the tests and sanitizers in the copy (~5 min)
#   bash lab/gpu_run.sh portableplan landed: the portable backward's next Q/dO copy planned before phase B (lab/ab/
#                                     portable_bwd_plan_q_do.diff): its A/B at D=64/128/256, the tests, sanitizers, ncu in the copy (~6 min)
#   bash lab/gpu_run.sh portabledefermore measured, not adopted: more deferred dQ reductions in the portable backward
#                                     (D=64 6, D=128 8; lab/ab/portable_bwd_dq_defer_more.diff): its A/B, the tests and
#                                     sanitizers in the copy, ncu source counters of its D=64 kernel and FA2's at S=8k (~5 min)
#   bash lab/gpu_run.sh softcapex2fma measured, not adopted: the D=64 softcap backward with one exponential in four on the
#                                     FMA pipe (lab/ab/bwd_softcap_ex2_fma.diff): its A/B, the softcap tests and sanitizers in the copy (~4 min)
#   bash lab/gpu_run.sh portabledqorder measured, not adopted: the portable backward's dV, dQ, dK order
#                                     (lab/ab/portable_bwd_dq_before_dk.diff): its A/B, then the tests and sanitizers in the copy (~6 min)
#   bash lab/gpu_run.sh portabled128a4x2 landed: the portable backward's D=128 phase A as 4 x 2 warps (lab/ab/
#                                     portable_bwd_d128_a4x2.diff): its A/B, then the tests and sanitizers in the copy (~8 min)
#   bash lab/gpu_run.sh portableswz128ab the portable backward's D=128 tile with swizzled Q/dO rows (lab/ab/
#                                     portable_bwd_swizzle_d128_lean.diff): its A/B, then portableland's steps (~9 min)
#   bash lab/gpu_run.sh portableb4x2ab the portable backward's D=64 phase B as 4 x 2 warps on sm90 (lab/ab/
#                                     portable_bwd_b4x2_sm90.diff) against the tree before it, bwd_check --portable (~8 min)
#   bash lab/gpu_run.sh portableswizzle the portable backward's D=128 tile with swizzled Q/dO rows (lab/ab/
#                                     portable_bwd_swizzle_qdo_d128.diff): its A/B with FA2, the copy kept in build/ab-swizzle (~7 min)
#   bash lab/gpu_run.sh portableswizzlecheck then, in build/ab-swizzle: the backward tests on the portable path,
#                                     memcheck/racecheck/synccheck on its small dense cases (~4 min)
#   bash lab/gpu_run.sh tmal2ab  lab/ab/tma_l2_128.diff's A/B (TMA maps with 128-byte L2 promotion) on the FP8 forward
#                                     against FlashAttention-3 (lab/fp8_time.py; two builds, ~7 min)
#   bash lab/gpu_run.sh portablesource ncu source counters (stalls per SASS instruction) of the portable
#                                     backward's main kernel and FlashAttention-2's, D=64 S=4k (~5 min)
#   bash lab/gpu_run.sh fwdcheck  on a built tree: memcheck/racecheck/synccheck on small dense cases, the
#                                     bf16 causal forward grid against cuDNN and FlashAttention-3 (~7 min)
#   bash lab/gpu_run.sh portableland build, the backward and packed-batch tests, memcheck/racecheck/synccheck
#                                     on the portable path's small cases, its timing vs FA2 and cuDNN (~8 min)
#   bash lab/gpu_run.sh twocta   measured 2026-11-28, not adopted: the one-consumer two-CTA forward variants against the shipped configs
#                                     (lab), then the FP8 calls' kernel breakdown (lab/fp8_time.py --breakdown) (~5 min)
#   bash lab/gpu_run.sh fp8vtk   the FP8 D=128 forward's in-kernel V transpose, on a tree with lab/ab/fp8_vt_in_kernel*.diff
#                                     applied: build, a smoke run, the FP8 tests, the four sanitizers on it, errors and
#                                     kernels against FlashAttention-3 (~4 min)
#   bash lab/gpu_run.sh fp8vtkab such a diff (FP8_VT_DIFF, default the lean form) against the tree, two builds,
#                                     lab/fp8_time.py A B A B (~4 min)
#   bash lab/gpu_run.sh fp8vtkncu the same two builds under ncu (lab/ncu_fwd.sh --fp8), one round (~5 min)
#   bash lab/gpu_run.sh fp8land  after an FP8 forward change: build, its tests, the four sanitizers on its cases, errors and
#                                     kernels against FlashAttention-3 (~8 min)
#   bash lab/gpu_run.sh fwdch4lab the 16-bit D=128 forward on 160/176-key blocks with 2-4 softmax chains (lab variants, ~6 min)
#   bash lab/gpu_run.sh fp8variants lab/ab/fp8_d128_variants_224.diff (three D=128 FP8 configs in one build) against the tree (~8 min)
#   bash lab/gpu_run.sh fwdnc176ab non-causal D=128 from 8k keys on 128 x 176 tiles (lab/ab/fwd_d128_noncausal_n176.diff)
#                                     against the tree, lab/fwd_time.py; then the forward tests in the patched copy (~9 min)
#   bash lab/gpu_run.sh fp8vt    after an FP8 V-transpose change: build, the FP8 tests, memcheck/racecheck/
#                                     initcheck on the FP8 cases, the FP8 calls' kernel breakdown (~5 min)
#   bash lab/gpu_run.sh detpieces lab/ab/det_dq_pieces.diff's A/B (deterministic mode's cost, D=128/256) (~4 min)
#   bash lab/gpu_run.sh softcaponepass the D=64 softcap backward's one-pass form (lab/ab/bwd_softcap_onepass.diff):
#                                     its A/B, then the softcap backward and packed-batch tests (~6 min)
#   bash lab/gpu_run.sh softcapwide the D=128 softcap backward on the wide config (lab/ab/bwd_softcap_wide.diff):
#                                     its A/B, then the softcap, wide-config and packed-batch tests (~6 min)
#   bash lab/gpu_run.sh softcaptanh the one-pass softcap backward's tanh under the dP GEMM (lab/ab/bwd_softcap_tanh_first.diff):
#                                     its A/B, then the softcap, wide-config and split backward tests (~8 min)
#   bash lab/gpu_run.sh softcapsan memcheck (every case), racecheck (every dense case) and racecheck/synccheck
#                                     (quick) on small dense and packed cases, on a built tree (~2 min)
#   bash lab/gpu_run.sh splitplan build, the forward's split tests, its kernel time at every forced split count
#                                     and the rule's against SDPA, both merges, sanitizers on the split cases (~8 min)
#   bash lab/gpu_run.sh smallgrid build, the forward's split tests, the rule's kernel time against SDPA (small
#                                     non-causal grids on 128-row tiles), the packed and window tests, both
#                                     merges, sanitizers on the split and small dense cases (~5 min)
#   bash lab/gpu_run.sh detncu   ncu on the D=256 causal backward with and without deterministic mode (~4 min)
#   bash lab/gpu_run.sh detrotate build, the backward tests, deterministic mode's cost with rotated walks and without (~8 min)
#   bash lab/gpu_run.sh sanitizedense memcheck/racecheck/synccheck on small dense cases, on a built tree (~4 min)
#   bash lab/gpu_run.sh training build, the backward tests with the wide config on masked calls, its causal
#                                     A/B, the training benchmark grid against cuDNN       (~9 min)
#   bash lab/gpu_run.sh bwd90    build, backward numerics and tests on both paths, the backward timing grid (~5 min)
#   bash lab/gpu_run.sh integrate build, the whole GPU suite, the window/varlen/paged benchmarks, the
#                                     D=256 backward config lab, the backward timing grid  (~7 min)
#   bash lab/gpu_run.sh host     build, the GPU suite, then where a small call's host time goes, side by
#                                     side with SDPA (lab/host_profile_gpu.py)             (~6 min)
#   bash lab/gpu_run.sh pytest   a part of the GPU suite on a built tree: PYTEST_ARGS="tests/kernels/test_x.py ..."
#   bash lab/gpu_run.sh fp8      the FP8 forward: build, its tests, memcheck, the comparison with FlashAttention-3 (~6 min)
#   bash lab/gpu_run.sh hostprofile  the host profile alone on a built tree                (~2 min)
#   bash lab/gpu_run.sh combineab the split forward's combine launched plainly vs programmatically:
#                                     A/B of lab/split_call_time.py (~5 min)
#   bash lab/gpu_run.sh clustermerge build, the split tests, the split merged in clusters vs the combine
#                                     kernel timed, the sanitizers on the split and small dense cases, the
#                                     attention tests (~7 min)
#   bash lab/gpu_run.sh l2decode build, the decode check and the suite's decode tests, then the Hopper
#                                     lab's L2 group budget A/B                           (~5 min)
#   bash lab/gpu_run.sh reliability build, the bad-index and NaN/inf GPU tests, then compute-sanitizer
#                                     (lab/sanitize.sh: memcheck, racecheck, synccheck, initcheck) (~8 min)
#
# A step that fails does not stop the others; the exit status is the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-results/gpu-run}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
failed=0

step() {  # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  local t0
  t0=$(date +%s)
  echo "=== $name: $*" | tee -a "$OUT/summary.txt"
  timeout "$limit" "$@" > "$OUT/step_$name.log" 2>&1
  local rc=$?
  tail -25 "$OUT/step_$name.log"
  echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || failed=$((failed + 1))
  snapshot_logs
}
# Every step's logs so far in one archive whose name sorts first: a call cut off by its time limit hands
# back only the first few files of $OUT (by name), and 0-partial.tgz is one of them (the archive at the
# end replaces it).
snapshot_logs() {
  local tmp
  tmp=$(mktemp) || return 0
  (cd "$OUT" && tar -czf "$tmp" --exclude=./0-partial.tgz --exclude=./logs.tgz . && chmod 644 "$tmp" && mv "$tmp" 0-partial.tgz) \
    > /dev/null 2>&1 || rm -f "$tmp"
}

env_info() {
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -2
  # The host compiler and the libstdc++ a torch process maps: the extension is built by the one and
  # run against the other (csrc/check.h says why that matters).
  "${CXX:-g++}" --version | head -1
  python3 -c "import torch; print(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libstdc++' in l}))"
}

# Wheels carried in .whl/ (pytest-benchmark, FlashAttention-3's tokenspeed-fa3 for the fa3 comparator:
# docs/benchmarks.md) are installed first; the machine has no package index.
install_carried_wheels() {
  compgen -G ".whl/*.whl" > /dev/null || return 0
  python3 -m pip install -q --no-index --no-deps .whl/*.whl > "$OUT/carried_wheels.log" 2>&1 \
    || echo "carried wheels: install failed (see carried_wheels.log)"
}
install_carried_wheels

# memcheck, racecheck and synccheck (or the tools given after $4) on lab/sanitize_small.py's quick
# cases of groups $3 (comma list) on backends $2 (SANITIZE_BACKENDS), one step each of at most $1
# seconds, named <tool>_$4; in the tree SANITIZE_IN names (a patched copy) where it is set.
sanitize_steps() {
  local limit=$1 backends=$2 groups=$3 name=$4 tool extra in=()
  shift 4
  local tools=("$@")
  [ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck synccheck)
  [ -n "${SANITIZE_IN:-}" ] && in=(env -C "$SANITIZE_IN" PYTHONPATH="$SANITIZE_IN")
  for tool in "${tools[@]}"; do
    extra=()
    [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
    step "${tool}_$name" "$limit" "${in[@]}" env SANITIZE_BACKENDS="$backends" compute-sanitizer --tool "$tool" \
      "${extra[@]}" --error-exitcode 99 python3 lab/sanitize_small.py --only "$groups" --quick
  done
}
# After a portable-backward change, on the tree: build (incremental after an A/B), the backward,
# public-gradient and packed-batch tests, memcheck/racecheck/synccheck on the portable path's small
# dense and packed cases, the timing against FlashAttention-2 (limits sized to follow an A/B in one
# call: the steps took 90, 65, 5-55 and 16 s on an H200).
portable_land_steps() {
  step build 300 bash lab/gpu_build.sh
  step pytest_backward 200 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_public_gradients.py \
    tests/kernels/test_varlen_gpu.py -ra
  sanitize_steps 120 portable dense,varlen portable
  step bwd_time_portable 100 python3 lab/bwd_check.py --time-only --time --portable --dtype bf16 --dims 64,128,256
}
# A patched copy of the tree (an A/B's side, lab/ab/run_ab.sh AB_COPY) checked on one backward path (the
# portable one unless said): the backward tests, then memcheck, racecheck and synccheck on the small dense
# cases, each in that copy. MORE_TESTS: further test files run with the backward's.
#   bwd_copy_checks COPY NAME PYTEST_LIMIT SANITIZER_LIMIT [PYTEST_K (portable) [SANITIZE_BACKENDS (portable) [MORE_TESTS]]]
bwd_copy_checks() {
  local copy=$1 name=$2 kexpr=${5:-portable} backends=${6:-portable} more=${7:-}
  step "pytest_$name" "$3" bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q \
    -p no:cacheprovider tests/kernels/test_backward_gpu.py tests/kernels/test_public_gradients.py $more -k $kexpr -ra"
  copy_sanitize_steps "$copy" "$name" "$4" "$backends" dense
}
# sanitize_steps' three tools in a patched copy on lab/sanitize_small.py's quick cases of GROUPS.
#   copy_sanitize_steps COPY NAME LIMIT BACKENDS GROUPS
copy_sanitize_steps() { SANITIZE_IN=$1 sanitize_steps "$3" "$4" "$5" "$2"; }
# ncu's stall samples per SASS instruction of the portable backward's main kernel in a patched copy,
# by default at D=64 S=8k non-causal (compare with lab/ncu_source_top.py --compare OURS.csv FA2.csv).
#   portable_copy_ncu COPY NAME [D:S:causal]
portable_copy_ncu() {
  local shape=${3:-64:8192:0}
  step "ncu_source_$2" 300 bash -c "cd '$1' && PYTHONPATH='$1' OUT='$OUT' NCU_KERNEL=flash_bwd_kernel \
    NCU_SCRIPT=lab/ncu_bwd.py NCU_BWD_BACKEND=portable NCU_BWD_PEERS=0 NCU_TAG=portable_${shape//:/_} bash lab/ncu_source.sh $shape"
}
# A portable-backward change as a patch against the tree (lab/ab/PATCH, REVERSE=0: B is the patched copy,
# kept in build/ab-NAME): its A/B on the D=64/128 grid with FlashAttention-2 alongside, then
# bwd_copy_checks in that copy.
portable_patch_ab() {
  local name=$1 patch=$2 dims=${3:-64,128} copy="$PWD/build/ab-$1"
  env_info > "$OUT/env.txt" 2>&1
  step "ab_$name" 420 env PATCH="$patch" REVERSE=0 AB_COPY="$copy" OUT="$OUT/ab" \
    AB_CMD="python3 lab/bwd_check.py --time-only --time --portable --dtype bf16 --dims $dims" bash lab/ab/run_ab.sh
  bwd_copy_checks "$copy" "$name" 200 120
}
# The Hopper backward timed alone with deterministic mode's cost and cuDNN alongside, bf16, at the
# head dims appended (a comma-separated list).
bwd_time_lean="python3 lab/bwd_check.py --time-only --time --lean --dtype bf16 --dims"
# A Hopper-backward change as a patch against the tree (REVERSE=0: B is the patched copy, kept in
# build/ab-NAME): its A/B on $bwd_time_lean DIMS.
#   hopper_ab NAME PATCH DIMS [A/B LIMIT_S (480)]
hopper_ab() {
  env_info > "$OUT/env.txt" 2>&1
  step "ab_$1" "${4:-480}" env PATCH="$2" REVERSE=0 AB_COPY="$PWD/build/ab-$1" OUT="$OUT/ab" \
    AB_CMD="$bwd_time_lean $3" bash lab/ab/run_ab.sh
}
# hopper_ab, then bwd_copy_checks on the Hopper path in that copy.
#   hopper_patch_ab NAME PATCH DIMS [A/B LIMIT_S (480)]
hopper_patch_ab() {
  hopper_ab "$@"
  bwd_copy_checks "$PWD/build/ab-$1" "$1" 200 120 hopper auto
}
# A patched copy of the tree built in build/ab-NAME (lab/ab/run_ab.sh without timing rounds), the
# tree's own build beside it unless TREE is 0 (a stage that runs only the copy).
#   build_patched NAME PATCH [TREE (1)]
build_patched() {
  local copy_only=1
  [ "${3:-1}" = 1 ] && copy_only=0
  step "build_$1" 420 env PATCH="$2" REVERSE=0 AB_COPY="$PWD/build/ab-$1" OUT="$OUT/ab" AB_ROUNDS=0 \
    AB_COPY_ONLY=$copy_only bash lab/ab/run_ab.sh
}
# A D=256 Hopper-backward form behind a run-time switch (SWITCH=0 off, 1 on) in a patched copy: the
# copy built, its D=256 Hopper tests first (a hang stops at 150 s), then SWITCH=0/1 alternated twice
# in that build (steps time_NAME_rR_TAG0/1), with TREE=1 the tree's own timing after them, then the
# Hopper backward tests and sanitizers in the copy.
#   hopper_switch_ab NAME PATCH SWITCH TAG [TREE (0)]
hopper_switch_ab() {
  local name=$1 switch=$3 tag=$4 tree=${5:-0} copy="$PWD/build/ab-$1" before round v
  env_info > "$OUT/env.txt" 2>&1
  build_patched "$name" "$2" "$tree"
  before=$failed
  step "smoke_$name" 150 bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q \
    -x -p no:cacheprovider tests/kernels/test_backward_gpu.py -k 'hopper and 256' -ra"
  [ "$failed" = "$before" ] || return 0
  for round in 1 2; do
    for v in 0 1; do
      step "time_${name}_r${round}_$tag$v" 200 bash -c "cd '$copy' && PYTHONPATH='$copy' $switch=$v $bwd_time_lean 256"
    done
  done
  [ "$tree" = 1 ] && step time_tree 200 $bwd_time_lean 256
  bwd_copy_checks "$copy" "$name" 200 120 hopper auto
}
# A patched copy of the tree (an A/B's side) checked on the Hopper forward: the forward, window, split and
# FP8 tests, then memcheck, racecheck and synccheck on the small dense, split and FP8 cases, each in that
# copy (the steps took 29, 5, 22 and 4 s on an H200).
#   fwd_copy_checks COPY NAME
# FWD_COPY_WHOLE=1: fwdland's checks instead (the kernel tests whole, the sanitizers on the packed cases
# too), so that a diff landed from its A/B needs no fwdland call after (~4 min more).
fwd_copy_checks() {
  local copy=$1 name=$2
  if [ "${FWD_COPY_WHOLE:-0}" = 1 ]; then
    copy_sanitize_steps "$copy" "$name" 120 auto dense,split,fp8,varlen
    step "pytest_$name" 330 env -C "$copy" PYTHONPATH="$copy" "${pytest_kernels[@]}" -ra --durations=10
    return 0
  fi
  step "pytest_$name" 200 bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q \
    -p no:cacheprovider tests/kernels/test_attention_gpu.py tests/kernels/test_window_gpu.py tests/kernels/test_fwd_split_gpu.py \
    tests/kernels/test_fp8_gpu.py -ra"
  copy_sanitize_steps "$copy" "$name" 90 auto dense,split,fp8
}
# An FP8-forward A/B of lab/ab/$2 (REVERSE=$3) on lab/fp8_time.py, as step ab_$1; with $4, the patched copy
# an earlier stage on this machine built for the same diff, reused (run_ab.sh AB_REUSE) or else made there.
#   fp8_patch_ab NAME PATCH REVERSE [COPY]
fp8_patch_ab() {
  local reuse=()
  [ -n "${4:-}" ] && reuse=(AB_REUSE=1 AB_COPY="$4")
  step "ab_$1" 580 env PATCH="$2" REVERSE="$3" "${reuse[@]}" OUT="$OUT/ab" AB_CMD="python3 lab/fp8_time.py" \
    bash lab/ab/run_ab.sh
}

# A Hopper-forward change as a patch against the tree (REVERSE 0, the default: B is the patched copy,
# kept in build/ab-NAME; 1 for a landed patch: the copy is the tree without it): its A/B on
# lab/fwd_time.py's CELLS (cuDNN alongside), after a smoke of the many-tile forward tests in the copy,
# then fwd_copy_checks in that copy.
#   fwd_patch_ab NAME PATCH CELLS [REVERSE]
fwd_patch_ab() {
  env_info > "$OUT/env.txt" 2>&1
  local before=$failed
  step "ab_$1" 400 env PATCH="$2" REVERSE="${4:-0}" AB_COPY="$PWD/build/ab-$1" OUT="$OUT/ab" \
    AB_SMOKE="python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_attention_gpu.py -k tiles" \
    AB_CMD="python3 lab/fwd_time.py --rounds 8 $3" bash lab/ab/run_ab.sh
  [ "$failed" = "$before" ] || return 0  # the smoke (the many-tile tests) failed: no checks of a broken copy
  fwd_copy_checks "$PWD/build/ab-$1" "$1"
}
# The small dense cases, the Hopper paths where the GPU has them.
sanitize_dense_steps() { sanitize_steps "$1" auto dense dense; }

# After an FP8 forward change: build, the small FP8 cases without a sanitizer first (a hang stops at
# 90 s), the FP8 tests, the four sanitizers on the FP8 cases, errors and kernels against
# FlashAttention-3 (lab/fp8_time.py --check --breakdown).
fp8_land_steps() {
  env_info > "$OUT/env.txt" 2>&1
  step build 420 bash lab/gpu_build.sh
  step fp8_smoke 90 env SANITIZE_BACKENDS=auto python3 lab/sanitize_small.py --only fp8 --quick
  step pytest_fp8 200 "${pytest_ci[@]}" tests/kernels/test_fp8_gpu.py tests/kernels/test_fp8_cpu.py -ra
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 sanitize_steps 150 auto fp8 fp8 memcheck racecheck synccheck initcheck
  step fp8_check 300 python3 lab/fp8_time.py --check --breakdown
}

# A host-path change as a patch against the tree (lab/ab/PATCH; REVERSE=1 for a landed one): its A/B
# on the host profile (lab/host_profile_gpu.py --no-profiler, rounds alternated), then the entry
# points' tests in the patched copy (build/ab-NAME).
#   host_patch_ab NAME PATCH REVERSE
host_patch_ab() {
  local copy="$PWD/build/ab-$1"
  env_info > "$OUT/env.txt" 2>&1
  step "ab_$1" 480 env PATCH="$2" REVERSE="$3" AB_COPY="$copy" OUT="$OUT/ab" \
    AB_SMOKE="python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_attention_gpu.py" \
    AB_CMD="python3 lab/host_profile_gpu.py --no-profiler" bash lab/ab/run_ab.sh
  step "pytest_$1" 200 bash -c "cd '$copy' && PYTHONPATH='$copy' \
    FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_attention_gpu.py \
    tests/kernels/test_nonfinite_gpu.py tests/kernels/test_torch_impl_gpu.py -ra"
}

ensure_built() {
  if ! python3 -c "import flashattn, sys; sys.exit(0 if flashattn.extension_available() else 1)" 2>/dev/null; then
    step build 420 bash lab/gpu_build.sh
  fi
}

# The test suite, ci hypothesis profile (extra pytest arguments appended by the caller).
pytest_ci=(env FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider)
# The kernel tests whole: tests/infra (the compile checks of every kernel file, the container, the
# README's commands in a fresh venv) is CI's, and on this machine it alone outlasts a step (2026-11-30:
# 12% of it in 330 s). tests/kernels took 3.5 min on an H200 that day (2785 passed).
pytest_kernels=("${pytest_ci[@]}" tests/kernels)

verify_steps() {  # build, hang-checked Hopper lab, numerics on both paths, decode check
  env_info > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
  step build 420 bash lab/gpu_build.sh
  step sm90_lab_check 300 bash lab/sm90_lab.sh check
  step quick_numerics_portable 150 env FLASHATTN_BACKEND=portable python3 lab/quick_check.py --numerics-only
  step quick_numerics_hopper 150 env FLASHATTN_BACKEND=hopper python3 lab/quick_check.py --numerics-only
  step decode_check 150 python3 lab/decode_check.py --no-perf-gate
}

case "${1:-verify}" in
  verify)
    verify_steps
    ;;
  check)  # after a change anywhere: everything that proves correctness, in one call
    verify_steps
    step pytest_ci 330 "${pytest_kernels[@]}" --durations=15
    ;;
  suite)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step pytest_ci 330 "${pytest_kernels[@]}" --durations=15
    for bug in ${PLANTED_BUGS:-causal kv_tail scale empty_rows}; do
      step "planted_$bug" 200 bash lab/planted_bug.sh "$bug"
    done
    ;;
  planted)  # the planted bugs alone (lab/planted_bug.sh, each in its own scratch build): PLANTED_BUGS, default the two
            # added 2026-12-02 and not yet run on a GPU
    env_info > "$OUT/env.txt" 2>&1
    for bug in ${PLANTED_BUGS:-fwd90_packed unaligned}; do
      step "planted_$bug" 280 bash lab/planted_bug.sh "$bug"
    done
    ;;
  bench)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step benchmarks 480 bash benchmarks/run_benchmarks.sh "$OUT/bench"
    ;;
  hopper)  # after a Hopper-path change: hang-checked lab, numerics both ways, the suite's sm90 part, benchmarks
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step sm90_lab_schedule 240 bash lab/sm90_lab.sh schedule
    step quick_numerics_hopper 150 env FLASHATTN_BACKEND=hopper python3 lab/quick_check.py --numerics-only
    step pytest_ci 330 "${pytest_kernels[@]}"
    step benchmarks 300 env BENCH_MARKERS="bench and standard" bash benchmarks/run_benchmarks.sh "$OUT/bench"
    ;;
  tune)  # a Hopper kernel experiment: lab correctness + every speed table (configs, variants), the
         # suite's hopper part, the standard grid
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step sm90_lab_full 330 bash lab/sm90_lab.sh
    step pytest_hopper 200 "${pytest_ci[@]}" -m gpu --flashattn-backend=hopper
    step benchmarks 300 env BENCH_MARKERS="bench and standard" bash benchmarks/run_benchmarks.sh "$OUT/bench"
    ;;
  decode)  # the decode kernel's tile-config variants vs the default (no torch, no extension build)
    env_info > "$OUT/env.txt" 2>&1
    step decode_lab 330 bash lab/decode_lab.sh
    ;;
  decodecopy)  # 2026-11-29 (measured on an H200; docs/perf-notes.md "Decode: what caps the copy"): the read
               # probes on the decode grid's shapes and the large ones; kHopperStream/kHopperSplit padded
               # (as before 2026-11-29) with the L2 prefetch hint at 256, 128 bytes or none, against the
               # library's swizzled rows (checked on D=96 ragged tails too); no torch, no build
    env_info > "$OUT/env.txt" 2>&1
    step decode_lab_copy 200 env DECODE_LAB_ONLY=stream-,split-,read- bash lab/decode_lab.sh
    step decode_lab_copy_large 200 env DECODE_LAB_ONLY=stream-,split-,read-head-cp \
      DECODE_LAB_SHAPES="8:16384,16:32768,64:4096,64:32768,128:4096,256:4096" ./build/decode_lab
    step decode_lab_copy_tails 100 env DECODE_LAB_ONLY=stream-pad-l2-256,split-pad-l2-256,stream-sw DECODE_LAB_D=96 \
      DECODE_LAB_RAGGED=1 DECODE_LAB_SHAPES="1:1024,3:5000,8:4096,64:1024" ./build/decode_lab
    ;;
  decodesw)  # 2026-11-29: kHopperSplit and kHopperStream on dense swizzled K/V rows with a 128-byte L2
             # prefetch hint (lab/ab/decode_swizzle_l2_128.diff, in the tree): build, the decode and split
             # tests, the four sanitizers on the decode cases, the decode lab against the padded configs
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_decode 200 "${pytest_ci[@]}" tests/kernels/test_kvcache.py tests/kernels/test_fwd_split_gpu.py -ra
    sanitize_steps 90 auto decode decode memcheck racecheck synccheck initcheck
    step decode_lab_sw 200 env DECODE_LAB_ONLY=stream-pad-l2-256,split-pad-l2-256 bash lab/decode_lab.sh
    ;;
  decodebench)  # the decode grids of benchmarks/test_bench_decode.py (eager and replayed), every peer in .whl
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step bench_decode 480 env BENCH_MARKERS="bench and decode" bash benchmarks/run_benchmarks.sh "$OUT/bench"
    ;;
  decodeswab)  # 2026-11-29: decode_swizzle_l2_128.diff's A/B (REVERSE=1: A is the tree before it) as a
               # model decodes, CUDA-graph replays, FlashAttention-3 and SDPA alongside
    env_info > "$OUT/env.txt" 2>&1
    step ab_decode_sw 540 env PATCH=decode_swizzle_l2_128.diff REVERSE=1 OUT="$OUT/ab" \
      AB_CMD="python3 lab/decode_layers_time.py --heads 32:8,8:1 1:1024 1:16384 8:4096 8:16384 16:32768 64:1024 64:4096 128:4096" \
      bash lab/ab/run_ab.sh
    ;;
  explore)  # written-but-never-run experiments after a quiet spell: correctness first, then timings
    verify_steps
    step sm90_lab_variants 240 bash lab/sm90_lab.sh variants
    step decode_lab 200 bash lab/decode_lab.sh
    step ceilings 120 python3 lab/ceilings.py
    ;;
  fwdpfirst)  # measured 2026-12-01 (issue 29; 1.002, swap only 1.003: D=64 +1.4-2.3%, D=128 from 4k keys -1.9..-3.0%,
              # D=256 S=16k -4.3%; the D=64 part landed through fwdpfirstsel; these diffs apply to commit e6fcfeb's csrc):
              # step order 2 with P converted before O's rescale
              # (lab/ab/fwd_order2_p_first.diff; FWD_PFIRST_DIFF=fwd_p_first_swap_only.diff for the swap alone, D=128
              # left on order 0; fwd_order2_all_p_first.diff: every config on order 2, the three-consumer D=64 ones too). SASS: order 2 ran P's 32 conversions after rescale_o's branch, alone once the last
              # exponential had landed (what cost it the long D=128 cells); converted first they fill the gaps
              # between the exponentials, as in FlashAttention-3's step, at D=64, 128 and 256. Its A/B on the 16-bit
              # forward over all three head dims (FWD_PFIRST_CELLS), then the fwdq2 checks in the copy
    fwd_patch_ab fwdpfirst "${FWD_PFIRST_DIFF:-fwd_order2_p_first.diff}" \
      "${FWD_PFIRST_CELLS:-64:512:1 64:1024:1 64:2048:1 128:512:1 128:1024:1 128:4096:1 128:16384:1 128:512:0 128:4096:0 128:16384:0 256:1024:1 256:4096:1 256:16384:0}"
    ;;
  fwdfinalize)  # measured 2026-12-02 on an H200 (issue 29), not adopted (D=128 -2.5..-4%, perf-notes "The forward grid again"): the tile's finalize (softmax.cuh) with both rows'
                # quad sums first, the normalization by __fdividef (MUFU.RCP and a multiply) instead of the IEEE
                # division, whose slow-path call put a branch into each row's chain so that the two rows ran one
                # after the other at every tile's end, and dead rows selected away (SASS of the D=64 dynamic kernel:
                # no branch, the rows' shuffles and reciprocals interleaved with the epilogue's address math; 0 spills
                # in the 16-bit and FP8 kernels checked). Every Hopper forward kernel changes: its A/B on the 16-bit
                # cells, FWD_FINALIZE_CELLS, the checks in the copy, then on lab/fp8_time.py in the same copy
    fwd_patch_ab fwdfinalize "${FWD_FINALIZE_DIFF:-fwd_finalize_fast.diff}" \
      "${FWD_FINALIZE_CELLS:-64:512:1 64:1024:1 64:512:0 128:512:1 128:512:0 128:4096:1 256:1024:1 128:16384:0}"
    fp8_patch_ab fwdfinalizefp8 "${FWD_FINALIZE_DIFF:-fwd_finalize_fast.diff}" 0 "$PWD/build/ab-fwdfinalize"
    ;;
  fwdchains)  # measured 2026-12-02 on an H200, not adopted (issue 29; 0 to -1.7%): kSoftmaxChains 4 on D=64's two-consumer config and
              # D=128's default (lab/ab/fwd_softmax_chains.diff; 0 spills; the key-block loop's longest FADD
              # chain 17 -> 7 and FMNMX chain 18 -> 8 in the D=128 dynamic kernel's SASS, 6 more FADDs a block).
              # The ncu source counters at D=128 S=16k causal put 3.5x FlashAttention-3's FADD waits on ours
              # (perf-notes "The forward's waits named"); v11 measured 4 chains neutral before step order 2 and
              # P converted first. Its A/B on the cells it changes, FWD_CHAINS_CELLS, then the checks in the copy
    fwd_patch_ab fwdchains "${FWD_CHAINS_DIFF:-fwd_softmax_chains.diff}" \
      "${FWD_CHAINS_CELLS:-64:512:1 64:1024:1 64:2048:1 128:512:1 128:4096:1 128:16384:1 128:4096:0 128:16384:0}"
    ;;
  fwdpfirstsel)  # measured 2026-12-01 (issue 29), landed (16-bit D=64 causal +1.6-2.5%, FP8 1.015; FWD_PFIRSTSEL_REVERSE=1
                 # times it against the tree without it): P converted before O's rescale where it measured a gain
                 # (lab/ab/fwd_pfirst_select.diff: traits.h kConvertPFirst; the 16-bit D=64 two-consumer config,
                 # the FP8 forward at D=256 on step order 2). Its A/B on the 16-bit cells it changes (D=128 and
                 # D=256 as controls), the fwdq2 checks in the copy, then its A/B on lab/fp8_time.py in the same copy
    fwd_patch_ab fwdpfirstsel "${FWD_PFIRSTSEL_DIFF:-fwd_pfirst_select.diff}" \
      "${FWD_PFIRSTSEL_CELLS:-64:512:1 64:1024:1 64:2048:1 128:4096:1 256:16384:0}" "${FWD_PFIRSTSEL_REVERSE:-0}"
    fp8_patch_ab fwdpfirstselfp8 "${FWD_PFIRSTSEL_DIFF:-fwd_pfirst_select.diff}" "${FWD_PFIRSTSEL_REVERSE:-0}" "$PWD/build/ab-fwdpfirstsel"
    ;;
  fwdwg0waits)  # measured 2026-12-01 (issue 29), not adopted: 0.997 on the 16-bit forward, 0.983 on FP8. In the ping-pong forward only consumer warpgroup 0 waits for K and V to
                # land (consumer.cuh waits_kv, as FlashAttention-3's consumers do): the others' sections follow its
                # section for the same block, so the named barrier already orders the load before their GEMMs. ncu
                # at D=128 S=16k causal: every one of our consumer K/V waits succeeds on its first try_wait, yet the
                # branch after it holds ~50 cycles of long-scoreboard stall a step (FlashAttention-3 runs half as
                # many such waits). lab/ab/fwd_wg0_waits.diff's A/B on the 16-bit forward (FWD_WG0_CELLS), the fwdq2
                # checks in the copy, then its A/B on lab/fp8_time.py in the same copy
    fwd_patch_ab fwdwg0waits fwd_wg0_waits.diff \
      "${FWD_WG0_CELLS:-64:512:1 64:1024:1 64:4096:1 64:1024:0 128:512:1 128:1024:1 128:4096:1 128:16384:1 128:512:0 128:16384:0 256:1024:1 256:4096:0}"
    fp8_patch_ab fwdwg0waitsfp8 fwd_wg0_waits.diff 0 "$PWD/build/ab-fwdwg0waits"
    ;;
  fwdorder2)  # measured 2026-12-01 (issue 29), not adopted (1.005 geomean): the 16-bit forward in step order 2 (traits.h
              # kStepOrder; FWD_ORDER_DIFF: lab/ab/fwd_step_order2.diff, every head dim, the default, or
              # fwd_d128_order2.diff, D=128 alone; fwd_order2_two_consumers.diff, every two-consumer config, 1.005,
              # of which D=64's landed, so these diffs apply to commit ad6e730's csrc): P converted and O rescaled after the step's softmax, so that a
              # ping-pong turn issues the two GEMMs and nothing else, as FlashAttention-3's step does (SASS: order
              # 0's turn converts P, 32 F2FP, and rescales O when a maximum moved). ncu at D=128 S=16k:
              # FlashAttention-3's tensor pipe 88% busy to our 82.5%. Its A/B on D=64 and D=128 cells of both masks
              # (cuDNN and FlashAttention-3 alongside: carry .whl/), then the fwdq2 checks in the copy
    fwd_patch_ab fwdorder2 "${FWD_ORDER_DIFF:-fwd_step_order2.diff}" \
      "${FWD_ORDER_CELLS:-64:512:1 64:1024:1 64:4096:1 64:1024:0 128:512:1 128:1024:1 128:4096:1 128:16384:1 128:512:0 128:16384:0}"
    ;;
  fwdncu)  # issue 29: ncu on our forward, cuDNN's and FlashAttention-3's (carried in .whl/) side by side on
           # NCU_FWD_SHAPES (default: D=128 S=16k causal and not, where FlashAttention-3 leads the causal cell
           # by 4% and not the other), in NCU_FWD_DTYPE (bf16, the default, or fp16: ncu locks the clocks, so
           # fp16 against bf16 there says whether fp16's lower rate in the timed grid is the power limit)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step ncu_fwd 420 bash lab/ncu_fwd.sh ${NCU_FWD_SHAPES:-128:16384:1 128:16384:0}
    ;;
  diagnose)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step ncu_fwd 420 bash lab/ncu_fwd.sh 128:512:0 64:512:0 256:512:0 64:512:1
    step sm90_lab_variants 240 bash lab/sm90_lab.sh variants
    ;;
  final)  # what a full run's numbers come from: every correctness step, then every benchmark
    verify_steps
    step pytest_ci 330 "${pytest_kernels[@]}" --durations=15
    step ceilings 60 python3 lab/ceilings.py
    step benchmarks 330 bash benchmarks/run_benchmarks.sh "$OUT/bench"
    ;;
  bwdlab)  # a backward kernel experiment: numerics, the suite's backward tests, tile-config lab, ncu, timing
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step bwd_check_quick 200 python3 lab/bwd_check.py --quick
    step pytest_backward 300 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_public_gradients.py
    step bwd_lab 300 bash lab/bwd_lab.sh
    step ncu_bwd 420 bash lab/ncu_bwd.sh ${NCU_BWD_SHAPES:-64:4096:0 128:4096:0}
    step bwd_time 300 python3 lab/bwd_check.py --quick --time
    [ -n "${EXTRA_TESTS:-}" ] && step extra_tests 300 "${pytest_ci[@]}" $EXTRA_TESTS -ra
    ;;
  portableab)  # 2026-11-27: the portable backward against FlashAttention-2 (issue 27): the landed
               # lab/ab/portable_bwd_lean_dq.diff undone (side A) against this tree (two builds), timing with FA2
    env_info > "$OUT/env.txt" 2>&1
    step ab_lean_dq 580 env PATCH=portable_bwd_lean_dq.diff REVERSE=1 OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_check.py --time-only --time --portable --dtype bf16 --dims 64,128" bash lab/ab/run_ab.sh
    ;;
  portablelab)  # 2026-11-27: the portable backward's tile lab at D=64 (phase B's warp layout) and ncu
                # against FlashAttention-2 with instruction counts and shared-memory bank conflicts
    env_info > "$OUT/env.txt" 2>&1
    step bwd_lab_d64 300 env LAB_ONLY=d64 bash lab/bwd_lab.sh
    step ncu_bwd_portable 300 env NCU_BWD_BACKEND=portable bash lab/ncu_bwd.sh 64:4096:0 128:4096:0
    ;;
  portablesource)  # 2026-11-29 (measured on an H200: docs/perf-notes.md "The portable backward's stalls by
                   # instruction"): per-SASS-instruction stall samples of our main kernel and FA2's, D=64 S=4k
                   # non-causal unless PORTABLE_SOURCE_SHAPE (D:S:causal) says otherwise; compare with
                   # python3 lab/ncu_source_top.py --compare OURS.csv FA2.csv
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    shape="${PORTABLE_SOURCE_SHAPE:-64:4096:0}"
    step ncu_source_portable 300 env NCU_KERNEL=flash_bwd_kernel NCU_SCRIPT=lab/ncu_bwd.py NCU_BWD_BACKEND=portable \
      NCU_BWD_PEERS=0 NCU_TAG="portable_${shape//:/_}" bash lab/ncu_source.sh "$shape"
    step ncu_source_fa2 300 env NCU_KERNEL=flash_bwd_dq_dk_dv_loop NCU_SCRIPT=lab/ncu_bwd.py NCU_BWD_BACKEND=portable \
      NCU_TAG="fa2_${shape//:/_}" bash lab/ncu_source.sh "$shape"
    ;;
  fwdcheck)  # after a Hopper forward change, on a built tree: the sanitizers on the small dense cases (the
             # dynamic schedule's case included), the bf16 causal forward grid against cuDNN and FA3
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    sanitize_dense_steps 150
    step bench_fwd_causal 300 env FLASHATTN_BENCH_IMPLS="${FLASHATTN_BENCH_IMPLS:-flashattn,sdpa-default,fa3}" \
      BENCH_MARKERS="bench and standard" BENCH_K="bf16 and causal" bash benchmarks/run_benchmarks.sh "$OUT/bench"
    ;;
  fwdpacked)  # 2026-12-02: packed batches on the Hopper forward's packed flavour (flash_fwd_sm90_packed_kernel):
              # build, the packed-batch tests (both forward paths), the dense forward tests, memcheck on the
              # small packed and bad-index cases, racecheck/synccheck/initcheck on the packed ones, then the
              # packed-batch benchmark beside the dense call and FlashAttention-3's varlen (tokenspeed-fa3 in .whl/)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step pytest_varlen 420 "${pytest_ci[@]}" tests/kernels/test_varlen_gpu.py tests/kernels/test_torch_impl_gpu.py \
      tests/kernels/test_check_indices_gpu.py tests/kernels/test_attention_gpu.py -ra
    # initcheck is left out: it reports every read of what a TMA store wrote (docs/sanitizer.md), and
    # the Hopper forward stores O with TMA; lab/sanitize.sh runs it gated on the portable paths.
    for tool in memcheck racecheck synccheck; do
      groups=varlen; quick=--quick; extra=()
      [ "$tool" = memcheck ] && groups=varlen,bad && quick=
      [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
      step "${tool}_varlen" 240 env SANITIZE_BACKENDS=auto compute-sanitizer --tool "$tool" "${extra[@]}" \
        --error-exitcode 99 python3 lab/sanitize_small.py --only "$groups" $quick
    done
    step bench_varlen 240 python3 -m pytest -q -s -p no:cacheprovider benchmarks/test_bench_varlen.py \
      -m "bench and varlen" -ra --benchmark-json="$OUT/bench-varlen.json"
    ;;
  fwdsmallgrid)  # 2026-12-02 (issue 28): a D <= 64 call of at most 1024 keys whose 64-row tiles fill at most half
                 # the SMs runs one consumer warpgroup a CTA (traits.h Sm90SmallGridConfig), split past two key
                 # blocks: the forward tests, the A/B (lab/fwd_split_time.py --small-grid, FLASHATTN_FWD_SMALL_GRID=0
                 # the tree before), the sanitizers on the small dense and split cases.
                 # SMALL_GRID_KEYS=<n>: the tests and sanitizers with the key bound at n (FLASHATTN_FWD_SMALL_GRID;
                 # the tests that set it themselves keep theirs), before a default moves
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    keys=()
    [ -n "${SMALL_GRID_KEYS:-}" ] && keys=(env FLASHATTN_FWD_SMALL_GRID="$SMALL_GRID_KEYS")
    step pytest_fwd 240 "${keys[@]}" "${pytest_ci[@]}" tests/kernels/test_fwd_split_gpu.py tests/kernels/test_attention_gpu.py \
      tests/kernels/test_window_gpu.py -ra
    step small_grid_ab 150 python3 lab/fwd_split_time.py --small-grid
    if [ -n "${SMALL_GRID_KEYS:-}" ]; then
      FLASHATTN_FWD_SMALL_GRID=$SMALL_GRID_KEYS sanitize_steps 90 auto dense,split small_grid_keys
    else
      sanitize_steps 90 auto dense,split small_grid
    fi
    ;;
  fwdsmallgridkeys)  # measured 2026-12-02 (issue 28; +14-20% to 768 keys, -6% at 4k: the bound wants 1024): Sm90SmallGridConfig past 256 keys, split
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step pytest_split_keys 120 env FLASHATTN_FWD_SMALL_GRID=65536 "${pytest_ci[@]}" tests/kernels/test_fwd_split_gpu.py \
      -k "split_forward_matches_reference or small_grids" -ra
    step small_grid_keys_ab 150 python3 lab/fwd_split_time.py --small-grid-keys
    FLASHATTN_FWD_SMALL_GRID=65536 sanitize_steps 90 auto split split_keys memcheck racecheck
    ;;
  varlenloop)  # the rare `misaligned address` of 2026-12-02 found by it (a contiguous view at an unaligned address, fixed): packed batches drawn as the padded-equivalence
               # test draws them, each spec printed before its calls, CUDA_LAUNCH_BLOCKING=1 (VARLEN_LOOP_N iterations a
               # backend, default 300): the last spec printed names the failing call
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    for backend in portable auto; do
      step "varlenloop_$backend" 280 env CUDA_LAUNCH_BLOCKING=1 python3 lab/varlen_equivalence_loop.py \
        --iterations "${VARLEN_LOOP_N:-300}" --backend "$backend"
    done
    ;;
  fwdpackedkeys)  # measured 2026-12-02 on an H200, not adopted (the two configs tie on the mix): the packed Hopper forward's config by the sequences' mean key
                  # count instead of the bound (lab/ab/fwd_packed_mean_keys.diff: D=64 causal packed batches of mostly
                  # short sequences on the 128-row default config, not the long-keys one): its A/B on lab/varlen_time.py
                  # (forward and backward ms of the varlen benchmark's packing), then the packed-batch tests in the copy
    env_info > "$OUT/env.txt" 2>&1
    step ab_fwdpackedkeys 480 env PATCH=fwd_packed_mean_keys.diff REVERSE=0 AB_COPY="$PWD/build/ab-fwdpackedkeys" \
      OUT="$OUT/ab" AB_CMD="python3 lab/varlen_time.py" bash lab/ab/run_ab.sh
    step pytest_fwdpackedkeys 300 bash -c "cd '$PWD/build/ab-fwdpackedkeys' && PYTHONPATH='$PWD/build/ab-fwdpackedkeys' \
      FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_varlen_gpu.py -ra"
    ;;
  fwdgrid)  # issue 29's forward grid (benchmarks' "standard": D 64/128/256, S 512..16k, causal on/off; 36 shapes a
            # dtype) against cuDNN/SDPA and FlashAttention-3 (tokenspeed-fa3 carried in .whl/), for each dtype in
            # FWDGRID_K (default bf16; "bf16 fp16" runs both back to back, a folder bench-DTYPE and a step log each),
            # then the FP8 forward's errors and speed against FlashAttention-3's (FWDGRID_FP8=0: not), then the
            # packed-batch benchmark (FWDGRID_VARLEN=0: not)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    for k in ${FWDGRID_K:-bf16}; do
      # The SM clock and power beside the grid (5 a second): whether fp16's lower rate than bf16's on the
      # same SASS (perf-notes, 2026-12-03) is the clock. FWDGRID_CLOCKS=0: not.
      clock_pid=""
      if [ "${FWDGRID_CLOCKS:-1}" = 1 ] && command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 200 \
          > "$OUT/clocks-$k.csv" 2>&1 &
        clock_pid=$!
      fi
      step "bench_fwd_$k" 480 env FLASHATTN_BENCH_IMPLS="${FLASHATTN_BENCH_IMPLS:-flashattn,sdpa-default,fa3}" \
        BENCH_MARKERS="bench and standard" BENCH_K="$k" bash benchmarks/run_benchmarks.sh "$OUT/bench-$k"
      if [ -n "$clock_pid" ]; then kill "$clock_pid" 2>/dev/null; wait "$clock_pid" 2>/dev/null || true; fi
    done
    [ "${FWDGRID_FP8:-1}" = 1 ] && step fp8_time 120 python3 lab/fp8_time.py --check
    # Packed batches beside the dense Hopper call and FlashAttention-3's varlen (TFLOP/s printed per case)
    [ "${FWDGRID_VARLEN:-1}" = 1 ] && step bench_varlen 240 python3 -m pytest -q -s -p no:cacheprovider \
      benchmarks/test_bench_varlen.py -m "bench and varlen" -ra --benchmark-json="$OUT/bench-varlen.json"
    ;;
  powerprobe)  # issue 29: each implementation's forward held 3 s a cell while nvidia-smi samples the SM clock, the power
              # draw and the clock-event reasons (lab/power_probe.py; POWER_CELLS, default D=128 S=16k and 4k
              # non-causal, D=64 S=512 causal; both dtypes): whether fp16's lower rate than bf16's on the same
              # SASS (ours and cuDNN's; FlashAttention-3's fp16 matches its bf16) is the board's power limit.
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step power 240 python3 lab/power_probe.py ${POWER_CELLS:-}
    ;;
  flexgrid)  # measured 2026-12-03 with led batches (ours 1.51x forward, 1.44x backward; 2026-12-02's 1.59x / 1.48x counted its host time): torch's FlexAttention (benchmarks' opt-in `flex`, compiled, a block
             # mask for causal) beside ours, cuDNN and FlashAttention-3 on the quick shapes of the forward grid
             # (bf16, D 64/128, S 1k/4k/16k, both masks; D=128 GQA 16/4 at S=4k), then beside ours and cuDNN on
             # the same shapes' backward and forward+backward (the training grid's quick cases)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step bench_flex_fwd 300 env FLASHATTN_BENCH_IMPLS="flashattn,sdpa-default,fa3,flex" \
      BENCH_MARKERS="bench and standard and quick" bash benchmarks/run_benchmarks.sh "$OUT/bench-flex-fwd"
    step bench_flex_training 280 env FLASHATTN_BENCH_IMPLS="flashattn,sdpa-default,flex" \
      BENCH_MARKERS="bench and training and quick" bash benchmarks/run_benchmarks.sh "$OUT/bench-flex-training"
    ;;
  windowflex)  # measured 2026-12-02 (every windowed cell of ours 1.22-1.47x faster than FlexAttention; issue 27's windows and softcap bars): the causal sliding-window
               # backward's cost per useful FLOP against the causal call, ours and FlexAttention's (its own causal
               # call), D 64/128, S=16k, windows 256..8192 (lab/bwd_window_time.py --flex); then the softcap's
               # cost on the backward, ours and FlexAttention's (lab/bwd_softcap_time.py --flex)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step window_flex 300 python3 lab/bwd_window_time.py --flex
    step softcap_flex 240 python3 lab/bwd_softcap_time.py --hopper-only --flex
    ;;
  tmal2ab)  # 2026-11-29 (measured on an H200: within +-0.7%, not adopted): the Hopper paths' TMA maps with 128-byte
            # L2 promotion instead of 256 (lab/ab/tma_l2_128.diff, REVERSE=0: B is the patched copy), on the FP8 forward
    env_info > "$OUT/env.txt" 2>&1
    fp8_patch_ab tma_l2 tma_l2_128.diff 0
    ;;
  dqpair)  # 2026-11-30 (issue 27; measured on an H200: correct, 1.005x from 2k keys, 0.68-0.73x at S <= 1k,
           # deterministic mode's cost 1.3 -> 1.45: not adopted): the D=256 Hopper backward in two-CTA clusters
           # summing their dQ tiles over distributed shared memory, each CTA adding half the tile
           # (lab/ab/bwd_dq_cluster_pair_d256.diff; dense calls without a mask, even key blocks, both
           # modes): hopper_switch_ab's steps, the tree's own timing among them.
    hopper_switch_ab dqpair bwd_dq_cluster_pair_d256.diff FLASHATTN_BWD_PAIR pair 1
    ;;
  bwdmulticast)  # measured 2026-11-30 on an H200, not adopted (issue 27; -4..+2% from 2k keys, -22..-25% at S <= 1k
                 # non-causal; perf-notes "The prepared probes answered"): the D=256 Hopper backward in two-CTA clusters,
                 # each step's Q and dO loaded once for both by TMA multicast (lab/ab/bwd_qdo_multicast_d256.diff;
                 # dense calls without a mask, default mode, even key blocks): hopper_switch_ab's steps.
    hopper_switch_ab multicast bwd_qdo_multicast_d256.diff FLASHATTN_BWD_MULTICAST mc
    ;;
  fwdq2)  # 2026-11-30 (issue 29): the Hopper forward with two Q buffers at D=64/128 (lab/ab/fwd_q_double_buffer.diff),
          # after the tile timeline measured 0.8-1.0 us a tile before Q (measured 2026-11-30 on an H200: no gain,
          # not adopted; perf-notes "The prepared probes answered"): its A/B on the short and long
          # D=64/128 cells (lab/fwd_time.py, cuDNN alongside), then in the copy the forward, window, split and
          # FP8 tests and memcheck/racecheck/synccheck on the small dense, split and FP8 cases
    fwd_patch_ab fwdq2 fwd_q_double_buffer.diff \
      "${FWD_Q2_CELLS:-64:512:1 64:1024:1 64:4096:1 64:512:0 64:4096:0 128:512:1 128:1024:1 128:512:0 128:4096:0 128:16384:1}"
    ;;
  fwdd128q2)  # issue 29, measured 2026-12-03 on an H200, not adopted (geomean 1.0005; the target cell 0.991): D=128's default config with two Q buffers
              # (lab/ab/fwd_d128_q_double_buffer.diff: kQStages 2, 224 KB of shared memory; 0 spills on sm_90a),
              # since the tile timeline of 2026-12-03 found every 4-block tile of D=128 non-causal S=512 waiting
              # 0.36 us for its Q (4.5% of the tile), a cell 0.96-0.97x cuDNN; fwdq2 (2026-11-30, D=64 and D=128)
              # never timed that cell. Its A/B on D=128 cells of both masks and a D=64 control, then the fwdq2
              # checks in the copy. Prediction: D=128 non-causal 512 +1-3%, 1k +0-2%, causal 512 / 1k 0..+1.5%,
              # 4k-16k +-1%, the D=64 control +-1%. Then, for the phases:
              # FWD_TIMELINE_DIFF="lab_fwd_tile_timeline.diff fwd_d128_q_double_buffer.diff"
              # FWD_TIMELINE_CELLS="128:512:0 128:512:1" bash lab/gpu_run.sh fwdtimeline (q_wait ~0.1 us predicted).
    fwd_patch_ab fwdd128q2 fwd_d128_q_double_buffer.diff \
      "${FWD_D128_Q2_CELLS:-128:512:0 128:1024:0 128:512:1 128:1024:1 128:4096:0 128:16384:0 128:16384:1 64:512:1}"
    ;;
  fwdvwait)  # issue 29, measured 2026-12-03 on an H200, not adopted (0.983; D=128 from 4k keys -5%): the consumers' wait for V[n+1] moved from inside their ping-pong
             # section (between the S = Q K^T and the P V issue) to before the turn (lab/ab/fwd_v_wait_before_turn.diff);
             # V[n+1] landed with K[n+1] a step earlier, so the wait is one try_wait round trip (~50 cycles a step in the
             # source counters of 2026-12-01) that the section no longer holds. Every config changes (the loop is
             # shared). Prediction: D=128 +0-2% (FlashAttention-3 leads by 3-7% there), D=64 causal S <= 1k +0-1.5%,
             # the rest +-1%. Its A/B, then the fwdq2 checks in the copy.
    fwd_patch_ab fwdvwait fwd_v_wait_before_turn.diff \
      "${FWD_VWAIT_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:2048:1 128:16384:1 64:512:1 64:4096:0 256:4096:0}"
    ;;
  fwdtoken)  # issue 29, measured 2026-12-03 on an H200, not adopted (0.997; D=128 +0.1..+1.4%, D=256 order 2 -8%): each consumer K/V wait asked a step ahead (mbarrier.test_wait right after the
             # previous release; the wait proper only where it said no: lab/ab/fwd_wait_token.diff). The 2026-12-01
             # source counters put ~50 cycles a step on the branch after each first-try TRYWAIT (every wait had
             # landed); asked ahead, that round trip runs under the softmax and the other warpgroup's turn. Every
             # config changes (the loop is shared). Prediction: D=128 +0.5-2.5%, D=64 causal S <= 1k +0-2%, the
             # rest +-1%. Its A/B, then the fwdq2 checks in the copy.
    fwd_patch_ab fwdtoken fwd_wait_token.diff \
      "${FWD_TOKEN_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:2048:1 128:16384:1 64:512:1 64:4096:0 256:4096:0}"
    ;;
  fwdtokensel)  # issue 29, measured 2026-12-03 on an H200, not adopted (0.995, D=128 causal 2k -4.6%; FP8 1.000): fwdtoken's waits asked ahead on the step orders 0 and 1 only (D=128, D=64's three-consumer
                # and small-grid configs, FP8 D=128; lab/ab/fwd_wait_token_order01.diff): fwdtoken measured D=128 +0.1..+1.4%
                # over five cells but D=256 (order 2) -8%. Prediction: D=128 +0.5-1.5%, the order-2 kernels unchanged
                # (D=256 control within noise), FP8 D=128 +0-1.5%. Its A/B on the 16-bit forward, the fwdq2 checks
                # and the packed-batch tests in the copy, then its A/B on lab/fp8_time.py in the same copy.
    fwd_patch_ab fwdtokensel fwd_wait_token_order01.diff \
      "${FWD_TOKENSEL_CELLS:-128:512:1 128:1024:0 128:4096:0 128:16384:0 128:2048:1 128:16384:1 64:4096:0 64:4096:1 256:4096:0}"
    step pytest_fwdtokensel_packed 150 bash -c "cd '$PWD/build/ab-fwdtokensel' && PYTHONPATH='$PWD/build/ab-fwdtokensel' \
      FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_varlen_gpu.py -ra"
    fp8_patch_ab fwdtokenselfp8 fwd_wait_token_order01.diff 0 "$PWD/build/ab-fwdtokensel"
    ;;
  fwdrelease)  # issue 29, measured 2026-12-03 on an H200, not adopted (0.990): the consumers release each Q, K and V stage with one arrival a warp
               # (lane 0, once its warp has waited for the wgmma that read it; the empty barriers count
               # kConsumerThreads / 32) instead of one a thread: 32 times fewer arrivals on the barrier a release.
               # FlashAttention-3's pipelines (CUTLASS's PipelineTmaAsync) arrive once a warpgroup; its consumers'
               # K/V waits cost it ~1.3 k samples against our ~3 k (source counters of 2026-12-01). Prediction:
               # D=128 +0-2%, D=64 causal S <= 1k +0-2%, the rest +-1%. Its A/B, then the fwdq2 checks in the copy.
    fwd_patch_ab fwdrelease fwd_release_one_lane.diff \
      "${FWD_RELEASE_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:2048:1 128:16384:1 64:512:1 64:4096:0 256:4096:0}"
    ;;
  fwdunmasked)  # issue 29, measured 2026-12-03 on an H200, not adopted (0.983): the consumers' key-block walk as three loops over one step
                # body, the masked upper edge blocks, the unmasked blocks with the mask compiled out, the masked
                # lower ones (lab/ab/fwd_unmasked_loop.diff), as FlashAttention-3 runs its unmasked steps in a loop
                # of their own (472 instructions a step; ours one loop of 1069 with the mask behind a uniform
                # branch; with the diff, sm_90a D=128 bf16 static: the unmasked loop 724 instructions, the
                # masked ones 1055-1058, the kernel 6456 instructions against 4664; 0 spills in the 103 forward
                # kernels). Prediction: D=128 +0-1.5%, the rest +-1%. Its A/B, then the fwdq2 checks in the copy.
    fwd_patch_ab fwdunmasked fwd_unmasked_loop.diff \
      "${FWD_UNMASKED_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:2048:1 128:16384:1 64:512:1 64:4096:0 256:4096:1}"
    ;;
  fwdstreamq2)  # 2026-11-30 (issue 29; measured on an H200: 0.938, not adopted): fwdstream with two Q buffers (lab/ab/fwd_q_double_buffer.diff on top), so the
                # next tile's Q is resident when the streamed step needs it (the D=128 dynamic kernels spill 8 B with both)
    fwd_patch_ab fwdstreamq2 "fwd_stream_tiles.diff fwd_q_double_buffer.diff" \
      "${FWD_STREAM_CELLS:-64:512:1 64:1024:1 64:2048:1 64:512:0 128:512:1 128:1024:1 128:4096:1 128:512:0 128:16384:0}"
    ;;
  fwdstream)  # 2026-11-30 (issue 29; measured on an H200: 0.942, not adopted): the Hopper forward's tiles streamed (lab/ab/fwd_stream_tiles.diff,
              # consumer_stream.cuh: a tile's last P V and the next tile's first S = Q K^T in one step, the next tile's
              # first softmax under the last P V): its A/B on short and long cells of both masks, then the fwdq2
              # stage's tests and sanitizers in the copy
    fwd_patch_ab fwdstream fwd_stream_tiles.diff \
      "${FWD_STREAM_CELLS:-64:512:1 64:1024:1 64:2048:1 64:512:0 128:512:1 128:1024:1 128:4096:1 128:512:0 128:16384:0}"
    ;;
  fwdd64otma)  # 2026-12-02 (issue 29; measured on an H200: causal S=512 +3.2-3.6% against cuDNN, 1k +1.1-1.3%, 2k -0.3..-2.4%,
               # landed): D=64's default config (causal and windowed calls below 4k keys, split calls) with O through
               # shared memory and TMA stores (lab/ab/fwd_d64_o_tma.diff: kOTma, as D=128's since 2026-11-23, applied in
               # reverse since it landed: side B is the tree without it), so that the next tile's O clear no longer waits
               # for the register stores to read their operands: its A/B on short and long D=64 cells of both masks,
               # then the fwdq2 stage's tests and sanitizers in the copy
    fwd_patch_ab fwdd64otma fwd_d64_o_tma.diff \
      "${FWD_D64_OTMA_CELLS:-64:512:1 64:1024:1 64:2048:1 64:512:0 64:1024:0 64:4096:1 128:1024:1}" 1
    ;;
  fwdd64widetma)  # 2026-12-02 (issue 29; measured on an H200, landed for the non-causal config): D=64's three-warpgroup
                  # non-causal config (192-row tiles) with O through shared memory and TMA stores, as D=64's default
                  # config (lab/ab/fwd_d64_noncausal_o_tma.diff, applied in reverse since it landed: side B is the tree
                  # without it; S=512 +1.3-3.1%, 1k +1.8-3.4%, 4k-16k within +-3%). The long-keys causal config with the
                  # same store lost 1.2-3.2% at 4k and 4.8-6.1% at 16k: FWD_WIDE_OTMA_DIFF=fwd_d64_long_keys_o_tma.diff
                  # FWD_WIDE_OTMA_REVERSE=0 repeats that. Its A/B on the cells those configs serve and a default-config
                  # control, then the fwdq2 stage's tests and sanitizers in the copy
    fwd_patch_ab fwdd64widetma "${FWD_WIDE_OTMA_DIFF:-fwd_d64_noncausal_o_tma.diff}" \
      "${FWD_D64_WIDE_OTMA_CELLS:-64:512:0 64:1024:0 64:4096:0 64:16384:0 64:4096:1 64:16384:1 64:1024:1}" \
      "${FWD_WIDE_OTMA_REVERSE:-1}"
    ;;
  fwdd64longkeys2k)  # issue 29: D=64 causal calls from 2048 keys on the long-keys config (192 x 128 tiles, three consumer
                     # warpgroups) where those tiles fill at least 8 waves (traits.h kSm90LongKeysFullGridWaves then), the
                     # default config below (lab/ab/fwd_d64_long_keys_full_grid.diff: the rule, the balance model's
                     # tile shape and the test that pins which config serves a call; measured 2026-12-02 on an H200:
                     # 2k +5.5-6.0%, 3k +10.8-12.9%, 2.5k +3.0-3.2%, 3.5k +8.5-10.4%, the 8-wave cell -0.6..+0.9%, the
                     # kernel tests 2936 passed and the sanitizers clean in the copy; landed, REVERSE=1 undoes it on trees up
                     # to 6e2a873).
                     # FWD_LONG_KEYS_DIFF=fwd_d64_long_keys_2k.diff FWD_LONG_KEYS_REVERSE=0 (trees before the landing)
                     # is the lab form measured 2026-12-02 on an H200
                     # (any grid over half the SMs: standard 2k +2.9-4.8%, 3k +10.2-10.9%, B=2 H=16 2k -1.6..-2.8%).
                     # Its A/B on 2k-3k causal cells (one at exactly 8 waves of 132 SMs) with cuDNN and
                     # FlashAttention-3 beside, a small-grid and two default-rule controls, then the fwdq2 checks
    # The kernel tests whole in the copy (FWD_COPY_WHOLE): landing it then needs no fwdland call.
    FWD_COPY_WHOLE="${FWD_COPY_WHOLE:-1}" fwd_patch_ab fwdd64longkeys2k "${FWD_LONG_KEYS_DIFF:-fwd_d64_long_keys_full_grid.diff}" \
      "${FWD_LONG_KEYS_2K_CELLS:-64:2048:1 64:2560:1 64:3072:1 64:3584:1 64:2048:1:1:96 64:2048:1:2:16 64:2048:1:1:4 64:1024:1 64:4096:1}" \
      "${FWD_LONG_KEYS_REVERSE:-1}"
    ;;
  fwdpartialfirst)  # issue 29: the Hopper forward's query tiles shifted so that under a causal mask or a local
                    # window the partial tile is the first (the shortest: it sees the fewest keys), not the last (the
                    # longest), whose unused rows otherwise cost a full tile's work on every key (Sm90Params::
                    # q_row_shift; lab/ab/fwd_partial_tile_first.diff). Its first all-config form measured 2026-12-03
                    # (H200): the long-keys cells +0..+11%, D=128 S=1000 -1..-4.5% (128-row tiles over 128-key blocks
                    # see the same key blocks shifted or not), a 3k long-keys control -3%. This form shifts the
                    # long-keys config's 192-row tiles only (Traits::kPartialTileFirst; every other kernel's PTX
                    # unchanged, tools/kernel_identity.py), measured 2026-12-03 on an H200: 2k +4.7-6.0%, 2.5k
                    # +3.0-6.2%, 3.5k +2.7-2.9%, 4k +5.4-9.4%, 8k +1.4-2.0%, 16k +0.3-1.7%, the unshifted 3k
                    # -1.6..+0.2%, the unchanged kernels -2.6..+1.7%; the kernel tests 2941 passed and the
                    # sanitizers clean in the copy; landed, REVERSE=1 undoes it. Cells: D=64 causal 2k, 2.5k, 3.5k, 4k, 8k, 16k (partial
                    # 192-row tiles); 3k (192 x 16, no shift) on the same kernel; D=128 S=1000/1024 causal and D=64 4k
                    # non-causal on unchanged kernels (the noise). Then fwdland's checks in the copy (the kernel tests
                    # whole, the sanitizers), so landing it needs no second call.
    FWD_COPY_WHOLE="${FWD_COPY_WHOLE:-1}" fwd_patch_ab fwdpartialfirst fwd_partial_tile_first.diff \
      "${FWD_PARTIAL_FIRST_CELLS:-64:2048:1 64:2560:1 64:3584:1 64:4096:1 64:8192:1 64:16384:1 128:1000:1 64:3072:1 128:1024:1 64:4096:0}" \
      "${FWD_PARTIAL_FIRST_REVERSE:-1}"
    ;;
  fwdd64longkeys512)  # issue 29, measured 2026-12-03 on an H200 (1.5k +3.8-6.0%, 1k -0.6..-2.4%, 768 -3..-5%, 512
                      # -9..-11%; the bound lands at 1536 through fwdd64longkeys1536): the long-keys rule's key bound from 2048 down to 512
                      # (traits.h kSm90LongKeysFullGridMin; lab/ab/fwd_d64_long_keys_512.diff, a lab form), now that the
                      # long-keys config puts its partial tile first: D=64 causal 512 / 1k at 0.92 / 0.95x cuDNN are
                      # issue 29's lowest cells, their 128-row tiles pay a tile's setup and epilogue for 1-8 key
                      # blocks, and 192-row tiles of three consumer warpgroups are fewer tiles (at 1k 6 instead of 8
                      # a head, 12.5% more MMA rows). Cells: 512, 768, 1k, 1.5k causal on full grids; 2k and 4k on the
                      # long-keys config either side and a 1k grid of 2.7 waves on the default config (controls).
    fwd_patch_ab fwdd64longkeys512 fwd_d64_long_keys_512.diff \
      "${FWD_LONG_KEYS_512_CELLS:-64:512:1 64:768:1 64:1024:1 64:1536:1 64:2048:1 64:1024:1:2:8 64:4096:1}"
    ;;
  fwdd64longkeys1536)  # issue 29: the long-keys rule's key bound at 1536 instead of 2048 (traits.h
                       # kSm90LongKeysFullGridMin, the balance model, the GPU test's cases;
                       # lab/ab/fwd_d64_long_keys_1536.diff), as fwdd64longkeys512 measured it: 1.5k gains, 1k loses.
                       # Measured 2026-12-03 on an H200 with REVERSE=0: 1.5k +4.7%, 1.75k +5.6%, the unmoved 1k, 2k
                       # and 1.5k-on-2-waves cells -1.4..-0.3%; the kernel tests 2941 passed and the sanitizers clean
                       # in the copy; landed, REVERSE=1 undoes it on trees up to commit e71d8c0 (the 1.5-wave rule
                       # rewrote its lines after). Cells: 1.5k (a multiple of 192) and 1.75k (10
                       # tiles, a 128-row shift) on full grids, which move; 1k, 2k and a 1.5k grid of 2 waves, which
                       # do not. Then fwdland's checks in the copy (the kernel tests whole, the sanitizers).
    FWD_COPY_WHOLE="${FWD_COPY_WHOLE:-1}" fwd_patch_ab fwdd64longkeys1536 fwd_d64_long_keys_1536.diff \
      "${FWD_LONG_KEYS_1536_CELLS:-64:1536:1 64:1792:1 64:1024:1 64:2048:1 64:1536:1:1:32}" \
      "${FWD_LONG_KEYS_1536_REVERSE:-1}"
    ;;
  fwdd64fewwaves)  # issue 29, measured 2026-12-03 on an H200, not adopted (the default config on those cells: 4k at 2.6 /
                   # 5.3 waves -5.4 / -11.6%, 8k -7.2%, 16k -8.8%, the 8-wave and standard controls -0.7..-0.9%; the
                   # long-keys config's partial tile first had tilted them its way): the other side of fwdd64longkeys2k's rule, D=64 causal calls of
                   # 4096 keys or more whose 192-row long-keys tiles fill more than half the SMs but under 8 waves on the
                   # default config's 128-row tiles (lab/ab/fwd_d64_long_keys_few_waves_default.diff, a lab form): whether the
                   # loss of the taller tiles on few waves seen at 2048 keys holds from 4096. Its A/B on 2.6-5.3-wave cells
                   # and an 8-wave and a standard-grid control, then the fwdq2 checks
    fwd_patch_ab fwdd64fewwaves fwd_d64_long_keys_few_waves_default.diff \
      "${FWD_FEW_WAVES_CELLS:-64:4096:1:1:16 64:4096:1:1:32 64:8192:1:1:8 64:16384:1:1:4 64:4096:1:1:48 64:4096:1}"
    ;;
  fwdd64longkeysonewave)  # issue 29: the long-keys rule's waves bound at one wave instead of 8
                          # (lab/ab/fwd_d64_long_keys_one_wave.diff, a lab form on commit 05e1645; measured 2026-12-03
                          # on an H200 with REVERSE=0: 2k on 1.3 / 2.7 / 5.3 waves -6.1 / +2.2 / +6.5%, 1.5k on 1.9
                          # +5.6%, 3k on 3.9 +7.2%, the controls 1.000-1.001; landed from 1.5 waves,
                          # traits.h kSm90LongKeysGridHalfWaves = 3, lab/ab/fwd_d64_long_keys_1_5_waves.diff, which
                          # this stage now undoes, FWD_ONE_WAVE_REVERSE=1), since fwdd64fewwaves measured the
                          # default config 5-12% behind the long-keys config on 2.6-5.3-wave cells from 4096 keys once
                          # the partial tile went first (its 2k loss on 2.7 waves, -1.6..-2.8%, predates that).
                          # Measured again 2026-12-03 on a588ca7 (REVERSE=1, cells 1536 H=25, 2048 H=18, 2048 B=2 H=16:
                          # -2.9 / -3.8 / -1.6% for the rule), then its bound at 1.75 waves on another H200
                          # (FWD_ONE_WAVE_DIFF=fwd_d64_long_keys_7_quarter_waves.diff FWD_ONE_WAVE_REVERSE=0: 2048 H=18
                          # +4.3% for the rule there, 2048 H=20 +5.4%, 1536 H=28 -7.6%; not adopted, perf-notes
                          # "The landed 1.5-wave rule on a GPU").
                          # Cells (D=64 causal, moved): 2k on 2.7, 1.3 and 5.3 waves of 192-row tiles, 1.5k on 1.9,
                          # 3k on 3.9; unmoved controls: 1.5k on 0.97 waves, the standard 2k (long-keys either side).
                          # Then the fwdq2 checks in the copy (the GPU test pins the rule at one wave there).
    fwd_patch_ab fwdd64longkeysonewave "${FWD_ONE_WAVE_DIFF:-fwd_d64_long_keys_1_5_waves.diff}" \
      "${FWD_ONE_WAVE_CELLS:-64:2048:1:2:16 64:2048:1:1:16 64:2048:1:4:16 64:1536:1:1:32 64:3072:1:1:32 64:1536:1:1:16 64:2048:1}" \
      "${FWD_ONE_WAVE_REVERSE:-1}"
    ;;
  fwdostore)  # 2026-11-30 (issue 29; measured on an H200: 1.000, not adopted): the Hopper forward's register epilogue (D=64's configs) with
              # O transposed across each quad of lanes and stored 16 bytes a lane (lab/ab/fwd_o_store_16b.diff): its A/B
              # on short cells of both masks, then the fwdq2 stage's tests and sanitizers in the copy
    fwd_patch_ab fwdostore fwd_o_store_16b.diff \
      "${FWD_O_STORE_CELLS:-64:512:1 64:1024:1 64:2048:1 64:4096:1 64:512:0 64:1024:0 64:4096:0 128:1024:1}"
    ;;
  fwdhalffirst)  # 2026-11-30 (issue 29; measured on an H200: 0.995, not adopted): the Hopper forward's first key block of a tile at half
                 # width (N = kBlockN / 2 GEMM, half the softmax) for a consumer warpgroup whose rows see none of its
                 # later half, the causal diagonal's upper triangle for warpgroup 0 (lab/ab/fwd_half_first_block.diff):
                 # its A/B on the causal short cells, one long and one unmasked (lab/fwd_time.py, cuDNN alongside), then
                 # the fwdq2 stage's tests and sanitizers in the copy
    fwd_patch_ab fwdhalffirst fwd_half_first_block.diff \
      "${FWD_HALF_FIRST_CELLS:-64:512:1 64:1024:1 64:2048:1 128:512:1 128:1024:1 128:4096:1 64:4096:1 64:1024:0}"
    ;;
  fwdtilework)  # 2026-11-30 (issue 29; measured on an H200: D=64 causal +2-3%, landed): the Hopper forward's
                # dynamic schedule publishing each tile's decoded coordinates and split with its index
                # (lab/ab/fwd_tile_decode_published.diff, applied in reverse since it landed: REVERSE=1 measures the tree
                # without it; it reverses on commit 8b08062's csrc, the dynamic schedule has carried no split since):
                # its A/B on the causal short cells and two long ones (lab/fwd_time.py, cuDNN alongside),
                # then the fwdq2 stage's tests and sanitizers in the copy
    fwd_patch_ab fwdtilework fwd_tile_decode_published.diff \
      "${FWD_TILEWORK_CELLS:-64:512:1 64:1024:1 64:2048:1 128:512:1 128:1024:1 256:1024:1 64:4096:1 128:16384:1}" 1
    ;;
  fwdtimeline)  # 2026-11-30 (issue 29; measured on an H200, the start stamps since moved; the diff rebased 2026-12-03 onto the
                # packed flavour and the partial tile first, run on a588ca7 the same day: D=64 causal 512's first softmax
                # 21-22% of the time, perf-notes "The landed 1.5-wave rule on a GPU"): where a Hopper forward tile's time goes, phase by
                # phase (lab/ab/lab_fwd_tile_timeline.diff: SM clock stamps of each consumer warpgroup per tile;
                # lab/fwd_tile_timeline.py reads them), on the short causal cells where cuDNN leads and on a
                # long one for the steady block; FWD_TIMELINE_CELLS overrides the cells, FWD_TIMELINE_DIFF the diffs
                # (with fwdq2's two-Q-buffer diff added after it: the stamps with two Q buffers, on the tree of 2026-11-30).
    env_info > "$OUT/env.txt" 2>&1
    copy="$PWD/build/ab-timeline"
    build_patched timeline "${FWD_TIMELINE_DIFF:-lab_fwd_tile_timeline.diff}" 0
    step timeline 400 bash -c "cd '$copy' && PYTHONPATH='$copy' python3 lab/fwd_tile_timeline.py --all-wgs \
      --json '$OUT/timeline.json' ${FWD_TIMELINE_CELLS:-}"
    ;;
  detprobe)  # 2026-11-30 (issue 27): deterministic mode's D=128/256 cost under a lab diff that makes the mode
             # non-deterministic (timing only, no tests), DET_PROBE_DIFF in lab/ab/: lab_det_two_chains.diff (the
             # key blocks of each parity in a ticket chain of their own, so a key block waits for the one two above
             # it; the default; measured on an H200, the stage then named detchains: the cost unchanged),
             # lab_det_two_chains_handback.diff (the same with the dQ stage handed back once read; measured:
             # unchanged), lab_det_no_tickets.diff (the mode's schedule without its tickets: is the cost the
             # schedule or the order? measured: the order, ~1.0 without). Both sides built (run_ab.sh, AB_ROUNDS=0), the copy timed first
             # (a deadlock stops at 150 s), then tree and copy alternated, DET_PROBE_DIMS (default 128,256).
    env_info > "$OUT/env.txt" 2>&1
    copy="$PWD/build/ab-detprobe"
    dims=${DET_PROBE_DIMS:-128,256}
    build_patched detprobe "${DET_PROBE_DIFF:-lab_det_two_chains.diff}"
    before=$failed
    step time_detprobe_r1_B 150 bash -c "cd '$copy' && PYTHONPATH='$copy' $bwd_time_lean $dims"
    if [ "$failed" = "$before" ]; then
      step time_detprobe_r1_A 150 $bwd_time_lean "$dims"
      step time_detprobe_r2_B 150 bash -c "cd '$copy' && PYTHONPATH='$copy' $bwd_time_lean $dims"
      step time_detprobe_r2_A 150 $bwd_time_lean "$dims"
    fi
    ;;
  detlpt)  # issue 27, prepared 2026-12-07, not yet run: deterministic mode's D=256 causal cost (1.32-1.38 on an H100,
          # the issue asks <= 1.3). Its grid runs key blocks fastest (block.h), so the CTAs in flight are many
          # key blocks of one head, each adding to a query block one step after the key block above it (the
          # count-down tickets): a chain as long as a head's CTAs in flight, one step of slack a link.
          # lab/ab/bwd_det_lpt.diff lets the mode take the causal default's grouped order (groups of heads
          # whose Q/dO fit FLASHATTN_BWD_DET_LPT MiB, heads fastest inside a group, key blocks counting down as
          # before, so a CTA still waits only for CTAs launched before it): a few key blocks of each of
          # many heads in flight, links with the slack of the CTAs launched between them. One build;
          # off / 8 / 64 twice (steps time_detlpt_rR_lptV, DETLPT_DIMS, default 256), then the Hopper
          # deterministic tests with the switch at 64. Prediction: the causal cost from 2k keys
          # 1.32-1.38 -> 1.20-1.30 if the chain binds; unchanged if the link is the reductions alone (the
          # two-chain probe of 2026-11-30 doubled the slack and moved nothing: expect the latter).
    env_info > "$OUT/env.txt" 2>&1
    copy="$PWD/build/ab-detlpt"
    build_patched detlpt bwd_det_lpt.diff 0
    # Times first (a deadlock would stop its step at 150 s), then the tests with the switch on.
    for round in 1 2; do
      for v in 0 8 64; do
        step "time_detlpt_r${round}_lpt$v" 150 bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_BWD_DET_LPT=$v \
          $bwd_time_lean ${DETLPT_DIMS:-256}"
      done
    done
    step pytest_detlpt 240 bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_BWD_DET_LPT=64 FLASHATTN_HYPOTHESIS_PROFILE=ci \
      python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_backward_gpu.py -k 'determin and hopper' -ra"
    ;;
  dqtraffic)  # measurements only (wrong results: no tests): the Hopper backward's dQ reductions priced,
              # DQ_TRAFFIC naming lab/ab/lab_dq_$DQ_TRAFFIC.diff: half_traffic_d256 (half of each step's
              # reductions left out; measured 2026-11-30 on an H200: +8.4%, deterministic mode's cost
              # 1.30 -> 1.10), half_traffic_d64_d128 (the default; +2.2% D=64, +2.5% D=128), pair_cost_d256
              # (half left out plus the DSMEM reads and adds a cluster pair's sum would cost; +5.4%),
              # half_loads_d256 (no reduction left out: Q and dO loaded on half the steps, half the L2
              # reads; +6-9% from 8k keys: any L2 traffic bounds)
    part=${DQ_TRAFFIC:-half_traffic_d64_d128}; dims=64,128; [ "${part%d256}" != "$part" ] && dims=256
    hopper_ab "dq_$part" "lab_dq_$part.diff" "$dims"
    ;;
  detticketfirst)  # 2026-11-30 (issue 27; measured on an H200, D=256 cost unchanged: not adopted): the Hopper
                   # backward's dQ writers poll a step's deterministic ticket before they wait for its tile, not after (lab/ab/det_ticket_before_tile.diff,
                   # REVERSE=0: B is the patched copy, kept in build/ab-ticketfirst): its A/B at D=128/256 with
                   # deterministic mode's cost, then in that copy the Hopper backward tests and the sanitizers
    hopper_patch_ab ticketfirst det_ticket_before_tile.diff 128,256
    ;;
  fwddynlean)  # measured 2026-12-01 on an H200 (issue 29), landed: the 16-bit forward 1.003 geomean, the FP8 D=256
               # causal cells +4-5%. lab/ab/fwd_dynamic_lean.diff (the dynamic schedule without a key split, the
               # producer's rings as counts, the LSE stored before O: the D=64 dynamic kernels on 24 / 240 / 240
               # registers instead of 32 / 232 / 232, and an FP8 D=256 dynamic kernel, whose causal calls ran the
               # static snake), applied in reverse since (A = the tree before it). Its A/B on the 16-bit forward
               # (short and long causal cells, two unmasked ones), then the fwdq2 checks in the copy (FP8 tests
               # and sanitizers included); fwddynleanfp8 next
    fwd_patch_ab fwddynlean fwd_dynamic_lean.diff \
      "${FWD_DYN_CELLS:-64:512:1 64:1024:1 64:2048:1 128:512:1 128:1024:1 128:4096:1 256:1024:1 256:4096:1 64:1024:0 128:16384:0}" 1
    ;;
  fwddynleanfp8)  # the same diff's A/B on lab/fp8_time.py (FP8 D=256 causal: the dynamic schedule against the snake),
                  # in fwddynlean's copy when this machine still has it built (run_ab.sh AB_REUSE)
    env_info > "$OUT/env.txt" 2>&1
    fp8_patch_ab fwddynleanfp8 fwd_dynamic_lean.diff 1 "$PWD/build/ab-fwddynlean"
    ;;
  waveprobe)  # issue 29: the non-causal standard cells run 7.76-23.3 waves of equal tiles on 132 SMs (a persistent
              # static schedule), so the last partial wave costs up to 1/ceil(waves) of the call (~3%). Each cell
              # beside B:H with a tile count of whole waves (the same S and D): if our TFLOP/s rises by ~3% there and
              # the peers' less, splitting the tail's tiles over the keys is a lever of ours
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step waveprobe 300 python3 lab/fwd_time.py --rounds 8 \
      ${WAVE_CELLS:-128:4096:0 128:4096:0:6:11 128:16384:0 128:16384:0:3:11 256:4096:0 256:4096:0:3:11 64:4096:0 64:4096:0:3:42 64:1024:0 64:1024:0:16:33}
    ;;
  fwdwaitsuspend)  # measured 2026-12-01 on an H200 (issue 29): 1.002 geomean, not adopted. The Hopper forward's
                   # producer waits (K/V/Q buffers and tile slots freed) with try_wait's suspend-time hint
                   # (NANOSLEEP.SYNCS in SASS) instead of spinning: ncu at D=64 S=512 causal counted 1.47 M retries
                   # of its waits (2.9 M issued instructions, 5% of the kernel's) and ~0 for the consumers'
                   # (lab/ab/fwd_producer_wait_suspend.diff, which applies to commit 8b08062's csrc: the producer's
                   # rings have been counts since): its A/B, then the fwdq2 checks in the copy
    fwd_patch_ab fwdwaitsuspend fwd_producer_wait_suspend.diff \
      "${FWD_WAIT_CELLS:-64:512:1 64:1024:1 64:2048:1 64:512:0 128:512:1 128:1024:1 128:4096:1 256:1024:1 128:16384:0}"
    ;;
  bwdmasklean)  # measured 2026-12-01 on an H200 (issue 27): +0.5% on the causal cells, not adopted. The Hopper
                # backward's masked steps tested against two limits relative to a thread's first column
                # (step_limits in the diff's common/mask.cuh, checked on the CPU by its test_window_cpu.py probe),
                # the upper one only where it cuts the thread's columns: lab/ab/bwd_mask_lean.diff's A/B on the
                # causal cells (D 64/128/256, cuDNN and deterministic mode alongside), then the Hopper backward
                # tests and sanitizers in the copy. The measured form failed the non-causal tail tests (a 32-bit
                # INT_MIN sentinel minus m0, wrapped in nvcc's PTX); the diff holds the 64-bit form since
    hopper_ab bwdmasklean bwd_mask_lean.diff "${BWD_MASK_DIMS:-64,128,256} --causal-only" 420
    bwd_copy_checks "$PWD/build/ab-bwdmasklean" bwdmasklean 240 100 hopper hopper \
      "tests/kernels/test_varlen_gpu.py tests/kernels/test_window_gpu.py"
    ;;
  fwdmasklean)  # landed 2026-11-30 (issue 29; measured on an H200: 1.020, D=64 causal +0.4-2.4%, D=128 causal
                # +1.6-4.4%): the Hopper forward's masked key blocks as one compare with an immediate and a select an
                # entry (the window's left limit only where it cuts the block for the thread's rows; the score scale's
                # multiply only where it is not folded), lab/ab/fwd_mask_lean.diff, applied in reverse since (REVERSE=1:
                # B is the tree, A the copy without it): its A/B, then the fwdq2 checks in the copy
    fwd_patch_ab fwdmasklean fwd_mask_lean.diff \
      "${FWD_MASK_CELLS:-64:512:1 64:1024:1 64:2048:1 64:4096:1 128:512:1 128:1024:1 128:4096:1 256:1024:1 64:1024:0}" 1
    ;;
  fwdsource)  # measured 2026-11-30 (issue 29) on an H200: where the short causal D=64 forward loses to cuDNN (0.84x at
              # S=512): both kernels under ncu side by side (instructions, IPC, stalls, tensor pipe) on short cells,
              # then each kernel's source counters at D=64 S=512 causal and the two side by side (FWD_SOURCE_SHAPE;
              # FWD_SOURCE_PEER=fa3 takes FlashAttention-3's kernel, carried in .whl/, in cuDNN's place, e.g. at
              # FWD_SOURCE_SHAPE=128:16384:1 FWD_NCU_SHAPES=128:16384:1, where it leads; FWD_NCU_SHAPES: the first step's)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step ncu_fwd 300 bash lab/ncu_fwd.sh ${FWD_NCU_SHAPES:-64:512:1 64:512:0 64:1024:1}
    shape=${FWD_SOURCE_SHAPE:-64:512:1}
    tag=${shape//:/_}
    peer=${FWD_SOURCE_PEER:-cudnn}
    peer_kernel=flash_fprop
    # FlashAttention-3's kernel is cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>: the base name
    # matches whether ncu's function name keeps the template arguments or not (none other in the script)
    [ "$peer" = fa3 ] && peer_kernel=device_kernel
    step "ncu_source_ours_$tag" 300 env OUT="$OUT" NCU_KERNEL=flash_fwd_sm90_kernel NCU_TAG="fwd_${tag}_ours" \
      bash lab/ncu_source.sh "$shape"
    step "ncu_source_${peer}_$tag" 300 env OUT="$OUT" NCU_KERNEL="$peer_kernel" NCU_TAG="fwd_${tag}_$peer" \
      bash lab/ncu_source.sh "$shape"
    step "compare_$tag" 60 python3 lab/ncu_source_top.py --compare "$OUT/ncu_source_fwd_${tag}_ours.csv" \
      "$OUT/ncu_source_fwd_${tag}_$peer.csv" stall_wait
    ;;
  fwdl2)  # issue 29, 2026-12-03: at D=128 S=4k non-causal ncu reads our L2 throughput 40.2% of peak against
          # FlashAttention-3's 24.1% and cuDNN's 30.6% for the same K/V bytes (L1 hit rate 70% against 88%): which L2
          # sub-unit and which operations (ncu's breakdown of lts__throughput, L2 sectors by read / write / atomic /
          # reduction) for the three kernels (FWD_L2_SHAPES). (Its run of 2026-12-03 also ran the sector counts alone in
          # case ncu refused the breakdown; it did not, so that second profile is gone.)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step ncu_fwd_l2_breakdown 200 env OUT="$OUT/l2-breakdown" \
      NCU_FWD_EXTRA="breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,lts__t_sectors_op_red.sum" \
      bash lab/ncu_fwd.sh ${FWD_L2_SHAPES:-128:4096:0}
    ;;
  fwdhalfkv)  # issue 29, measured 2026-12-04 (1.0095: D=128 1k +3.3%, 4k +0.9%, 16k 0%), a measurement with wrong results (no tests): FlashAttention-3's D=128
              # forward runs 2-CTA clusters that multicast K/V (ncu at S=4k non-causal: 76.6 M L2 read sectors against
              # our 129.3 M and cuDNN's 100.4 M). lab/ab/lab_fwd_half_kv_loads.diff loads only the first half of each
              # K/V tile's chunks (D=128: one of two, D=256: two of four; D=64 unchanged, its control) once the stages
              # have been filled whole, as each CTA of a multicast pair would: the upper bound of what halving
              # the L2 reads and TMA issues buys, before building the cluster. Prediction: D=128 +0-3% (the
              # consumers' K/V waits already succeed at the first try), D=256 +0-2%.
    env_info > "$OUT/env.txt" 2>&1
    step ab_fwdhalfkv 500 env PATCH=lab_fwd_half_kv_loads.diff REVERSE=0 AB_COPY="$PWD/build/ab-fwdhalfkv" OUT="$OUT/ab" \
      AB_CMD="python3 lab/fwd_time.py --rounds 8 ${FWD_HALF_KV_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:4096:1 128:16384:1 256:4096:0 256:16384:1 64:4096:0}" \
      bash lab/ab/run_ab.sh
    ;;
  fwdclusterkv)  # issue 29, measured 2026-12-04, not adopted (every clustered cell 0.71-0.72, correct, with the remote release at cluster scope; CTA-scoped since, 0.98-1.00: fwdclusterkvcount): the static D=128 forward in 2-CTA clusters sharing each K/V tile by
                 # TMA multicast, as FlashAttention-3's (lab/ab/fwd_cluster_kv.diff, a lab form behind Sm90Params::cluster_kv:
                 # calls without a mask or a split whose query tiles a head are even; each CTA loads one of the two
                 # 64-column chunks into both, a stage's release also arrives on the other CTA's empty barrier, one
                 # arrival a consumer warp; FLASHATTN_FWD_CLUSTER_KV=0 off). Run after fwdhalfkv says the halved L2 reads
                 # pay. Prediction: D=128 non-causal +0-3% (at most fwdhalfkv's gain), the masked D=128 cell and the
                 # D=64/256 controls unchanged. Its A/B, then the fwdq2 checks in the copy (test_fwd_split_gpu.py's
                 # test_cluster_kv_pairs_match_single_ctas among them: bitwise the outputs with FLASHATTN_FWD_CLUSTER_KV=0).
    fwd_patch_ab fwdclusterkv fwd_cluster_kv.diff \
      "${FWD_CLUSTER_KV_CELLS:-128:512:0 128:1024:0 128:4096:0 128:16384:0 128:4096:1 64:4096:0 256:4096:0}"
    ;;
  fwdclusterkvcount)  # issue 29, 2026-12-04: why fwdclusterkv's clustered cells ran at 0.71-0.72 at every length. Measured
                      # the same day: the query answers 66 clusters (not the grid), so the diff's remote release is now
                      # CTA-scoped (mbarrier.arrive.shared::cluster, as CUTLASS's ClusterBarrier) instead of release.cluster:
                      # the clustered call then 0.999 / 0.987 / 0.984 / 0.991 of the unclustered at 512 / 1k / 4k / 16k. The copy with lab/ab/fwd_cluster_kv.diff
                      # built alone, then lab/fwd_cluster_kv_time.py: the occupancy query's cluster count printed, the call
                      # unclustered, with the query's count and with 66 / 64 / 48 clusters forced
                      # (FLASHATTN_FWD_CLUSTER_KV_CLUSTERS), interleaved in one process with SDPA's default. Prediction: the
                      # query answers ~48 and 66 forced recovers >= 1.0x of the unclustered call (512/1k up to +3%, as
                      # fwdhalfkv bounds it); if 66 forced stays ~0.72, the pair's lockstep is the loss instead.
    env_info > "$OUT/env.txt" 2>&1
    copy="$PWD/build/ab-fwdclusterkvcount"
    build_patched fwdclusterkvcount fwd_cluster_kv.diff 0
    step pytest_cluster_kv 120 bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest \
      -q -p no:cacheprovider tests/kernels/test_fwd_split_gpu.py -k cluster_kv -ra"
    step cluster_kv_time 300 bash -c "cd '$copy' && PYTHONPATH='$copy' python3 lab/fwd_cluster_kv_time.py ${FWD_CLUSTER_KV_TIME_ARGS:-}"
    ;;
  detsource)  # 2026-11-30 (issue 27; measured on an H200: the consumers wait for their stage): where
              # deterministic mode's D=256 cost goes, per SASS instruction: ncu's source counters of the Hopper main kernel, default and deterministic, at
              # S=4k non-causal (rotated walks) and S=8k causal (DET_SOURCE_SHAPES), then the two side by side
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    for shape in ${DET_SOURCE_SHAPES:-256:4096:0 256:8192:1}; do
      tag=${shape//:/_}
      # lab/ncu_bwd.py runs the deterministic call after the default one: its kernel is launch 1.
      for det in 0 1; do
        mode=default; [ $det = 1 ] && mode=det
        step "ncu_source_${mode}_$tag" 300 env OUT="$OUT" NCU_KERNEL=flash_bwd_sm90_kernel NCU_SCRIPT=lab/ncu_bwd.py \
          NCU_BWD_PEERS=0 NCU_BWD_DET=$det NCU_LAUNCH_SKIP=$det NCU_TAG="d${tag}_$mode" bash lab/ncu_source.sh "$shape"
      done
      step "compare_$tag" 60 python3 lab/ncu_source_top.py --compare "$OUT/ncu_source_d${tag}_det.csv" \
        "$OUT/ncu_source_d${tag}_default.csv" stall_long_sb
    done
    ;;
  detwriterlanes)  # 2026-11-30 (issue 27; its A/B measured on an H200: det cost unchanged, the default mode 0-6% slower at S <= 4k; not adopted): the Hopper backward's D=256 dQ writer with a lane a
                   # stage, so that deterministic mode's round trip per step (the ticket's poll, the
                   # additions performed, the ticket moved on) overlaps the next step's
                   # (lab/ab/bwd_dq_writer_lanes.diff, REVERSE=0: B is the patched copy, kept in
                   # build/ab-writerlanes): its A/B on D=256 with deterministic mode's cost, then in
                   # that copy the Hopper backward tests and the sanitizers on the small dense cases
    hopper_patch_ab writerlanes bwd_dq_writer_lanes.diff 256 420
    ;;
  portabledqbulk)  # 2026-11-30 (issue 27; its A/B measured on an H200 in two forms: D=128 4-6% slower; not adopted): the portable backward's D=128 swizzled tile on sm90
                   # stages an unmasked step's float32 dQ tile in shared memory and adds it to dq_accum with
                   # one bulk reduce-add a row (cp.reduce.async.bulk), issued after the next step's first
                   # barrier, instead of 16 reductions a thread (lab/ab/portable_bwd_dq_bulk_d128.diff,
                   # REVERSE=0: B is the patched copy, kept in build/ab-dqbulk); then in that copy the
                   # backward tests, the sanitizers, ncu at D=128 S=4k
    portable_patch_ab dqbulk portable_bwd_dq_bulk_d128.diff 128
    portable_copy_ncu "$PWD/build/ab-dqbulk" dqbulk 128:4096:0
    ;;
  portabledqhalves)  # 2026-11-30 (issue 27; its A/B measured on an H200: D=128 2.0-3.9% slower; not adopted): the portable backward's D=128 swizzled tile
                     # computes phase C's dQ in two column halves and issues the first half's reductions
                     # before the second half's MMAs, instead of all 16 after the GEMM (ncu: lg throttle on
                     # that burst, 7% of the D=128 kernel's samples at S=4k) (lab/ab/portable_bwd_dq_halves_d128.diff,
                     # REVERSE=0: B is the patched copy, kept in build/ab-dqhalves); then in that copy the
                     # backward tests, the sanitizers, ncu at D=128 S=4k
    portable_patch_ab dqhalves portable_bwd_dq_halves_d128.diff 128
    portable_copy_ncu "$PWD/build/ab-dqhalves" dqhalves 128:4096:0
    ;;
  portabledeferbase)  # 2026-11-30 (issue 27; its A/B measured on an H200: D=64/128 0.3-1.5% slower; not adopted): the portable backward's D=64/128 swizzled tiles
                      # set the deferred reductions' base (dq_defer_base) before phase C's reductions instead of
                      # after them, where ptxas wrote it into a register a queued reduction had still to read
                      # (D=64 S=8k: 5% of the kernel's samples on that one SEL, long scoreboard)
                      # (lab/ab/portable_bwd_dq_defer_base_early.diff, REVERSE=0: B is the patched copy, kept in
                      # build/ab-deferbase); then in that copy the backward tests, the sanitizers, ncu at D=64 S=8k
    portable_patch_ab deferbase portable_bwd_dq_defer_base_early.diff
    portable_copy_ncu "$PWD/build/ab-deferbase" deferbase
    ;;
  portableplanahead)  # 2026-11-30 (issue 27; its A/B measured on an H200: D=128 0.6-1.8% slower; not adopted): the portable backward's D=128 large tile (two
                      # Q/dO stages) works out the copy step t + 1 starts with (step t + 2's Q/dO) before phase C
                      # of step t and carries it across the step boundary, instead of after the barrier that
                      # starts step t + 1 (lab/ab/portable_bwd_plan_ahead_d128.diff, REVERSE=0: B is the patched
                      # copy, kept in build/ab-ahead); then in that copy the backward tests and the sanitizers
    portable_patch_ab ahead portable_bwd_plan_ahead_d128.diff
    ;;
  portableplan)  # 2026-11-30 (issue 27; measured on an H200: D=64 +1.0-1.7% from S=2k, D=256 +0.4-1.7%, D=128
                 # +-0.3%; landed with the early plan on the compact tiles too): the portable backward's D=64
                 # swizzled tile works out the next step's Q/dO copy (the division by the query-block count,
                 # the 64-bit offsets, the loaders' lanes) before phase B instead of after the barrier that
                 # ends it; lse/dpsum rows planned with the copy on every tile (lab/ab/portable_bwd_plan_q_do.diff
                 # on commit 19632f5, REVERSE=0: B is the patched copy, kept in build/ab-plan), D=64/128/256;
                 # then in that copy the backward and packed-batch tests, the sanitizers and ncu at D=64 S=8k
    portable_patch_ab plan portable_bwd_plan_q_do.diff 64,128,256
    step pytest_varlen_plan 200 bash -c "cd '$PWD/build/ab-plan' && PYTHONPATH='$PWD/build/ab-plan' \
      FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_varlen_gpu.py -k gradients -ra"
    portable_copy_ncu "$PWD/build/ab-plan" plan
    ;;
  portabledefermore)  # 2026-11-30 (issue 27; measured on an H200: D=64 1-4% slower, D=128 1-5%; not adopted): the portable backward's deferred dQ reductions
                      # at D=64 2 -> 6 and D=128 4 -> 8, the Q/dO loader's offsets derived again each step (opaque)
                      # so that they fit (lab/ab/portable_bwd_dq_defer_more.diff, REVERSE=0: B is the patched copy,
                      # kept in build/ab-defermore); then in that copy the backward tests and the sanitizers
    portable_patch_ab defermore portable_bwd_dq_defer_more.diff
    # Where D=64's long non-causal rows (0.94-0.96x FlashAttention-2) still lose, in the patched copy.
    portable_copy_ncu "$PWD/build/ab-defermore" defermore
    step ncu_source_fa2 300 env NCU_KERNEL=flash_bwd_dq_dk_dv_loop NCU_SCRIPT=lab/ncu_bwd.py NCU_BWD_BACKEND=portable \
      NCU_TAG=fa2_64_8192_0 bash lab/ncu_source.sh 64:8192:0
    ;;
  softcapex2fma)  # 2026-11-30 (issue 27; measured on an H200: D=64 softcap 3-4% slower; not adopted): the Hopper backward's one-pass softcap at D=64 with
                  # one slice of exponentials in four on the FMA pipe (ex2_fma: a degree-3 polynomial, relative
                  # error 1e-4), the SFU's load a score 2 -> 1.75 (lab/ab/bwd_softcap_ex2_fma.diff, REVERSE=0: B is
                  # the patched copy, kept in build/ab-ex2fma); then in that copy the softcap tests and the
                  # sanitizers on the small dense cases (the softcap among them)
    env_info > "$OUT/env.txt" 2>&1
    copy="$PWD/build/ab-ex2fma"
    step ab_ex2fma 420 env PATCH=bwd_softcap_ex2_fma.diff REVERSE=0 AB_COPY="$copy" OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only" bash lab/ab/run_ab.sh
    step pytest_ex2fma 300 bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q \
      -p no:cacheprovider tests/kernels/test_backward_gpu.py tests/kernels/test_varlen_gpu.py -k 'softcap or cap' -ra"
    copy_sanitize_steps "$copy" ex2fma 150 auto dense
    ;;
  portabledqorder)  # 2026-11-30 (issue 27; measured on an H200: 6-8% slower at D=64 and D=128, not adopted):
                    # the portable backward's large D=64/128 tiles with dV, then phase C
                    # (dQ and its reductions), then dK, FlashAttention-2's order (lab/ab/portable_bwd_dq_before_dk.diff,
                    # REVERSE=0: B is the patched copy, kept in build/ab-dqorder); then in that copy the backward
                    # tests and the sanitizers
    portable_patch_ab dqorder portable_bwd_dq_before_dk.diff
    ;;
  portabled128a4x2)  # 2026-11-30 (issue 27), landed in ce2272d (D=128 +2.3-3.6% from S=2k): the portable backward's D=128 large tile with
                     # phase A as 4 (keys) x 2 (queries) warps, FlashAttention-2's layout, its k-steps unrolled
                     # two at a time (lab/ab/portable_bwd_d128_a4x2.diff, REVERSE=0: B is the patched copy,
                     # kept in build/ab-a4x2); then in that copy the backward tests and the sanitizers
    portable_patch_ab a4x2 portable_bwd_d128_a4x2.diff
    ;;
  portableswz128ab)  # 2026-11-30 (measured on an H200 in a form that also changed D=64's epilogue: D=128 +1-5%,
                     # landed for D=128 alone): the portable backward's D=128 large tile with swizzled Q/dO rows,
                     # 0 spills (lab/ab/portable_bwd_swizzle_d128_lean.diff, REVERSE=1: A is the tree before it), then on
                     # the tree: the backward and packed-batch tests, the sanitizers on the portable path, the
                     # timing against FlashAttention-2
    env_info > "$OUT/env.txt" 2>&1
    step ab_swz128 420 env PATCH=portable_bwd_swizzle_d128_lean.diff REVERSE=1 OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_check.py --time-only --time --portable --dtype bf16 --dims 64,128" bash lab/ab/run_ab.sh
    portable_land_steps
    ;;
  portableb4x2ab)  # 2026-11-30: the portable backward's D=64 large tile with phase B's warps as 4 (keys) x 2 (head
                   # dims) on sm90 and the deterministic ticket as an index (lab/ab/portable_bwd_b4x2_sm90.diff,
                   # REVERSE=1 on commit 85cf3ba: A is the tree before it; later changes to the same lines
                   # keep it from reversing on newer trees); then portableland on the same machine
    env_info > "$OUT/env.txt" 2>&1
    step ab_b4x2 560 env PATCH=portable_bwd_b4x2_sm90.diff REVERSE=1 OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_check.py --time-only --time --portable --dtype bf16 --dims 64,128" bash lab/ab/run_ab.sh
    ;;
  portableswizzle)  # 2026-11-29 (measured on an H200 with D=64 and D=128 swizzled: D=64 +4-8%, landed; D=128
                     # +1-4% with an 8-byte spill on sm_90a, not adopted): the portable backward's D=128 large
                     # tile with Q and dO rows dense and XOR-swizzled (lab/ab/portable_bwd_swizzle_qdo_d128.diff,
                     # REVERSE=0: B is the patched copy, kept in build/ab-swizzle)
    env_info > "$OUT/env.txt" 2>&1
    step ab_swizzle_qdo 540 env PATCH=portable_bwd_swizzle_qdo_d128.diff REVERSE=0 AB_COPY="$PWD/build/ab-swizzle" OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_check.py --time-only --time --portable --dtype bf16 --dims 64,128" bash lab/ab/run_ab.sh
    ;;
  portableswizzlecheck)  # after portableswizzle on the same machine: the patched copy's correctness
    env_info > "$OUT/env.txt" 2>&1
    copy="$PWD/build/ab-swizzle"
    bwd_copy_checks "$copy" swizzled 300 150
    ;;
  portableland)  # 2026-11-27: after a portable-backward change: build, its tests, the sanitizers on the
                  # portable path alone (dense and packed small cases), the timing against FA2 and cuDNN
    env_info > "$OUT/env.txt" 2>&1
    portable_land_steps
    ;;
  bwd90)  # the backward through the op on both paths: numerics, the suite's backward tests, the timing grid
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step bwd_check_quick 200 python3 lab/bwd_check.py --quick
    step pytest_backward 400 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_public_gradients.py tests/kernels/test_torch_impl_gpu.py ${EXTRA_TESTS:-} -ra
    step bwd_time_bf16 300 python3 lab/bwd_check.py --quick --time --dtype bf16
    step bwd_time_fp16 300 python3 lab/bwd_check.py --quick --time --dtype fp16
    ;;
  bwdwide)  # the Hopper backward's wide config (80-query steps): build, its tests, the A/B against the
            # 64-query config with cuDNN alongside, memcheck on the small dense cases
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_wide 150 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py -k "wide or GQA-8 or 16k" -ra
    step bwd_wide_time 300 python3 lab/bwd_wide_time.py ${BWD_WIDE_ARGS:-}
    step memcheck_dense 150 env SANITIZE_BACKENDS=auto compute-sanitizer --tool memcheck --error-exitcode 99 \
      python3 lab/sanitize_small.py --only dense
    ;;
  bwdwideshort)  # issue 27, measured 2026-12-03 on an H200, landed as wide_rule.h's bounds (causal S=512 +9.8%, non-causal
                 # S=512 +3.5% on the 64-query config): the wide config (80-query steps) on short calls, never measured
                 # below 1k keys before; causal D=128 calls took it at every length, though windows that
                 # see <= 1024 keys lost 2-5% with it. The D=128 S=512 causal backward is issue 27's one cell
                 # under 0.9x cuDNN on the H200 (0.89x, bf16 and fp16). The A/B against the 64-query config
                 # (lab/bwd_wide_time.py: FLASHATTN_BWD_WIDE=3 / 0, every call on one config or the other) causal and not,
                 # cuDNN alongside, then the kernel-by-kernel breakdown of those calls beside cuDNN's
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step bwd_wide_short_causal 240 python3 lab/bwd_wide_time.py --causal --rounds 5 --seqs 512,768,1024,1536,2048
    step bwd_wide_short 150 python3 lab/bwd_wide_time.py --rounds 5 --seqs 512,768,1024
    step bwd_breakdown_short 150 python3 lab/kernel_breakdown.py --dims 128 --seqs 512,1024
    ;;
  bwdpersistent)  # issue 27, measured 2026-12-03 on an H200, not adopted (non-causal 0.980, causal 0.817 on a static stride): the Hopper backward on a persistent grid
                  # (the diff applies to commit eb5151f's csrc: it reads the SM count through bwd_sm_count, which the
                  # backward's launchers replaced by the DeviceLimits they take since)
                  # (lab/ab/bwd_persistent.diff: kernel.cuh kPersistent, one CTA an SM walking blocks c, c + SMs, ...,
                  # each role carrying its barrier phases in one word, BwdPhase; the next block's K/V loaded behind
                  # the epilogue, dK/dV staged over the dS^T buffers and the dQ tile when a block follows; unmasked
                  # dense D <= 128 calls without a softcap, by default). At S=512 a CTA's time beyond its steps is
                  # ~5 us of ~25 (perf-notes, 2026-12-03). Prediction: unmasked S=512 +5-10%, 1k +3-5%, 2k +1-3%,
                  # from 4k +-1%; causal on a static stride (FLASHATTN_BWD_PERSISTENT=<SMs>) slower (unequal blocks).
                  # The copy built alone; its persistent-grid tests first (FLASHATTN_BWD_PERSISTENT=3: many blocks a
                  # CTA on small calls); the timing, both kernels in one process (lab/bwd_persistent_time.py); the
                  # backward tests whole; memcheck/racecheck/synccheck on the small dense cases with the switch at 3
    env_info > "$OUT/env.txt" 2>&1
    copy="$PWD/build/ab-bwdpersistent"
    build_patched bwdpersistent bwd_persistent.diff 0
    step pytest_persistent 150 bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest \
      -q -x -p no:cacheprovider tests/kernels/test_backward_gpu.py -k persistent -ra"
    step bwd_persistent_time 300 bash -c "cd '$copy' && PYTHONPATH='$copy' python3 lab/bwd_persistent_time.py ${BWD_PERSISTENT_ARGS:-}"
    step pytest_backward_persistent 240 bash -c "cd '$copy' && PYTHONPATH='$copy' FLASHATTN_HYPOTHESIS_PROFILE=ci \
      python3 -m pytest -q -p no:cacheprovider tests/kernels/test_backward_gpu.py -ra"
    FLASHATTN_BWD_PERSISTENT=3 copy_sanitize_steps "$copy" persistent 150 auto dense
    ;;
  bwdwideland)  # issue 27, 2026-12-03: after wide_rule.h's bounds (short calls on the 64-query config): build, the
                # backward tests (the wide config forced on and off, the default's choice at the bounds), then
                # the training grid against cuDNN in bf16 and fp16 (BENCH_K per run, a folder each)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step pytest_backward 240 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py -ra
    for k in ${BWDWIDELAND_K:-bf16 fp16}; do
      step "bench_training_$k" 150 env FLASHATTN_BENCH_IMPLS=flashattn,sdpa-default BENCH_MARKERS="bench and training" \
        BENCH_K="$k" bash benchmarks/run_benchmarks.sh "$OUT/bench-training-$k"
    done
    ;;
  gqaraised)  # issue 27, measured 2026-12-07 on an H100 (docs/perf-notes.md), prepared 2026-12-06: the default's
              # split under a mask is the wave rule's raised by group_split.h's dispatch model
              # (bwd_group_split_raised; the model alone gained 2-6% on the 4k causal cells and lost 4-18% at
              # 16k, gqasplit). The default against the wave rule alone (=r4) at D=64/128, the backward tests,
              # then the training grid against cuDNN (GQARAISED_K, default bf16: the dtypes, a folder each)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step raised_vs_r4 280 python3 lab/bwd_group_split_time.py --dims 64,128 --against r4
    step pytest_backward 240 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py -ra
    for k in ${GQARAISED_K:-bf16}; do
      step "bench_training_$k" 150 env FLASHATTN_BENCH_IMPLS=flashattn,sdpa-default BENCH_MARKERS="bench and training" \
        BENCH_K="$k" bash benchmarks/run_benchmarks.sh "$OUT/bench-training-$k"
    done
    ;;
  causalsource)  # issue 27, measured 2026-12-07 on an H200 but for its fabric step (its metric query, fixed since): under locked clocks the Hopper backward's causal D=128 S=16k
                 # call takes 0.570 of its non-causal time where cuDNN's takes 0.520 (the work: 0.506), a causal step 12.5%
                 # slower than an unmasked one (gqancu). ncu's source counters of our main kernel on both calls (the same
                 # kernel, CAUSAL_SOURCE_SHAPES), then the two side by side by stall reason: which instructions the
                 # causal call's extra samples sit on (the mask's selects, the writer's waits, the producer's); first
                 # lab/bwd_causal_step_time.py (the main kernels' times at 1, 2 and 16 heads, both walks, cuDNN's)
                 # and ncu's L2 fabric traffic (between the L2's partitions) of ours and cuDNN's on both calls
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    # The step's price without the grid's dynamics: one head is one wave (the longest CTA walks
    # every query block), 16 heads the ncu call's grid; both walks; cuDNN's alongside.
    step causal_step_time 200 python3 lab/bwd_causal_step_time.py --dims 128,64 --heads 1,2,16
    # The traffic between the L2's two partitions (whether a Q/dO tile read by few CTAs at a time
    # crosses it more often than one read by many at once), ours and cuDNN's, both masks.
    fabric=$(ncu --query-metrics 2>/dev/null | awk '$1 ~ /^lts__ltcfabric/ {print $1 ".sum"}' | head -4 | paste -sd, -)
    echo "fabric metrics: ${fabric:-none}" > "$OUT/fabric_metrics.txt"
    step ncu_fabric 200 env OUT="$OUT/fabric" NCU_BWD_EXTRA="$fabric" NCU_BWD_PEERS=1 bash lab/ncu_bwd.sh \
      128:16384:1 128:16384:0
    csv=()
    for shape in ${CAUSAL_SOURCE_SHAPES:-128:16384:1 128:16384:0}; do
      step "ncu_source_${shape//:/_}" 300 env OUT="$OUT" NCU_KERNEL=flash_bwd_sm90_kernel NCU_SCRIPT=lab/ncu_bwd.py \
        NCU_BWD_PEERS=0 bash lab/ncu_source.sh "$shape"
      csv+=("$OUT/ncu_source_${shape//:/_}.csv")
    done
    step compare_causal 60 python3 lab/ncu_source_top.py --compare "${csv[0]}" "${csv[1]}" stall_long_sb
    step waits_causal 60 python3 lab/ncu_source_top.py --waits "${csv[@]}"
    ;;
  bwdprefetch)  # issue 27, measured 2026-12-07 on an H200 through causallevers, not adopted (causal 0.954, non-causal 0.938, D=256 -12..-16%): the Hopper backward's load warp prefetching into L2 the Q/dO
                # tiles, lse and dpsum rows (FLASHATTN_BWD_PREFETCH=<steps ahead>) and the dq_accum tile
                # (FLASHATTN_BWD_PREFETCH_DQ=1) of a later step (lab/ab/bwd_l2_prefetch.diff, off by default in the
                # copy). Reasoning: under a causal mask about two CTAs work on a (head, query block) at once
                # (lab/bwd_schedule_model.py --walks), without one ~66, so a causal step is far more often the
                # first reader of its tiles and waits on DRAM; a causal step costs 12.5% more than an unmasked one.
                # Prediction: causal D=128 S=16k +4..+10%, causal cells from 4k +2..+6%, non-causal within +-1%.
                # In a patched copy: the modes' A/B with cuDNN alongside, the prefetch tests, causalsource's
                # step probe at D=128 with it off and on
    env_info > "$OUT/env.txt" 2>&1
    build_patched prefetch bwd_l2_prefetch.diff 0
    pf_copy="$PWD/build/ab-prefetch"
    step prefetch_ab 330 env -C "$pf_copy" PYTHONPATH="$pf_copy" python3 lab/bwd_switch_time.py --modes \
      off:FLASHATTN_BWD_PREFETCH=0 ahead2:FLASHATTN_BWD_PREFETCH=2 ahead2dq:FLASHATTN_BWD_PREFETCH=2,FLASHATTN_BWD_PREFETCH_DQ=1 \
      ahead4dq:FLASHATTN_BWD_PREFETCH=4,FLASHATTN_BWD_PREFETCH_DQ=1
    step pytest_prefetch 150 env -C "$pf_copy" PYTHONPATH="$pf_copy" "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py \
      -k prefetch -ra
    # A causal step's price with and without it (causalsource's probe, D=128: one head, one wave; 16 heads).
    step causal_step_off 100 env -C "$pf_copy" PYTHONPATH="$pf_copy" python3 lab/bwd_causal_step_time.py --dims 128 --heads 1,16
    step causal_step_on 100 env -C "$pf_copy" PYTHONPATH="$pf_copy" FLASHATTN_BWD_PREFETCH=2 FLASHATTN_BWD_PREFETCH_DQ=1 \
      python3 lab/bwd_causal_step_time.py --dims 128 --heads 1,16
    ;;
  bwdprefetchcheck)  # issue 27, moot after bwdprefetch's loss (measured 2026-12-07 through causallevers), left unrun: after bwdprefetch, in its copy (lab/ab/bwd_l2_prefetch.diff)
                     # with the prefetch on (2 steps ahead, dq_accum too): the Hopper backward, packed-batch
                     # and public-gradient tests, memcheck/racecheck/synccheck on the small dense and packed cases
    env_info > "$OUT/env.txt" 2>&1
    pf_copy="$PWD/build/ab-prefetch"
    [ -d "$pf_copy" ] || build_patched prefetch bwd_l2_prefetch.diff 0
    export FLASHATTN_BWD_PREFETCH=2 FLASHATTN_BWD_PREFETCH_DQ=1
    step pytest_prefetch_all 300 env -C "$pf_copy" PYTHONPATH="$pf_copy" "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py \
      tests/kernels/test_public_gradients.py tests/kernels/test_varlen_gpu.py -k "hopper or prefetch or varlen" -ra
    copy_sanitize_steps "$pf_copy" prefetch 120 auto dense,varlen
    unset FLASHATTN_BWD_PREFETCH FLASHATTN_BWD_PREFETCH_DQ
    ;;
  zigzag)  # issue 27, measured 2026-12-07 on an H200 through causallevers, not adopted (1.000 over 6 causal cells): the causal backward's walk alternating by group of the grouped
            # order (lab/ab/bwd_zigzag_walk.diff, FLASHATTN_BWD_REVERSE=2: the first group walked down, the next up
            # from each key block's diagonal, ...): where a group about fills the GPU (D=128 16k: one head) every
            # group's CTAs are then at one query block at each step, as without a mask; today every other group's
            # are each at a different one. In a patched copy: the walks' A/B (1 = today, 2) over D 64/128/256,
            # S 1k..16k, both dtypes, cuDNN alongside; the step probe with both; the walk's CPU tests, the Hopper
            # backward's causal GPU tests and the sanitizers with it on
    env_info > "$OUT/env.txt" 2>&1
    build_patched zigzag bwd_zigzag_walk.diff 0
    zz_copy="$PWD/build/ab-zigzag"
    step zigzag_ab 300 env -C "$zz_copy" PYTHONPATH="$zz_copy" python3 lab/bwd_order_time.py --walks 1,2 --dims 128,64,256 \
      --rounds 2
    step zigzag_steps 150 env -C "$zz_copy" PYTHONPATH="$zz_copy" python3 lab/bwd_causal_step_time.py --dims 128 \
      --heads 16 --walks 1,2
    export FLASHATTN_BWD_REVERSE=2
    step pytest_zigzag 280 env -C "$zz_copy" PYTHONPATH="$zz_copy" "${pytest_ci[@]}" tests/kernels/test_sm90_bwd_block_cpu.py \
      tests/kernels/test_backward_gpu.py -k "zigzag or hopper" -ra
    copy_sanitize_steps "$zz_copy" zigzag 150 auto dense
    unset FLASHATTN_BWD_REVERSE
    ;;
  headdims)  # issues 27, 29, landed 2026-12-07 on an H100 (lab/ab/head_dims_fwd_bwd.diff, applied; perf-notes "Head dims
            # 72..96 and 136..192 on forms of their own"): the forward's D=96 config 1.10-1.20x the D=128 kernel,
            # D=192's 1.24x the D=256 kernel, the backward's D=192 form 1.27-1.43x the D=256 form, on the same
            # B, H and S. On the tree: HEADDIMS_PART=1 (the default) builds it, runs the forward, split, packed
            # and backward tests of head dims 80..96 and 152..192 and times the forward (FWDHEADDIMS_CELLS,
            # D=96 beside D=128 and D=192 beside D=256, cuDNN and FlashAttention-3 alongside: carry .whl/);
            # HEADDIMS_PART=2 times the backward (BWD192_CELLS, cuDNN alongside) and runs memcheck/racecheck/
            # synccheck on the small D=80/96/168/192 cases and the property tests. (`git apply -R` of the diff
            # gives the tree before it, whose D=96 and D=192 calls ran on D=128's and D=256's kernels.)
    env_info > "$OUT/env.txt" 2>&1
    if [ "${HEADDIMS_PART:-1}" = 1 ]; then
      ensure_built
      step pytest_headdims 280 "${pytest_ci[@]}" tests/kernels/test_attention_gpu.py tests/kernels/test_fwd_split_gpu.py \
        tests/kernels/test_varlen_gpu.py tests/kernels/test_backward_gpu.py -k "96 or 80 or 192 or 176 or 168 or 160 or 152" -ra
      step time_fwd_headdims 240 python3 lab/fwd_time.py --rounds 6 \
        ${FWDHEADDIMS_CELLS:-96:1024:1:16:21 128:1024:1:16:21 96:4096:0:4:21 128:4096:0:4:21 96:4096:1:4:21 \
        128:4096:1:4:21 96:16384:1:1:21 128:16384:1:1:21 192:4096:0:4:10 256:4096:0:4:10 192:16384:1:1:10 256:16384:1:1:10}
    else
      ensure_built
      step time_bwd_headdims 200 python3 lab/fwd_time.py --pass bwd --rounds 6 \
        ${BWD192_CELLS:-192:2048:0:8:8 256:2048:0:8:8 192:8192:0:2:8 256:8192:0:2:8 192:8192:1:2:8 256:8192:1:2:8 192:4096:1}
      SANITIZE_DIMS=80,96,168,192 sanitize_steps 120 auto dense,varlen,split headdims
      step pytest_properties 150 "${pytest_ci[@]}" tests/kernels/test_properties_gpu.py -ra
    fi
    ;;
  bwd96)  # issue 27, landed 2026-12-07 on an H100 (lab/ab/bwd_d96.diff, applied; perf-notes "Head dims 72..96 on
         # backward configs of their own"): 1.11-1.20x the D=128 kernel these dims ran on, 0.98-1.15x cuDNN.
         # Head dims 72..96 on Hopper backward configs of their own instead of D=128's, a quarter of whose
         # GEMM work is zero columns: D=128's 64-query and wide (80-query) configs with two chunk planes, the
         # second half used, S^T/dP^T in 6 k-steps, dV/dK at N = 96 (RS, B one whole and one half swizzle
         # atom: the read the D=192 forms proved), dQ transposed in both (M = 64 columns a warpgroup, the
         # upper 32 of the second zeros); dq_accum tiles 128 columns wide. On the tree: the backward and
         # packed-batch tests of head dims 72..96, the backward of D=96 against D=128's kernel on the same
         # B, H and S with cuDNN alongside (BWD96_CELLS), memcheck/racecheck/synccheck on the small D=80/96
         # cases. (`git apply -R` of the diff gives the tree before it, whose D=96 calls ran on D=128's kernels.)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step pytest_bwd96 280 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_varlen_gpu.py \
      -k "96 or 80 or 88 or 72" -ra
    step time_bwd96 200 python3 lab/fwd_time.py --pass bwd --rounds 6 \
      ${BWD96_CELLS:-96:1024:1:16:21 128:1024:1:16:21 96:4096:0:4:21 128:4096:0:4:21 96:4096:1:4:21 128:4096:1:4:21 \
      96:16384:0:1:21 128:16384:0:1:21}
    SANITIZE_DIMS=80,96 sanitize_steps 120 auto dense,varlen bwd96
    ;;
  fwd192n)  # issue 29, prepared 2026-12-07, not yet run: the D=192 forward (0.95x FlashAttention-3 on 2026-12-07's
           # H100, `headdims`) on larger key blocks, a lab form each: FWD192N_DIFF=fwd_d192_n96.diff (the
           # default: 96-key blocks, O streamed through one 16 KB plane) or fwd_d192_n112.diff (112-key
           # blocks, FlashAttention-3's tile, O from the registers: no room for an O plane); sm_90a 0
           # spills in both. Its A/B against the tree's 80-key config on D=192 cells with a D=128 control
           # (cuDNN and FlashAttention-3 alongside: carry .whl/), then the forward checks in the copy.
           # Prediction: 96 keys +1..+3% from 4k keys (fewer per-block costs, the epilogue a few % of a
           # tile), 112 -2..+3% (the register epilogue's half-used sectors against the longer blocks).
           # Prepared 2026-12-08 for the same stage: the held row max at D=192 (D=96/128's update_held,
           # +3.6-9.7% at D=128), fwd_d192_held.diff on the 80-key blocks and fwd_d192_n96_held.diff on 96;
           # sm_90a 0 spills in both. Prediction +2..+5% from 2k keys (perf-notes "The held row max at
           # D=192"); the copy's forward checks run the held-max tests at D=192, and for a held form
           # the packed batches' D=192 tests run there after them (~1 min more).
           # Also prepared 2026-12-08: fwd_d192_order2.diff, D=256's step order 2 at D=192 (0 spills; D=256
           # +2.7% with it, D=128 -0.3..-1.8% from 4k): prediction -1..+2%, after the held forms.
    fwd_patch_ab fwd192n "${FWD192N_DIFF:-fwd_d192_n96.diff}" \
      "${FWD192N_CELLS:-192:1024:1:16:10 192:4096:0:4:10 192:4096:1:4:10 192:16384:0:1:10 192:16384:1:1:10 128:4096:0}"
    # A held form: the packed batches' D=192 cases too (a row's bits must not depend on its tile's other rows).
    case "${FWD192N_DIFF:-}" in
      *held*) step pytest_fwd192n_packed 120 bash -c "cd '$PWD/build/ab-fwd192n' && PYTHONPATH='$PWD/build/ab-fwd192n' \
        FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_varlen_gpu.py -k '192' -ra" ;;
    esac
    ;;
  fwd256held)  # issue 29, prepared 2026-12-08, not yet run: the D=256 forward (causal 4k/8k 0.97x FlashAttention-3
              # on 2026-12-05's H100) with the held row max (D=128's update_held, +3.6-9.7% when it landed),
              # lab/ab/fwd_d256_held_order0.diff: at D=256's step order 2 ptxas serialized the wgmma for want of
              # registers (C7511), so the form takes order 0 (order 2 measured +2.7% at D=256 on 2026-11-27);
              # a lab form: the warpgroup index spills (4 B) in the dense dynamic kernels, 20 B in the packed
              # ones, to be removed before it could land. Its A/B against the tree on D=256 cells with a D=128
              # control (cuDNN and FlashAttention-3 alongside: carry .whl/), then the forward checks in the
              # copy (the held-max tests run D=256 through the held path there). Prediction -1..+4% (the held
              # step's gain less order 2's), perf-notes "The held row max at D=192".
    fwd_patch_ab fwd256held fwd_d256_held_order0.diff \
      "${FWD256HELD_CELLS:-256:1024:1 256:4096:1 256:8192:1 256:16384:1 256:4096:0 256:16384:0 128:4096:1}"
    ;;
  bwdidle)  # issue 27, measured 2026-12-07 on an H100, not adopted (perf-notes "The D=128 backward's warpgroup on a
           # step its keys do not see"): D=128 causal 0.973-1.039 a cell, geomean 1.007 (predicted +4-6% at
           # 512, +2-3% at 1k); windows of 256-2048 keys +1.4..+2.2% beside a +0.5% causal control (predicted
           # +2..+9%); its tests passed in the copy (792), memcheck and racecheck clean, synccheck not: the
           # idle step and a full one reached the step's bar.sync (.aligned) from different code; the diff
           # now drops .aligned there (named_barrier_sync_unaligned), not rerun. As prepared:
           # in the D=128 Hopper backward (64- and 80-query steps,
           # 128-key blocks, each consumer warpgroup 64 of the keys) a masked step none of whose queries one
           # warpgroup's keys see (a causal key block's first step, a window's far edge) computes that
           # warpgroup's scores and its dV/dK GEMMs anyway, on zeros. lab/ab/bwd_idle_warpgroup.diff: such a
           # warpgroup waits for the stage, frees it, writes zeros as its dS^T rows and computes its part of
           # dQ; the other has the tensor cores to itself (mask.cuh keys_see_rows, checked on the CPU by
           # test_window_cpu.py; D=64 and the packed softcap kernel keep the plain walk). IDLE_PART=1 (the
           # default): its A/B on the causal cells at D=64/128 with cuDNN alongside, then on
           # lab/bwd_window_time.py --hopper-only (D=128, windows 256-8192) in the same copy; IDLE_PART=2: the
           # Hopper backward, public-gradient and packed-batch tests and memcheck/racecheck/synccheck on the
           # dense and packed cases in that copy. Prediction: D=128 causal S=512 +4-6%, 1k +2-3%, from 2k
           # within +-1%; D=128 windows 256 +6-9%, 512 +4-5%, 1024 +2-3%, from 2048 +0-2%; D=64 unchanged.
    env_info > "$OUT/env.txt" 2>&1
    if [ "${IDLE_PART:-1}" = 1 ]; then
      step ab_idle 480 env PATCH=bwd_idle_warpgroup.diff REVERSE=0 AB_COPY="$PWD/build/ab-idle" OUT="$OUT/ab" \
        AB_CMD="$bwd_time_lean 64,128 --causal-only" bash lab/ab/run_ab.sh
      step ab_idle_windows 300 env PATCH=bwd_idle_warpgroup.diff REVERSE=0 AB_COPY="$PWD/build/ab-idle" AB_REUSE=1 \
        OUT="$OUT/ab-windows" AB_CMD="python3 lab/bwd_window_time.py --hopper-only --dims 128" bash lab/ab/run_ab.sh
    else
      [ -d build/ab-idle ] || build_patched idle bwd_idle_warpgroup.diff 0
      bwd_copy_checks "$PWD/build/ab-idle" idle 280 150 hopper auto tests/kernels/test_varlen_gpu.py
      copy_sanitize_steps "$PWD/build/ab-idle" idle-varlen 150 hopper varlen
    fi
    ;;
  bwdtimeline)  # issue 27, measured 2026-12-07 on an H100: a causal D=128 S=16k backward costs 7-9% more than its work
                # at 16 heads but matches cuDNN's ratio at two (perf-notes "The causal step's two levers measured");
                # ncu put half the excess inside the step loop, half outside it. In a copy with SM clock stamps a CTA
                # (lab/ab/lab_bwd_cta_timeline.diff; dense kernels only), lab/bwd_cta_timeline.py: each CTA's launch
                # gap, K/V and first-stage waits, step 0, the steady step, the epilogue; the fixed part in steps; the
                # SMs' busy share; the steady step by quarter of the call (BWD_TIMELINE_CELLS overrides the cells).
                # Then ncu's DRAM bytes and L2 sectors of the plain tree's causal call at 2 and 16 heads.
                # Predictions: the fixed part 2-5 steps a CTA, the same at 2 and 16 heads; at 16 heads the causal
                # call's steady step ~3-5% above the non-causal one's, in the quarters where two heads overlap.
                # Outcome (perf-notes "The landed tree on an H100 again"): the fixed part 1.9-2.8 steps, smaller
                # at 16 heads; SMs busy 99%; the causal steady step +3.0% at 16 heads, flat over the quarters
    env_info > "$OUT/env.txt" 2>&1
    build_patched timeline_bwd lab_bwd_cta_timeline.diff 0
    tl_copy="$PWD/build/ab-timeline_bwd"
    step bwd_timeline 300 env -C "$tl_copy" PYTHONPATH="$tl_copy" python3 lab/bwd_cta_timeline.py --json "$OUT/bwd_timeline.json" \
      ${BWD_TIMELINE_CELLS:-}
    ensure_built
    step ncu_heads 200 env OUT="$OUT/ncu_heads" NCU_BWD_PEERS=0 bash lab/ncu_bwd.sh 128:16384:1 128:16384:0
    ;;
  causallevers)  # issue 27, measured 2026-12-07 on an H200 (prefetch 0.954 causal / 0.938 non-causal, zigzag 1.000; neither adopted): bwdprefetch's and zigzag's diffs applied together in one copy
                 # (both are run-time switches, off by default there), so that one build answers both levers and
                 # their sum: the causal cells (D 64/128/256, 4k and 16k) with the modes off, prefetch 2 steps ahead
                 # with dq_accum, the zigzag walk, and both, cuDNN alongside; non-causal 16k controls; the step probe.
                 # Predictions: the two stages' (prefetch causal D=128 16k +4..+10%; zigzag there +3..+8% if
                 # sharing is the cause, both then less than the sum)
    env_info > "$OUT/env.txt" 2>&1
    build_patched levers "bwd_l2_prefetch.diff bwd_zigzag_walk.diff" 0
    lv_copy="$PWD/build/ab-levers"
    lv_modes=(off:FLASHATTN_BWD_PREFETCH=0 prefetch:FLASHATTN_BWD_PREFETCH=2,FLASHATTN_BWD_PREFETCH_DQ=1
      zigzag:FLASHATTN_BWD_REVERSE=2 both:FLASHATTN_BWD_REVERSE=2,FLASHATTN_BWD_PREFETCH=2,FLASHATTN_BWD_PREFETCH_DQ=1)
    step levers_causal 240 env -C "$lv_copy" PYTHONPATH="$lv_copy" python3 lab/bwd_switch_time.py --modes "${lv_modes[@]}" \
      --seqs 4096,16384 --causal 1
    step levers_noncausal 120 env -C "$lv_copy" PYTHONPATH="$lv_copy" python3 lab/bwd_switch_time.py --modes \
      "${lv_modes[0]}" "${lv_modes[1]}" --seqs 16384 --causal 0
    step levers_step_probe 100 env -C "$lv_copy" PYTHONPATH="$lv_copy" FLASHATTN_BWD_PREFETCH=2 FLASHATTN_BWD_PREFETCH_DQ=1 \
      python3 lab/bwd_causal_step_time.py --dims 128 --heads 1,16 --walks 1,2
    ;;
  causalleverscheck)  # issue 27, moot after causallevers (neither lever adopted), left unrun: after causallevers, in its copy with both levers on:
                      # the prefetch and zigzag tests, the Hopper backward, packed-batch and public-gradient tests, the
                      # block CPU tests, memcheck/racecheck/synccheck on the small dense and packed cases
    env_info > "$OUT/env.txt" 2>&1
    lv_copy="$PWD/build/ab-levers"
    [ -d "$lv_copy" ] || build_patched levers "bwd_l2_prefetch.diff bwd_zigzag_walk.diff" 0
    export FLASHATTN_BWD_PREFETCH=2 FLASHATTN_BWD_PREFETCH_DQ=1 FLASHATTN_BWD_REVERSE=2
    step pytest_levers 330 env -C "$lv_copy" PYTHONPATH="$lv_copy" "${pytest_ci[@]}" tests/kernels/test_sm90_bwd_block_cpu.py \
      tests/kernels/test_backward_gpu.py tests/kernels/test_public_gradients.py tests/kernels/test_varlen_gpu.py \
      -k "hopper or prefetch or zigzag or varlen" -ra
    copy_sanitize_steps "$lv_copy" levers 120 auto dense,varlen
    unset FLASHATTN_BWD_PREFETCH FLASHATTN_BWD_PREFETCH_DQ FLASHATTN_BWD_REVERSE
    ;;
  gqawalk)  # issue 27, measured 2026-12-07 on an H100, not adopted (geomean 1.001 over 24 GQA shapes, D=128 S=16k 16:4
             # causal 0.949; lab/bwd_l2_model.py predicted no gain at the rules' splits): a GQA group's heads walked
             # interleaved under a mask (lab/ab/bwd_gqa_heads_interleaved.diff: BwdBlock::interleaved behind the switch
             # FLASHATTN_BWD_HEAD_WALK, with its CPU and GPU tests). In a patched copy: the switch's A/B at the default
             # split with cuDNN alongside, the walk's and the group split's tests, the sanitizers with it on
    env_info > "$OUT/env.txt" 2>&1
    build_patched walk bwd_gqa_heads_interleaved.diff 0
    walk_copy="$PWD/build/ab-walk"
    step walk_ab 280 env -C "$walk_copy" PYTHONPATH="$walk_copy" python3 lab/bwd_group_split_time.py --dims 64,128 \
      --force FLASHATTN_BWD_HEAD_WALK=1 --against FLASHATTN_BWD_HEAD_WALK=0
    step pytest_walk 240 env -C "$walk_copy" PYTHONPATH="$walk_copy" "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py \
      -k "heads_walk or group_split" -ra
    export FLASHATTN_BWD_HEAD_WALK=1
    copy_sanitize_steps "$walk_copy" walk 150 auto dense
    unset FLASHATTN_BWD_HEAD_WALK
    ;;
  gqancu)  # issue 27, measured 2026-12-07 on an H100 (docs/perf-notes.md: under locked clocks our 16k GQA call is
            # the faster one; the gap is our causal step, 0.570 of the non-causal call's time against cuDNN's
            # 0.520): ncu on ours at group splits 2 and 4, cuDNN's GQA call and the MHA twin side by side (tensor
            # pipe, stalls, DRAM bytes, L2 hit rate), the MHA twin without a mask, the 4k cell
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step ncu_gqa 420 env NCU_BWD_SPLITS="2 4" NCU_BWD_PEERS=1 bash lab/ncu_bwd.sh ${GQANCU_SHAPES:-128:16384:1:4 128:16384:1 128:16384:0 128:4096:1:4}
    ;;
  gqasplit)  # issue 27, prepared 2026-12-06: the training grid's GQA 16:4 causal backward at 4k ran 0.93x cuDNN and 8%
              # slower than its MHA twin (H200); the wave rule splits its group over 2 CTAs, group_split.h's dispatch
              # model (FLASHATTN_BWD_GROUP_SPLIT=m, a lab switch) over 4 and leaves D=64 32:8 at 2k unsplit. Both sides
              # of each A/B are one build (the switch is read at every call): the model against the wave rule, a
              # forced 4 against it, then the group-split tests with the model among them (perf-notes "The landed
              # tree on an H200")
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step split_model_vs_w4 280 python3 lab/bwd_group_split_time.py --dims 64,128 --force m --against w4
    step split_4_vs_w4 150 python3 lab/bwd_group_split_time.py --dims 128 --force 4 --against w4
    step pytest_group_split 150 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py -k group_split -ra
    ;;
  bwdgqa)  # the Hopper backward's GQA group split: build, the backward tests, its A/B against no split
           # with cuDNN alongside (lab/bwd_group_split_time.py), memcheck/racecheck/synccheck on the small dense cases
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_backward 300 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py -ra
    step bwd_group_split_time 240 python3 lab/bwd_group_split_time.py
    sanitize_dense_steps 150
    ;;
  hostsplit)  # the forward's tile counter behind lse (issue 28) and the GQA split's wave target: build,
              # the forward's split and attention tests, the latency grid, the wave-target A/B
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_forward 200 "${pytest_ci[@]}" -x tests/kernels/test_fwd_split_gpu.py tests/kernels/test_attention_gpu.py -ra
    step bench_latency 150 env FLASHATTN_BENCH_IMPLS="${FLASHATTN_BENCH_IMPLS:-flashattn,sdpa-default}" \
      BENCH_MARKERS="bench and latency" bash benchmarks/run_benchmarks.sh "$OUT/bench"
    step bwd_split_waves 150 python3 lab/bwd_group_split_time.py --force w4 --against w2
    ;;
  training)  # the backward as users train: build, the backward tests with the wide config on masked calls
             # too, its causal A/B (lab/bwd_wide_time.py --causal), then the training benchmark grid
             # against cuDNN, with the wide config on masked calls where the A/B gained >= 1% and the
             # tests passed (FLASHATTN_BWD_WIDE=2; the grid's report says which in bench-wide-mode.txt)
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_backward_wide_masked 240 env FLASHATTN_BWD_WIDE=2 "${pytest_ci[@]}" -x tests/kernels/test_backward_gpu.py -ra
    tests_ok=$(grep -q "exit 0 in" <(tail -1 "$OUT/summary.txt") && echo 1 || echo 0)
    step bwd_wide_causal 240 python3 lab/bwd_wide_time.py --causal
    wide_mode=$(python3 - "$OUT/step_bwd_wide_causal.log" "$tests_ok" <<'PY'
import re, sys
m = re.search(r"over the 64-query one: ([0-9.]+)", open(sys.argv[1]).read())
print(2 if sys.argv[2] == "1" and m and float(m.group(1)) >= 1.01 else 1)
PY
)
    echo "FLASHATTN_BWD_WIDE=$wide_mode (tests ok: $tests_ok)" > "$OUT/bench-wide-mode.txt"
    step bench_training 330 env FLASHATTN_BWD_WIDE="$wide_mode" \
      FLASHATTN_BENCH_IMPLS="${FLASHATTN_BENCH_IMPLS:-flashattn,sdpa-default}" BENCH_MARKERS="bench and training" \
      bash benchmarks/run_benchmarks.sh "$OUT/bench"
    ;;
  shortcalls)  # 2026-11-27: the forward's masked three-warpgroup config for causal D=64 from 2k keys and the
              # backward's 80-query config on wide windows: build, the forward, window and backward tests, the
              # D=64 causal forward grid against cuDNN and FlashAttention-3, sanitizers on the small dense cases
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_forward 300 "${pytest_ci[@]}" tests/kernels/test_attention_gpu.py tests/kernels/test_window_gpu.py \
      tests/kernels/test_fwd_split_gpu.py -ra
    step pytest_backward 300 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py -ra
    step bench_fwd_d64_causal 200 env FLASHATTN_BENCH_IMPLS="${FLASHATTN_BENCH_IMPLS:-flashattn,sdpa-default,fa3}" \
      BENCH_MARKERS="bench and standard" BENCH_K="bf16-D64- and causal" bash benchmarks/run_benchmarks.sh "$OUT/bench"
    sanitize_dense_steps 200
    ;;
  fwdch4lab)  # measured 2026-11-30 on an H200, not adopted (0.91-0.92x the shipped configs; perf-notes):
              # the 16-bit D=128 forward on longer key blocks with the softmax
              # reductions in 4 chains, the form that moved the FP8 D=128 forward by 1.5-7% (lab variants
              # against the shipped configs, alternating samples; d128-n176-otma is the one-chain reference)
    env_info > "$OUT/env.txt" 2>&1
    step lab_ch4 560 bash lab/sm90_lab.sh variants d128-n176-otma d128-n176-otma-ch2 d128-n160-otma d128-n160-otma-ch4
    ;;
  twocta)  # 2026-11-27 (measured 2026-11-28 on an H100: no gain, not adopted): the short causal forward on one-consumer CTAs, two to an SM (lab variants,
           # traits.h kCtasPerSm), timed against the shipped configs; then the FP8 call's kernels (its V
           # transpose's share) against FlashAttention-3's
    env_info > "$OUT/env.txt" 2>&1
    step lab_twocta 420 bash lab/sm90_lab.sh variants d64-1wg-2cta d64-1wg-2cta-s3 d128-1wg-2cta-n64
    ensure_built
    step fp8_breakdown 240 python3 lab/fp8_time.py --breakdown
    ;;
  fp8vtkab)  # 2026-11-30: the in-kernel V transpose (FP8_VT_DIFF in lab/ab, REVERSE=0: B is the patched copy)
             # against the tree, lab/fp8_time.py A B A B in two builds. Default the lean form
             # (fp8_vt_in_kernel_lean.diff); both measured on an H200: 10-14% and 0-11% slower. The diffs
             # apply to commit 24e6e7b's csrc
    env_info > "$OUT/env.txt" 2>&1
    fp8_patch_ab fp8_vt "${FP8_VT_DIFF:-fp8_vt_in_kernel_lean.diff}" 0
    ;;
  fp8ab)  # any forward diff's A/B on the FP8 forward (lab/fp8_time.py A B A B in two builds): FP8_AB_DIFF in
          # lab/ab, FP8_AB_REVERSE=1 for a landed diff (B is the tree). 2026-11-30: fwd_mask_lean.diff, landed,
          # which changes the FP8 kernels' code too (kernel_identity)
    env_info > "$OUT/env.txt" 2>&1
    fp8_patch_ab fp8 "${FP8_AB_DIFF:?FP8_AB_DIFF names a diff in lab/ab}" "${FP8_AB_REVERSE:-0}"
    ;;
  fp8vtkncu)  # prepared 2026-11-30: why the in-kernel V transpose slows the FP8 D=128 forward: ncu on the tree's
              # kernel and the patched copy's (FP8_VT_DIFF, as fp8vtkab), FlashAttention-3's alongside, one
              # round (shared-memory wavefronts, bank conflicts, issue activity, stall reasons)
    env_info > "$OUT/env.txt" 2>&1
    step ncu_fp8_vt 580 env AB_ROUNDS=1 PATCH="${FP8_VT_DIFF:-fp8_vt_in_kernel_lean.diff}" REVERSE=0 OUT="$OUT/ab" \
      AB_CMD="bash lab/ncu_fwd.sh --fp8 128:4096:0 128:4096:1" bash lab/ab/run_ab.sh
    ;;
  fp8land)  # after an FP8 forward change: fp8_land_steps
    fp8_land_steps
    ;;
  fp8vtk)  # 2026-11-30: fp8_land_steps on a tree with one of lab/ab/fp8_vt_in_kernel*.diff applied first (the
           # in-kernel V transpose; both forms measured on an H200, not adopted)
    fp8_land_steps
    ;;
  fp8variants)  # lab variants of the D=128 FP8 config in one build (FP8_VARIANTS_DIFF in lab/ab, default
                # fp8_d128_variants_224.diff: 224-key blocks with 4 chains, 192 with 8, 160 with 4, measured
                # 2026-11-30 on an H200, none faster; fp8_d128_variants.diff, on commit 24e6e7b's csrc: its
                # 192 keys with 4 chains landed), FLASHATTN_LAB_FP8 picking one per run of lab/fp8_time.py,
                # A B A B against the tree
    env_info > "$OUT/env.txt" 2>&1
    step ab_fp8_variants 580 env PATCH="${FP8_VARIANTS_DIFF:-fp8_d128_variants_224.diff}" REVERSE=0 OUT="$OUT/ab" AB_COPY=/tmp/flashattn-fp8var \
      AB_CMD="bash lab/fp8_lab_variants.sh" bash lab/ab/run_ab.sh
    ;;
  fwdnc176ab)  # 2026-11-30 (measured on an H200: -0.3..+1.1%, not adopted): non-causal D=128 calls from 8192 keys on a 128 x 176 tile
               # (lab/ab/fwd_d128_noncausal_n176.diff, REVERSE=0: B is the patched copy), lab/fwd_time.py A B A B in
               # two builds, FlashAttention-3 alongside; then, in the patched copy, the forward tests
    env_info > "$OUT/env.txt" 2>&1
    step ab_nc176 560 env PATCH=fwd_d128_noncausal_n176.diff REVERSE=0 OUT="$OUT/ab" AB_COPY=/tmp/flashattn-nc176 \
      AB_CMD="python3 lab/fwd_time.py 128:4096:0 128:8192:0 128:16384:0 128:16384:1 64:16384:0" bash lab/ab/run_ab.sh
    step pytest_nc176 300 bash -c "cd /tmp/flashattn-nc176 && PYTHONPATH=/tmp/flashattn-nc176 FLASHATTN_HYPOTHESIS_PROFILE=ci \
      python3 -m pytest -q -p no:cacheprovider tests/kernels/test_attention_gpu.py tests/kernels/test_window_gpu.py -x"
    ;;
  fwdheld)  # issue 29, measured 2026-12-04, not adopted (0.987: D=128 16k -3.6%, causal 16k -2.7%; correct, its copy's tests and sanitizers clean): the Hopper forward's exponentials against the row max held from the blocks before
           # (lab/ab/fwd_held_max.diff: Sm90Softmax::update_held past a tile's first key block, the two-consumer
           # D=64/128 configs; the max reduced beside the exponentials instead of before them; a rise past 2^8
           # scales P down, past 2^120 recomputes the warp's scores by mma.sync). Its A/B (D=128, D=64's
           # two-consumer causal cells; D=64 non-causal and D=256 unchanged controls), then the fwdq2 checks in the
           # copy (the new rising-max test among them). Prediction: the softmax's chain ~100-150 cycles shorter a
           # step: D=128 +1-4%, D=64 causal 512/1k +2-6%, the controls within noise.
    fwd_patch_ab fwdheld fwd_held_max.diff \
      "${FWD_HELD_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:4096:1 128:16384:1 64:512:1 64:1024:1 64:4096:0 256:4096:0}"
    ;;
  fwdpvboundary)  # issue 29, measured 2026-12-07 on an H100, not adopted (B/A 0.986 over 9 cells; its targets, D=64
                  # causal 512 / 1k, 0.961 / 0.948; its checks in the copy passed, racecheck cut off by the end of
                  # the device time; docs/perf-notes.md): the Hopper forward's step order 2 (D=64's two-consumer
                  # config, D=256, FP8 D=256) with a basic-block boundary before the P V[n+1] wait (a try_wait on
                  # V[n+1]'s full phase, complete until the release after that wait), so that ptxas keeps the
                  # block's softmax under the P V GEMM instead of hoisting the wait above it
                  # (lab/ab/fwd_order2_pv_wait_boundary.diff). In the tree's SASS the exponentials between the S
                  # wait and the P V wait of a step: D=64 (two consumers) 0 of 64, D=256 5 of 32 (orders 0 and 1
                  # have their K wait there as the boundary: 64 of 64 at D=64's three-consumer configs, all of
                  # D=128's); with it: all of them. Its A/B on the short causal D=64 cells (the issue's worst,
                  # 0.91-0.94x cuDNN), D=256, D=128 and D=64 three-consumer controls (unchanged kernels), the fwdq2
                  # checks in the copy (~7 min); fwdpvboundaryfp8 after it, its A/B on lab/fp8_time.py. Prediction:
                  # D=64 causal 512/1k/2k +1-4%, D=256 -1..+3%, controls within noise, FP8 D=256 -1..+2%.
    fwd_patch_ab fwdpvboundary fwd_order2_pv_wait_boundary.diff \
      "${FWD_PV_BOUNDARY_CELLS:-64:512:1 64:1024:1 64:2048:1 256:1024:1 256:4096:1 256:4096:0 256:16384:0 128:4096:0 64:4096:0}"
    ;;
  fwdpvboundaryfp8)  # prepared 2026-12-05, left unrun (moot: fwdpvboundary lost on its target cells, 2026-12-07): fwdpvboundary's diff on the packed and FP8 forwards, reusing
                     # fwdpvboundary's copy when the machine still has it built: the packed-batch tests and the
                     # sanitizers on the packed cases in the copy (its packed D=64/256 kernels changed too), then
                     # its A/B on lab/fp8_time.py (~6 min)
    env_info > "$OUT/env.txt" 2>&1
    fp8_patch_ab fp8pvboundary fwd_order2_pv_wait_boundary.diff 0 "$PWD/build/ab-fwdpvboundary"
    step pytest_fwdpvboundary_varlen 200 bash -c "cd '$PWD/build/ab-fwdpvboundary' && PYTHONPATH='$PWD/build/ab-fwdpvboundary' \
      FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_varlen_gpu.py -ra"
    copy_sanitize_steps "$PWD/build/ab-fwdpvboundary" fwdpvboundary_varlen 90 auto varlen
    ;;
  bwdboundary)  # issue 27, measured 2026-12-05 on an H100, not adopted (0.991 over 24 cells, non-causal from 2k keys
                # 0.978; docs/perf-notes.md): the Hopper backward (D <= 128, dense calls, unmasked steps)
                # with a basic-block boundary before its dP^T wait (mainloop.cuh schedule_boundary: a try_wait on
                # the step's full barrier, complete since the step's start), so that ptxas keeps the score pass
                # meant to run under the dP^T GEMM before the wait instead of hoisting the wait above it
                # (lab/ab/bwd_dp_wait_boundary.diff). In the SASS of an unmasked step, the P exponentials before
                # the wait: D=64 21 -> 42 of 64, D=128 7 -> 20 of 32, the wide config 11 -> 26 of 40; the
                # softcap's tanh D=64 10 -> 64 of 64, wide 9 -> 25 of 40. Its A/B on the backward with cuDNN
                # alongside (D=64/128, bf16), then on lab/bwd_softcap_time.py in the same copy, then the Hopper
                # backward tests and the sanitizers on the dense cases in the copy. Prediction: D=64/128
                # backward +1-4% (non-causal most, S >= 2k), D=64 softcap +2-5%, D=256 (unchanged) within noise.
    hopper_ab boundary bwd_dp_wait_boundary.diff 64,128
    step ab_boundary_softcap 420 env PATCH=bwd_dp_wait_boundary.diff REVERSE=0 AB_COPY="$PWD/build/ab-boundary" AB_REUSE=1 \
      OUT="$OUT/ab-softcap" AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only" bash lab/ab/run_ab.sh
    bwd_copy_checks "$PWD/build/ab-boundary" boundary 240 150 hopper auto
    ;;
  softcapsplit)  # issue 27, measured 2026-12-05 on an H100, not adopted (D=64 softcap calls 0.967, 4k 0.95-0.96;
                 # docs/perf-notes.md): the dense D=64 softcap backward (one pass on 128-query
                 # steps) with its dP^T GEMM in two commit groups of 64 queries (WgmmaSS::mma_at on the halves of
                 # the accumulator), the first half's P and dS computed and packed to 16-bit A fragments while
                 # the second half's GEMM runs, bwdboundary's boundary before each of the two waits in unmasked
                 # steps (lab/ab/bwd_softcap_split_dp.diff). Why: in the tree's SASS ptxas hoists the dP wait
                 # above most of the work meant to run under it (an unmasked step: 10 of 64 tanh and 4 of 64
                 # exponentials before it, 54 and 60 after); with the split, all 64 tanh before the first
                 # half's wait, 35 exponentials between the two waits, 29 after. Its A/B on
                 # lab/bwd_softcap_time.py (D=64/128/256, S 4k/16k, both masks; D=128/256 unchanged kernels as
                 # controls), then the softcap backward tests and the sanitizers on the dense cases in the copy.
                 # Prediction: D=64 softcap calls 3-7% faster (cost 1.14-1.17 -> 1.07-1.12), the rest within noise.
    env_info > "$OUT/env.txt" 2>&1
    step ab_softcapsplit 420 env PATCH=bwd_softcap_split_dp.diff REVERSE="${SOFTCAP_SPLIT_REVERSE:-0}" \
      AB_COPY="$PWD/build/ab-softcapsplit" OUT="$OUT/ab" \
      AB_SMOKE="python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_backward_gpu.py::test_window_and_softcap_edge_case_gradients -k GQA" \
      AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only" bash lab/ab/run_ab.sh
    step pytest_softcapsplit 300 bash -c "cd '$PWD/build/ab-softcapsplit' && PYTHONPATH='$PWD/build/ab-softcapsplit' \
      FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_backward_gpu.py \
      tests/kernels/test_public_gradients.py -k 'softcap or cap' -ra"
    copy_sanitize_steps "$PWD/build/ab-softcapsplit" softcapsplit 150 auto dense
    ;;
  fwdpackedfirst)  # issue 29, prepared 2026-12-04; its first run on an H100 (2026-12-05) failed its bitwise test (a
                   # sequence packed alone took another config: the bounds clamped to the packed rows, mended on main
                   # the same day, packedbounds); measured again the same day on an H100 and landed: the benchmark's
                   # D=64 causal packing 1.15x (0.52 -> 0.45 ms), the short-heavy one 1.08x, the controls 1.00x;
                   # FWD_PACKED_FIRST_REVERSE=1 (the default now) undoes it. The packed Hopper forward's causal D=64 calls on the
                   # long-keys config from 1536 keys where one sequence of the bounds fills 1.5 waves of its tiles
                   # (dispatch.cu packed_config_kind: the dense rule on the bounds and heads, never the batch), with
                   # each sequence's partial query tile first (packed.cuh packed_row_shift), as the dense calls have
                   # had since 2026-12-03 (lab/ab/fwd_packed_long_keys_first.diff, with its GPU test). The varlen
                   # benchmark's D=64 causal cell read 0.87x our dense call and 0.84x FlashAttention-3's varlen
                   # (2026-12-03), on the default config (its bound 4024 < 4096). Its A/B on lab/varlen_time.py
                   # (the benchmark's packing and a short-heavy one under a 2048 bound; D=64 causal, D=64
                   # non-causal and D=128 causal controls; forward only), then the packed-batch tests and the
                   # sanitizers on the packed cases in the copy. Prediction: bench D=64 causal +6-12%; the
                   # short-heavy mix -5..+3% (192-row tiles on its short sequences); the controls within noise.
    env_info > "$OUT/env.txt" 2>&1
    step ab_fwdpackedfirst 420 env PATCH=fwd_packed_long_keys_first.diff REVERSE="${FWD_PACKED_FIRST_REVERSE:-1}" \
      AB_COPY="$PWD/build/ab-fwdpackedfirst" OUT="$OUT/ab" AB_ROUNDS="${FWD_PACKED_FIRST_ROUNDS:-3}" \
      AB_SMOKE="python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_varlen_gpu.py::test_a_sequence_packed_alone_takes_its_batch_config" \
      AB_CMD="python3 lab/varlen_time.py --mix bench --mix short --cells 64:1,64:0,128:1 --forward-only" \
      bash lab/ab/run_ab.sh
    ;;
  fwdpackedfirstcheck)  # fwdpackedfirst's checks in its copy (build/ab-fwdpackedfirst, built there if absent): the packed-batch
                        # tests, then the sanitizers on the packed cases (apart: with the A/B they outlast one call).
                        # Passed 2026-12-05 on an H100 (183 passed, memcheck/racecheck/synccheck clean) before it landed;
                        # on a tree that holds the diff the copy it builds is the tree without it
    env_info > "$OUT/env.txt" 2>&1
    compgen -G "build/ab-fwdpackedfirst/flashattn/*.so" > /dev/null || build_patched fwdpackedfirst fwd_packed_long_keys_first.diff
    step pytest_fwdpackedfirst 240 bash -c "cd '$PWD/build/ab-fwdpackedfirst' && PYTHONPATH='$PWD/build/ab-fwdpackedfirst' \
      FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_varlen_gpu.py -ra"
    copy_sanitize_steps "$PWD/build/ab-fwdpackedfirst" fwdpackedfirst 120 auto varlen
    ;;
  packedbounds)  # 2026-12-05: the packed Hopper forward's config from the caller's bounds and window edges, never from the
                 # packed rows (FwdParams::bound_q / bound_k; set_mask caps a packed call's window edges instead of
                 # dropping them): the build, then the packed-batch tests, test_a_sequence_packed_alone_takes_its_batch_config
                 # among them (a 4096-key bound and a window past a short sequence: before the change the sequence packed
                 # alone took another D=64 config), then the public gradients (the backward reads the same mask)
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_varlen 300 "${pytest_ci[@]}" tests/kernels/test_varlen_gpu.py tests/kernels/test_public_gradients.py -ra
    ;;
  packedprobe)  # issue 29, measured 2026-12-05 (H100: the packed call of 22 heads ran the long-keys config, each short
                # sequence alone the default one: the bounds clamped to the packed rows; docs/perf-notes.md): why fwdpackedfirst's copy gives sequence 2 of its test's batch other bits than the
                # sequence's call alone (lab/packed_alone_probe.py: repeated calls, the rows and heads that differ,
                # each side's float64 error, the sequence alone with real rows past its end and after an empty
                # sequence), on the test's batch, then the default config's heads (21 on an H100) as the control,
                # then two smaller batches around the 250-row sequence. Reuses build/ab-fwdpackedfirst if there.
    env_info > "$OUT/env.txt" 2>&1
    compgen -G "build/ab-fwdpackedfirst/flashattn/*.so" > /dev/null || build_patched fwdpackedfirst fwd_packed_long_keys_first.diff
    for args in "--hq 22" "--hq 21" "--hq 22 --lens 1700,250" "--hq 22 --lens 1700,1,250,900" "--hq 22 --dtype float16"; do
      tag=$(echo "$args" | tr -c 'a-z0-9' '_')
      step "probe$tag" 120 bash -c "cd '$PWD/build/ab-fwdpackedfirst' && PYTHONPATH='$PWD/build/ab-fwdpackedfirst' \
        python3 '$PWD/lab/packed_alone_probe.py' --causal $args"
    done
    ;;
  fwdheldv5)  # issue 29, measured 2026-12-04 on an H200, landed: fwdheldv3 with the refill's masked flag and key base opaque
             # (lab/ab/fwd_held_max_v5.diff; its SASS: the ~180 instructions gone from the common case, whose path is
             # fwdheldv2's again). Its A/B on fwdheld's cells, then fwdland's checks in the copy (FWD_COPY_WHOLE=1: the
             # kernel tests whole, the packed-batch bitwise tests, the rising-max and row-independence tests among them,
             # and the sanitizers on the dense, split, FP8 and packed cases), so that it lands with no fwdland after.
             # Prediction: as fwdheldv2, D=128 +5-7%, the controls within noise. Outcome: 1.035, D=128 non-causal
             # 1k / 4k / 16k +3.9 / +3.6 / +4.5%, causal 4k / 16k +6.7 / +9.7%, D=64 and D=256 controls 0.993-1.003;
             # the kernel tests 2987 passed, memcheck/racecheck/synccheck clean. Landed: FWD_HELD_REVERSE=1 undoes it.
    FWD_COPY_WHOLE=${FWD_COPY_WHOLE:-1} fwd_patch_ab fwdheldv5 fwd_held_max_v5.diff \
      "${FWD_HELD_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:4096:1 128:16384:1 64:512:1 64:4096:0 256:4096:0}" \
      "${FWD_HELD_REVERSE:-1}"
    ;;
  fwdheldv3)  # issue 29, measured 2026-12-04: correct (the forward tests 570 and the packed-batch tests 179 passed, the
             # sanitizers clean) but 0.906, D=128 -10..-15%: ptxas built the refill's per-element masked flag into a
             # bitmask in every step (~180 instructions); fwdheldv5 hides it. fwdheldv2's fast path with every row's arithmetic a function of that row alone
             # (lab/ab/fwd_held_max_v3.diff: the other cases settled per row by selects after the P V wait, the
             # rarest one refilling only its rows by mma.sync; D=128's two-consumer config only), for the packed
             # bitwise tests fwdheldv2 failed. Its A/B (D=128 cells, a D=64 control), the fwdq2 checks, then the
             # packed-batch tests and the sanitizers on the packed cases in the copy. Prediction: as fwdheldv2, D=128 +5-7%.
    fwd_patch_ab fwdheldv3 fwd_held_max_v3.diff "${FWD_HELD_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:4096:1 64:4096:0}"
    step pytest_fwdheldv3_packed 200 bash -c "cd '$PWD/build/ab-fwdheldv3' && PYTHONPATH='$PWD/build/ab-fwdheldv3' \
      FLASHATTN_HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider tests/kernels/test_varlen_gpu.py -ra"
    copy_sanitize_steps "$PWD/build/ab-fwdheldv3" fwdheldv3_packed 120 auto varlen
    ;;
  fwdheldv2)  # issue 29, measured 2026-12-04 (1.036: D=128 +5.8..+7.3% in every cell, D=64 -0.4/+1.4%, controls 0.99; its copy's
             # forward tests and sanitizers clean, but the kernel tests whole (fwdland on the tree with it) failed two packed-batch
             # bitwise tests: not landed, see perf-notes): fwdheld's second form (lab/ab/fwd_held_max_v2.diff): the check reads the exponentials
             # (max p against 2^8, one vote, no shuffles), so their FMNMX and the sums' FADD follow the SFU's results
             # and the MUFU stream starts at the first instruction (the first form's SASS bunched 52 of 64 MUFU after
             # the shuffles and sank the sums behind the vote). Its A/B on fwdheld's cells, then the fwdq2 checks in
             # the copy. Prediction: D=128 0..+3%, D=64 causal 512/1k 0..+4%.
    fwd_patch_ab fwdheldv2 fwd_held_max_v2.diff \
      "${FWD_HELD_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:4096:1 128:16384:1 64:512:1 64:1024:1 64:4096:0 256:4096:0}"
    ;;
  fwdheldearly)  # issue 29, measured 2026-12-04 (0.982: not the K release): fwdheld's exponentials against the held max with K[n] released before the
                # softmax as in the tree and the recompute path dropped (lab/ab/lab_fwd_held_max_early_release.diff,
                # wrong results on a rise past 2^120, so timing only): whether fwdheld's loss is its later K release.
    step ab_fwdheldearly 400 env PATCH=lab_fwd_held_max_early_release.diff REVERSE=0 AB_COPY="$PWD/build/ab-fwdheldearly" \
      OUT="$OUT/ab" AB_CMD="python3 lab/fwd_time.py --rounds 8 ${FWD_HELD_CELLS:-128:1024:0 128:4096:0 128:16384:0 128:4096:1 128:16384:1 64:512:1 64:1024:1 64:4096:0 256:4096:0}" \
      bash lab/ab/run_ab.sh
    ;;
  fwdnc176v2)  # issue 29, measured 2026-12-04, not adopted (0.991: 1k -4.1%, 4k -0.8%, 8k/16k +0.9/+1.0%, controls -1.2%): FlashAttention-3's D=128 non-causal tile (128 x 176) again, on today's step
               # (lab/ab/fwd_d128_noncausal_n176_v2.diff, a lab form: Sm90NonCausalConfig<128> at every length, its
               # static, dynamic and packed kernels generated; sm_90a 0 spills). Its A/B on D=128 non-causal cells
               # with a causal and a D=64 control, then the fwdq2 checks in the patched copy. Prediction (its first form:
               # 8k -0.3%, 16k +0.5-1.1%, S <= 1k -8..-19% on the H100): 16k +0-2%, 4k -1..+1%, 1k and below slower.
    fwd_patch_ab fwdnc176v2 fwd_d128_noncausal_n176_v2.diff \
      "${FWD_NC176_CELLS:-128:1024:0 128:4096:0 128:8192:0 128:16384:0 128:4096:1 64:4096:0}"
    ;;
  fp8vt)  # 2026-11-28: the FP8 forward's V transpose at 128 x 128 per CTA (fp8_transpose.cu): build, the FP8
          # tests, the sanitizers on the FP8 cases, the kernel breakdown against FlashAttention-3
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_fp8 200 "${pytest_ci[@]}" tests/kernels/test_fp8_gpu.py tests/kernels/test_fp8_cpu.py -ra
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 sanitize_steps 150 auto fp8 fp8 memcheck racecheck initcheck
    step fp8_breakdown 240 python3 lab/fp8_time.py --breakdown
    ;;
  detpieces)  # 2026-11-28: deterministic mode's D=256 dQ tile added in four pieces with a ticket each
              # (lab/ab/det_dq_pieces.diff), against the tree, in two builds (measured: worse, not adopted)
    env_info > "$OUT/env.txt" 2>&1
    step ab_det_pieces 580 env PATCH=det_dq_pieces.diff REVERSE=0 OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_check.py --time-only --time --lean --dims ${DET_DIMS:-128,256}" bash lab/ab/run_ab.sh
    ;;
  softcaponepass)  # 2026-11-28: the D=64 softcap backward on 128-query steps, P and dS in one pass
                   # (lab/ab/bwd_softcap_onepass.diff, in the tree): A/B against the tree without it
                   # (the softcap's cost per dense call), then the softcap backward tests in the tree
    env_info > "$OUT/env.txt" 2>&1
    step ab_softcap_onepass 420 env PATCH=bwd_softcap_onepass.diff REVERSE=1 OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only" bash lab/ab/run_ab.sh
    step pytest_softcap 300 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_varlen_gpu.py \
      -k "softcap or cap" -ra
    ;;
  softcapwide)  # 2026-11-28: dense D=128 softcap calls on the wide config (80-query steps, one pass;
                # lab/ab/bwd_softcap_wide.diff, in the tree): A/B against the tree without it, then the tests
    env_info > "$OUT/env.txt" 2>&1
    step ab_softcap_wide 420 env PATCH=bwd_softcap_wide.diff REVERSE=1 OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only" bash lab/ab/run_ab.sh
    step pytest_softcap_wide 300 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_varlen_gpu.py \
      -k "softcap or cap or wide" -ra
    ;;
  softcaptanh)  # 2026-11-28: the one-pass softcap backward's tanh under the dP GEMM (lab/ab/bwd_softcap_tanh_first.diff,
                # in the tree): A/B against the tree without it, then the backward tests that cover it
    env_info > "$OUT/env.txt" 2>&1
    step ab_softcap_tanh 420 env PATCH=bwd_softcap_tanh_first.diff REVERSE=1 OUT="$OUT/ab" \
      AB_CMD="python3 lab/bwd_softcap_time.py --hopper-only" bash lab/ab/run_ab.sh
    step pytest_softcap_tanh 300 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_varlen_gpu.py \
      -k "softcap or cap or wide or split" -ra
    ;;
  combineab)  # 2026-11-29: the forward's split-keys calls with the combine launched plainly instead of
              # programmatically (lab/ab/fwd_combine_plain_launch.diff): host alone, back to back, single calls
    env_info > "$OUT/env.txt" 2>&1
    step ab_combine_launch 480 env PATCH=fwd_combine_plain_launch.diff REVERSE=0 OUT="$OUT/ab" \
      AB_CMD="python3 lab/split_call_time.py --calls 1000" bash lab/ab/run_ab.sh
    ;;
  clustermerge|splitplan|smallgrid)  # 2026-11-29: the forward's split over the keys merged in thread-block
                           # clusters, and its plan (issue 28): build, the split tests; splitplan also
                           # the seed shapes' kernel time at every forced split count, splitplan and
                           # smallgrid (small non-causal grids on 128-row tiles) the rule's against
                           # SDPA; both merges timed, the sanitizers on the split and small dense
                           # cases, the attention tests (smallgrid: and the packed and window ones)
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_split 300 "${pytest_ci[@]}" tests/kernels/test_fwd_split_gpu.py -ra
    [ "$1" = splitplan ] && step split_counts 300 python3 lab/fwd_split_time.py --counts
    [ "$1" != clustermerge ] && step split_rule 300 python3 lab/fwd_split_time.py
    [ "$1" = smallgrid ] && step pytest_varlen_window 300 "${pytest_ci[@]}" tests/kernels/test_varlen_gpu.py \
      tests/kernels/test_window_gpu.py -ra
    step split_call_time 240 python3 lab/split_call_time.py --calls 1000
    step memcheck_split 200 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 99 \
      python3 lab/sanitize_small.py --only split
    sanitize_steps 200 auto split split racecheck synccheck initcheck
    sanitize_steps 200 auto dense dense memcheck racecheck
    step pytest_attention 300 "${pytest_ci[@]}" tests/kernels/test_attention_gpu.py -ra
    ;;
  softcapsan)  # 2026-11-28: the sanitizers after a Hopper backward change, on a built tree: memcheck over
               # every small dense and packed case (softcap alone included), racecheck over every small
               # dense case, then racecheck and synccheck quick on both
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step memcheck_full 240 env SANITIZE_BACKENDS=auto compute-sanitizer --tool memcheck --error-exitcode 99 \
      python3 lab/sanitize_small.py --only dense,varlen
    step racecheck_dense_full 240 env SANITIZE_BACKENDS=auto compute-sanitizer --tool racecheck --racecheck-report hazard \
      --error-exitcode 99 python3 lab/sanitize_small.py --only dense
    sanitize_steps 150 auto dense,varlen quick racecheck synccheck
    ;;
  detncu)  # 2026-11-28: where deterministic mode's D=256 causal cost goes (issue 27): the main kernel's
           # stall reasons with and without flashattn.set_deterministic, one call each (lab/ncu_bwd.sh)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step ncu_bwd_det 420 env NCU_BWD_DET=1 NCU_BWD_PEERS=0 OUT="$OUT" bash lab/ncu_bwd.sh ${NCU_BWD_SHAPES:-256:8192:1}
    ;;
  tailsplit)  # 2026-11-27: the backward's split last wave (tail_split.h): build, the backward tests, its A/B
              # against no split with cuDNN alongside, sanitizers on the small dense cases
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_backward 300 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_sm90_bwd_block_cpu.py -ra
    step bwd_tail_time 420 python3 lab/bwd_tail_time.py
    ;;
  detrotate)  # 2026-11-27: deterministic mode's rotated walks (launch.cuh bwd_rotate_m): build, the backward
              # tests, deterministic mode's cost with them and without (FLASHATTN_BWD_ROTATE=0)
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_backward 300 "${pytest_ci[@]}" tests/kernels/test_backward_gpu.py tests/kernels/test_sm90_bwd_block_cpu.py -ra
    step det_cost_rotated 300 python3 lab/bwd_check.py --time-only --time --lean --dtype bf16
    step det_cost_countdown 300 env FLASHATTN_BWD_ROTATE=0 python3 lab/bwd_check.py --time-only --time --lean --dtype bf16
    ;;
  fwdland)  # after a Hopper forward change lands: build, memcheck/racecheck/synccheck on the small dense, split, FP8
            # and packed cases, then the kernel tests whole (tests/kernels). No initcheck: on the Hopper forward it reports
            # every read of a TMA-stored output (docs/sanitizer.md; run 2026-11-30: 100 such reports in 120 s, all
            # in torch's elementwise add); lab/sanitize.sh runs the gated one on the portable forward.
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    sanitize_steps 150 auto dense,split,fp8,varlen fwd
    step pytest_ci 330 "${pytest_kernels[@]}" --durations=15
    ;;
  detcost)  # issue 27's deterministic-mode bar (<= 1.3x the default): on a built tree, the op's backward in both
            # modes side by side with cuDNN, D 64/128/256 (DET_COST_DIMS), bf16 (measured 2026-12-04 on an H200 by the
            # same command: D=256 1.18-1.33, D=128 1.04-1.16, D=64 1.03-1.11)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step det_cost 300 $bwd_time_lean "${DET_COST_DIMS:-64,128,256}"
    ;;
  sanitizedense)  # memcheck/racecheck/synccheck on lab/sanitize_small.py's dense cases, on a built tree
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    sanitize_dense_steps 200
    ;;
  integrate)  # after merging features: build, the whole GPU suite, the features' benchmarks, the D=256 backward lab, backward timing
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_gpu 330 "${pytest_kernels[@]}" -ra --durations=15
    step bench_features 200 python3 -m pytest -q -p no:cacheprovider benchmarks -m "bench and (window or varlen)" -ra -s
    step bwd_lab_d256 240 env LAB_ONLY=d256 bash lab/bwd_lab.sh
    step bwd_time_bf16 200 python3 lab/bwd_check.py --quick --time --dtype bf16
    ;;
  host)  # issue 28, the host path: build, the whole GPU suite (the C++ checks and autograd behind every
         # entry point), then where a small call's host time goes, side by side with SDPA
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_gpu 330 "${pytest_kernels[@]}" -ra --durations=10
    step host_profile 180 python3 lab/host_profile_gpu.py
    ;;
  pytest)  # a part of the suite on a built tree (built first if not): PYTEST_ARGS (split on spaces),
           # PYTEST_K (one -k expression, spaces allowed), PYTEST_TIMEOUT_S (default 540). The whole GPU
           # suite takes longer than one call: run it in parts.
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    k_args=()
    [ -n "${PYTEST_K:-}" ] && k_args=(-k "$PYTEST_K")
    # shellcheck disable=SC2086
    step pytest_part "${PYTEST_TIMEOUT_S:-540}" "${pytest_ci[@]}" ${PYTEST_ARGS:-} "${k_args[@]}" -ra --durations=10
    ;;
  fp8)  # issue 29's FP8 forward, first run: build, its tests, compute-sanitizer memcheck on it, the
        # comparison with FlashAttention-3's FP8 forward (tokenspeed-fa3 carried in .whl/)
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step pytest_fp8 200 "${pytest_ci[@]}" tests/kernels/test_fp8_gpu.py tests/kernels/test_fp8_cpu.py -ra
    step memcheck_fp8 200 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 99 \
      python3 lab/sanitize_small.py --only fp8,split
    step fp8_time 240 python3 lab/fp8_time.py --check
    ;;
  latencygrid)  # issue 28: the latency grid (host time included) and its CUDA-graph twin (kernel time) on the seed's
                # shapes, side by side with every SDPA backend, and the host profile
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step bench_latency 300 env BENCH_MARKERS="bench and latency" bash benchmarks/run_benchmarks.sh "$OUT/bench"
    step host_profile 180 python3 lab/host_profile_gpu.py
    ;;
  hostbhsd)  # 2026-12-02 (issue 28's host path; measured on an H200: the seed shapes' single calls 1.24 -> 1.32-1.33x SDPA's,
             # landed): flashattn::fwd_bhsd reads q, k, v [B, H, S, D] through their strides instead of taking a
             # transposed view of each (lab/ab/host_fwd_bhsd_no_views.diff, applied in reverse on a tree from its landing
             # to commit 2041474: host_fwd_outputs.diff, landed after it, rewrote the same lines; the kernels'
             # parameters are the same): its A/B on the host profile, then the entry points' tests in the copy
    host_patch_ab hostbhsd host_fwd_bhsd_no_views.diff 1
    ;;
  hostoutputs)  # 2026-12-02 (issue 28; measured on an H200: 1.5-2.5 us less a call on the host profile's layers, the
                # controls unchanged; landed): the dense forward's out, lse (+ tile counter) and split partials
                # from at::detail::empty_cuda (the caching allocator without a dispatcher op each), lse shaped in
                # place instead of an as_strided view, fwd_bhsd's out allocated as [B, H, S, D] over the [B, S, H, D]
                # memory the kernels write instead of transposed after the call (lab/ab/host_fwd_outputs.diff, applied
                # in reverse since it landed): its A/B on the host profile, then the entry points' tests in the copy
    host_patch_ab hostoutputs host_fwd_outputs.diff 1
    ;;
  hostprofile)  # the host profile alone, on a built tree (a second look at the numbers)
    env_info > "$OUT/env.txt" 2>&1
    ensure_built
    step host_profile 180 python3 lab/host_profile_gpu.py
    ;;
  l2decode)
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh
    step decode_check 150 python3 lab/decode_check.py --no-perf-gate
    step pytest_kvcache 200 "${pytest_ci[@]}" tests/kernels/test_kvcache.py
    step sm90_lab_l2 300 bash lab/sm90_lab.sh l2
    ;;
  reliability)  # issue 25: bad device-side indices, NaN/inf patterns, compute-sanitizer on every path
    env_info > "$OUT/env.txt" 2>&1
    step build 420 bash lab/gpu_build.sh  # always: a build left from before the kernel fix would hide it
    step pytest_reliability 150 "${pytest_ci[@]}" tests/kernels/test_check_indices_gpu.py tests/kernels/test_nonfinite_gpu.py -ra
    step sanitize 590 env SANITIZE_TIMEOUT_S="${SANITIZE_TIMEOUT_S:-150}" bash lab/sanitize.sh "$OUT/sanitize"
    ;;
  *)
    echo "usage: $0 verify|bwdwideshort|bwdwideland|bwdpersistent|planted|fwdsmallgrid|fwdsmallgridkeys|flexgrid|windowflex|fwdpacked|fwdpackedkeys|varlenloop|fwdfinalize|fwdchains|fwdpfirst|fwdpfirstsel|fwdwg0waits|fwdorder2|fwdncu|waveprobe|fwddynlean|fwddynleanfp8|fwdwaitsuspend|bwdmasklean|fwdgrid|powerprobe|fp8ab|fwdmasklean|fwdsource|fwdland|fwdstreamq2|fwdstream|fwdostore|fwdhalffirst|fwdtilework|fwdq2|fwdd128q2|fwdvwait|fwdrelease|fwdtoken|fwdtokensel|fwdl2|fwdhalfkv|fwdclusterkv|fwdclusterkvcount|fwdunmasked|dqpair|bwdmulticast|fwdtimeline|detprobe|detlpt|dqtraffic|detticketfirst|detsource|detwriterlanes|portabledqbulk|portabledqhalves|portabledeferbase|portableplanahead|portableplan|portabledefermore|softcapex2fma|portabledqorder|portabled128a4x2|portableswz128ab|portableb4x2ab|fwdch4lab|fp8land|fp8variants|fp8vtk|fp8vtkab|fp8vtkncu|fwdnc176ab|fwdnc176v2|fwdheld|fwdpvboundary|fwdpvboundaryfp8|bwdboundary|softcapsplit|fwdpackedfirst|fwdpackedfirstcheck|packedbounds|packedprobe|fwdheldv5|fwdheldv3|fwdheldv2|fwdheldearly|decodecopy|decodesw|decodeswab|decodebench|portablesource|tmal2ab|portableswizzle|portableswizzlecheck|check|suite|bench|hopper|tune|decode|explore|diagnose|l2decode|final|host|pytest|fp8|hostprofile|latencygrid|fwdd64otma|fwdd64widetma|fwdd64longkeys2k|fwdd64longkeys512|fwdd64longkeys1536|fwdd64fewwaves|fwdd64longkeysonewave|fwdpartialfirst|hostbhsd|hostoutputs|bwdlab|bwdwide|bwdgqa|gqasplit|gqaraised|gqancu|gqawalk|causalsource|zigzag|bwdprefetch|bwdprefetchcheck|causallevers|causalleverscheck|bwdtimeline|headdims|bwd96|fwd192n|fwd256held|bwdidle|hostsplit|training|shortcalls|tailsplit|twocta|fp8vt|detpieces|softcaponepass|softcapwide|softcaptanh|combineab|clustermerge|splitplan|smallgrid|softcapsan|detncu|detrotate|portableab|portablelab|portableland|fwdcheck|detcost|sanitizedense|bwd90|integrate|reliability" >&2; exit 2 ;;
esac
cp -r build/sm90_lab*.log "$OUT/" 2>/dev/null || true
echo "failed steps: $failed" | tee -a "$OUT/summary.txt"
# Everything but the summary and the benchmark report travels as one archive (tar -xzf logs.tgz),
# so a run hands back three files. A second stage in the same $OUT (one call, two stages) adds its
# logs to the first one's archive, never replaces it.
(
  cd "$OUT" || exit 0
  rm -f 0-partial.tgz
  [ -f logs.tgz ] && tar -xzf logs.tgz && rm -f logs.tgz
  keep="summary.txt bench/report.txt bench/bench.json"
  files=$(find . -type f ! -name logs.tgz | sed 's#^\./##' | grep -vxF -f <(tr ' ' '\n' <<< "$keep"))
  [ -n "$files" ] && tar -czf logs.tgz $files && rm -f $files
) || true
exit $failed
