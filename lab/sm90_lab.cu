// Standalone lab for the Hopper forward path (no torch): correctness against a naive GPU reference,
// then TFLOP/s of the compiled configs and of candidate variants. Build and run on an H100/H200:
//   bash lab/sm90_lab.sh            (see there; modes: sm90_lab [check|schedule|speed|full])
// Exit status: 0 when every correctness case passes, 1 otherwise, 2 on a CUDA error. Built with
// FLASHATTN_SM90_HANG_CHECK, a stuck pipeline traps after 10 s and the error message names the
// barrier, the block and the thread (the script runs that build only to diagnose a hang, since the
// check perturbs register allocation).
//
// Correctness: fresh random inputs per case; O and LSE poisoned with NaN before each run (so an
// unwritten element fails); reference = one warp per query row, fp32 online softmax over the same
// 16-bit inputs (error ~1e-6, far under the 16-bit output rounding). Pass when
//   rel_fro = ||O - ref|| / ||ref|| <= 1e-2 (bf16) / 2e-3 (fp16), max |O - ref| <= 5e-2 / 1e-2,
//   max |LSE - ref| <= 1e-3 over rows with a visible key, and rows without one give exactly 0 / -inf.
// Cases cover D 64/128/256 and the rounded-up dims (32, 96, 160), Sq != Sk both ways, sequence
// lengths that are not multiples of the tiles, the three causal modes, GQA/MQA, a packed-QKV
// layout [B, S, 3, H, D] and a [B, H, S, D] layout, softmax scale 0 and negative, multi-wave grids.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "flash_fwd_sm90/api.h"
#include "flash_fwd_sm90/launch.cuh"

using namespace flashattn;
using namespace flashattn::sm90;

// Host-mapped report of a stuck mbarrier wait (see mbar_wait_checked in csrc/common/sm90/ptx.cuh).
static volatile int* g_hang_host = nullptr;
static const char* wait_tag_name(int tag) {
  switch (tag) {
    case kTagProducerKEmpty: return "producer waiting for a free K stage (k_empty)";
    case kTagProducerVEmpty: return "producer waiting for a free V stage (v_empty)";
    case kTagProducerQEmpty: return "producer waiting for Q to be released (q_empty)";
    case kTagConsumerQFull: return "consumer waiting for Q (q_full)";
    case kTagConsumerKFull: return "consumer waiting for a K block (k_full)";
    case kTagConsumerVFull: return "consumer waiting for a V block (v_full)";
  }
  return "?";
}
static void report_and_exit(cudaError_t e, const char* file, int line, const char* what) {
  std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e), file, line, what);
  if (g_hang_host != nullptr && g_hang_host[0] == 1)
    std::printf("HANG REPORT: block %d thread %d (warpgroup %d) stuck >10 s at: %s, parity %d\n", g_hang_host[2],
                g_hang_host[3], g_hang_host[3] / 128, wait_tag_name(g_hang_host[1]), g_hang_host[4]);
  std::fflush(stdout);
  std::exit(2);
}

#define CK(x)                                                  \
  do {                                                         \
    cudaError_t e_ = (x);                                      \
    if (e_ != cudaSuccess) report_and_exit(e_, __FILE__, __LINE__, #x); \
  } while (0)

// ------------------------------------------------------------------------------------------------
// Device helpers: random fill, poison, reference
// ------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

template <typename T>
__global__ void fill_normal(T* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u1 = (hash32(seed * 0x9E3779B97F4A7C15ull + 2 * i) + 1.0f) * 2.3283064e-10f;
    const float u2 = hash32(seed * 0x9E3779B97F4A7C15ull + 2 * i + 1) * 2.3283064e-10f;
    const float z = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    p[i] = T(z * scale);
  }
}

template <typename T>
__global__ void fill_bits(T* p, int64_t n, unsigned short bits) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    reinterpret_cast<unsigned short*>(p)[i] = bits;
}

__global__ void fill_f32(float* p, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) p[i] = v;
}

template <typename T>
__device__ __forceinline__ float to_f(T x) {
  return static_cast<float>(x);
}

// One warp per (batch, query row, head): online softmax in fp32 over all visible keys.
// o_ref [B, Sq, Hq, D] float (contiguous), lse_ref [B, Hq, Sq].
template <typename T>
__global__ void reference_attention(FwdParams p, float* o_ref, float* lse_ref) {
  const int warps = blockDim.x / 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
  if (row >= rows) return;
  const int h = static_cast<int>(row % p.heads_q);
  const int i = static_cast<int>((row / p.heads_q) % p.seqlen_q);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.heads_q) * p.seqlen_q));
  const int hk = h / (p.heads_q / p.heads_kv);
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + i * p.q_row_stride + h * p.q_head_stride;
  const T* kb = static_cast<const T*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
  const T* vb = static_cast<const T*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
  constexpr int kMaxPer = 8;  // D <= 256
  float qr[kMaxPer], acc[kMaxPer];
#pragma unroll
  for (int t = 0; t < kMaxPer; ++t) {
    const int d = lane + 32 * t;
    qr[t] = d < p.head_dim ? to_f(q[d]) : 0.f;
    acc[t] = 0.f;
  }
  int j_end = p.seqlen_k;
  if (p.causal) j_end = min(j_end, max(0, i + p.causal_offset + 1));
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < j_end; ++j) {
    const T* kr = kb + j * p.k_row_stride;
    float s = 0.f;
#pragma unroll
    for (int t = 0; t < kMaxPer; ++t) {
      const int d = lane + 32 * t;
      if (d < p.head_dim) s += qr[t] * to_f(kr[d]);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    s *= p.softmax_scale;
    const float m_new = fmaxf(m, s);
    const float c = expf(m - m_new);  // exp(-inf) = 0 on the first key
    const float e = expf(s - m_new);
    l = l * c + e;
    const T* vr = vb + j * p.v_row_stride;
#pragma unroll
    for (int t = 0; t < kMaxPer; ++t) {
      const int d = lane + 32 * t;
      acc[t] = acc[t] * c + (d < p.head_dim ? e * to_f(vr[d]) : 0.f);
    }
    m = m_new;
  }
  float* orow = o_ref + ((static_cast<int64_t>(b) * p.seqlen_q + i) * p.heads_q + h) * p.head_dim;
#pragma unroll
  for (int t = 0; t < kMaxPer; ++t) {
    const int d = lane + 32 * t;
    if (d < p.head_dim) orow[d] = l > 0.f ? acc[t] / l : 0.f;
  }
  if (lane == 0)
    lse_ref[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

// ------------------------------------------------------------------------------------------------
// Host side
// ------------------------------------------------------------------------------------------------
static DeviceLimits g_dev;
static uint64_t g_seed = 12345;

static int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 8192)); }

