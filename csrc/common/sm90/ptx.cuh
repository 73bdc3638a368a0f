// PTX wrappers for both Hopper paths: mbarriers, TMA loads, wgmma fences and shared-memory
// matrix descriptors, register reallocation, named barriers.
//
// Everything that emits sm_90a-only instructions is inside FLASHATTN_SM90A_ENABLED, defined only in
// the device pass for compute_90a; the descriptor math is plain host/device code so that
// lab/sm90_desc_check.cpp can compare it with CuTe's make_gmma_desc on the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASHATTN_SM90A_ENABLED 1
#endif

#if defined(__CUDACC__)
#define FLASHATTN_HD __host__ __device__ __forceinline__
#else
#define FLASHATTN_HD inline
#endif

namespace flashattn {
namespace sm90 {

// ---------------------------------------------------------------------------------------------
// Shared-memory matrix descriptors (PTX ISA "Matrix Descriptor Format" for wgmma):
//   bits  0-13  start address >> 4
//   bits 16-29  leading dimension byte offset >> 4
//   bits 32-45  stride dimension byte offset >> 4
//   bits 49-51  base offset (0: every swizzle atom here is 1024-byte aligned)
//   bits 62-63  swizzle mode: 1 = 128-byte swizzle, 2 = 64-byte swizzle
// For the 128-byte swizzle (CuTe's canonical forms, in 16-bit elements):
//   K-major  ((8,m),(64)) : rows of 64 K-elements at 128 B; SBO = stride between 8-row groups
//            (1024 B here); LBO unused (1 by convention). One wgmma k-step (16 elements = 32 B)
//            inside the 64-wide chunk advances the start address by 32 B.
//   MN-major ((64,n),(8,k)) : 64 contiguous MN-elements per 128-B row, 8 K-rows at 128 B;
//            LBO = stride between 64-wide MN chunks, SBO = stride between 8-row K groups (1024 B).
// ---------------------------------------------------------------------------------------------
FLASHATTN_HD uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes, uint32_t swizzle_mode) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4);
  desc |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16;
  desc |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFFu) << 32;
  desc |= static_cast<uint64_t>(swizzle_mode) << 62;
  return desc;
}
FLASHATTN_HD uint64_t make_smem_desc_sw128(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return make_smem_desc(smem_addr, lbo_bytes, sbo_bytes, 1u);
}
// The 64-byte swizzle, K-major (the FP8 forward's 64-key V^T planes): rows of 64 bytes, 8-row
// atoms of 512 B (SBO), LBO unused (1 by convention); a k-step (32 one-byte elements) inside the
// row advances the start address by 32 B, as inside a 128-byte row.
FLASHATTN_HD uint64_t make_smem_desc_sw64(uint32_t smem_addr) { return make_smem_desc(smem_addr, 16u, 512u, 2u); }

// Q or K tile (A or B operand of S = Q K^T, K-major): `plane0` is the address of the tile's first
// chunk plane, `plane_bytes` the size of one plane (rows * 128 B), `row0` the first row the
// wgmma reads (a multiple of 8), `kk` the 16-column k-step.
FLASHATTN_HD uint64_t desc_kmajor(uint32_t plane0, uint32_t plane_bytes, int row0, int kk) {
  const uint32_t addr = plane0 + static_cast<uint32_t>(kk / 4) * plane_bytes + static_cast<uint32_t>(row0) * 128u +
                        static_cast<uint32_t>(kk % 4) * 32u;
  return make_smem_desc_sw128(addr, 16u, 1024u);
}

// V tile as the B operand of O += P V (MN-major: N = head dim is the contiguous axis, K = keys):
// k-step kk reads keys [16 kk, 16 kk + 16) of every chunk plane; LBO steps between the planes
// (unused with a single plane, where CuTe writes 0).
FLASHATTN_HD uint64_t desc_mnmajor(uint32_t plane0, uint32_t plane_bytes, int planes, int kk) {
  const uint32_t addr = plane0 + static_cast<uint32_t>(kk) * 16u * 128u;
  return make_smem_desc_sw128(addr, planes > 1 ? plane_bytes : 0u, 1024u);
}

// A descriptor for the same layout `bytes` further on (bytes a multiple of 16). Shared-window
// addresses stay under 2^18, so the start-address field never carries into the next field.
FLASHATTN_HD uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + static_cast<uint64_t>(bytes >> 4); }

// Byte offset, inside a tile stored as 128-byte-swizzled chunk planes of `rows` rows, of element
// (row, col): what TMA's CU_TENSOR_MAP_SWIZZLE_128B writes for a box of [rows, 64] per plane.
FLASHATTN_HD uint32_t swizzled_offset(int rows, int row, int col) {
  const uint32_t plane = static_cast<uint32_t>(col / 64);
  const uint32_t in_row = static_cast<uint32_t>(col % 64) * 2u;  // byte within the 128-byte row
  const uint32_t chunk16 = (in_row / 16u) ^ static_cast<uint32_t>(row % 8);
  return plane * static_cast<uint32_t>(rows) * 128u + static_cast<uint32_t>(row) * 128u + chunk16 * 16u + in_row % 16u;
}

#if defined(__CUDACC__)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The body every sm_90a kernel (forward and backward) gets in the device passes without sm_90a
// (sm_80, sm_89, plain sm_90): never launched, it traps. The marker is its only static shared
// memory (the volatile store keeps it), which no real sm_90a kernel declares: sm90_kernel_is_real
// tells the two apart from the host.
__device__ __forceinline__ void sm90_stub_body() {
  __shared__ int sm90_stub_marker[4];
  volatile int* marker = sm90_stub_marker;
  marker[threadIdx.x % 4] = 1;
  __trap();
}

