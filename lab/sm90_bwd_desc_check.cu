// CPU-only cross-check of the Hopper backward prototype's wgmma descriptors
// (csrc/flash_bwd_sm90/descriptors.h) against CuTe's canonical GMMA layouts and make_gmma_desc
// (CUTLASS 4.2.0 headers), in the style of lab/sm90_desc_check.cu (which covers the forward's
// tile layout, K-major and MN-major B forms, and the fragment layouts). Build and run:
//   bash lab/sm90_bwd_desc_check.sh
// For every traits config and k-step, the start address, LBO, SBO, base offset and swizzle mode
// of the kernel's descriptors (base + desc_advance) equal CuTe's for:
//   K_wg / V_wg as K-major A of S^T = K Q^T (rows 64 wg..), Q / dO as K-major B,
//   Q / dO as MN-major B of dK / dV (the transposed view of the same tile),
//   dS^T as MN-major A of dQ (the transposed view of [128 keys][64 queries]),
//   K as MN-major B of dQ (per warpgroup: N = D/2 columns, or its 64 keys with N = D);
// and the dS^T store offsets equal CuTe's K-major SW128 layout of the [128][64] tile. Also the
// wide config's operands (80-query steps, dQ^T = K^T dS^T), its transposed dS store and its dQ
// tile order (check_wide_config).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include "flash_bwd_sm90/descriptors.h"
#include "flash_bwd_sm90/traits.h"

using namespace cute;

static int failures = 0;
static int checks = 0;

#define CHECK_EQ(a, b, what)                                                                 \
  do {                                                                                       \
    const long long va = static_cast<long long>(a), vb = static_cast<long long>(b);          \
    ++checks;                                                                                \
    if (va != vb) {                                                                          \
      if (failures < 30) std::printf("MISMATCH %s: ours %lld cute %lld\n", what, va, vb);   \
      ++failures;                                                                            \
    }                                                                                        \
  } while (0)

alignas(1024) static cute::uint8_t g_smem[1 << 18];

template <class Tensor>
uint32_t data_offset(Tensor const& t) {
  return static_cast<uint32_t>(reinterpret_cast<cute::uint8_t const*>(raw_pointer_cast(t.data())) - g_smem);
}

void check_desc(uint64_t ours, GmmaDescriptor cute_desc, uint32_t cute_start, const char* what) {
  // the kernel's form: the lower word only, the upper one the constant kBwdDescHi
  CHECK_EQ(flashattn::sm90::desc_from_lo(flashattn::sm90::desc_lo(ours), 0), ours, "desc upper word is kBwdDescHi");
  GmmaDescriptor o(ours);
  char buf[200];
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

template <class Element, int kRows, int kCols>
auto kmajor_tile() {  // [kRows][kCols] as 64-column SW128 chunk planes (atoms down the rows first)
  auto layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kRows>, Int<kCols>>{});
  return make_tensor(make_smem_ptr(reinterpret_cast<Element*>(g_smem)), layout);
}
template <class Element, int kRows, int kCols>
auto transposed_tile() {  // the same bytes viewed as (kCols, kRows): MN-major operand
  auto layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kRows>, Int<kCols>>{});
  auto t = composition(layout, make_ordered_layout(Shape<Int<kCols>, Int<kRows>>{}, Step<_2, _1>{}));
  return make_tensor(make_smem_ptr(reinterpret_cast<Element*>(g_smem)), t);
}