enum class Layout { kBSHD, kPackedQKV, kBHSD };
static const char* layout_name(Layout l) {
  return l == Layout::kBSHD ? "bshd" : l == Layout::kPackedQKV ? "qkv-packed" : "bhsd";
}

using LaunchFn = cudaError_t (*)(const FwdParams&, const DeviceLimits&, cudaStream_t);

struct Case {
  int batch, sq, sk, hq, hk, d;
  CausalMode causal;
  Layout layout = Layout::kBSHD;
  float scale = NAN;  // NAN: 1/sqrt(d)
};

struct Buffers {
  void* qkv = nullptr;  // all of q, k, v live in here
  void* o = nullptr;
  float* lse = nullptr;
  float* o_ref = nullptr;
  float* lse_ref = nullptr;
};

// Fills p's pointers and strides for the case's layout inside freshly allocated buffers.
template <typename T>
static void setup(const Case& c, FwdParams& p, Buffers& buf) {
  p = FwdParams{};
  p.batch = c.batch;
  p.seqlen_q = c.sq;
  p.seqlen_k = c.sk;
  p.heads_q = c.hq;
  p.heads_kv = c.hk;
  p.head_dim = c.d;
  p.dtype = std::is_same<T, __half>::value ? DType::kFloat16 : DType::kBFloat16;
  p.set_scale(std::isnan(c.scale) ? 1.f / std::sqrt(static_cast<float>(c.d)) : c.scale);
  p.set_causal(c.causal);
  const int64_t B = c.batch, Sq = c.sq, Sk = c.sk, Hq = c.hq, Hk = c.hk, D = c.d;
  int64_t total = 0;
  T* base;
  if (c.layout == Layout::kPackedQKV) {  // [B, S, 3, H, D], needs Sq == Sk, Hq == Hk
    total = B * Sq * 3 * Hq * D;
    CK(cudaMalloc(&buf.qkv, total * sizeof(T)));
    base = static_cast<T*>(buf.qkv);
    p.q = base;
    p.k = base + Hq * D;
    p.v = base + 2 * Hq * D;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = Sq * 3 * Hq * D;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * Hq * D;
    p.q_head_stride = p.k_head_stride = p.v_head_stride = D;
  } else {
    const int64_t nq = B * Sq * Hq * D, nk = B * Sk * Hk * D;
    total = nq + 2 * nk;
    CK(cudaMalloc(&buf.qkv, total * sizeof(T)));
    base = static_cast<T*>(buf.qkv);
    p.q = base;
    p.k = base + nq;
    p.v = base + nq + nk;
    if (c.layout == Layout::kBSHD) {
      p.q_batch_stride = Sq * Hq * D, p.q_row_stride = Hq * D, p.q_head_stride = D;
      p.k_batch_stride = p.v_batch_stride = Sk * Hk * D;
      p.k_row_stride = p.v_row_stride = Hk * D;
      p.k_head_stride = p.v_head_stride = D;
    } else {  // [B, H, S, D]
      p.q_batch_stride = Hq * Sq * D, p.q_row_stride = D, p.q_head_stride = Sq * D;
      p.k_batch_stride = p.v_batch_stride = Hk * Sk * D;
      p.k_row_stride = p.v_row_stride = D;
      p.k_head_stride = p.v_head_stride = Sk * D;
    }
  }
  fill_normal<T><<<blocks_for(total), 256>>>(base, total, ++g_seed, 1.f);
  CK(cudaGetLastError());
  const int64_t no = B * Sq * Hq * D;
  CK(cudaMalloc(&buf.o, no * sizeof(T)));
  CK(cudaMalloc(&buf.lse, B * Hq * Sq * sizeof(float)));
  p.o = buf.o;
  p.lse = buf.lse;
  p.o_batch_stride = Sq * Hq * D, p.o_row_stride = Hq * D, p.o_head_stride = D;
}

static void free_buffers(Buffers& b) {
  cudaFree(b.qkv);
  cudaFree(b.o);
  cudaFree(b.lse);
  cudaFree(b.o_ref);
  cudaFree(b.lse_ref);
  b = Buffers{};
}

static float half_bits_to_float(unsigned short h, bool bf16) {
  if (bf16) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  __half x;
  std::memcpy(&x, &h, 2);
  return __half2float(x);
}

static int g_failures = 0;
static int g_cases = 0;

