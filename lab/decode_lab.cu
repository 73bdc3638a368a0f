// The split-KV decode kernel's tile configs side by side, without torch: for the decode grid's
// shapes (bf16, D=128, GQA 32:8, Sq=1, full caches), every variant below against the compiled
// default (DecodeTileConfig<128>, the portable config), each with its own split plan (its own block N and CTAs per
// SM through the shipped heuristic), timed in alternating samples so clock drift hits both
// alike, and checked against the default's output. Bandwidth = K/V bytes read / time.
//
//   bash lab/decode_lab.sh          (on a GPU machine; ~1 min)
//
// What it is for: at large B the default reads K/V at ~2.85 TB/s where SDPA reaches ~3.07 TB/s
// (docs/perf-notes.md, decode): more stages, more warps per CTA or longer key steps are the
// candidates, and only a measurement decides.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "flash_decode/decode_combine.cuh"
#include "flash_decode/decode_launch.cuh"
#include "flash_decode/decode_traits.h"

using namespace flashattn;

#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

using T = __nv_bfloat16;

__global__ void fill_random(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 65535.f - 0.5f) * 4.f);
  }
}

struct Shape {
  int b, sk;
};

struct Buffers {
  T *q, *k, *v, *o;
  float *lse, *o_accum, *lse_accum;
};

static DeviceLimits g_dev;

// One config: plan (its own block N and occupancy), split kernel, combine kernel.
template <typename Traits>
struct Config {
  static DecodeParams plan(DecodeParams p) {
    int ctas = 1;
    CK((decode_ctas_per_sm<Traits, T>(&ctas)));
    p.num_splits = decode_plan_splits(0, p.num_m_blocks, p.batch, p.heads_kv, p.seqlen_k_max, Traits::kBlockN,
                                      g_dev.sm_count, ctas);
    return p;
  }
  static void run(const DecodeParams& p) {
    CK((run_decode_split<Traits, T>(p, 0)));
    if (p.num_splits > 1) CK((launch_split_combine<T>(split_combine_params(p, p.o_accum, p.lse_accum, p.num_splits), 0, false)));
  }
};

struct Variant {
  const char* name;
  DecodeParams (*plan)(DecodeParams);
  void (*run)(const DecodeParams&);
  int block_n, smem;
};

#define VARIANT(NAME, W, ST)                                                                                  \
  Variant {                                                                                                 \
    NAME, &Config<DecodeKernelTraits<128, W, ST>>::plan, &Config<DecodeKernelTraits<128, W, ST>>::run,        \
        DecodeKernelTraits<128, W, ST>::kBlockN, DecodeKernelTraits<128, W, ST>::kSmemBytes                  \
  }

using Default = DecodeTileConfig<128>::Traits;
static const Variant kDefault{"default", &Config<Default>::plan, &Config<Default>::run, Default::kBlockN,
                              Default::kSmemBytes};
static const Variant kVariants[] = {
    VARIANT("w4-s3", 4, 3),  // one more stage in flight
    VARIANT("w2-s4", 2, 4),  // shorter steps, deeper ring
    VARIANT("w8-s2", 8, 2),  // 128-key steps (over sm89's 99 KB: an sm90-only config)
    VARIANT("w8-s3", 8, 3),
};

// Median of `samples` calls-per-sample timings, alternating the two configs.
static void time_pair(const Variant& a, const DecodeParams& pa, const Variant& b, const DecodeParams& pb, double* ta,
                      double* tb) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) {
    a.run(pa);
    b.run(pb);
  }
  CK(cudaDeviceSynchronize());
  std::vector<double> sa, sb;
  const int reps = 20;
  for (int s = 0; s < 11; ++s) {
    for (int which = 0; which < 2; ++which) {
      const bool first = (which == 0) == (s % 2 == 0);  // alternate who goes first
      const Variant& v = first ? a : b;
      const DecodeParams& p = first ? pa : pb;
      CK(cudaEventRecord(e0));
      for (int r = 0; r < reps; ++r) v.run(p);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      (first ? sa : sb).push_back(ms / reps);
    }
  }
  CK(cudaGetLastError());
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  *ta = sa[sa.size() / 2];
  *tb = sb[sb.size() / 2];
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

