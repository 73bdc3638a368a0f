// Hopper backward lab (sm_90a, no torch; build and run: lab/sm90_bwd_lab.sh). Self-checking:
//   1. correctness: for each case, random inputs (hash fill), O and lse from the portable forward
//      (run_fwd, so P is consistent with lse), then the portable backward (run_bwd, the reference)
//      and the Hopper prototype (run_bwd_sm90) on the same inputs; dq, dk, dv compared elementwise:
//      max |new - ref|, and that over max |ref|. PASS when every tensor is finite and within
//      kTol * max |ref| (bf16/fp16 rounding of P and dS, different summation orders).
//   2. timing (bf16, B*S = 16k, H = 2048/D, S in {1k, 4k, 16k}, causal 0/1): the whole backward as
//      the op runs it (dq_accum zeroing, preprocess, main kernel, convert), median of 15 calls,
//      portable and Hopper samples alternating; FLOPs = 2.5 * 4 B H S^2 D, halved when causal.
// Every kernel wait is bounded (kHangSeconds): a stuck kernel prints HANG and exits with status 3.
// Exit status: 0 all PASS; 1 a FAIL; 2 CUDA error; 3 HANG.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "flash_bwd/launch.cuh"
#include "flash_bwd/traits.h"
#include "flash_bwd_sm90/launch.cuh"
#include "flash_fwd/launch.cuh"
#include "flash_fwd/traits.h"

using namespace flashattn;

#define CHECK(...)                                                                            \
  do {                                                                                        \
    cudaError_t e_ = (__VA_ARGS__);                                                           \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("CUDA ERROR %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));       \
      std::fflush(stdout);                                                                    \
      std::_Exit(2);                                                                          \
    }                                                                                         \
  } while (0)

constexpr double kHangSeconds = 20.0;  // the largest timing call takes well under 1 s
constexpr double kTol = 2e-2;

// Waits for the default stream, bounded: a kernel stuck on a wrong barrier would otherwise hang
// the lab forever.
static void wait_or_hang(const char* what) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(0);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) CHECK(e);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s > kHangSeconds) {
      std::printf("HANG: %s did not finish within %.0f s\n", what, kHangSeconds);
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

template <typename Element>
__global__ void fill_random(Element* x, size_t n, unsigned seed, float amp) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ (seed * 0x9e3779b9u);
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    const float v = ((h & 0xffff) / 32768.0f - 1.0f) * amp;
    if constexpr (std::is_same_v<Element, __nv_bfloat16>) x[i] = __float2bfloat16(v);
    else x[i] = __float2half(v);
  }
}

template <typename Element>
static float to_float(Element x) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) return __bfloat162float(x);
  else return __half2float(x);
}

enum class Causal { kNone, kTopLeft, kBottomRight };
static const char* causal_name(Causal c) {
  return c == Causal::kNone ? "none" : c == Causal::kTopLeft ? "top-left" : "bottom-right";
}

struct Problem {
  int B, H, Hk, Sq, Sk, D;
  Causal causal;
};

// Device buffers of one problem: inputs, forward outputs, and two sets of gradients.
template <typename Element>
struct Buffers {
  Problem pr;
  size_t nq, nk, rows, accum;  // accum: floats of dq_accum, enough for either path's layout
  Element *q, *k, *v, *o, *dout;
  Element *dq[2], *dk[2], *dv[2];
  float *lse, *dpsum, *dq_accum;