template <typename T>
static bool check_case(const char* variant, LaunchFn launch, const Case& c) {
  FwdParams p;
  Buffers buf;
  setup<T>(c, p, buf);
  const bool bf16 = std::is_same<T, __nv_bfloat16>::value;
  const int64_t no = int64_t(c.batch) * c.sq * c.hq * c.d, nl = int64_t(c.batch) * c.hq * c.sq;
  fill_bits<T><<<blocks_for(no), 256>>>(static_cast<T*>(buf.o), no, 0x7FFF);  // NaN in fp16 and bf16
  fill_f32<<<blocks_for(nl), 256>>>(buf.lse, nl, NAN);
  CK(cudaMalloc(&buf.o_ref, no * sizeof(float)));
  CK(cudaMalloc(&buf.lse_ref, nl * sizeof(float)));
  CK(cudaDeviceSynchronize());

  char name[256];
  std::snprintf(name, sizeof name, "%-18s %s D=%-3d B=%d Sq=%-5d Sk=%-5d H=%d/%d causal=%d %-10s scale=%g", variant,
                bf16 ? "bf16" : "fp16", c.d, c.batch, c.sq, c.sk, c.hq, c.hk, static_cast<int>(c.causal),
                layout_name(c.layout), p.softmax_scale);
  std::printf("%s ... ", name);
  std::fflush(stdout);

  const bool supported = flash_fwd_sm90_supported(p, g_dev);
  const cudaError_t err = launch(p, g_dev, 0);
  if (err != cudaSuccess) {
    std::printf("FAIL launch: %s (supported()=%d)\n", cudaGetErrorString(err), supported);
    ++g_failures;
    ++g_cases;
    free_buffers(buf);
    return false;
  }
  CK(cudaDeviceSynchronize());
  const int rows = c.batch * c.sq * c.hq;
  reference_attention<T><<<(rows + 7) / 8, 256>>>(p, buf.o_ref, buf.lse_ref);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  std::vector<unsigned short> o(no);
  std::vector<float> oref(no), lse(nl), lref(nl);
  CK(cudaMemcpy(o.data(), buf.o, no * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(oref.data(), buf.o_ref, no * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lse.data(), buf.lse, nl * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lref.data(), buf.lse_ref, nl * 4, cudaMemcpyDeviceToHost));

  double err2 = 0, ref2 = 0, max_err = 0, lse_err = 0;
  int64_t nonfinite = 0, bad_empty = 0;
  for (int b = 0; b < c.batch; ++b)
    for (int i = 0; i < c.sq; ++i)
      for (int h = 0; h < c.hq; ++h) {
        const int64_t li = (int64_t(b) * c.hq + h) * c.sq + i;
        const bool empty = std::isinf(lref[li]);
        if (empty) {
          if (!(std::isinf(lse[li]) && lse[li] < 0)) ++bad_empty;
        } else if (!std::isfinite(lse[li])) {
          ++nonfinite;
        } else {
          lse_err = std::max(lse_err, static_cast<double>(std::fabs(lse[li] - lref[li])));
        }
        for (int d = 0; d < c.d; ++d) {
          const int64_t oi = ((int64_t(b) * c.sq + i) * c.hq + h) * c.d + d;
          const float x = half_bits_to_float(o[oi], bf16);
          if (!std::isfinite(x)) {
            ++nonfinite;
            continue;
          }
          if (empty && x != 0.f) ++bad_empty;
          const double e = static_cast<double>(x) - oref[oi];
          err2 += e * e;
          ref2 += static_cast<double>(oref[oi]) * oref[oi];
          max_err = std::max(max_err, std::fabs(e));
        }
      }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const double tol_rel = bf16 ? 1e-2 : 2e-3, tol_max = bf16 ? 5e-2 : 1e-2;
  const bool ok = nonfinite == 0 && bad_empty == 0 && rel <= tol_rel && max_err <= tol_max && lse_err <= 1e-3;
  std::printf("%s rel_fro=%.2e max_abs=%.2e lse_err=%.1e unwritten/nonfinite=%lld bad_empty_rows=%lld\n",
              ok ? "ok  " : "FAIL", rel, max_err, lse_err, static_cast<long long>(nonfinite),
              static_cast<long long>(bad_empty));
  std::fflush(stdout);
  ++g_cases;
  if (!ok) ++g_failures;
  free_buffers(buf);
  return ok;
}

// Median time of one call in ms: `samples` samples of `reps` back-to-back calls between events.
template <typename T>
static double time_config(LaunchFn launch, int d, int s, bool causal, double* tflops) {
  Case c{16384 / s, s, s, 2048 / d, 2048 / d, d, causal ? CausalMode::kTopLeft : CausalMode::kNone};
  FwdParams p;
  Buffers buf;
  setup<T>(c, p, buf);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) CK(launch(p, g_dev, 0));
  CK(cudaDeviceSynchronize());
  const int reps = 10, samples = 9;
  std::vector<float> ts;
  for (int smp = 0; smp < samples; ++smp) {
    CK(cudaEventRecord(a));
    for (int r = 0; r < reps; ++r) launch(p, g_dev, 0);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms / reps);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  const double ms = ts[ts.size() / 2];
  const double flops = 4.0 * c.batch * c.hq * double(s) * s * d / (causal ? 2 : 1);
  *tflops = flops / (ms * 1e-3) / 1e12;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  free_buffers(buf);
  return ms;
}

// ------------------------------------------------------------------------------------------------
// Configs: the compiled defaults (through the public entry point) and variants
// ------------------------------------------------------------------------------------------------
// As the torch binding does it: a zeroed tile counter (dynamic schedule) where `want` says so. One
// lab stream, so one buffer serves every call; the memset is part of the timed work, as there.
static FwdParams with_tile_counter(const FwdParams& p, bool want, cudaStream_t s) {
  static int* counter = nullptr;
  FwdParams q = p;
  if (want) {
    if (counter == nullptr) CK(cudaMalloc(&counter, sizeof(int)));
    CK(cudaMemsetAsync(counter, 0, sizeof(int), s));
    q.tile_counter = counter;
  }
  return q;
}

// The entry point with the binding's choice of schedule (the split over the keys left out).
cudaError_t launch_default(const FwdParams& p, const DeviceLimits& dev, cudaStream_t s) {
  const Sm90FwdPlan plan = flash_fwd_sm90_plan(p, dev);
  return flash_fwd_sm90(with_tile_counter(p, plan.tile_counter, s), plan, dev, s);
}
// Either schedule forced (correctness of both on every kind of shape; the schedule A/B).
cudaError_t launch_static(const FwdParams& p, const DeviceLimits& dev, cudaStream_t s) {
  return flash_fwd_sm90(p, flash_fwd_sm90_plan(p, dev), dev, s);
}
// (A small grid's call runs its static kernel even so: the small-grid config has no dynamic one.)
cudaError_t launch_dynamic(const FwdParams& p, const DeviceLimits& dev, cudaStream_t s) {
  return flash_fwd_sm90(with_tile_counter(p, true, s), flash_fwd_sm90_plan(p, dev), dev, s);
}

