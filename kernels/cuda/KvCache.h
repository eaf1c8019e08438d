// KV cache element types shared by QkvNormRope (writer) and AttentionDecode (reader).
// Layout of one layer's cache (ReferenceOps.h): [capacity slots][kvHeads][headDim], absolute
// position p in slot p % capacity. The CUDA backend stores BF16 by default (half the bytes the
// attention reads); FP32 storage matches the CPU backend exactly and is kept for parity runs.
#pragma once

#include <cstddef>

namespace gemma::cuda {

enum class KvDtype { F32, BF16 };

inline std::size_t kvElementBytes(KvDtype dtype) { return dtype == KvDtype::F32 ? 4u : 2u; }

}  // namespace gemma::cuda