  explicit Buffers(const Problem& p) : pr(p) {
    nq = (size_t)p.B * p.Sq * p.H * p.D;
    nk = (size_t)p.B * p.Sk * p.Hk * p.D;
    rows = (size_t)p.B * p.H * p.Sq;
    // The Hopper path keeps each query block (128 rows at D = 64, 64 at D = 128) as one tile.
    accum = std::max(nq, (size_t)p.B * p.H * ((p.Sq + 127) / 128) * 128 * (p.D <= 64 ? 64 : 128));
    CHECK(cudaMalloc(&q, nq * 2)); CHECK(cudaMalloc(&o, nq * 2)); CHECK(cudaMalloc(&dout, nq * 2));
    CHECK(cudaMalloc(&k, nk * 2)); CHECK(cudaMalloc(&v, nk * 2));
    for (int i = 0; i < 2; ++i) {
      CHECK(cudaMalloc(&dq[i], nq * 2)); CHECK(cudaMalloc(&dk[i], nk * 2)); CHECK(cudaMalloc(&dv[i], nk * 2));
      CHECK(cudaMemset(dq[i], 0xff, nq * 2)); CHECK(cudaMemset(dk[i], 0xff, nk * 2)); CHECK(cudaMemset(dv[i], 0xff, nk * 2));
    }
    CHECK(cudaMalloc(&lse, rows * 4)); CHECK(cudaMalloc(&dpsum, rows * 4)); CHECK(cudaMalloc(&dq_accum, accum * 4));
    fill_random<<<1024, 256>>>(q, nq, 1, 1.7f);
    fill_random<<<1024, 256>>>(k, nk, 2, 1.7f);
    fill_random<<<1024, 256>>>(v, nk, 3, 1.0f);
    fill_random<<<1024, 256>>>(dout, nq, 4, 1.0f);
    CHECK(cudaGetLastError());
  }
  ~Buffers() {
    for (void* t : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)dout, (void*)lse, (void*)dpsum, (void*)dq_accum})
      cudaFree(t);
    for (int i = 0; i < 2; ++i) { cudaFree(dq[i]); cudaFree(dk[i]); cudaFree(dv[i]); }
  }

  // Gradient set i's parameter block (fills the forward's part too).
  BwdParams params(int i) const {
    const Problem& p = pr;
    BwdParams b;
    b.q = q; b.k = k; b.v = v; b.o = o; b.lse = lse; b.dout = dout;
    b.dq = dq[i]; b.dk = dk[i]; b.dv = dv[i];
    b.q_batch_stride = b.o_batch_stride = b.do_batch_stride = b.dq_batch_stride = (int64_t)p.Sq * p.H * p.D;
    b.q_row_stride = b.o_row_stride = b.do_row_stride = b.dq_row_stride = (int64_t)p.H * p.D;
    b.q_head_stride = b.o_head_stride = b.do_head_stride = b.dq_head_stride = p.D;
    b.k_batch_stride = b.v_batch_stride = b.dk_batch_stride = b.dv_batch_stride = (int64_t)p.Sk * p.Hk * p.D;
    b.k_row_stride = b.v_row_stride = b.dk_row_stride = b.dv_row_stride = (int64_t)p.Hk * p.D;
    b.k_head_stride = b.v_head_stride = b.dk_head_stride = b.dv_head_stride = p.D;
    b.batch = p.B; b.heads_q = p.H; b.heads_kv = p.Hk; b.seqlen_q = p.Sq; b.seqlen_k = p.Sk; b.head_dim = p.D;
    b.set_scale(1.0f / std::sqrt((float)p.D));
    b.set_causal(p.causal == Causal::kNone ? CausalMode::kNone
                 : p.causal == Causal::kTopLeft ? CausalMode::kTopLeft : CausalMode::kBottomRight);
    b.dtype = std::is_same_v<Element, __nv_bfloat16> ? DType::kBFloat16 : DType::kFloat16;
    b.dpsum = dpsum; b.dq_accum = dq_accum;
    return b;
  }
};

template <int D, typename Element>
static void run_forward(const BwdParams& b) {
  const FwdParams& f = b;
  CHECK(run_fwd<typename FwdTileConfig<D, TileVariant::kLarge>::Traits, Element, false>(f, 0));
  wait_or_hang("portable forward");
}

template <int D, typename Element>
static void portable_bwd(const BwdParams& b, size_t nq) {
  CHECK(cudaMemsetAsync(b.dq_accum, 0, nq * 4, 0));
  CHECK(run_bwd<typename BwdTileConfig<D, BwdTileVariant::kLarge>::Traits, Element>(b, 0));
}

static DeviceLimits g_dev;  // main() fills it from the device's properties