template <typename Traits, typename T>
cudaError_t launch_variant(const FwdParams& p, const DeviceLimits& dev, cudaStream_t s) {
  return run_fwd_sm90<Traits, T, false>(p, dev, s);
}

// The variant on the schedule the binding would pick for its tile shape (dynamic for causal calls
// with more tiles than SMs): what the variant timing compares against launch_default.
template <typename Traits, typename T>
cudaError_t launch_variant_scheduled(const FwdParams& p, const DeviceLimits& dev, cudaStream_t s) {
  const bool dynamic = flashattn::sm90::dynamic_schedule_pays(p.causal, p.seqlen_q, static_cast<long long>(p.batch) * p.heads_q,
                                                            Traits::kBlockM, dev.sm_count);
  if (!dynamic) return run_fwd_sm90<Traits, T, false>(p, dev, s);
  return run_fwd_sm90<Traits, T, true>(with_tile_counter(p, true, s), dev, s);
}


struct Variant {
  const char* name;
  int d;  // head dim it serves
  LaunchFn bf16;  // static schedule (correctness cases)
  LaunchFn fp16;
  LaunchFn bf16_scheduled;  // the binding's schedule choice (timing)
  bool masks;  // takes a causal mask / window (Sm90FwdTraits::kLocal: not the three-consumer kernels)
};

// Every traits parameter (VARIANT_X), and shorthands for the common shapes of a variant.
#define VARIANT_X(NAME, D, N, ST, PP, QS, OT, CH, WG)                                                     \
  Variant {                                                                                             \
    NAME, D, &launch_variant<Sm90FwdTraits<D, N, ST, PP, QS, OT, CH, WG>, __nv_bfloat16>,               \
        &launch_variant<Sm90FwdTraits<D, N, ST, PP, QS, OT, CH, WG>, __half>,                          \
        &launch_variant_scheduled<Sm90FwdTraits<D, N, ST, PP, QS, OT, CH, WG>, __nv_bfloat16>,         \
        Sm90FwdTraits<D, N, ST, PP, QS, OT, CH, WG>::kLocal                                            \
  }
// A three-consumer config that also takes causal masks and windows (the non-causal three-consumer
// config compiles the window out: Sm90FwdTraits::kLocal); "d64-3wg-masked-ch4" is the shipped D=64
// long-keys config.
template <int D, int N, int CH, bool OT = false>
using Masked3Traits = Sm90FwdTraits<D, N, 2, true, 1, OT, CH, 3, true>;
#define VARIANT_M3O(NAME, D, N, CH, OT)                                                            \
  Variant {                                                                                      \
    NAME, D, &launch_variant<Masked3Traits<D, N, CH, OT>, __nv_bfloat16>,                        \
        &launch_variant<Masked3Traits<D, N, CH, OT>, __half>,                                    \
        &launch_variant_scheduled<Masked3Traits<D, N, CH, OT>, __nv_bfloat16>, true              \
  }
#define VARIANT_M3(NAME, D, N, CH) VARIANT_M3O(NAME, D, N, CH, false)
// One consumer warpgroup, 64-row tiles, two CTAs to an SM (Sm90FwdTraits::kCtasPerSm), with masks:
// the short causal forward's tile edges overlapped across CTAs instead of in a ping-pong section.
template <int D, int N, int ST>
using OneConsumerTraits = Sm90FwdTraits<D, N, ST, false, 1, false, 1, 1, true>;
#define VARIANT_1(NAME, D, N, ST)                                                               \
  Variant {                                                                                   \
    NAME, D, &launch_variant<OneConsumerTraits<D, N, ST>, __nv_bfloat16>,                     \
        &launch_variant<OneConsumerTraits<D, N, ST>, __half>,                                 \
        &launch_variant_scheduled<OneConsumerTraits<D, N, ST>, __nv_bfloat16>, true           \
  }
#define VARIANT_O(NAME, D, N, ST, PP, QS, OT) VARIANT_X(NAME, D, N, ST, PP, QS, OT, 1, 2)
#define VARIANT(NAME, D, N, ST, PP, QS) VARIANT_X(NAME, D, N, ST, PP, QS, false, 1, 2)
// The shipped config of head dim D (2 stages, ping-pong, O-TMA from D=128) with CH softmax chains.
#define VARIANT_C(NAME, D, N, CH) VARIANT_X(NAME, D, N, 2, true, 1, D >= 128, CH, 2)

// The shipped config with another key-block step order (Sm90FwdTraits::kStepOrder, consumer.cuh):
// 1, P converted and O rescaled once the step's P V has completed (out of the ping-pong turn);
// 2, as 1 with the wait for the next K block at the top of the step (FlashAttention-3's order;
// D=256 ships it, so its variants are orders 1 and 0).
template <typename Base, int kOrder>
struct StepOrder : Base {
  static constexpr int kStepOrder = kOrder;
};
#define VARIANT_STEP_ORDER(NAME, D, ORDER)                                                             \
  Variant {                                                                                            \
    NAME, D, &launch_variant<StepOrder<Sm90DefaultConfig<D>::Traits, ORDER>, __nv_bfloat16>,            \
        &launch_variant<StepOrder<Sm90DefaultConfig<D>::Traits, ORDER>, __half>,                        \
        &launch_variant_scheduled<StepOrder<Sm90DefaultConfig<D>::Traits, ORDER>, __nv_bfloat16>, true  \
  }

