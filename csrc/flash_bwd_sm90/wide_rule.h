// Which calls the Hopper backward's wide config runs (traits.h Sm90BwdConfig<128, softcap, true>:
// 80-query steps, dQ transposed; dispatch.cu `wide_config` adds what the config itself needs: an
// instantiated D of 128, a dense call). Plain C++, so that
// tests/kernels/test_sm90_bwd_block_cpu.py checks it on the CPU.
//
// Measured on the H100 (docs/perf-notes.md "Backward v16" and "Kernel by kernel against cuDNN"):
// +2.4% without a mask, +3.3% causal, and under a local window +2.6-2.8% once a row sees >= 2048
// keys but 2-5% slower at 256-1024 keys (a key block then has few steps, and the longer step only
// adds to the masked edges).
#pragma once

namespace flashattn {
namespace sm90 {

constexpr long long kBwdWideWindowKeys = 2048;

// mode: FLASHATTN_BWD_WIDE (a lab switch): 0 never, 1 unmasked calls only, 2 (the default) and
// causal calls and windows of at least kBwdWideWindowKeys keys, 3 and every window. causal,
// window_left, window_right: BwdParams' (set_mask folds a causal mask in as window_right = 0, so a
// window is anything beyond that; -1 is an open side, which reaches over the whole sequence).
inline bool bwd_wide_rule(const int mode, const bool causal, const int window_left, const int window_right,
                          const int seqlen_k) {
  const bool window = window_left >= 0 || (!causal && window_right >= 0);
  if (!window) return mode >= (causal ? 2 : 1);
  const long long sk = seqlen_k;
  const long long left = window_left < 0 ? sk : window_left, right = window_right < 0 ? sk : window_right;
  const long long keys = left + right + 1 < sk ? left + right + 1 : sk;  // keys a row sees at most
  return mode >= 3 || (mode == 2 && keys >= kBwdWideWindowKeys);
}

}  // namespace sm90
}  // namespace flashattn
