// CPU-only cross-check of the Hopper path's hand-written shared-memory layout and wgmma matrix
// descriptors (csrc/common/sm90/ptx.cuh) against CuTe's canonical GMMA layouts and
// make_gmma_desc (CUTLASS 4.2.0 headers). No GPU needed; build and run:
//   bash lab/sm90_desc_check.sh            (downloads the pinned CUTLASS wheel if needed)
// Checks, for every config the extension instantiates (and a few more):
//  1. The byte offset TMA's 128-byte swizzle gives element (row, col) of a Q/K/V tile stored as
//     64-column chunk planes equals CuTe's GMMA::Layout_K_SW128_Atom tiled to the tile (atoms down
//     the rows first), i.e. our smem tile *is* the canonical K-major SW128 layout.
//  2. For each wgmma k-step: the start address, LBO, SBO and swizzle mode of our descriptors for
//     Q (A, K-major, per consumer warpgroup), K (B, K-major) and V (B, MN-major through the
//     transposed view, as FlashAttention-3 does) equal CuTe's; and the kernel's base + offset
//     form (desc_advance) equals the direct one.
//  3. The accumulator and register-A fragment layouts the softmax and P conversion assume.
//  4. The tile scheduler visits every (query block, batch, head) exactly once, and block_range()
//     agrees with a brute-force count of visible keys (blocks, and which need the mask).
#include <cstdio>
#include <cstdlib>

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

#include "common/sm90/ptx.cuh"
#include "flash_fwd_sm90/tile_scheduler.h"
#include "flash_fwd_sm90/traits.h"

#include <vector>

using namespace cute;

static int failures = 0;

#define CHECK_EQ(a, b, what)                                                                          \
  do {                                                                                              \
    const long long va = static_cast<long long>(a), vb = static_cast<long long>(b);                 \
    if (va != vb) {                                                                                 \
      if (failures < 20) std::printf("MISMATCH %s: ours %lld cute %lld\n", what, va, vb);            \
      ++failures;                                                                                   \
    }                                                                                               \
  } while (0)

alignas(1024) static cute::uint8_t g_smem[1 << 18];

template <class T>
uint32_t offset_of(T const* p) {
  return static_cast<uint32_t>(reinterpret_cast<cute::uint8_t const*>(p) - g_smem);
}

template <class Tensor>
uint32_t data_offset(Tensor const& t) {
  return offset_of(raw_pointer_cast(t.data()));
}

void check_desc_fields(uint64_t ours, GmmaDescriptor cute_desc, uint32_t cute_start, const char* what) {
  GmmaDescriptor o(ours);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s start", what);
  CHECK_EQ(o.bitfield.start_address_, (cute_start >> 4) & 0x3FFF, buf);
  std::snprintf(buf, sizeof buf, "%s LBO", what);
  CHECK_EQ(o.bitfield.leading_byte_offset_, cute_desc.bitfield.leading_byte_offset_, buf);
  std::snprintf(buf, sizeof buf, "%s SBO", what);
  CHECK_EQ(o.bitfield.stride_byte_offset_, cute_desc.bitfield.stride_byte_offset_, buf);
  std::snprintf(buf, sizeof buf, "%s base_offset", what);
  CHECK_EQ(o.bitfield.base_offset_, cute_desc.bitfield.base_offset_, buf);
  std::snprintf(buf, sizeof buf, "%s layout_type", what);
  CHECK_EQ(o.bitfield.layout_type_, cute_desc.bitfield.layout_type_, buf);
}

template <class Element, int kRows, int kD>
void check_tile_layout(const char* name) {
  auto layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kRows>, Int<kD>>{});
  Tensor t = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(g_smem)), layout);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kD; ++c) {
      const uint32_t cute_off = offset_of(raw_pointer_cast(&t(r, c)));
      const uint32_t ours = flashattn::sm90::swizzled_offset(kRows, r, c);
      if (cute_off != ours) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "%s tile[%d x %d] element (%d, %d) byte offset", name, kRows, kD, r, c);
        CHECK_EQ(ours, cute_off, buf);
      }
    }
}