static const Variant kVariants[] = {
    VARIANT_STEP_ORDER("d128-order1", 128, 1),
    VARIANT_STEP_ORDER("d128-order2", 128, 2),
    VARIANT_STEP_ORDER("d256-order1", 256, 1),
    VARIANT_STEP_ORDER("d256-order0", 256, 0),  // order 2 is D=256's shipped order (traits.h)
    VARIANT_STEP_ORDER("d64-order1", 64, 1),
    VARIANT("d64-n128-s2-nopp", 64, 128, 2, false, 1),
    VARIANT("d64-n128-s3-pp", 64, 128, 3, true, 1),
    VARIANT("d64-n192-s2-pp", 64, 192, 2, true, 1),
    // smaller key blocks: less masked work on a causal tile's diagonal block, more per-block cost
    VARIANT("d64-n64-s2-pp", 64, 64, 2, true, 1),
    VARIANT("d64-n96-s2-pp", 64, 96, 2, true, 1),
    VARIANT("d64-n128-s2-pp-q2", 64, 128, 2, true, 2),  // double-buffered Q (perf-notes "v6")
    VARIANT("d64-n128-s4-pp", 64, 128, 4, true, 1),
    VARIANT_O("d64-n128-s2-pp-otma", 64, 128, 2, true, 1, true),  // O through smem + TMA store
    // the softmax's max/sum reductions as 2 / 4 / 8 independent chains per row (perf-notes "v11")
    VARIANT_C("d64-ch2", 64, 128, 2),
    VARIANT_C("d64-ch4", 64, 128, 4),
    VARIANT_C("d64-ch8", 64, 128, 8),
    VARIANT_C("d64-n192-ch4", 64, 192, 4),
    // three consumer warpgroups, a 192-row tile (perf-notes "v12")
    VARIANT_X("d64-3wg", 64, 128, 2, true, 1, false, 1, 3),
    VARIANT_X("d64-3wg-ch4", 64, 128, 2, true, 1, false, 4, 3),
    VARIANT_X("d64-3wg-nopp", 64, 128, 2, false, 1, false, 1, 3),
    VARIANT_X("d64-3wg-n96", 64, 96, 2, true, 1, false, 1, 3),
    VARIANT_1("d64-1wg-2cta", 64, 128, 2),  // 74 KB
    VARIANT_1("d64-1wg-2cta-s3", 64, 128, 3),  // 106 KB
    VARIANT_1("d128-1wg-2cta-n64", 128, 64, 2),  // 82 KB
    VARIANT_M3("d64-3wg-masked", 64, 128, 1),
    VARIANT_M3("d64-3wg-masked-ch4", 64, 128, 4),
    VARIANT_M3("d64-3wg-masked-n96", 64, 96, 1),
    // three consumer warpgroups at D=128: at 160 registers 64- and 80-key blocks compile clean
    // (96 spills 32 bytes and serializes its wgmma: ptxas C7512)
    VARIANT_X("d128-3wg-n64", 128, 64, 2, true, 1, true, 1, 3),
    VARIANT_X("d128-3wg-n80", 128, 80, 2, true, 1, true, 1, 3),
    // ... and with the mask, for causal calls (192 x 64 / 192 x 80 tiles)
    VARIANT_M3O("d128-3wg-masked-n64", 128, 64, 1, true),
    VARIANT_M3O("d128-3wg-masked-n80", 128, 80, 1, true),
    VARIANT_M3O("d128-3wg-masked-n64-ch4", 128, 64, 4, true),
    VARIANT_C("d128-ch4", 128, 128, 4),
    VARIANT_C("d256-ch4", 256, 64, 4),
    VARIANT("d128-n128-s2-nopp", 128, 128, 2, false, 1),
    VARIANT("d128-n176-s2-pp", 128, 176, 2, true, 1),
    // FlashAttention-3's non-causal D=128 tile (128 x 176), with the TMA-store epilogue streamed
    // through one 16 KB O plane (two do not fit next to 176-key K/V stages)
    VARIANT_O("d128-n176-otma", 128, 176, 2, true, 1, true),
    // ... with the softmax reductions in 4 chains: the FP8 D=128 forward, whose GEMMs take about as
    // long as its exponentials, gained 1.5-7% from 192-key blocks only with 4 chains (192 alone
    // -3..+1%; perf-notes "FP8 D=128 on 192-key blocks with four chains"). At 16 bits D=128's GEMMs
    // take twice the SFU's time, so the prediction is smaller: +0-3% over the same tile with one chain.
    // 176 keys take 2 chains (22 pairs a row); 192 keys with 4 spilled 24-36 B at 240 registers.
    VARIANT_X("d128-n176-otma-ch2", 128, 176, 2, true, 1, true, 2, 2),
    VARIANT_O("d128-n160-otma", 128, 160, 2, true, 1, true),
    VARIANT_X("d128-n160-otma-ch4", 128, 160, 2, true, 1, true, 4, 2),
    VARIANT("d128-n96-s3-pp", 128, 96, 3, true, 1),
    VARIANT("d128-n128-s2-pp-q2", 128, 128, 2, true, 2),  // double-buffered Q (perf-notes "v6")
    VARIANT("d128-n128-s3-pp", 128, 128, 3, true, 1),  // 225 KB: a deeper K/V prefetch for short S
    VARIANT_O("d128-n128-s2-pp-otma", 128, 128, 2, true, 1, true),  // O through smem + TMA store
    VARIANT("d256-n80-s2-nopp", 256, 80, 2, false, 1),
    VARIANT("d256-n64-s2-pp", 256, 64, 2, true, 1),
    // O streamed through two 16 KB plane buffers + TMA stores (224 KB; perf-notes "v9")
    VARIANT_O("d256-n64-s2-pp-otma", 256, 64, 2, true, 1, true),
};

