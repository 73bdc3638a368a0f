// The torch binding of the KV-cache decoding path: the CUDA implementation of
// flashattn::fwd_kvcache (schema in flashattn/_ops.py; csrc/autograd.cpp refuses inputs that
// require grad). Thin by design: checks (csrc/host_args.h), fills DecodeParams, allocates outputs
// and split partials, calls csrc/flash_decode/. Never synchronizes with the device and never reads
// cache_seqlens, block_table or seqused_k, so it is CUDA-graph safe.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>

#include "device_limits.h"
#include "flash_decode/decode_api.h"
#include "flash_decode/decode_traits.h"
#include "host_args.h"

namespace {

using flashattn::DecodeParams;

// int32 [B] on q's device: cache_seqlens, seqused_k.
void check_lengths(const char* op, const char* name, const at::Tensor& t, int64_t B, const at::Tensor& q) {
  FLASHATTN_CHECK(t.scalar_type() == at::kInt && t.dim() == 1 && t.size(0) == B && t.device() == q.device(), op, ": ",
              name, " must be an int32 tensor [B] on q's device");
}

std::tuple<at::Tensor, at::Tensor> fwd_kvcache_cuda(const at::Tensor& q_in, const at::Tensor& k_cache,
                                                     const at::Tensor& v_cache, const std::optional<at::Tensor>& k_new_in,
                                                     const std::optional<at::Tensor>& v_new_in,
                                                     const std::optional<at::Tensor>& cache_seqlens, int64_t cache_seqlen,
                                                     std::optional<double> softmax_scale, bool causal, int64_t num_splits,
                                                     int64_t window_left, int64_t window_right, double softcap,
                                                     const std::optional<at::Tensor>& block_table,
                                                     const std::optional<at::Tensor>& seqused_k) {
  constexpr const char* op = "flashattn::fwd_kvcache";
  FLASHATTN_CHECK(q_in.dim() == 4 && k_cache.dim() == 4 && v_cache.dim() == 4, op,
              ": q, k_cache, v_cache must be 4-D [B, S, H, D]");
  FLASHATTN_CHECK(flashattn::is_half_type(q_in.scalar_type()), op, ": dtype must be float16 or bfloat16");
  FLASHATTN_CHECK(q_in.is_cuda(), op, ": q must be on a CUDA device");
  flashattn::check_like(op, "k_cache", k_cache, q_in);
  flashattn::check_like(op, "v_cache", v_cache, q_in);
  const int64_t B = q_in.size(0), Sq = q_in.size(1), Hq = q_in.size(2), D = q_in.size(3);
  const bool paged = block_table.has_value();
  // Paged: the caches are [num_pages, page_size, Hk, D] and the table's width sets the capacity.
  const int64_t page_size = paged ? k_cache.size(1) : 0;
  if (paged) {
    const at::Tensor& bt = *block_table;
    FLASHATTN_CHECK(bt.scalar_type() == at::kInt && bt.dim() == 2 && bt.size(0) == B && bt.size(1) >= 1 &&
                    bt.device() == q_in.device(), op,
                ": block_table must be an int32 tensor [B, max_blocks_per_seq >= 1] on q's device");
    FLASHATTN_CHECK(page_size > 0 && page_size % flashattn::kDecodeMinPageSize == 0 && k_cache.size(0) >= 1, op,
                ": with block_table, k_cache must be [num_blocks >= 1, page_size, Hk, D] with page_size a positive "
                "multiple of ", flashattn::kDecodeMinPageSize, ", got shape ", k_cache.sizes());
    FLASHATTN_CHECK(bt.size(1) <= INT32_MAX / page_size && k_cache.size(0) <= INT32_MAX, op,
                ": block_table width x page_size or the page count exceeds int32");
  }
  const int64_t Sk = paged ? block_table->size(1) * page_size : k_cache.size(1), Hk = k_cache.size(2);
  FLASHATTN_CHECK(k_cache.sizes() == v_cache.sizes(), op, ": k_cache and v_cache shapes differ");
  FLASHATTN_CHECK((paged || k_cache.size(0) == B) && k_cache.size(3) == D, op, ": k_cache batch or head dim differ from q");
  FLASHATTN_CHECK(Hk > 0 && Hq % Hk == 0, op, ": q heads must be a multiple of cache heads");
  FLASHATTN_CHECK(D >= 8 && D <= 256 && D % 8 == 0, op, ": head dim must be a multiple of 8 in [8, 256]");
  flashattn::check_unit_last_stride(op, {&q_in, &k_cache, &v_cache});
  // The caches are read (and appended to) in place, so they cannot be copied to fix a layout.
  FLASHATTN_CHECK(flashattn::aligned16(k_cache) && flashattn::aligned16(v_cache), op,
              ": k_cache and v_cache need 16-byte aligned data pointers and strides that are multiples of 8 "
              "elements (they are used in place and cannot be copied)");
  FLASHATTN_CHECK(B <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX && Hq <= INT32_MAX, op, ": sizes too large");
  FLASHATTN_CHECK(num_splits >= 0, op, ": num_splits must be >= 0");
  flashattn::check_mask(op, causal ? 2 : 0, window_left, window_right, softcap);
  const float scale = flashattn::softmax_scale_of(op, softmax_scale, D);
  FLASHATTN_CHECK(k_new_in.has_value() == v_new_in.has_value(), op, ": k and v must be given together");

  int64_t Sq_new = 0;
  at::Tensor k_new, v_new;
  if (k_new_in.has_value()) {
    k_new = *k_new_in;
    v_new = *v_new_in;
    FLASHATTN_CHECK(k_new.dim() == 4 && k_new.sizes() == v_new.sizes(), op, ": k and v must be 4-D, same shape");
    FLASHATTN_CHECK(k_new.size(0) == B && k_new.size(2) == Hk && k_new.size(3) == D, op,
                ": k/v must be [B, Sq_new, Hk, D] matching the cache");
    flashattn::check_like(op, "k", k_new, q_in);
    flashattn::check_like(op, "v", v_new, q_in);
    flashattn::check_unit_last_stride(op, {&k_new, &v_new});
    Sq_new = k_new.size(1);
    FLASHATTN_CHECK(Sq_new <= Sk, op, ": k/v have more rows than the cache holds");
  }
  if (cache_seqlens.has_value()) {
    check_lengths(op, "cache_seqlens", *cache_seqlens, B, q_in);
  } else {
    FLASHATTN_CHECK(cache_seqlen >= 0 && cache_seqlen + Sq_new <= Sk, op,
                ": cache_seqlen + new rows must lie in [0, Sk_max]");
  }
  if (seqused_k.has_value()) check_lengths(op, "seqused_k", *seqused_k, B, q_in);

  const c10::cuda::CUDAGuard guard(q_in.device());
  at::Tensor out = at::empty({B, Sq, Hq, D}, q_in.options());
  at::Tensor lse = at::empty({B, Hq, Sq}, q_in.options().dtype(at::kFloat));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q_in.get_device()).stream();