// An MN-major operand of N = 96 as one whole swizzle atom and the first 32 columns of another
// (descriptors.h roles_b at D = 192: plane wg, then half wg of plane 2; acc_b at D = 96: plane 0,
// then the used half of plane 1): the atom, which CuTe describes (every field but LBO checked
// against it), is 64-column block `atom_block` of `t`; the partial atom, which CuTe cannot tile,
// starts at column `second_col`: LBO checked as the distance from the start to CuTe's address of
// that column at the k-step's first row, where the swizzle leaves the row's 16-byte pieces in place
// (row % 8 == 0).
template <class Tensor>
void check_partial_atom(uint64_t desc, Tensor const& t, int atom_block, int second_col, int kk, const char* what) {
  auto atom = local_tile(t, Shape<_64, _16>{}, make_coord(atom_block, kk));
  auto cute_desc = GMMA::make_gmma_desc<GMMA::Major::MN>(atom);
  CHECK_EQ(flashattn::sm90::desc_from_lo(flashattn::sm90::desc_lo(desc), 0), desc, "desc upper word is kBwdDescHi");
  GmmaDescriptor o(desc);
  const uint32_t start = static_cast<uint32_t>(o.bitfield.start_address_) << 4;
  CHECK_EQ(start, static_cast<uint32_t>(data_offset(atom)), what);
  CHECK_EQ(o.bitfield.stride_byte_offset_, cute_desc.bitfield.stride_byte_offset_, what);
  CHECK_EQ(o.bitfield.layout_type_, cute_desc.bitfield.layout_type_, what);
  CHECK_EQ(o.bitfield.base_offset_, cute_desc.bitfield.base_offset_, what);
  const uint32_t second = static_cast<uint32_t>(
      reinterpret_cast<cute::uint8_t const*>(raw_pointer_cast(&t(second_col, 16 * kk))) - g_smem);
  CHECK_EQ(start + (static_cast<uint32_t>(o.bitfield.leading_byte_offset_) << 4), second, what);
}
// The D = 192 roles form's operand of warpgroup wg.
template <class Tensor>
void check_roles192(uint64_t desc, Tensor const& t, int wg, int kk, const char* what) {
  check_partial_atom(desc, t, wg, 128 + 32 * wg, kk, what);
}