// A variant's correctness cases: uneven lengths, GQA, both causal alignments, a head dim below the
// instantiated one (columns clipped), and Sq > Sk bottom-right (query rows that see no key).
// Variants without masks (the three-consumer kernels, which the binding runs only without one) get
// the unmasked cases only.
static bool check_variant(const Variant& v) {
  const int d_small = v.d - 24;
  bool ok = true;
  if (v.masks) {
    ok = check_case<__nv_bfloat16>(v.name, v.bf16, Case{2, 1000, 1000, 4, 2, v.d, CausalMode::kTopLeft}) && ok;
    ok = check_case<__half>(v.name, v.fp16, Case{1, 339, 1024, 4, 1, v.d, CausalMode::kBottomRight}) && ok;
    ok = check_case<__half>(v.name, v.fp16, Case{2, 500, 130, 4, 2, d_small, CausalMode::kBottomRight}) && ok;
  } else {
    ok = check_case<__half>(v.name, v.fp16, Case{1, 339, 1024, 4, 1, v.d, CausalMode::kNone}) && ok;
  }
  ok = check_case<__nv_bfloat16>(v.name, v.bf16, Case{4, 3000, 3000, 16, 4, v.d, CausalMode::kNone}) && ok;
  ok = check_case<__nv_bfloat16>(v.name, v.bf16, Case{3, 77, 300, 6, 2, d_small, CausalMode::kNone}) && ok;
  return ok;
}

// Static vs dynamic schedule on the causal standard grid, timed in alternating samples (clock
// drift hits both alike), with the binding's choice marked.
// TFLOP/s of two launchers on one standard-grid shape (bf16): `reps` calls of time_config each,
// alternating A, B, A, B, ... so that clock drift hits both alike; the median of each.
static void tflops_ab(LaunchFn a, LaunchFn b, int d, int s, bool causal, int reps, double* ta, double* tb) {
  std::vector<double> sa, sb;
  for (int rep = 0; rep < reps; ++rep) {
    double x, y;
    time_config<__nv_bfloat16>(a, d, s, causal, &x);
    time_config<__nv_bfloat16>(b, d, s, causal, &y);
    sa.push_back(x);
    sb.push_back(y);
  }
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  *ta = sa[sa.size() / 2];
  *tb = sb[sb.size() / 2];
}

static void schedule_table() {
  std::printf("\n== schedule A/B: causal, B*S = 16k, H = 2048/D, bf16, TFLOP/s (alternating samples) ==\n");
  std::printf("%4s %6s %9s %9s %7s %s\n", "D", "S", "static", "dynamic", "dyn/st", "binding picks");
  double lg_best = 0, lg_static = 0;
  int n = 0;
  for (int d : {64, 128, 256})
    for (int s : {512, 1024, 2048, 4096, 8192, 16384}) {
      double ts, td;
      tflops_ab(launch_static, launch_dynamic, d, s, true, 5, &ts, &td);
      // The binding's choice (flash_fwd_sm90_plan's, which wants the call's tensors): the
      // policy on the tile shape of the causal config that serves these grids.
      const int block_m = d == 64 ? sm90::sm90_tile_shape<64>(s, true).block_m
                          : d == 128 ? sm90::sm90_tile_shape<128>(s, true).block_m
                                     : sm90::sm90_tile_shape<256>(s, true).block_m;
      const bool dyn = sm90::dynamic_schedule_pays(true, s, 16384LL / s * (2048 / d), block_m, g_dev.sm_count);
      std::printf("%4d %6d %9.1f %9.1f %7.3f %s\n", d, s, ts, td, td / ts, dyn ? "dynamic" : "static");
      std::fflush(stdout);
      lg_best += std::log(dyn ? td : ts);
      lg_static += std::log(ts);
      ++n;
    }
  std::printf("geomean gain of the binding's choice over static-only: %.3fx\n", std::exp((lg_best - lg_static) / n));
}

// What the dynamic schedule costs per key block, apart from balance: both schedules forced on calls
// without a mask, whose tiles are all alike (so the static hand-out is already balanced). The
// dynamic kernels take each tile index through the shared-memory ring (schedule.cuh); their three-
// consumer configs run a 32-register producer (traits.h, RegisterSplit).
static void dynamic_cost_table() {
  std::printf("\n== dynamic vs static schedule without a mask (bf16, both forced), TFLOP/s (alternating samples) ==\n");
  std::printf("%4s %6s %9s %9s %7s\n", "D", "S", "static", "dynamic", "dyn/st");
  double lg = 0;
  int n = 0;
  for (int d : {64, 128, 256})
    for (int s : {1024, 4096, 16384}) {
      double ts, td;
      tflops_ab(launch_static, launch_dynamic, d, s, false, 5, &ts, &td);
      std::printf("%4d %6d %9.1f %9.1f %7.3f\n", d, s, ts, td, td / ts);
      std::fflush(stdout);
      lg += std::log(td / ts);
      ++n;
    }
  std::printf("geomean dynamic/static without a mask: %.3f\n", std::exp(lg / n));
}

// The named variants vs the compiled default configs (bf16) with alternating samples (the plain
// speed table times them one after the other, so differences under ~5% are drift there). Both
// on the schedule the binding would pick (the dynamic one for causal shapes with more tiles than
// SMs, decided per side from its own tile shape): a variant with other tiles balances differently,
// and production causal calls run the dynamic schedule (the v9-v12 A/B runs timed both sides static).
static void variants_table(const std::vector<std::string>& names) {
  std::printf("\n== variant A/B vs default configs (bf16, the binding's schedule choice), TFLOP/s (alternating samples) ==\n");
  std::printf("%-18s %6s %6s %9s %9s %7s\n", "variant", "S", "causal", "variant", "default", "var/def");
  for (const Variant& v : kVariants) {
    if (std::none_of(names.begin(), names.end(), [&](const std::string& n) { return n == v.name; })) continue;
    // First its correctness cases (as in "check"): a broken variant is not timed.
    const bool ok = check_variant(v);
    if (!ok) {
      std::printf("%-18s FAILS its correctness cases: not timed\n", v.name);
      continue;
    }
    double lg = 0;
    int n = 0;
    for (int s : {512, 1024, 2048, 4096, 16384})
      for (bool causal : {false, true}) {
        if (causal && !v.masks) continue;
        double tv, td;
        tflops_ab(v.bf16_scheduled, launch_default, v.d, s, causal, 3, &tv, &td);
        std::printf("%-18s %6d %6d %9.1f %9.1f %7.3f\n", v.name, s, int(causal), tv, td, tv / td);
        std::fflush(stdout);
        lg += std::log(tv / td);
        ++n;
      }
    std::printf("%-18s geomean variant/default %.3f\n", v.name, std::exp(lg / n));
  }
}

