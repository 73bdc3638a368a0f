// Where a sequence of a packed variable-length batch lies in its packed tensor: shared by the
// forward's packed flavour (csrc/flash_fwd/tile_scheduler.cuh, fwd_seq) and the portable
// backward's (csrc/flash_bwd/varlen.cuh, bwd_seq), so both clamp bad offsets the same way.
#pragma once

namespace flashattn {

// Sequence b's rows [row0, row0 + len) of a packed tensor of `total` rows, from cu_seqlens on the
// device, clamped into the tensor: the host never reads cu_seqlens (that would synchronize), so a
// caller's bad offsets (decreasing, negative, or past the packed rows) must not make a kernel read
// or write outside the tensors it was given. row0 is clamped into [0, total] and the end into
// [row0, total]: a decreasing pair gives an empty sequence, an end past the tensor a shorter one.
// Two min/max per offset; for offsets that keep the contract (0 <= cu[b] <= cu[b+1] <= total)
// the same rows. Rows of sequences that overlap under bad offsets are written by both (in bounds;
// their values unspecified): docs/varlen.md, "Bad offsets".
__device__ __forceinline__ void packed_span(const int* cu, int b, int total, int& row0, int& len) {
  row0 = min(max(__ldg(cu + b), 0), total);
  len = min(max(__ldg(cu + b + 1), row0), total) - row0;
}

}  // namespace flashattn
