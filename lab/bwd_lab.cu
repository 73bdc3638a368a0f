// Backward tile-config lab: times candidate BwdKernelTraits side by side on the local GPU, without
// torch (build and run: lab/bwd_lab.sh). The whole backward as the op runs it: dq_accum zeroing,
// preprocess, main kernel, dQ convert. Inputs are random; lse is set to a plausible log-sum-exp
// (log Sk + 1/2 for unit-variance scores) so the exponentials stay in range: timing, not numerics
// (the suite checks numerics of whatever config lands in traits.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "flash_bwd/launch.cuh"
#include "lab_util.cuh"

using namespace flashattn;

__global__ void fill_value(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = v;
}

// The lab's variant of a config with the other dQ reduction width.
template <typename Base>
struct DqFlip : Base {
  static constexpr bool kDqVec4 = !Base::kDqVec4;
};

// ... and with the other placement of a one-stage config's Q/dO load.
template <typename Base>
struct LoadFlip : Base {
  static constexpr bool kLoadBeforeDq = !Base::kLoadBeforeDq;
};

template <typename Traits>
void time_config(const char* name, int S, bool causal) {
  const int D = LAB_D, H = 2048 / D, B = 16384 / S;
  const size_t n = (size_t)B * S * H * D;
  __nv_bfloat16 *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float *lse, *dpsum, *dq_accum;
  for (auto** t : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) CHECK(cudaMalloc(t, n * 2));
  CHECK(cudaMalloc(&lse, (size_t)B * H * S * 4));
  CHECK(cudaMalloc(&dpsum, (size_t)B * H * S * 4));
  CHECK(cudaMalloc(&dq_accum, n * 4));
  unsigned seed = 1;
  for (auto* t : {q, k, v, o, dout}) fill_random<<<1024, 256>>>(t, n, seed++, 1.7f);
  fill_value<<<1024, 256>>>(lse, (size_t)B * H * S, std::log((float)S) + 0.5f);
  BwdParams p;
  p.q = q; p.k = k; p.v = v; p.o = o; p.lse = lse; p.dout = dout; p.dq = dq; p.dk = dk; p.dv = dv;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = (int64_t)S * H * D;
  p.do_batch_stride = p.dq_batch_stride = p.dk_batch_stride = p.dv_batch_stride = (int64_t)S * H * D;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = H * D;
  p.do_row_stride = p.dq_row_stride = p.dk_row_stride = p.dv_row_stride = H * D;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = D;
  p.do_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = D;
  p.batch = B; p.heads_q = p.heads_kv = H; p.seqlen_q = p.seqlen_k = S; p.head_dim = D;
  p.set_scale(1.0f / std::sqrt((float)D));
  p.set_causal(causal ? CausalMode::kTopLeft : CausalMode::kNone);
  p.dpsum = dpsum; p.dq_accum = dq_accum;
  auto call = [&] {
    CHECK(cudaMemsetAsync(dq_accum, 0, n * 4, 0));
    CHECK(run_bwd<Traits, __nv_bfloat16>(p, 0));
  };
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) call();
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 15; ++i) {
    CHECK(cudaEventRecord(a));
    call();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t; CHECK(cudaEventElapsedTime(&t, a, b)); ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double flops = 2.5 * 4.0 * B * H * (double)S * S * D / (causal ? 2 : 1);
  const float med = ms[ms.size() / 2];
  std::printf("bwdlab D=%d %-34s S=%5d causal=%d  %8.3f ms  %6.1f TFLOP/s\n", D, name, S, causal, med,
              flops / med / 1e9);
  std::fflush(stdout);
  for (void* t : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)dout, (void*)dq, (void*)dk, (void*)dv, (void*)lse,
                  (void*)dpsum, (void*)dq_accum})
    cudaFree(t);
}

// LAB(BN, BM, warps, A-key warps, B-key warps, C-query warps, stages): one config over the grid.
#define LAB_T(NAME, ...)                                     \
  for (int S : {1024, 4096, 16384})                          \
    for (int c = 0; c < 2; ++c) time_config<__VA_ARGS__>(NAME, S, c)
#define LAB(BN, BM, NW, AN, BNW, CM, ST)                                                             \
  LAB_T(#BN "x" #BM "x" #NW "w A" #AN " B" #BNW " C" #CM " st" #ST,                                 \
        BwdKernelTraits<LAB_D, BN, BM, NW, AN, BNW, CM, ST>)
#define LAB_DQFLIP(BN, BM, NW, AN, BNW, CM, ST)                                                      \
  LAB_T(#BN "x" #BM "x" #NW "w A" #AN " B" #BNW " C" #CM " st" #ST " dq-width-flipped",             \
        DqFlip<BwdKernelTraits<LAB_D, BN, BM, NW, AN, BNW, CM, ST>>)
#define LAB_LOADFLIP(BN, BM, NW, AN, BNW, CM, ST)                                                    \
  LAB_T(#BN "x" #BM "x" #NW "w A" #AN " B" #BNW " C" #CM " st" #ST " load-flipped",                 \
        LoadFlip<BwdKernelTraits<LAB_D, BN, BM, NW, AN, BNW, CM, ST>>)

int main() {
#include LAB_CONFIG_FILE
  return 0;
}
