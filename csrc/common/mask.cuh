// The one visibility rule of every forward path (portable csrc/flash_fwd, Hopper csrc/flash_fwd_sm90,
// decode csrc/flash_decode): causal masking and local (sliding-window) attention, FlashAttention's
// semantics. Plain C++ (host and device), so the CPU tests check it against a brute-force mask with
// the host compiler (tests/kernels/test_window_cpu.py).
//
// Key j is visible to query row i iff lo(i) <= j < hi(i), with
//   lo(i) = clamp(i + offset - window_left, 0, seqlen_k)        (0 when window_left < 0)
//   hi(i) = clamp(i + offset + window_right + 1, 0, seqlen_k)   (seqlen_k when window_right < 0)
// where offset aligns the diagonal: 0 top-left (SDPA's is_causal), seqlen_k - seqlen_q
// bottom-right (FlashAttention, KV cache; also the window's alignment without a causal mask).
// Causal masking is window_right = 0 (the host folds it in: FwdParams::set_mask). A row with
// lo(i) >= hi(i) sees no key: output 0, LSE -inf.
#pragma once

#if defined(__CUDACC__)
#define FLASHATTN_MASK_HD __host__ __device__ __forceinline__
#else
#define FLASHATTN_MASK_HD inline
#endif

namespace flashattn {

struct KeyWindow {
  int seqlen_k;
  int lo_shift;  // offset - window_left (read when has_lo)
  int hi_shift;  // offset + window_right + 1 (read when has_hi)
  bool has_lo;   // window_left >= 0
  bool has_hi;   // window_right >= 0 (causal included)

  // First visible key of row `row`, and one past the last (both in [0, seqlen_k]).
  FLASHATTN_MASK_HD int lo(int row) const {
    if (!has_lo) return 0;
    const int x = row + lo_shift;
    return x < 0 ? 0 : (x > seqlen_k ? seqlen_k : x);
  }
  FLASHATTN_MASK_HD int hi(int row) const {
    if (!has_hi) return seqlen_k;
    const int x = row + hi_shift;
    return x < 0 ? 0 : (x > seqlen_k ? seqlen_k : x);
  }
  FLASHATTN_MASK_HD bool visible(int row, int col) const { return col >= lo(row) && col < hi(row); }
};

// window_left / window_right: -1 unbounded, else >= 0, normalized by the host so that
// offset +- window stays within int range (FwdParams::set_mask, decode's binding).
FLASHATTN_MASK_HD KeyWindow make_key_window(int seqlen_k, int offset, int window_left, int window_right) {
  KeyWindow w;
  w.seqlen_k = seqlen_k;
  w.has_lo = window_left >= 0;
  w.has_hi = window_right >= 0;
  w.lo_shift = w.has_lo ? offset - window_left : 0;
  w.hi_shift = w.has_hi ? offset + window_right + 1 : 0;
  return w;
}

// The key blocks (block_n keys each) that query rows [row_begin, row_end) need, walked by the
// kernels; cost is proportional to the window, not to seqlen_k. Blocks [full_begin, full_end) are
// seen whole by every one of the rows and need no per-element mask; the others (at the window's
// two edges and at seqlen_k) apply it. Because lo() and hi() are nondecreasing in the row, the
// union of the rows' key ranges is [lo(row_begin), hi(row_end - 1)) and their intersection
// [lo(row_end - 1), hi(row_begin)).
struct KeyBlocks {
  int n_begin, n_end;        // n_end == n_begin: no row sees any key
  int full_begin, full_end;  // within [n_begin, n_end]; full_begin == full_end: none
  FLASHATTN_MASK_HD int count() const { return n_end - n_begin; }
  FLASHATTN_MASK_HD bool masked(int n) const { return n < full_begin || n >= full_end; }
};

// row_end > row_begin; rows past seqlen_q may be included (their results are never stored).
FLASHATTN_MASK_HD KeyBlocks key_blocks(const KeyWindow& w, int row_begin, int row_end, int block_n) {
  KeyBlocks b;
  const int lo = w.lo(row_begin), hi = w.hi(row_end - 1);
  if (lo >= hi) {
    b.n_begin = b.n_end = b.full_begin = b.full_end = 0;
    return b;
  }
  b.n_begin = lo / block_n;
  b.n_end = (hi + block_n - 1) / block_n;
  int fb = (w.lo(row_end - 1) + block_n - 1) / block_n;
  int fe = w.hi(row_begin) / block_n;
  fb = fb > b.n_begin ? fb : b.n_begin;
  fe = fe < b.n_end ? fe : b.n_end;
  if (fb >= fe) fb = fe = b.n_end;
  b.full_begin = fb;
  b.full_end = fe;
  return b;
}

// The backward's view (csrc/flash_bwd/mainloop.cuh): one key block, the query blocks whose rows
// see one of its keys. Because lo() and hi() are nondecreasing in the row, the rows that see a key
// of [col_begin, col_end) are those with hi(i) > col_begin (a suffix) and lo(i) < col_end (a
// prefix): one contiguous range, found from the two shifts without walking rows. m-block m is in
// [m_begin, m_end) iff n-block n is in key_blocks(rows of m).[n_begin, n_end) (tests/kernels/test_window_cpu.py
// checks both directions), which the deterministic backward's dQ tickets rely on.
struct QueryBlocks {
  int m_begin, m_end;  // m_end == m_begin: no row sees any key of the block
};

// col_begin < col_end <= seqlen_k (the key block's real keys), seqlen_q >= 1.
FLASHATTN_MASK_HD QueryBlocks query_blocks(const KeyWindow& w, int col_begin, int col_end, int seqlen_q, int block_m) {
  // hi(i) > col_begin <=> i + hi_shift > col_begin (col_begin < seqlen_k, so hi's clamps agree);
  // lo(i) < col_end <=> i + lo_shift < col_end (0 < col_end <= seqlen_k, likewise).
  int row_begin = w.has_hi ? col_begin + 1 - w.hi_shift : 0;
  int row_end = w.has_lo ? col_end - w.lo_shift : seqlen_q;
  row_begin = row_begin < 0 ? 0 : row_begin;
  row_end = row_end > seqlen_q ? seqlen_q : row_end;
  QueryBlocks b;
  if (row_begin >= row_end) {
    b.m_begin = b.m_end = 0;
    return b;
  }
  b.m_begin = row_begin / block_m;
  b.m_end = (row_end + block_m - 1) / block_m;
  return b;
}

}  // namespace flashattn