template <class Element, class Traits>
void check_traits(const char* name) {
  using namespace flashattn::sm90;
  using Descs = Sm90BwdDescs<Traits>;
  constexpr int D = Traits::kHeadDim, BN = Traits::kBlockN, BM = Traits::kBlockM;
  char what[200];
  // S^T / dP^T: A = K_wg (K-major), B = Q (K-major).
  {
    auto sK = kmajor_tile<Element, BN, D>();
    auto sQ = kmajor_tile<Element, BM, D>();
    for (int wg = 0; wg < (Traits::kRoles ? 1 : 2); ++wg)  // the D = 256 form: all 64 keys, both roles
      for (int kk = 0; kk < D / 16; ++kk) {
        auto sub = local_tile(sK, Shape<_64, _16>{}, make_coord(wg, kk));
        std::snprintf(what, sizeof what, "%s score A wg=%d kk=%d", name, wg, kk);
        check_desc(desc_advance(Descs::score_a(0u, wg), Descs::score_a_step(kk)), GMMA::make_gmma_desc<GMMA::Major::K>(sub),
                   data_offset(sub), what);
      }
    for (int kk = 0; kk < D / 16; ++kk) {
      auto sub = local_tile(sQ, Shape<Int<BM>, _16>{}, make_coord(0, kk));
      std::snprintf(what, sizeof what, "%s score B kk=%d", name, kk);
      check_desc(desc_advance(Descs::score_b(0u), Descs::score_b_step(kk)), GMMA::make_gmma_desc<GMMA::Major::K>(sub),
                 data_offset(sub), what);
    }
  }
  // dV / dK: B = dO / Q viewed (D, queries), MN-major, k-steps of 16 queries.
  {
    auto sQt = transposed_tile<Element, BM, D>();
    for (int kk = 0; kk < BM / 16; ++kk) {
      if constexpr (Traits::kRoles && D == 192) {  // plane wg, then half wg of plane 2 (roles_b)
        for (int wg = 0; wg < 2; ++wg) {
          std::snprintf(what, sizeof what, "%s acc B D=192 wg=%d kk=%d", name, wg, kk);
          check_roles192(desc_advance(Descs::acc_b_half(0u, wg), Descs::acc_b_step(kk)), sQt, wg, kk, what);
        }
      } else if constexpr (Traits::kRoles) {  // warpgroup wg's N = D/2 columns
        for (int wg = 0; wg < 2; ++wg) {
          auto sub = local_tile(sQt, Shape<Int<D / 2>, _16>{}, make_coord(wg, kk));
          std::snprintf(what, sizeof what, "%s acc B half wg=%d kk=%d", name, wg, kk);
          check_desc(desc_advance(Descs::acc_b_half(0u, wg), Descs::acc_b_step(kk)),
                     GMMA::make_gmma_desc<GMMA::Major::MN>(sub), data_offset(sub), what);
        }
      } else {
        auto sub = local_tile(sQt, Shape<Int<D>, _16>{}, make_coord(0, kk));
        std::snprintf(what, sizeof what, "%s acc B kk=%d", name, kk);
        check_desc(desc_advance(Descs::acc_b(0u), Descs::acc_b_step(kk)), GMMA::make_gmma_desc<GMMA::Major::MN>(sub),
                   data_offset(sub), what);
      }
    }
  }
  // The D = 256 form's A of dV / dK: P^T or dS^T [64 keys][64 queries], K-major.
  if constexpr (Traits::kRoles) {
    auto sP = kmajor_tile<Element, BN, BM>();
    for (int kk = 0; kk < BM / 16; ++kk) {
      auto sub = local_tile(sP, Shape<_64, _16>{}, make_coord(0, kk));
      std::snprintf(what, sizeof what, "%s P^T/dS^T A kk=%d", name, kk);
      check_desc(desc_advance(Descs::pds_a(0u), Descs::pds_a_step(kk)), GMMA::make_gmma_desc<GMMA::Major::K>(sub),
                 data_offset(sub), what);
    }
  }
  // dQ: A = dS^T [128 keys][64 queries] viewed (queries, keys), MN-major; B = K viewed (D, keys).
  {
    auto sDSt = transposed_tile<Element, BN, BM>();
    auto sDS = kmajor_tile<Element, BN, BM>();
    for (int r = 0; r < BN; ++r)
      for (int c = 0; c < BM; c += 2) {
        const uint32_t cute_off =
            static_cast<uint32_t>(reinterpret_cast<cute::uint8_t const*>(raw_pointer_cast(&sDS(r, c))) - g_smem);
        std::snprintf(what, sizeof what, "%s dS^T store offset (%d, %d)", name, r, c);
        CHECK_EQ(Descs::ds_offset(r, c), cute_off, what);
        CHECK_EQ(Descs::ds_offset(r, c), swizzled_offset(BN, r, c), what);
      }
    auto sKt = transposed_tile<Element, BN, D>();
    constexpr bool kSplitD = Traits::kDqSplit == Sm90BwdDqSplit::kSplitD;
    constexpr bool kSplitQ = Traits::kDqSplit == Sm90BwdDqSplit::kSplitQueries;
    for (int wg = 0; wg < 2; ++wg)
      for (int kk = 0; kk < Traits::kDqKSteps; ++kk) {
        const int kblock = kSplitD || kSplitQ ? kk : wg * 4 + kk;  // 16-key step within the 128 keys
        // kSplitQueries: warpgroup wg's 64 queries; otherwise all kBlockM (= 64) of them.
        auto a = local_tile(sDSt, Shape<_64, _16>{}, make_coord(kSplitQ ? wg : 0, kblock));
        std::snprintf(what, sizeof what, "%s dQ A wg=%d kk=%d", name, wg, kk);
        check_desc(desc_advance(Descs::dq_a(0u, wg), Descs::dq_step(kk)), GMMA::make_gmma_desc<GMMA::Major::MN>(a),
                   data_offset(a), what);
        std::snprintf(what, sizeof what, "%s dQ B wg=%d kk=%d", name, wg, kk);
        if constexpr (Traits::kRoles && D == 192) {
          check_roles192(desc_advance(Descs::dq_b(0u, wg), Descs::dq_step(kk)), sKt, wg, kblock, what);
        } else {
          auto b = local_tile(sKt, Shape<Int<Traits::kDqN>, _16>{}, make_coord(kSplitD ? wg : 0, kblock));
          check_desc(desc_advance(Descs::dq_b(0u, wg), Descs::dq_step(kk)), GMMA::make_gmma_desc<GMMA::Major::MN>(b),
                     data_offset(b), what);
        }
      }
  }
  std::printf("checked %s\n", name);
}

