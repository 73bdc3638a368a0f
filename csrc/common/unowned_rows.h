// Rows of a packed variable-length tensor that no sequence owns: [0, cu_seqlens[0]) and
// [cu_seqlens[batch], total). The kernels never touch them, so a caller's padding rows at the end
// of a packed buffer would come back as whatever the allocator held; they are set here instead,
// on the device (the offsets are device data: reading them on the host would sync), in one small
// launch whose work is the unowned rows alone (none, usually).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashattn {

// `data` is [outer, total, words_per_row] 32-bit words, contiguous; every word of the unowned rows
// of each outer slice becomes `value` (0 for outputs, the bits of -inf for lse). Offsets are
// clamped into [0, total] as the kernels clamp them.
cudaError_t fill_unowned_rows(void* data, int64_t outer, int64_t total, int64_t words_per_row, const int* cu_seqlens,
                              int batch, uint32_t value, cudaStream_t stream);

}  // namespace flashattn
