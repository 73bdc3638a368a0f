// The backward's preprocess kernel (csrc/common/bwd_preprocess.cuh: dpsum and the scratch's
// zeroing in one pass) against what it replaced, a memset of the zero region then the one-row-a-
// thread kernel (copied here as old_preprocess_kernel), on the local GPU without torch.
//   check: dpsum bit for bit the old kernel's (bf16 and fp16, D 32..256, odd row counts, strided
//          O / dO, the 64-bit index path), the zero region all zeros for sizes 0, 1-3 (the scalar
//          tail), a multiple of 4 plus a tail, one larger than the rows' share (the grid sized by
//          it), no row at all, and nothing written past it; a misaligned region refused.
//   time:  16k tokens of H * D = 2048 bf16 (the measured shape), D 64/128/256, the zero region as
//          large as dq_accum: memset + old kernel, the new kernel, and each part alone.
//   nvcc -std=c++17 -O3 -Icsrc -gencode=arch=compute_90a,code=sm_90a lab/bwd_preprocess_lab.cu \
//     -o build/bwd_preprocess_lab && build/bwd_preprocess_lab [all|check|time] [--no-wide]
// Exit status: 0 all PASS, 1 a FAIL, 2 a CUDA error. --no-wide skips the 64-bit case (8.6 GB).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/bwd_preprocess.cuh"

using namespace flashattn;

#define CHECK(...)                                                                   \
  do {                                                                               \
    cudaError_t e = (__VA_ARGS__);                                                   \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(2);                                                                  \
    }                                                                                \
  } while (0)