// ---- The wide config (traits.h Sm90BwdConfig<128, false, true>: 80-query steps, dQ transposed):
// the kernel's descriptors (descriptors.h) against CuTe, its transposed dS store (stmatrix
// .m8n8.x4.trans from the S^T accumulators, descriptors.h ds_t_addr) simulated element by element
// against CuTe's K-major [80 queries][128 keys] tile, and its dQ tile order. The simulation encodes
// the PTX ISA's stmatrix: lanes 8 i .. 8 i + 7 give the row addresses of matrix i; thread t's
// register i holds row t / 4, columns 2 (t % 4) and + 1 of matrix i; .trans stores element (r, c)
// at row c, position r.
// The same holds for every config with dQ transposed: D = 96's two (64- and 80-query steps, two
// chunk planes with the second half used: its score GEMMs take kHeadDim / 16 = 6 k-steps of the
// 128-column tiles, its dV/dK B is a whole and a partial atom, check_partial_atom). `name` prefixes
// each message.
template <class Element, class Traits = flashattn::sm90::Sm90BwdConfig<128, false, true>::Traits>
void check_wide_config(const char* name = "wide") {
  using flashattn::sm90::desc_advance;
  using Descs = flashattn::sm90::Sm90BwdDescs<Traits>;
  constexpr int BM = Traits::kBlockM, BN = Traits::kBlockN;
  constexpr int D = Traits::kChunks * 64;  // the tiles' columns (D = 96: 128, the last 32 zeros)
  static_assert(Traits::kDqTransposed && BN == 128 && D == 128, "a transposed-dQ config");
  char what[200];
  // The K-major B operands, N = kBlockM: Q / dO [kBlockM queries][128] of S^T = K Q^T (score_b,
  // kHeadDim / 16 k-steps), and dS [kBlockM queries][128 keys] of dQ^T = K^T dS^T (dqt_b, 8
  // k-steps of keys): the same tile shape.
  auto sQ = kmajor_tile<Element, BM, D>();
  for (int kk = 0; kk < D / 16; ++kk) {
    auto sub = local_tile(sQ, Shape<Int<BM>, _16>{}, make_coord(0, kk));
    if (kk < Traits::kHeadDim / 16) {
      std::snprintf(what, sizeof what, "%s score B (Q, dO) kk=%d", name, kk);
      check_desc(desc_advance(Descs::score_b(0u), Descs::score_b_step(kk)), GMMA::make_gmma_desc<GMMA::Major::K>(sub),
                 data_offset(sub), what);
    }
    std::snprintf(what, sizeof what, "%s dQ^T B (dS) kk=%d", name, kk);
    check_desc(desc_advance(Descs::dqt_b(0u), Descs::dqt_b_step(kk)), GMMA::make_gmma_desc<GMMA::Major::K>(sub),
               data_offset(sub), what);
  }
  // dV += P^T dO / dK += dS^T Q: B = dO / Q viewed (D, kBlockM) MN-major, k-steps of 16 queries.
  auto sQt = transposed_tile<Element, BM, D>();
  for (int kk = 0; kk < Traits::kPVSteps; ++kk) {
    std::snprintf(what, sizeof what, "%s acc B kk=%d", name, kk);
    if constexpr (Traits::kHeadDim == 96) {  // N = 96: plane 0, then the used half of plane 1
      check_partial_atom(desc_advance(Descs::acc_b(0u), Descs::acc_b_step(kk)), sQt, 0, 64, kk, what);
    } else {
      auto sub = local_tile(sQt, Shape<Int<D>, _16>{}, make_coord(0, kk));
      check_desc(desc_advance(Descs::acc_b(0u), Descs::acc_b_step(kk)), GMMA::make_gmma_desc<GMMA::Major::MN>(sub),
                 data_offset(sub), what);
    }
  }
  // S^T / dP^T: A = K_wg [64 keys][D] (K-major), kHeadDim / 16 k-steps.
  auto sK = kmajor_tile<Element, BN, D>();
  for (int wg = 0; wg < 2; ++wg)
    for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
      auto sub = local_tile(sK, Shape<_64, _16>{}, make_coord(wg, kk));
      std::snprintf(what, sizeof what, "%s score A wg=%d kk=%d", name, wg, kk);
      check_desc(desc_advance(Descs::score_a(0u, wg), Descs::score_a_step(kk)), GMMA::make_gmma_desc<GMMA::Major::K>(sub),
                 data_offset(sub), what);
    }
  // dQ^T = K^T dS^T: A = K viewed (D, keys) MN-major, warpgroup wg's M = 64 columns of D,
  // k-steps of 16 keys.
  auto sKt = transposed_tile<Element, BN, D>();
  for (int wg = 0; wg < 2; ++wg)
    for (int kk = 0; kk < Traits::kDqKSteps; ++kk) {
      auto a = local_tile(sKt, Shape<_64, _16>{}, make_coord(wg, kk));
      std::snprintf(what, sizeof what, "%s dQ^T A wg=%d kk=%d", name, wg, kk);
      check_desc(desc_advance(Descs::dqt_a(0u, wg), Descs::dqt_a_step(kk)), GMMA::make_gmma_desc<GMMA::Major::MN>(a),
                 data_offset(a), what);
    }
  // dS stored transposed, as the kernel addresses it: warpgroup wg (keys 64 wg ..), warp w (its
  // 16 keys), stmatrix number g at the lane's address for g = 0 plus 16 rows per g (mainloop.cuh).
  auto sDS = kmajor_tile<Element, BM, BN>();
  int stored = 0;
  for (int wg = 0; wg < 2; ++wg)
    for (int w = 0; w < 4; ++w)
      for (int g = 0; g < BM / 16; ++g)
        for (int lane = 0; lane < 32; ++lane) {
          const int i = lane / 8, c = lane % 8;  // the lane addresses row c of matrix i
          const int j = 2 * g + i / 2, h = i % 2, q = 8 * j + c;
          const uint32_t row_addr = Descs::ds_t_addr(wg, w, 0, lane) + static_cast<uint32_t>(g) * 16u * 128u;
          std::snprintf(what, sizeof what, "%s ds_t_addr g=%d lane=%d", name, g, lane);
          CHECK_EQ(row_addr, Descs::ds_t_addr(wg, w, g, lane), what);
          for (int r = 0; r < 8; ++r) {  // element r of that row: key 64 wg + 16 w + 8 h + r
            const int key = 64 * wg + 16 * w + 8 * h + r;
            const uint32_t cute_off =
                static_cast<uint32_t>(reinterpret_cast<cute::uint8_t const*>(raw_pointer_cast(&sDS(q, key))) - g_smem);
            std::snprintf(what, sizeof what, "%s dS stmatrix.trans (query %d, key %d)", name, q, key);
            CHECK_EQ(row_addr + 2u * static_cast<uint32_t>(r), cute_off, what);
            ++stored;
          }
        }
  CHECK_EQ(stored, BM * BN, name);
  // The dQ tile: value v of n8 slice j of thread wtid of warpgroup wg (accumulator row = column d
  // of dQ, accumulator column = query q) sits where the convert kernel's (row, col) says.
  std::vector<int> seen(Traits::kDqTileFloats, 0);
  for (int wg = 0; wg < 2; ++wg)
    for (int j = 0; j < Traits::kDqRegs / 4; ++j)
      for (int wtid = 0; wtid < 128; ++wtid)
        for (int v = 0; v < 4; ++v) {
          const int d = 64 * wg + 16 * (wtid / 32) + (wtid % 32) / 4 + 8 * (v / 2);
          const int q = 8 * j + 2 * (wtid % 4) + v % 2;
          const int off = Traits::dq_tile_offset(wg, j, wtid, v);
          std::snprintf(what, sizeof what, "%s dq tile (query %d, column %d)", name, q, d);
          CHECK_EQ(Traits::dq_tile_offset_rc(q, d), off, what);
          ++seen[off];
        }
  for (int i = 0; i < Traits::kDqTileFloats; ++i) CHECK_EQ(seen[i], 1, name);
  std::printf("checked %s (%d-query steps, dQ transposed)\n", name, BM);
}