template <typename Traits, typename Element>
static void sm90_bwd(const BwdParams& b, size_t accum) {
  CHECK(cudaMemsetAsync(b.dq_accum, 0, accum * 4, 0));
  CHECK((sm90::run_bwd_sm90<Traits, Element, false, false>(b, g_dev, 0)));
}

struct Cmp {
  double max_diff = 0, max_ref = 0;
  long long bad = 0;  // non-finite values in the new result
  bool pass() const { return bad == 0 && std::isfinite(max_diff) && max_diff <= kTol * max_ref + 1e-6; }
};

template <typename Element>
static Cmp compare(const Element* ref_d, const Element* new_d, size_t n) {
  std::vector<Element> r(n), x(n);
  CHECK(cudaMemcpy(r.data(), ref_d, n * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(x.data(), new_d, n * 2, cudaMemcpyDeviceToHost));
  Cmp c;
  for (size_t i = 0; i < n; ++i) {
    const double a = to_float(r[i]), b = to_float(x[i]);
    if (!std::isfinite(b)) { ++c.bad; continue; }
    if (!std::isfinite(a)) { ++c.bad; continue; }  // the reference itself must be finite too
    c.max_ref = std::max(c.max_ref, std::fabs(a));
    c.max_diff = std::max(c.max_diff, std::fabs(a - b));
  }
  return c;
}

static int g_cases = 0, g_failures = 0;

template <int D, typename Element, typename Traits>
static void check_case(const char* variant, Problem p) {
  p.D = D;
  Buffers<Element> buf(p);
  const BwdParams ref = buf.params(0), nw = buf.params(1);
  run_forward<D, Element>(ref);
  portable_bwd<D, Element>(ref, buf.nq);
  wait_or_hang("portable backward");
  sm90_bwd<Traits, Element>(nw, buf.accum);
  wait_or_hang("sm90 backward");
  CHECK(cudaGetLastError());
  const Cmp cq = compare(buf.dq[0], buf.dq[1], buf.nq);
  const Cmp ck = compare(buf.dk[0], buf.dk[1], buf.nk);
  const Cmp cv = compare(buf.dv[0], buf.dv[1], buf.nk);
  const bool ok = cq.pass() && ck.pass() && cv.pass();
  ++g_cases;
  if (!ok) ++g_failures;
  std::printf("CHECK %s D=%3d %-9s B=%d H=%d Hk=%d Sq=%5d Sk=%5d causal=%-12s", std::is_same_v<Element, __half> ? "fp16" : "bf16",
              D, variant, p.B, p.H, p.Hk, p.Sq, p.Sk, causal_name(p.causal));
  for (auto [name, c] : {std::pair<const char*, Cmp>{"dq", cq}, {"dk", ck}, {"dv", cv}})
    std::printf("  %s diff %.3e rel %.3e%s", name, c.max_diff, c.max_ref > 0 ? c.max_diff / c.max_ref : c.max_diff,
                c.bad ? " NONFINITE" : "");
  std::printf("  %s\n", ok ? "PASS" : "FAIL");
  std::fflush(stdout);
}

template <int D, typename Element, typename Traits>
static void check_all(const char* variant) {
  const Problem cases[] = {
      {2, 4, 2, 1024, 1024, D, Causal::kNone},
      {2, 4, 2, 1024, 1024, D, Causal::kTopLeft},
      {2, 4, 2, 1000, 777, D, Causal::kNone},
      {2, 4, 2, 1000, 777, D, Causal::kTopLeft},
      {2, 4, 2, 1000, 777, D, Causal::kBottomRight},  // rows 0..222 see no key (lse = -inf)
      {2, 4, 2, 777, 1000, D, Causal::kTopLeft},      // keys >= 777 seen by no query (dK = dV = 0)
      {2, 4, 2, 777, 1000, D, Causal::kBottomRight},
      {1, 4, 1, 1, 1024, D, Causal::kNone},           // Sq = 1, MQA
      {1, 4, 1, 1, 1000, D, Causal::kTopLeft},
      {1, 4, 1, 1, 1000, D, Causal::kBottomRight},
      {1, 2, 2, 64, 128, D, Causal::kNone},           // exactly one tile
      {3, 6, 3, 300, 200, D, Causal::kBottomRight},
  };
  for (const Problem& p : cases) check_case<D, Element, Traits>(variant, p);
}

template <int D, typename Traits>
static void time_case(int S, bool causal) {
  using Element = __nv_bfloat16;
  const Problem p{16384 / S, 2048 / D, 2048 / D, S, S, D, causal ? Causal::kTopLeft : Causal::kNone};
  Buffers<Element> buf(p);
  const BwdParams ref = buf.params(0), nw = buf.params(1);
  run_forward<D, Element>(ref);
  for (int i = 0; i < 3; ++i) {
    portable_bwd<D, Element>(ref, buf.nq);
    wait_or_hang("portable backward (warm-up)");
    sm90_bwd<Traits, Element>(nw, buf.accum);
    wait_or_hang("sm90 backward (warm-up)");
  }
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
  std::vector<float> ms[2];
  for (int i = 0; i < 15; ++i)
    for (int which = 0; which < 2; ++which) {
      CHECK(cudaEventRecord(a));
      if (which == 0) portable_bwd<D, Element>(ref, buf.nq);
      else sm90_bwd<Traits, Element>(nw, buf.accum);
      CHECK(cudaEventRecord(b));
      wait_or_hang(which == 0 ? "portable backward (timing)" : "sm90 backward (timing)");
      float t;
      CHECK(cudaEventElapsedTime(&t, a, b));
      ms[which].push_back(t);
    }
  CHECK(cudaEventDestroy(a)); CHECK(cudaEventDestroy(b));
  const double flops = 2.5 * 4.0 * p.B * p.H * (double)S * S * D / (causal ? 2 : 1);
  float med[2];
  for (int w = 0; w < 2; ++w) {
    std::sort(ms[w].begin(), ms[w].end());
    med[w] = ms[w][ms[w].size() / 2];
  }
  std::printf("TIME bf16 D=%3d B=%2d H=%2d S=%5d causal=%d  portable %8.3f ms %6.1f TFLOP/s  sm90 %8.3f ms %6.1f TFLOP/s  "
              "speedup(sm90/portable) %.3f\n",
              D, p.B, p.H, S, causal, med[0], flops / med[0] / 1e9, med[1], flops / med[1] / 1e9, med[0] / med[1]);
  std::fflush(stdout);
}

template <int D, typename Traits>
static void time_all() {
  for (int S : {1024, 4096, 16384})
    for (int c = 0; c < 2; ++c) time_case<D, Traits>(S, c);
}

using sm90::Sm90BwdDqSplit;
using sm90::Sm90BwdTraits;
using D64SplitD = Sm90BwdTraits<64>;  // the kernel's D=64 form: 128-query steps, dQ split by query rows
using D128SplitD = Sm90BwdTraits<128, Sm90BwdDqSplit::kSplitD>;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  g_dev.sm_count = prop.multiProcessorCount;
  g_dev.max_smem_per_block = static_cast<int>(prop.sharedMemPerBlockOptin);
  g_dev.cc_major = prop.major;
  g_dev.cc_minor = prop.minor;
  if (prop.major != 9) {
    std::printf("FAIL: needs an sm_90 GPU (H100/H200)\n");
    return 1;
  }
  if (mode == "all" || mode == "check") {
    check_all<128, __nv_bfloat16, D128SplitD>("split-D");
    check_all<128, __half, D128SplitD>("split-D");
    check_all<64, __nv_bfloat16, D64SplitD>("split-D");
    check_all<64, __half, D64SplitD>("split-D");
    std::printf("CHECK SUMMARY: %d cases, %d failed\n", g_cases, g_failures);
  }
  if (mode == "all" || mode == "time") {
    time_all<128, D128SplitD>();
    time_all<64, D64SplitD>();
  }
  const bool pass = g_failures == 0;
  std::printf("RESULT: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