// The L2 group budget (tile_scheduler.h, l2_group_budget_bytes: 8 MB static, 16 MB dynamic) vs
// 24 MB (the budget before v7) and 2 MB, alternating samples, on the binding's schedule choice.
// ncu at S=512 (docs/perf-notes.md, "Before v7") showed the kernel moving ~1.4x the Q+K+V+O bytes
// from DRAM with 24 MB: a head's query blocks ran up to three waves apart and its K/V was re-read.
static int g_budget_mb = 0;  // launch_budget's budget (one lab thread)
cudaError_t launch_budget(const FwdParams& p, const DeviceLimits& dev, cudaStream_t s) {
  sm90_l2_budget_mb_override() = g_budget_mb;
  const cudaError_t e = launch_default(p, dev, s);
  sm90_l2_budget_mb_override() = 0;
  return e;
}

// Without budgets: 24 and 2 MB against the default over D x S x causal (the v7 table). With budgets
// (`l2 16 32`): each against the default on the causal cells only, where the budget also sets how
// many tiles the last L2 group holds, i.e. how long the dynamic schedule's tail is
// (lab/sm90_schedule_model.py --budget-mb).
static void l2_table(const std::vector<int>& budgets_in) {
  const bool causal_only = !budgets_in.empty();
  const std::vector<int> budgets = causal_only ? budgets_in : std::vector<int>{24, 2};
  std::printf("\n== L2 group budget A/B: default (%lld MB static, %lld MB dynamic schedule) vs",
              kL2GroupBudgetBytes >> 20, kL2GroupBudgetDynamicBytes >> 20);
  for (int mb : budgets) std::printf(" %d MB", mb);
  std::printf(" (bf16, binding's schedule), TFLOP/s (alternating samples) ==\n%4s %6s %6s %9s", "D", "S", "causal",
              "default");
  for (int mb : budgets) std::printf(" %6d MB %7s", mb, "ratio");
  std::printf("\n");
  std::vector<double> lg(budgets.size(), 0.0);
  int n = 0;
  const std::vector<int> seqs = causal_only ? std::vector<int>{1024, 2048, 4096, 8192}
                                            : std::vector<int>{512, 1024, 2048, 4096, 16384};
  for (int d : {64, 128, 256})
    for (int s : seqs)
      for (bool causal : {false, true}) {
        if (causal_only && !causal) continue;
        std::vector<double> tdef, tb;
        for (int mb : budgets) {
          double ta, t;
          g_budget_mb = mb;
          tflops_ab(launch_default, launch_budget, d, s, causal, 3, &ta, &t);
          tdef.push_back(ta);
          tb.push_back(t);
        }
        double mean_def = 0;
        for (double t : tdef) mean_def += t / tdef.size();
        std::printf("%4d %6d %6d %9.1f", d, s, int(causal), mean_def);
        for (size_t i = 0; i < budgets.size(); ++i) {
          std::printf(" %9.1f %7.3f", tb[i], tb[i] / tdef[i]);
          lg[i] += std::log(tb[i] / tdef[i]);
        }
        std::printf("\n");
        std::fflush(stdout);
        ++n;
      }
  std::printf("geomean vs default:");
  for (size_t i = 0; i < budgets.size(); ++i) std::printf(" %d MB %.3fx", budgets[i], std::exp(lg[i] / n));
  std::printf("\n");
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "full";
  const bool do_check = mode == "check" || mode == "full";
  const bool do_speed = mode == "speed" || mode == "full";
  const bool do_schedule = mode == "schedule" || mode == "full";

  int dev_id = 0;
  CK(cudaSetDevice(dev_id));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev_id));
  g_dev.sm_count = prop.multiProcessorCount;
  g_dev.max_smem_per_block = static_cast<int>(prop.sharedMemPerBlockOptin);
  g_dev.cc_major = prop.major;
  g_dev.cc_minor = prop.minor;
  std::printf("device: %s, cc %d.%d, %d SMs, %zu B smem opt-in, CUDA runtime %d\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.sharedMemPerBlockOptin, CUDART_VERSION);
  if (prop.major != 9) {
    std::printf("not a Hopper GPU: nothing to test\n");
    return 1;
  }
  {
    int* host = nullptr;
    int* dev = nullptr;
    CK(cudaHostAlloc(&host, 8 * sizeof(int), cudaHostAllocMapped));
    std::memset(host, 0, 8 * sizeof(int));
    CK(cudaHostGetDevicePointer(&dev, host, 0));
    g_hang_host = host;
    sm90_hang_report_slot() = dev;
  }
  {
    FwdParams probe;
    Buffers buf;
    setup<__nv_bfloat16>(Case{1, 128, 128, 1, 1, 128, CausalMode::kNone}, probe, buf);
    std::printf("flash_fwd_sm90_supported(probe D=128 bf16) = %d (0 means this build has no sm_90a kernel)\n",
                flash_fwd_sm90_supported(probe, g_dev));
    free_buffers(buf);
  }

  if (mode == "l2") {
    std::vector<int> budgets;
    for (int i = 2; i < argc; ++i) budgets.push_back(std::atoi(argv[i]));
    l2_table(budgets);
    return 0;
  }
  if (mode == "dynamic-cost") {
    dynamic_cost_table();
    return 0;
  }
  if (mode == "variants") {  // each named variant's correctness cases, then its timing
    std::vector<std::string> names(argv + 2, argv + argc);
    if (names.empty()) names = {"d128-n176-otma", "d128-n176-s2-pp"};
    variants_table(names);
    return g_failures ? 1 : 0;
  }

  // ---------------- correctness ----------------
  if (do_check) {
  std::printf("\n== correctness: compiled configs (entry point flash_fwd_sm90) ==\n");
  const CausalMode modes[] = {CausalMode::kNone, CausalMode::kTopLeft, CausalMode::kBottomRight};
  struct Shape {
    int b, sq, sk, hq, hk;
  };
  const Shape shapes[] = {{2, 1, 1, 4, 2},      {2, 17, 17, 4, 2},   {1, 128, 128, 2, 2}, {2, 65, 129, 4, 2},
                          {2, 129, 65, 4, 4},   {1, 339, 1024, 4, 1}, {1, 1024, 339, 4, 2}, {1, 113, 4097, 2, 1},
                          {2, 1000, 1000, 3, 3}, {1, 2048, 2048, 8, 2}};
  for (int d : {128, 64, 256}) {
    for (const Shape& s : shapes)
      for (CausalMode m : modes) {
        const Case c{s.b, s.sq, s.sk, s.hq, s.hk, d, m};
        check_case<__nv_bfloat16>("default", launch_default, c);
        check_case<__half>("default", launch_default, c);
      }
    // layouts, scales, many tiles (several per CTA: exercises the persistent loop and the
    // pipeline phases across tiles)
    check_case<__nv_bfloat16>("default", launch_default, Case{2, 777, 777, 3, 3, d, CausalMode::kTopLeft, Layout::kPackedQKV});
    check_case<__half>("default", launch_default, Case{2, 300, 520, 4, 2, d, CausalMode::kBottomRight, Layout::kBHSD});
    check_case<__nv_bfloat16>("default", launch_default, Case{1, 200, 300, 2, 1, d, CausalMode::kNone, Layout::kBSHD, 0.f});
    check_case<__half>("default", launch_default, Case{1, 200, 300, 2, 1, d, CausalMode::kTopLeft, Layout::kBSHD, -0.3f});
    check_case<__nv_bfloat16>("default", launch_default, Case{4, 4096, 4096, 16, 8, d, CausalMode::kNone});
    check_case<__nv_bfloat16>("default", launch_default, Case{4, 3000, 3000, 16, 4, d, CausalMode::kTopLeft});
    // Both schedules forced, several tiles per CTA: uneven causal tiles, tiles with no visible key
    // (bottom-right, Sq > Sk), a ragged last tile, GQA.
    for (CausalMode m : modes) {
      check_case<__nv_bfloat16>("dynamic", launch_dynamic, Case{3, 2100, 1500, 16, 4, d, m});
      check_case<__half>("dynamic", launch_dynamic, Case{2, 1000, 3000, 40, 8, d, m});
      check_case<__half>("dynamic", launch_dynamic, Case{2, 700, 4500, 16, 4, d, m});  // long-keys config at D=64
      check_case<__nv_bfloat16>("static", launch_static, Case{3, 2100, 1500, 16, 4, d, m});
    }
    check_case<__nv_bfloat16>("dynamic", launch_dynamic, Case{1, 1, 1, 1, 1, d, CausalMode::kTopLeft});
  }
  for (int d : {32, 96, 160, 200}) {  // head dims served by the next instantiation up
    check_case<__nv_bfloat16>("default", launch_default, Case{2, 300, 333, 4, 2, d, CausalMode::kNone});
    check_case<__half>("default", launch_default, Case{2, 129, 1000, 4, 1, d, CausalMode::kBottomRight});
    check_case<__nv_bfloat16>("default", launch_default, Case{1, 300, 5000, 4, 2, d, CausalMode::kBottomRight});
  }
  std::printf("\n== correctness: variants ==\n");
  for (const Variant& v : kVariants) check_variant(v);
  std::printf("\ncorrectness: %d/%d cases pass\n", g_cases - g_failures, g_cases);
  }
  if (do_schedule) schedule_table();
  if (!do_speed) return g_failures ? 1 : 0;

  // ---------------- speed ----------------
  std::printf("\n== speed: compiled configs, B*S = 16k, H = 2048/D, TFLOP/s (ms) ==\n");
  std::printf("%-5s %4s %6s %6s %16s\n", "dtype", "D", "S", "causal", "TFLOP/s (ms)");
  std::vector<double> all;
  for (int bf = 1; bf >= 0; --bf)
    for (int d : {64, 128, 256})
      for (int s : {512, 1024, 2048, 4096, 8192, 16384})
        for (bool causal : {false, true}) {
          double tf;
          const double ms = bf ? time_config<__nv_bfloat16>(launch_default, d, s, causal, &tf)
                               : time_config<__half>(launch_default, d, s, causal, &tf);
          all.push_back(tf);
          std::printf("%-5s %4d %6d %6d %9.1f (%.3f)\n", bf ? "bf16" : "fp16", d, s, int(causal), tf, ms);
          std::fflush(stdout);
        }
  double lg = 0;
  for (double x : all) lg += std::log(x);
  std::printf("geomean over the grid: %.1f TFLOP/s\n", std::exp(lg / all.size()));

  std::printf("\n== speed: variants vs default (bf16), TFLOP/s ==\n");
  std::printf("%-18s %6s %6s %9s %9s\n", "variant", "S", "causal", "variant", "default");
  for (const Variant& v : kVariants)
    for (int s : {1024, 4096, 16384})
      for (bool causal : {false, true}) {
        if (causal && !v.masks) continue;
        double tv, td;
        time_config<__nv_bfloat16>(v.bf16, v.d, s, causal, &tv);
        time_config<__nv_bfloat16>(launch_default, v.d, s, causal, &td);
        std::printf("%-18s %6d %6d %9.1f %9.1f\n", v.name, s, int(causal), tv, td);
        std::fflush(stdout);
      }
  if (do_check) std::printf("\ncorrectness: %d/%d cases pass\n", g_cases - g_failures, g_cases);
  return g_failures ? 1 : 0;
}
