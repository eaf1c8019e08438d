// KV cache element types shared by the cache writers (NormRopeCache, HeadNormRope) and the
// attention kernels (AttentionDecode, AttentionPrefill).
// Layout of one layer's cache (ReferenceOps.h): [capacity slots][kvHeads][headDim], absolute
// position p in slot p % capacity. F32 matches the CPU backend exactly. F16 (round to nearest
// even) holds exactly what the tensor-core attention reads, since it rounds K and V to fp16 when
// it stages them: a full layer's cache in F16 gives those kernels the same bits for half the
// bytes; the engine's default (gemma::KvCacheType::F16) stores every layer in F16, the sliding
// layers' fp32 attention reading it to 2^-11 relative. BF16 halves the bytes too but keeps 8
// significant bits (fp16 11).
#pragma once

#include <cstddef>

namespace gemma::cuda {

enum class KvDtype { F32, BF16, F16 };

inline std::size_t kvElementBytes(KvDtype dtype) { return dtype == KvDtype::F32 ? 4u : 2u; }

}  // namespace gemma::cuda