  const at::Tensor q = flashattn::aligned_or_copy(q_in);
  at::Tensor cs_contig, bt_contig, su_contig;
  DecodeParams p;
  flashattn::set_bshd(q, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  flashattn::set_bshd(k_cache, p.k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  flashattn::set_bshd(v_cache, p.v_cache, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  flashattn::set_bshd(out, p.o, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  p.lse = lse.data_ptr<float>();
  if (Sq_new > 0) {
    k_new = flashattn::aligned_or_copy(k_new);
    v_new = flashattn::aligned_or_copy(v_new);
    flashattn::set_bshd(k_new, p.k_new, p.knew_batch_stride, p.knew_row_stride, p.knew_head_stride);
    flashattn::set_bshd(v_new, p.v_new, p.vnew_batch_stride, p.vnew_row_stride, p.vnew_head_stride);
  }
  if (cache_seqlens.has_value()) {
    cs_contig = cache_seqlens->contiguous();
    p.cache_seqlens = cs_contig.data_ptr<int>();
  }
  p.cache_seqlen = static_cast<int>(cache_seqlens.has_value() ? 0 : cache_seqlen);
  if (paged) {
    bt_contig = block_table->stride(1) == 1 ? *block_table : block_table->contiguous();
    p.block_table = bt_contig.data_ptr<int>();
    p.block_table_batch_stride = bt_contig.stride(0);
    p.page_size = static_cast<int>(page_size);
    p.num_pages = static_cast<int>(k_cache.size(0));
  }
  if (seqused_k.has_value()) {
    su_contig = seqused_k->contiguous();
    p.seqused_k = su_contig.data_ptr<int>();
  }
  p.batch = static_cast<int>(B);
  p.heads_q = static_cast<int>(Hq);
  p.heads_kv = static_cast<int>(Hk);
  p.seqlen_q = static_cast<int>(Sq);
  p.seqlen_k_max = static_cast<int>(Sk);
  p.seqlen_new = static_cast<int>(Sq_new);
  p.head_dim = static_cast<int>(D);
  p.dtype = flashattn::dtype_of(q);
  p.set_scale(scale);
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(causal, window_left, window_right);

  cudaError_t err = flashattn::kvcache_append(p, stream);
  FLASHATTN_CHECK(err == cudaSuccess, op, ": append launch failed: ", cudaGetErrorString(err));
  if (out.numel() == 0) return {out, lse};

  const int requested = static_cast<int>(std::min<int64_t>(num_splits, flashattn::kDecodeMaxSplits));
  err = flashattn::flash_decode_plan(p, flashattn::device_limits(q.get_device()), requested, &p);
  FLASHATTN_CHECK(err == cudaSuccess, op, ": planning failed: ", cudaGetErrorString(err));
  at::Tensor o_accum, lse_accum;  // alive until the kernels are enqueued; the caching allocator is stream-ordered
  if (p.num_splits > 1) {
    o_accum = at::empty({flashattn::flash_decode_oaccum_numel(p)}, q.options().dtype(at::kFloat));
    lse_accum = at::empty({flashattn::flash_decode_lseaccum_numel(p)}, q.options().dtype(at::kFloat));
    p.o_accum = o_accum.data_ptr<float>();
    p.lse_accum = lse_accum.data_ptr<float>();
  }
  err = flashattn::flash_decode(p, stream);
  FLASHATTN_CHECK(err == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(err));
  return {out, lse};
}

}  // namespace

// A second implementation block for the same library is allowed: csrc/binding.cpp registers fwd.
TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("fwd_kvcache", &fwd_kvcache_cuda); }