// True when this build holds the real sm_90a code of `kernel` for the current device.
template <typename Kernel>
bool sm90_kernel_is_real(Kernel* kernel) {
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.sharedSizeBytes == 0 && attr.binaryVersion >= 90;
}

// ---------------------------------------------------------------------------------------------
// mbarriers, bulk copies, the async-proxy fence, named barriers: sm_90 instructions, not sm_90a
// ones, defined in every device pass so that a kernel compiled for several targets may carry a
// branch that only its sm_90 instances take (lab/decode_lab.cu's read probes use them so, built
// for sm_90a alone today); below sm_90 they trap.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHATTN_SM90_ASM(...) asm volatile(__VA_ARGS__)
#else
#define FLASHATTN_SM90_ASM(...) __trap()
#endif

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  FLASHATTN_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialized barriers visible to the other threads and to the TMA unit.
__device__ __forceinline__ void fence_barrier_init() { FLASHATTN_SM90_ASM("fence.mbarrier_init.release.cluster;" ::: "memory"); }

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  FLASHATTN_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// One arrival (release: this thread's earlier shared-memory accesses are done before it counts).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  FLASHATTN_SM90_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  FLASHATTN_SM90_ASM(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Waits until the phase of parity `parity` of barrier `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory in one
// bulk copy, completing on `bar` (transaction bytes).
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  FLASHATTN_SM90_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                     "l"(src), "r"(bytes), "r"(bar)
                     : "memory");
}

// Generic-proxy shared-memory writes made visible to the async proxy (TMA) that reads them next.
__device__ __forceinline__ void fence_proxy_async() { FLASHATTN_SM90_ASM("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  FLASHATTN_SM90_ASM("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

#undef FLASHATTN_SM90_ASM

#if defined(FLASHATTN_SM90A_ENABLED)

// A 32-bit shared-memory store / load by shared-window address. Used to publish a value through
// an mbarrier: the arrive (release.cta) orders the store before it, the waiter's try_wait
// (acquire.cta) orders the load after it.
__device__ __forceinline__ void st_shared_s32(uint32_t addr, int v) {
  asm volatile("st.shared.s32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_shared_s32(uint32_t addr) {
  int v;
  asm volatile("ld.shared.s32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The same wait, bounded: after ~10 s it writes {1, tag, block, thread, parity} to `report`
// (host-mapped memory, readable after the context dies) and traps. For the lab build
// (FLASHATTN_SM90_HANG_CHECK); no function call, so the kernel's code is otherwise unchanged.
__device__ __forceinline__ void mbar_wait_checked(uint32_t bar, uint32_t parity, int* report, int tag) {
  if (mbar_try_wait(bar, parity)) return;
  const uint64_t start = globaltimer_ns();
  while (!mbar_try_wait(bar, parity)) {
    if (globaltimer_ns() - start > 10000000000ull) {
      if (report != nullptr) {
        report[1] = tag;
        report[2] = static_cast<int>(blockIdx.x);
        report[3] = static_cast<int>(threadIdx.x);
        report[4] = static_cast<int>(parity);
        __threadfence_system();
        report[0] = 1;
        __threadfence_system();
      }
      __trap();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Thread-block clusters: a barrier over every thread of every CTA of the cluster, and loads from
// another CTA's shared memory (distributed shared memory).
// ---------------------------------------------------------------------------------------------
// Every thread of the cluster arrives (release: its shared and global writes before the barrier
// become visible to the cluster) and waits for all of them (acquire).
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release;\n"
      "barrier.cluster.wait.acquire;" ::: "memory");
}

// The shared::cluster address of this CTA's shared-window address `addr` in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

__device__ __forceinline__ float ld_cluster_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ float4 ld_cluster_v4_f32(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ void st_shared_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

__device__ __forceinline__ void st_shared_v2_f32(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// ---------------------------------------------------------------------------------------------
// TMA: 4-D tiled load global -> shared, completing on an mbarrier (transaction bytes).
// Coordinates innermost first: (column, row, head, batch). Out-of-bounds elements are zero-filled
// and still counted in the transaction bytes.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* tmap, uint32_t bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// TMA: 4-D tiled store shared -> global in a bulk group (out-of-bounds elements are not written).
// The smem source was written through the generic proxy: fence_proxy_async() by every writer,
// then a barrier, before one thread issues the store.
__device__ __forceinline__ void tma_store_4d(const void* tmap, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// At most N of this thread's bulk groups still reading their shared-memory sources (0: every
// buffer they read may be rewritten).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// This thread's bulk groups have completed (the writes are done).
__device__ __forceinline__ void bulk_wait_group_0() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// 16 zero bytes at a 16-byte-aligned shared address.
__device__ __forceinline__ void st_shared_zero_v4(uint32_t addr) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0u) : "memory");
}
__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
// Four 8x8 16-bit matrices stored transposed: register i of thread t holds row t / 4, columns
// 2 (t % 4) and + 1 of matrix i; lanes 8 i .. 8 i + 7 give the addresses of the stored rows of
// matrix i (row c of the stored matrix is column c of the held one, 16 contiguous bytes).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

__device__ __forceinline__ void prefetch_tmap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// ---------------------------------------------------------------------------------------------
// wgmma ordering
// ---------------------------------------------------------------------------------------------
// Orders this warpgroup's earlier register writes (accumulators, A fragments) before the wgmmas
// that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Compiler-level fence on registers an in-flight wgmma reads or writes: the compiler must
// materialize the values here and may not move their uses across this point.
template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void reg_fence(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// ---------------------------------------------------------------------------------------------
// Register reallocation and named barriers
// ---------------------------------------------------------------------------------------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

#endif  // FLASHATTN_SM90A_ENABLED
#endif  // __CUDACC__

}  // namespace sm90
}  // namespace flashattn