// The roles form's dQ tile order (traits.h): accumulator value v of n8 slice j of thread wtid of
// warpgroup wg is row 16 warp + lane / 4 + 8 (v / 2), column roles_col(wg, 8 j + 2 (lane % 4) + v % 2)
// of the block; dq_tile_offset_rc (the convert kernel's read) must find it where the consumer stored
// it (dq_tile_offset), and every float of the tile is written once.
template <class Traits>
void check_roles_dq_order(const char* name) {
  char what[200];
  std::vector<int> seen(Traits::kDqTileFloats, 0);
  for (int wg = 0; wg < 2; ++wg)
    for (int wtid = 0; wtid < 128; ++wtid)
      for (int j = 0; j < Traits::kDqRegs / 4; ++j)
        for (int v = 0; v < 4; ++v) {
          const int warp = wtid / 32, lane = wtid % 32;
          const int row = 16 * warp + lane / 4 + 8 * (v / 2);
          const int col = Traits::roles_col(wg, 8 * j + 2 * (lane % 4) + v % 2);
          const int off = Traits::dq_tile_offset(wg, j, wtid, v);
          std::snprintf(what, sizeof what, "%s dQ tile order (%d, %d)", name, row, col);
          CHECK_EQ(Traits::dq_tile_offset_rc(row, col), off, what);
          if (off >= 0 && off < Traits::kDqTileFloats) ++seen[off];
        }
  for (int i = 0; i < Traits::kDqTileFloats; ++i) CHECK_EQ(seen[i], 1, name);
  std::printf("checked %s dQ tile order\n", name);
}