static double rel_diff(const T* x, const T* y, int64_t n) {
  std::vector<T> hx(n), hy(n);
  CK(cudaMemcpy(hx.data(), x, n * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hy.data(), y, n * sizeof(T), cudaMemcpyDeviceToHost));
  double d2 = 0, r2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = __bfloat162float(hx[i]), b = __bfloat162float(hy[i]);
    if (!std::isfinite(a)) return INFINITY;
    d2 += (a - b) * (a - b);
    r2 += b * b;
  }
  return std::sqrt(d2 / std::max(r2, 1e-30));
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_dev.sm_count = prop.multiProcessorCount;
  g_dev.max_smem_per_block = static_cast<int>(prop.sharedMemPerBlockOptin);
  g_dev.cc_major = prop.major;
  g_dev.cc_minor = prop.minor;
  std::printf("device: %s, %d SMs, %zu B smem opt-in\n", prop.name, prop.multiProcessorCount,
              prop.sharedMemPerBlockOptin);

  const int hq = 32, hk = 8, d = 128;
  const Shape shapes[] = {{1, 32768}, {1, 131072}, {8, 32768}, {8, 131072}, {64, 32768}, {64, 131072}};
  int failures = 0;
  std::printf("%-8s %3s %7s %6s %6s %9s %9s %9s %7s %9s\n", "variant", "B", "Sk", "splits", "dflt", "GB/s", "dflt GB/s",
              "speedup", "smem KB", "rel diff");
  for (const Shape& sh : shapes) {
    const int64_t nq = int64_t(sh.b) * hq * d, nkv = int64_t(sh.b) * sh.sk * hk * d;
    Buffers buf{};
    CK(cudaMalloc(&buf.q, nq * sizeof(T)));
    CK(cudaMalloc(&buf.k, nkv * sizeof(T)));
    CK(cudaMalloc(&buf.v, nkv * sizeof(T)));
    T* o_ref;
    CK(cudaMalloc(&buf.o, nq * sizeof(T)));
    CK(cudaMalloc(&o_ref, nq * sizeof(T)));
    CK(cudaMalloc(&buf.lse, int64_t(sh.b) * hq * sizeof(float)));
    CK(cudaMalloc(&buf.o_accum, int64_t(kDecodeMaxSplits) * nq * sizeof(float)));
    CK(cudaMalloc(&buf.lse_accum, int64_t(kDecodeMaxSplits) * sh.b * hq * sizeof(float)));
    fill_random<<<1024, 256>>>(buf.q, nq, 1);
    fill_random<<<4096, 256>>>(buf.k, nkv, 2);
    fill_random<<<4096, 256>>>(buf.v, nkv, 3);

    DecodeParams p;  // q [B,1,Hq,D], caches [B,Sk,Hk,D], o [B,1,Hq,D], contiguous
    p.q = buf.q;
    p.k_cache = buf.k;
    p.v_cache = buf.v;
    p.lse = buf.lse;
    p.o_accum = buf.o_accum;
    p.lse_accum = buf.lse_accum;
    p.cache_seqlen = sh.sk;
    p.q_batch_stride = int64_t(hq) * d, p.q_row_stride = int64_t(hq) * d, p.q_head_stride = d;
    p.k_batch_stride = int64_t(sh.sk) * hk * d, p.k_row_stride = int64_t(hk) * d, p.k_head_stride = d;
    p.v_batch_stride = p.k_batch_stride, p.v_row_stride = p.k_row_stride, p.v_head_stride = d;
    p.o_batch_stride = int64_t(hq) * d, p.o_row_stride = int64_t(hq) * d, p.o_head_stride = d;
    p.batch = sh.b, p.heads_q = hq, p.heads_kv = hk, p.seqlen_q = 1, p.seqlen_k_max = sh.sk, p.head_dim = d;
    p.set_scale(1.f / std::sqrt(float(d)));
    p.dtype = DType::kBFloat16;
    p.num_m_blocks = (hq / hk + kDecodeBlockM - 1) / kDecodeBlockM;

    DecodeParams pd = kDefault.plan(p);
    pd.o = o_ref;
    kDefault.run(pd);
    CK(cudaDeviceSynchronize());
    const double bytes = 2.0 * nkv * sizeof(T);
    for (const Variant& v : kVariants) {
      if (v.smem > g_dev.max_smem_per_block) {
        std::printf("%-8s skipped: %d B shared memory over this GPU's %d\n", v.name, v.smem, g_dev.max_smem_per_block);
        continue;
      }
      DecodeParams pv = v.plan(p);
      pv.o = buf.o;
      CK(cudaMemset(buf.o, 0xff, nq * sizeof(T)));  // NaN: an unwritten output shows up
      v.run(pv);
      CK(cudaDeviceSynchronize());
      const double diff = rel_diff(buf.o, o_ref, nq);
      const bool ok = diff <= 1e-2;
      if (!ok) ++failures;
      double tv, td;
      time_pair(v, pv, kDefault, pd, &tv, &td);
      std::printf("%-8s %3d %7d %6d %6d %9.0f %9.0f %9.3f %7.1f %9.1e%s\n", v.name, sh.b, sh.sk, pv.num_splits,
                  pd.num_splits, bytes / (tv * 1e-3) / 1e9, bytes / (td * 1e-3) / 1e9, td / tv, v.smem / 1024.0, diff,
                  ok ? "" : "  FAIL");
      std::fflush(stdout);
    }
    cudaFree(buf.q), cudaFree(buf.k), cudaFree(buf.v), cudaFree(buf.o), cudaFree(o_ref), cudaFree(buf.lse);
    cudaFree(buf.o_accum), cudaFree(buf.lse_accum);
  }
  std::printf("speedup = default time / variant time (> 1: the variant is faster). %s\n", failures ? "SOME VARIANTS DISAGREE WITH THE DEFAULT" : "all variants agree with the default");
  return failures ? 1 : 0;
}
