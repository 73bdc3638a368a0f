// Which calls the Hopper backward's wide config runs (traits.h Sm90BwdConfig<128, softcap, true>:
// 80-query steps, dQ transposed; dispatch.cu `wide_config` adds what the config itself needs: an
// instantiated D of 128, a dense call). Plain C++, so that
// tests/kernels/test_sm90_bwd_block_cpu.py checks it on the CPU.
//
// Measured on the H100 (docs/perf-notes.md "Backward v16" and "Kernel by kernel against cuDNN"):
// +2.4% without a mask, +3.3% causal, and under a local window +2.6-2.8% once a row sees >= 2048
// keys but 2-5% slower at 256-1024 keys (a key block then has few steps, and the longer step only
// adds to the masked edges). Short calls, measured on an H200 (perf-notes "The backward's wide config
// on short calls"): causal calls are windows of the whole sequence and follow the same bound (512
// keys -9%, 768 -4%, 1k -1%, 1.5k -2..-3%, 2k +0.5..+1.2%), and without a mask a call of 512
// queries loses 3.5% to the padding of its last 80-row step (768 ties, 1k +3.4%).
#pragma once

namespace flashattn {
namespace sm90 {

// Masked calls (causal, windows): the keys a row sees at most.
constexpr long long kBwdWideWindowKeys = 2048;
// Calls without a mask: the query rows.
constexpr long long kBwdWideUnmaskedQueries = 768;

// mode: FLASHATTN_BWD_WIDE (a lab switch): 0 never, 1 unmasked calls only, 2 (the default) and
// masked ones, each by its bound above, 3 every call. causal, window_left, window_right: BwdParams'
// (set_mask folds a causal mask in as window_right = 0; -1 is an open side, which reaches over the
// whole sequence).
inline bool bwd_wide_rule(const int mode, const bool causal, const int window_left, const int window_right,
                          const int seqlen_q, const int seqlen_k) {
  if (mode >= 3) return true;
  if (mode <= 0) return false;
  const bool masked = causal || window_left >= 0 || window_right >= 0;
  if (!masked) return seqlen_q >= kBwdWideUnmaskedQueries;
  if (mode < 2) return false;
  const long long sk = seqlen_k;
  const long long left = window_left < 0 ? sk : window_left, right = window_right < 0 ? sk : window_right;
  const long long keys = left + right + 1 < sk ? left + right + 1 : sk;  // keys a row sees at most
  return keys >= kBwdWideWindowKeys;
}

}  // namespace sm90
}  // namespace flashattn