int main() {
  using namespace flashattn::sm90;
  check_roles_dq_order<Sm90BwdTraits<192>>("D=192 roles");
  check_roles_dq_order<Sm90BwdTraits<256>>("D=256 roles");
  check_wide_config<cute::bfloat16_t>();
  check_wide_config<cute::half_t, Sm90BwdConfig<96, false, false>::Traits>("D=96");
  check_wide_config<cute::bfloat16_t, Sm90BwdConfig<96, false, true>::Traits>("D=96 wide");
  check_traits<cute::bfloat16_t, Sm90BwdTraits<128, Sm90BwdDqSplit::kSplitD>>("D=128 split-D");
  check_traits<cute::bfloat16_t, Sm90BwdTraits<256>>("D=256 roles");
  check_traits<cute::half_t, Sm90BwdTraits<192>>("D=192 roles");
  check_traits<cute::bfloat16_t, Sm90BwdTraits<128, Sm90BwdDqSplit::kSplitKeys, 64>>("D=128 split-keys");
  check_traits<cute::bfloat16_t, Sm90BwdTraits<64, Sm90BwdDqSplit::kSplitKeys, 64>>("D=64 split-keys");
  check_traits<cute::half_t, Sm90BwdTraits<64, Sm90BwdDqSplit::kSplitD, 64>>("D=64 split-D");
  check_traits<cute::bfloat16_t, Sm90BwdTraits<64>>("D=64 split-queries (128-query steps, the kernel's)");
  if (failures) {
    std::printf("FAIL: %d of %d field checks mismatch\n", failures, checks);
    return 1;
  }
  std::printf("OK: %d field checks, the backward's descriptors and dS^T offsets match CuTe\n", checks);
  return 0;
}
