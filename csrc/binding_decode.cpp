// The torch binding of the KV-cache decoding path: the CUDA implementation of
// flashattn::fwd_kvcache (schema in flashattn/_ops.py). Thin by design: checks (a second line of
// defence behind flashattn/kvcache.py, which raises the user-facing errors), fills DecodeParams,
// allocates outputs and split partials, calls csrc/flash_decode/. Never synchronizes with the
// device and never reads cache_seqlens, block_table or seqused_k, so it is CUDA-graph safe.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "device_limits.h"
#include "flash_decode/decode_api.h"
#include "flash_decode/decode_traits.h"
#include "tensor_access.h"

namespace {

using flashattn::DecodeParams;
using flashattn::DType;

using flashattn::aligned16;
using flashattn::aligned_or_copy;

std::tuple<at::Tensor, at::Tensor> fwd_kvcache_cuda(const at::Tensor& q_in, const at::Tensor& k_cache,
                                                     const at::Tensor& v_cache, const std::optional<at::Tensor>& k_new_in,
                                                     const std::optional<at::Tensor>& v_new_in,
                                                     const std::optional<at::Tensor>& cache_seqlens, int64_t cache_seqlen,
                                                     double softmax_scale, bool causal, int64_t num_splits,
                                                     int64_t window_left, int64_t window_right, double softcap,
                                                     const std::optional<at::Tensor>& block_table,
                                                     const std::optional<at::Tensor>& seqused_k) {
  TORCH_CHECK(q_in.dim() == 4 && k_cache.dim() == 4 && v_cache.dim() == 4,
              "flashattn::fwd_kvcache: q, k_cache, v_cache must be 4-D [B, S, H, D]");
  const auto dt = q_in.scalar_type();
  TORCH_CHECK(dt == at::kHalf || dt == at::kBFloat16, "flashattn::fwd_kvcache: dtype must be float16 or bfloat16");
  TORCH_CHECK(k_cache.scalar_type() == dt && v_cache.scalar_type() == dt,
              "flashattn::fwd_kvcache: q, k_cache, v_cache must share one dtype");
  TORCH_CHECK(q_in.is_cuda() && k_cache.device() == q_in.device() && v_cache.device() == q_in.device(),
              "flashattn::fwd_kvcache: q, k_cache, v_cache must be on one CUDA device");
  const int64_t B = q_in.size(0), Sq = q_in.size(1), Hq = q_in.size(2), D = q_in.size(3);
  const bool paged = block_table.has_value();
  // Paged: the caches are [num_pages, page_size, Hk, D] and the table's width sets the capacity.
  const int64_t page_size = paged ? k_cache.size(1) : 0;
  if (paged) {
    const at::Tensor& bt = *block_table;
    TORCH_CHECK(bt.scalar_type() == at::kInt && bt.dim() == 2 && bt.size(0) == B && bt.size(1) >= 1 &&
                    bt.device() == q_in.device(),
                "flashattn::fwd_kvcache: block_table must be an int32 tensor [B, max_blocks_per_seq >= 1] on q's device");
    TORCH_CHECK(page_size > 0 && page_size % flashattn::kDecodeMinPageSize == 0 && k_cache.size(0) >= 1,
                "flashattn::fwd_kvcache: with block_table, k_cache must be [num_blocks >= 1, page_size, Hk, D] with "
                "page_size a positive multiple of ", flashattn::kDecodeMinPageSize, ", got shape ", k_cache.sizes());
    TORCH_CHECK(bt.size(1) <= INT32_MAX / page_size && k_cache.size(0) <= INT32_MAX,
                "flashattn::fwd_kvcache: block_table width x page_size or the page count exceeds int32");
  }
  const int64_t Sk = paged ? block_table->size(1) * page_size : k_cache.size(1), Hk = k_cache.size(2);
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(), "flashattn::fwd_kvcache: k_cache and v_cache shapes differ");
  TORCH_CHECK((paged || k_cache.size(0) == B) && k_cache.size(3) == D,
              "flashattn::fwd_kvcache: k_cache batch or head dim differ from q");
  TORCH_CHECK(Hk > 0 && Hq % Hk == 0, "flashattn::fwd_kvcache: q heads must be a multiple of cache heads");
  TORCH_CHECK(D >= 8 && D <= 256 && D % 8 == 0, "flashattn::fwd_kvcache: head dim must be a multiple of 8 in [8, 256]");
  TORCH_CHECK(q_in.stride(-1) == 1 && k_cache.stride(-1) == 1 && v_cache.stride(-1) == 1,
              "flashattn::fwd_kvcache: last dimension must be contiguous");
  // The caches are read (and appended to) in place, so they cannot be copied to fix a layout.
  TORCH_CHECK(aligned16(k_cache) && aligned16(v_cache),
              "flashattn::fwd_kvcache: k_cache and v_cache need 16-byte aligned data pointers and strides that "
              "are multiples of 8 elements (they are used in place and cannot be copied)");
  TORCH_CHECK(B <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX && Hq <= INT32_MAX,
              "flashattn::fwd_kvcache: sizes too large");
  TORCH_CHECK(num_splits >= 0, "flashattn::fwd_kvcache: num_splits must be >= 0");
  TORCH_CHECK(window_left >= -1 && window_right >= -1, "flashattn::fwd_kvcache: window_left and window_right must be "
              ">= -1 (-1: unbounded), got ", window_left, " and ", window_right);
  TORCH_CHECK(softcap == 0.0 || (softcap > 0.0 && std::isfinite(static_cast<float>(softcap)) && static_cast<float>(softcap) > 0.f),
              "flashattn::fwd_kvcache: softcap must be 0 (off) or a positive float32-representable value, got ", softcap);
  TORCH_CHECK(k_new_in.has_value() == v_new_in.has_value(), "flashattn::fwd_kvcache: k and v must be given together");

