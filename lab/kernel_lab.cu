// Tile-config lab: times candidate FwdKernelTraits for one head dim side by side on the local
// GPU, without torch (build: lab/kernel_lab.sh). Used to pick the configs in traits.h;
// the numbers it prints go to docs/perf-notes.md.
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

#include "flash_fwd/launch.cuh"
#include "lab_util.cuh"

using namespace flashattn;

template <typename Traits>
void time_config(const char* name, int S, bool causal) {
  const int D = LAB_D, H = 2048 / D, B = 16384 / S;
  const size_t n = (size_t)B * S * H * D;
  __nv_bfloat16 *q, *k, *v, *o;
  float* lse;
  CHECK(cudaMalloc(&q, n * 2)); CHECK(cudaMalloc(&k, n * 2)); CHECK(cudaMalloc(&v, n * 2)); CHECK(cudaMalloc(&o, n * 2));
  CHECK(cudaMalloc(&lse, (size_t)B * H * S * 4));
  fill_random<<<1024, 256>>>(q, n, 1, 1.0f); fill_random<<<1024, 256>>>(k, n, 2, 1.0f); fill_random<<<1024, 256>>>(v, n, 3, 1.0f);
  FwdParams p;
  p.q = q; p.k = k; p.v = v; p.o = o; p.lse = lse;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = (int64_t)S * H * D;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = H * D;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = D;
  p.batch = B; p.heads_q = p.heads_kv = H; p.seqlen_q = p.seqlen_k = S; p.head_dim = D;
  p.set_scale(0.125f);
  p.set_causal(causal ? CausalMode::kTopLeft : CausalMode::kNone);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) CHECK(run_fwd<Traits, __nv_bfloat16, false>(p, 0));
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaEventRecord(a));
    CHECK(run_fwd<Traits, __nv_bfloat16, false>(p, 0));
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t; CHECK(cudaEventElapsedTime(&t, a, b)); ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double flops = 4.0 * B * H * (double)S * S * D / (causal ? 2 : 1);
  std::printf("lab D=%d %-22s S=%5d causal=%d  %8.3f ms  %6.1f TFLOP/s\n", D, name, S, causal, ms[ms.size() / 2],
              flops / ms[ms.size() / 2] / 1e9);
  cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(lse);
}

#define LAB(BM, BN, NW) \
  for (int S : {1024, 4096, 16384}) for (int c = 0; c < 2; ++c) \
    time_config<FwdKernelTraits<LAB_D, BM, BN, NW>>(#BM "x" #BN "x" #NW "w", S, c)

int main() {
#include LAB_CONFIG_FILE
  return 0;
}