template <class Element, int kD, int kBlockN>
void check_config() {
  constexpr int kBlockM = 128;
  char what[160];
  // 1. Tile layouts: Q [128, D], K and V [kBlockN, D].
  check_tile_layout<Element, kBlockM, kD>("Q");
  check_tile_layout<Element, kBlockN, kD>("K/V");

  // 2a. Q as the A operand (K-major), per consumer warpgroup (rows 64w..64w+63), per k-step.
  {
    auto layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kD>>{});
    Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(g_smem)), layout);
    for (int wg = 0; wg < 2; ++wg)
      for (int kk = 0; kk < kD / 16; ++kk) {
        Tensor sub = local_tile(sQ, Shape<_64, _16>{}, make_coord(wg, kk));
        GmmaDescriptor d = GMMA::make_gmma_desc<GMMA::Major::K>(sub);
        const uint64_t ours = flashattn::sm90::desc_kmajor(0u, kBlockM * 128, 64 * wg, kk);
        std::snprintf(what, sizeof what, "D=%d Q desc wg=%d kk=%d", kD, wg, kk);
        check_desc_fields(ours, d, data_offset(sub), what);
        // the kernel's form: base descriptor of the warpgroup's rows + byte offset (smem base 1024..)
        const uint32_t base = 0x2400;
        const uint64_t kernel_form = flashattn::sm90::desc_advance(
            flashattn::sm90::make_smem_desc_sw128(base + wg * 64 * 128, 16u, 1024u), (kk / 4) * kBlockM * 128 + (kk % 4) * 32);
        CHECK_EQ(kernel_form, flashattn::sm90::desc_kmajor(base, kBlockM * 128, 64 * wg, kk), "Q desc_advance form");
      }
  }
  // 2b. K as the B operand of S = Q K^T (K-major, N = kBlockN rows).
  {
    auto layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockN>, Int<kD>>{});
    Tensor sK = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(g_smem)), layout);
    for (int kk = 0; kk < kD / 16; ++kk) {
      Tensor sub = local_tile(sK, Shape<Int<kBlockN>, _16>{}, make_coord(0, kk));
      GmmaDescriptor d = GMMA::make_gmma_desc<GMMA::Major::K>(sub);
      const uint64_t ours = flashattn::sm90::desc_kmajor(0u, kBlockN * 128, 0, kk);
      std::snprintf(what, sizeof what, "D=%d N=%d K desc kk=%d", kD, kBlockN, kk);
      check_desc_fields(ours, d, data_offset(sub), what);
      for (int stage = 0; stage < 3; ++stage) {
        const uint32_t base = 0x2400 + 0x8000, stage_bytes = kBlockN * kD * 2;
        const uint64_t kernel_form = flashattn::sm90::desc_advance(
            flashattn::sm90::make_smem_desc_sw128(base, 16u, 1024u), stage * stage_bytes + (kk / 4) * kBlockN * 128 + (kk % 4) * 32);
        CHECK_EQ(kernel_form, flashattn::sm90::desc_kmajor(base + stage * stage_bytes, kBlockN * 128, 0, kk), "K desc_advance form");
      }
    }
  }
  // 2c. V as the B operand of O += P V: the same smem tile [kBlockN keys, D] viewed as (D, keys),
  //     MN-major (D contiguous).
  {
    auto layoutV = tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockN>, Int<kD>>{});
    auto layoutVt = composition(layoutV, make_ordered_layout(Shape<Int<kD>, Int<kBlockN>>{}, Step<_2, _1>{}));
    Tensor sVt = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(g_smem)), layoutVt);
    // the transposed view addresses the same bytes
    for (int key = 0; key < kBlockN; ++key)
      for (int c = 0; c < kD; ++c) {
        const uint32_t off = offset_of(raw_pointer_cast(&sVt(c, key)));
        if (off != flashattn::sm90::swizzled_offset(kBlockN, key, c)) {
          std::snprintf(what, sizeof what, "Vt view (%d, %d)", c, key);
          CHECK_EQ(flashattn::sm90::swizzled_offset(kBlockN, key, c), off, what);
        }
      }
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      Tensor sub = local_tile(sVt, Shape<Int<kD>, _16>{}, make_coord(0, kk));
      GmmaDescriptor d = GMMA::make_gmma_desc<GMMA::Major::MN>(sub);
      const uint64_t ours = flashattn::sm90::desc_mnmajor(0u, kBlockN * 128, kD / 64, kk);
      std::snprintf(what, sizeof what, "D=%d N=%d V desc kk=%d", kD, kBlockN, kk);
      check_desc_fields(ours, d, data_offset(sub), what);
      for (int stage = 0; stage < 3; ++stage) {
        const uint32_t base = 0x2400 + 0x10000, stage_bytes = kBlockN * kD * 2;
        const uint64_t kernel_form = flashattn::sm90::desc_advance(
            flashattn::sm90::make_smem_desc_sw128(base, kD > 64 ? kBlockN * 128 : 0u, 1024u), stage * stage_bytes + kk * 16 * 128);
        CHECK_EQ(kernel_form, flashattn::sm90::desc_mnmajor(base + stage * stage_bytes, kBlockN * 128, kD / 64, kk), "V desc_advance form");
      }
    }
  }
  std::printf("checked %s D=%d kBlockN=%d\n", sizeof(Element) == 2 ? "16-bit" : "?", kD, kBlockN);
}