  int64_t Sq_new = 0;
  at::Tensor k_new, v_new;
  if (k_new_in.has_value()) {
    k_new = *k_new_in;
    v_new = *v_new_in;
    TORCH_CHECK(k_new.dim() == 4 && k_new.sizes() == v_new.sizes(), "flashattn::fwd_kvcache: k and v must be 4-D, same shape");
    TORCH_CHECK(k_new.size(0) == B && k_new.size(2) == Hk && k_new.size(3) == D,
                "flashattn::fwd_kvcache: k/v must be [B, Sq_new, Hk, D] matching the cache");
    TORCH_CHECK(k_new.scalar_type() == dt && v_new.scalar_type() == dt, "flashattn::fwd_kvcache: k/v dtype differs from q");
    TORCH_CHECK(k_new.device() == q_in.device() && v_new.device() == q_in.device(),
                "flashattn::fwd_kvcache: k/v must be on q's device");
    TORCH_CHECK(k_new.stride(-1) == 1 && v_new.stride(-1) == 1, "flashattn::fwd_kvcache: k/v last dimension must be contiguous");
    Sq_new = k_new.size(1);
    TORCH_CHECK(Sq_new <= Sk, "flashattn::fwd_kvcache: k/v have more rows than the cache holds");
  }
  if (cache_seqlens.has_value()) {
    const at::Tensor& cs = *cache_seqlens;
    TORCH_CHECK(cs.scalar_type() == at::kInt && cs.dim() == 1 && cs.size(0) == B && cs.device() == q_in.device(),
                "flashattn::fwd_kvcache: cache_seqlens must be an int32 tensor [B] on q's device");
  } else {
    TORCH_CHECK(cache_seqlen >= 0 && cache_seqlen + Sq_new <= Sk,
                "flashattn::fwd_kvcache: cache_seqlen + new rows must lie in [0, Sk_max]");
  }

  if (seqused_k.has_value()) {
    const at::Tensor& su = *seqused_k;
    TORCH_CHECK(su.scalar_type() == at::kInt && su.dim() == 1 && su.size(0) == B && su.device() == q_in.device(),
                "flashattn::fwd_kvcache: seqused_k must be an int32 tensor [B] on q's device");
  }

  const c10::cuda::CUDAGuard guard(q_in.device());
  at::Tensor out = at::empty({B, Sq, Hq, D}, q_in.options());
  at::Tensor lse = at::empty({B, Hq, Sq}, q_in.options().dtype(at::kFloat));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q_in.get_device()).stream();

  const at::Tensor q = aligned_or_copy(q_in);
  at::Tensor cs_contig, bt_contig, su_contig;
  DecodeParams p;
  p.q = q.data_ptr();
  p.k_cache = k_cache.data_ptr();
  p.v_cache = v_cache.data_ptr();
  p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.q_batch_stride = q.stride(0), p.q_row_stride = q.stride(1), p.q_head_stride = q.stride(2);
  p.k_batch_stride = k_cache.stride(0), p.k_row_stride = k_cache.stride(1), p.k_head_stride = k_cache.stride(2);
  p.v_batch_stride = v_cache.stride(0), p.v_row_stride = v_cache.stride(1), p.v_head_stride = v_cache.stride(2);
  p.o_batch_stride = out.stride(0), p.o_row_stride = out.stride(1), p.o_head_stride = out.stride(2);
  if (Sq_new > 0) {
    k_new = aligned_or_copy(k_new);
    v_new = aligned_or_copy(v_new);
    p.k_new = k_new.data_ptr();
    p.v_new = v_new.data_ptr();
    p.knew_batch_stride = k_new.stride(0), p.knew_row_stride = k_new.stride(1), p.knew_head_stride = k_new.stride(2);
    p.vnew_batch_stride = v_new.stride(0), p.vnew_row_stride = v_new.stride(1), p.vnew_head_stride = v_new.stride(2);
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
  p.dtype = dt == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  p.set_scale(static_cast<float>(softmax_scale));
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(causal, window_left, window_right);

  cudaError_t err = flashattn::kvcache_append(p, stream);
  TORCH_CHECK(err == cudaSuccess, "flashattn::fwd_kvcache: append launch failed: ", cudaGetErrorString(err));
  if (out.numel() == 0) return {out, lse};

  const int requested = static_cast<int>(std::min<int64_t>(num_splits, flashattn::kDecodeMaxSplits));
  err = flashattn::flash_decode_plan(p, flashattn::device_limits(q.get_device()), requested, &p);
  TORCH_CHECK(err == cudaSuccess, "flashattn::fwd_kvcache: planning failed: ", cudaGetErrorString(err));
  at::Tensor o_accum, lse_accum;  // alive until the kernels are enqueued; the caching allocator is stream-ordered
  if (p.num_splits > 1) {
    o_accum = at::empty({flashattn::flash_decode_oaccum_numel(p)}, q.options().dtype(at::kFloat));
    lse_accum = at::empty({flashattn::flash_decode_lseaccum_numel(p)}, q.options().dtype(at::kFloat));
    p.o_accum = o_accum.data_ptr<float>();
    p.lse_accum = lse_accum.data_ptr<float>();
  }
  err = flashattn::flash_decode(p, stream);
  TORCH_CHECK(err == cudaSuccess, "flashattn::fwd_kvcache: kernel launch failed: ", cudaGetErrorString(err));
  return {out, lse};
}

}  // namespace

// A second implementation block for the same library is allowed: csrc/binding.cpp registers fwd.
TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("fwd_kvcache", &fwd_kvcache_cuda); }