// The kernel before the zeroing moved into it (one row per lane group, one CTA of 8 warps per
// 8 * 32 / kLanes rows): the bitwise reference and the timing baseline.
template <typename Element, int kLanes, typename Index>
__global__ void __launch_bounds__(256) old_preprocess_kernel(const __grid_constant__ BwdParams p) {
  constexpr int kRowsPerWarp = 32 / kLanes;
  const int lane = threadIdx.x % 32;
  const int sub = lane % kLanes;
  const Index rows = static_cast<Index>(p.batch) * p.seqlen_q * p.heads_q;
  const Index row = (static_cast<Index>(blockIdx.x) * 8 + threadIdx.x / 32) * kRowsPerWarp + lane / kLanes;
  float acc = 0.f;
  Index h = 0, i = 0, b = 0;
  if (row < rows) {
    h = row % p.heads_q;
    const Index token = row / p.heads_q;
    i = token % p.seqlen_q;
    b = token / p.seqlen_q;
    if (sub * 8 < p.head_dim) {
      const Element* o = static_cast<const Element*>(p.o) + (b * static_cast<Index>(p.o_batch_stride) +
                                                              i * static_cast<Index>(p.o_row_stride) +
                                                              h * static_cast<Index>(p.o_head_stride));
      const Element* d = static_cast<const Element*>(p.dout) + (b * static_cast<Index>(p.do_batch_stride) +
                                                                i * static_cast<Index>(p.do_row_stride) +
                                                                h * static_cast<Index>(p.do_head_stride));
      acc = dot8<Element>(*reinterpret_cast<const uint4*>(o + sub * 8), *reinterpret_cast<const uint4*>(d + sub * 8));
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (sub == 0 && row < rows) p.dpsum[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i] = acc;
}

template <typename Element, int kLanes>
void old_launch_lanes(const BwdParams& p, long long rows, bool wide) {
  const long long grid = (rows + 8 * (32 / kLanes) - 1) / (8 * (32 / kLanes));
  if (wide)
    old_preprocess_kernel<Element, kLanes, int64_t><<<static_cast<unsigned>(grid), 256>>>(p);
  else
    old_preprocess_kernel<Element, kLanes, int><<<static_cast<unsigned>(grid), 256>>>(p);
  CHECK(cudaGetLastError());
}

template <typename Element>
void old_launch(const BwdParams& p, bool wide) {
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  if (rows <= 0) return;
  const int chunks = (p.head_dim + 7) / 8;
  if (chunks <= 4) return old_launch_lanes<Element, 4>(p, rows, wide);
  if (chunks <= 8) return old_launch_lanes<Element, 8>(p, rows, wide);
  if (chunks <= 16) return old_launch_lanes<Element, 16>(p, rows, wide);
  return old_launch_lanes<Element, 32>(p, rows, wide);
}

template <typename Element>
__global__ void fill_inputs(Element* x, size_t n, unsigned seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed ^ static_cast<unsigned>(i >> 32) * 40503u;
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    const float v = ((h & 0xffff) / 32768.0f - 1.0f) * 3.0f;
    if constexpr (std::is_same_v<Element, __nv_bfloat16>) x[i] = __float2bfloat16(v); else x[i] = __float2half(v);
  }
}

struct Case {
  int d, batch, seqlen, heads;
  int row_mult;       // O / dO row stride in units of heads * d (3: a packed qkv-like layout)
  long long zero;     // zero_floats; -1: as large as dq_accum plus a tail of 3
  bool wide;          // batch stride 2^31 elements: the 64-bit index path
};

static int failures = 0;

template <typename Element>
void check_case(const Case& c) {
  const long long rows = static_cast<long long>(c.batch) * c.seqlen * c.heads;
  const long long row_elems = static_cast<long long>(c.row_mult) * c.heads * c.d;
  const long long batch_stride = c.wide ? (1ll << 31) : c.seqlen * row_elems;
  const size_t n = c.batch == 0 ? 0 : static_cast<size_t>((c.batch - 1) * batch_stride + c.seqlen * row_elems);
  const long long zero = c.zero < 0 ? rows * c.d + 3 : c.zero;
  Element *o = nullptr, *dout = nullptr;
  float *dpsum_new, *dpsum_old, *scratch;
  if (n > 0) {
    CHECK(cudaMalloc(&o, n * sizeof(Element)));
    CHECK(cudaMalloc(&dout, n * sizeof(Element)));
    fill_inputs<<<1024, 256>>>(o, n, 11u);
    fill_inputs<<<1024, 256>>>(dout, n, 23u);
  }
  const size_t dp = std::max<long long>(rows, 1);
  CHECK(cudaMalloc(&dpsum_new, dp * 4)); CHECK(cudaMalloc(&dpsum_old, dp * 4));
  CHECK(cudaMemset(dpsum_new, 0xff, dp * 4)); CHECK(cudaMemset(dpsum_old, 0xff, dp * 4));
  const size_t guard = 8;  // floats past the region that must keep their bits
  CHECK(cudaMalloc(&scratch, (zero + guard) * 4));
  CHECK(cudaMemset(scratch, 0xff, (zero + guard) * 4));

  BwdParams p;
  p.o = o; p.dout = dout;
  p.o_batch_stride = p.do_batch_stride = batch_stride;
  p.o_row_stride = p.do_row_stride = row_elems;
  p.o_head_stride = p.do_head_stride = c.d;
  p.batch = c.batch; p.seqlen_q = c.seqlen; p.heads_q = c.heads; p.head_dim = c.d;
  p.dq_accum = scratch;
  p.zero_floats = static_cast<int>(zero);
  p.dpsum = dpsum_new;
  CHECK(launch_bwd_preprocess<Element>(p, 0));
  p.dpsum = dpsum_old;
  old_launch<Element>(p, c.wide);
  CHECK(cudaDeviceSynchronize());

  std::vector<uint32_t> a(dp), b(dp), z(zero + guard);
  CHECK(cudaMemcpy(a.data(), dpsum_new, dp * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(b.data(), dpsum_old, dp * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(z.data(), scratch, (zero + guard) * 4, cudaMemcpyDeviceToHost));
  long long dpsum_diff = 0, nonzero = 0, guard_hit = 0;
  for (size_t i = 0; i < dp; ++i) dpsum_diff += a[i] != b[i];
  for (long long i = 0; i < zero; ++i) nonzero += z[i] != 0u;
  for (size_t i = 0; i < guard; ++i) guard_hit += z[zero + i] != 0xffffffffu;
  const bool ok = dpsum_diff == 0 && nonzero == 0 && guard_hit == 0;
  failures += !ok;
  std::printf("%s %s D=%3d B=%d S=%4d H=%2d rows x%d zero=%9lld%s: dpsum %lld differ, %lld unzeroed, "
              "%lld past the region\n",
              ok ? "PASS" : "FAIL", std::is_same_v<Element, __nv_bfloat16> ? "bf16" : "fp16", c.d, c.batch, c.seqlen,
              c.heads, c.row_mult, zero, c.wide ? " wide" : "", dpsum_diff, nonzero, guard_hit);
  std::fflush(stdout);
  for (void* t : {(void*)o, (void*)dout, (void*)dpsum_new, (void*)dpsum_old, (void*)scratch}) cudaFree(t);
}

void check(bool wide) {
  std::vector<Case> cases;
  for (int d : {32, 64, 96, 128, 192, 256})
    for (long long zero : {0ll, 3ll, -1ll, 50ll * 2 * 37 * 3 * 256 + 1}) cases.push_back({d, 2, 37, 3, 1, zero, false});
  for (long long zero : {1ll, 2ll, 4ll, 5ll}) cases.push_back({128, 1, 5, 1, 1, zero, false});
  cases.push_back({64, 3, 129, 5, 3, -1, false});   // strided O / dO
  cases.push_back({128, 0, 16, 4, 1, 1003, false});  // no row: the zeroing alone
  cases.push_back({128, 4, 1024, 16, 1, -1, false});
  if (wide) cases.push_back({128, 2, 3, 4, 1, -1, true});
  for (const Case& c : cases) {
    check_case<__nv_bfloat16>(c);
    if (!c.wide) check_case<__half>(c);
  }
  // A region the float4 stores cannot start at: refused, nothing launched.
  BwdParams p;
  float* f;
  CHECK(cudaMalloc(&f, 64));
  p.dq_accum = f + 1;
  p.zero_floats = 4;
  const bool refused = launch_bwd_preprocess<__nv_bfloat16>(p, 0) == cudaErrorInvalidValue;
  failures += !refused;
  std::printf("%s misaligned region refused\n", refused ? "PASS" : "FAIL");
  cudaFree(f);
}

template <typename F>
float median_us(F&& call) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) call();
  std::vector<float> us;
  for (int i = 0; i < 51; ++i) {
    CHECK(cudaEventRecord(a));
    call();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms; CHECK(cudaEventElapsedTime(&ms, a, b)); us.push_back(ms * 1e3f);
  }
  CHECK(cudaEventDestroy(a)); CHECK(cudaEventDestroy(b));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void time_all() {
  const int tokens = 16384, S = 4096, B = tokens / S;
  for (int d : {64, 128, 256}) {
    const int H = 2048 / d;
    const size_t n = static_cast<size_t>(tokens) * H * d;
    __nv_bfloat16 *o, *dout;
    float *dpsum, *accum;
    CHECK(cudaMalloc(&o, n * 2)); CHECK(cudaMalloc(&dout, n * 2));
    CHECK(cudaMalloc(&dpsum, static_cast<size_t>(tokens) * H * 4)); CHECK(cudaMalloc(&accum, n * 4));
    fill_inputs<<<1024, 256>>>(o, n, 1u);
    fill_inputs<<<1024, 256>>>(dout, n, 2u);
    BwdParams p;
    p.o = o; p.dout = dout;
    p.o_batch_stride = p.do_batch_stride = static_cast<int64_t>(S) * H * d;
    p.o_row_stride = p.do_row_stride = H * d;
    p.o_head_stride = p.do_head_stride = d;
    p.batch = B; p.seqlen_q = S; p.heads_q = H; p.head_dim = d;
    p.dpsum = dpsum; p.dq_accum = accum;
    BwdParams no_zero = p;
    p.zero_floats = static_cast<int>(n);
    const double read_gb = 2.0 * n * 2 / 1e9, zero_gb = n * 4.0 / 1e9;  // GB over us * 1e3: TB/s
    const float t_old = median_us([&] {
      CHECK(cudaMemsetAsync(accum, 0, n * 4, 0));
      old_launch<__nv_bfloat16>(no_zero, false);
    });
    const float t_new = median_us([&] { CHECK(launch_bwd_preprocess<__nv_bfloat16>(p, 0)); });
    const float t_memset = median_us([&] { CHECK(cudaMemsetAsync(accum, 0, n * 4, 0)); });
    const float t_old_alone = median_us([&] { old_launch<__nv_bfloat16>(no_zero, false); });
    const float t_new_alone = median_us([&] { CHECK(launch_bwd_preprocess<__nv_bfloat16>(no_zero, 0)); });
    std::printf("time D=%3d H=%2d S=%d B=%d: memset+old %7.1f us, new %7.1f us (%.2fx, %.2f TB/s) | memset %6.1f us, "
                "old alone %6.1f us (%.2f TB/s), new without zeroing %6.1f us (%.2f TB/s)\n",
                d, H, S, B, t_old, t_new, t_old / t_new, (read_gb + zero_gb) / t_new * 1e3, t_memset, t_old_alone,
                read_gb / t_old_alone * 1e3, t_new_alone, read_gb / t_new_alone * 1e3);
    std::fflush(stdout);
    for (void* t : {(void*)o, (void*)dout, (void*)dpsum, (void*)accum}) cudaFree(t);
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 && argv[1][0] != '-' ? argv[1] : "all";
  bool wide = true;
  for (int i = 1; i < argc; ++i) wide = wide && std::strcmp(argv[i], "--no-wide") != 0;
  if (std::strcmp(mode, "time") != 0) check(wide);
  if (std::strcmp(mode, "check") != 0) time_all();
  std::printf("%s\n", failures == 0 ? "ALL PASS" : "FAILURES");
  return failures == 0 ? 0 : 1;
}