// 3. The accumulator / A-fragment layouts the kernel assumes (kernel.cuh, softmax.cuh):
//    C (m64nN f32): thread t, value v = v0 + 2 v1 + 4 j -> row 16 (t/32) + (t%32)/4 + 8 v1,
//                   col 8 j + 2 (t%4) + v0.
//    A (m64k16 16-bit, registers): value v = v0 + 2 v1 + 4 v2 -> row 16 (t/32) + (t%32)/4 + 8 v1,
//                   col 2 (t%4) + v0 + 8 v2.
template <int N>
void check_fragment_layouts() {
  auto clayout = GMMA::CLayout_64xN<N>{};  // (thread, value) -> m + 64 n
  for (int t = 0; t < 128; ++t)
    for (int v = 0; v < N / 2; ++v) {
      const int idx = clayout(t, v);
      const int m = idx % 64, n = idx / 64;
      const int v0 = v % 2, v1 = (v / 2) % 2, j = v / 4;
      CHECK_EQ(16 * (t / 32) + (t % 32) / 4 + 8 * v1, m, "C fragment row");
      CHECK_EQ(8 * j + 2 * (t % 4) + v0, n, "C fragment col");
    }
  auto alayout = GMMA::ALayout_64x16{};  // (thread, value) -> m + 64 k
  for (int t = 0; t < 128; ++t)
    for (int v = 0; v < 8; ++v) {
      const int idx = alayout(t, v);
      const int m = idx % 64, k = idx / 64;
      const int v0 = v % 2, v1 = (v / 2) % 2, v2 = v / 4;
      CHECK_EQ(16 * (t / 32) + (t % 32) / 4 + 8 * v1, m, "A fragment row");
      CHECK_EQ(2 * (t % 4) + v0 + 8 * v2, k, "A fragment col");
    }
  std::printf("checked fragment layouts N=%d\n", N);
}

// 4. Scheduler and block ranges.
void check_schedule() {
  using namespace flashattn::sm90;
  int cases = 0;
  for (int m_blocks : {1, 2, 3, 7, 128})
    for (int batch : {1, 2, 5})
      for (int heads : {1, 3, 16})
        for (int group : {1, 2, 4, 7, 1000}) {
          const int bh = batch * heads, g = group < bh ? group : bh, tiles = m_blocks * bh;
          std::vector<int> seen(tiles, 0);
          for (int t = 0; t < tiles; ++t) {
            const TileCoord c = decode_tile(t, m_blocks, heads, bh, g);
            const bool in = c.m_block >= 0 && c.m_block < m_blocks && c.batch >= 0 && c.batch < batch && c.head_q >= 0 &&
                            c.head_q < heads;
            CHECK_EQ(in, true, "decode_tile in range");
            if (in) ++seen[(c.batch * heads + c.head_q) * m_blocks + c.m_block];
          }
          for (int i = 0; i < tiles; ++i) CHECK_EQ(seen[i], 1, "decode_tile visits each tile once");
          ++cases;
        }
  // block_range vs brute force: a block is needed iff some row of the tile sees one of its keys;
  // it needs no mask iff every key is < Sk and visible to every row of the tile (whose rows
  // >= Sq are padding and ignored).
  for (int bm : {128})
    for (int bn : {64, 80, 128, 176})
      for (int sq : {1, 5, 128, 129, 300, 1000})
        for (int sk : {1, 7, 80, 128, 333, 1024})
          for (int mode = 0; mode < 3; ++mode) {
            const bool causal = mode != 0;
            const int off = mode == 2 ? sk - sq : 0;
            for (int mb = 0; mb * bm < sq; ++mb) {
              const flashattn::KeyBlocks r = block_range(mb, bm, bn, sq, sk, off, -1, causal ? 0 : -1);
              int need = 0;
              for (int j = 0; j < sk; ++j)
                for (int i = mb * bm; i < std::min(sq, (mb + 1) * bm); ++i)
                  if (!causal || j <= i + off) need = std::max(need, j / bn + 1);
              CHECK_EQ(r.n_begin, 0, "block_range n_begin without a window");
              CHECK_EQ(r.count(), need, "block_range n_blocks");
              for (int n = 0; n < r.n_end; ++n) {
                bool full = (n + 1) * bn <= sk;
                for (int j = n * bn; full && j < (n + 1) * bn; ++j)
                  if (causal && j > mb * bm + off) full = false;  // row m0 is the tile's least-seeing row
                if (!r.masked(n)) CHECK_EQ(full, true, "block walked without the mask needs none");
              }
            }
            ++cases;
          }
  std::printf("checked scheduler and block ranges (%d cases)\n", cases);
}

int main() {
  check_config<cute::bfloat16_t, 64, 128>();
  check_config<cute::bfloat16_t, 128, 128>();
  check_config<cute::bfloat16_t, 256, 80>();
  check_config<cute::bfloat16_t, 256, 64>();
  check_config<cute::half_t, 128, 128>();
  check_config<cute::half_t, 128, 176>();
  check_config<cute::half_t, 192, 112>();
  check_config<cute::bfloat16_t, 192, 80>();  // Sm90DefaultConfig<192>
  check_fragment_layouts<128>();
  check_fragment_layouts<80>();
  check_fragment_layouts<256>();
  check_fragment_layouts<192>();
  check_fragment_layouts<96>();
  check_schedule();
  if (failures) {
    std::printf("FAIL: %d mismatches\n", failures);
    return 1;
  }
  std::printf("OK: smem layouts, wgmma descriptors and fragment layouts match CuTe; schedule and block ranges exact\n");
  return 0;
}
