// Byte ranges a decode kernel asks the L2 to fetch from memory for the launches after it (host and
// device). See AttentionDecodeParams::warmL2 and CudaCommon.h's warmL2Share().
#pragma once

#include <cstddef>

namespace gemma::cuda {

// [data, data + bytes) of device memory: data 16-byte aligned; bytes is rounded down to a multiple
// of 16 (the copy engine's unit). A null or empty range is skipped.
struct L2Range {
    const void* data = nullptr;
    std::size_t bytes = 0;
};

// The most ranges one launch takes: an o projection's codes and scales, and a GeGLU's gate and up
// codes and scales.
inline constexpr int kL2WarmRanges = 6;

// [data, data + bytes) shrunk to start at the first 16-byte boundary at or after data.
inline L2Range alignedL2Range(const void* data, std::size_t bytes) {
    const std::size_t skip = (16 - reinterpret_cast<std::size_t>(data) % 16) % 16;
    if (data == nullptr || bytes <= skip) return {};
    return {static_cast<const unsigned char*>(data) + skip, bytes - skip};
}

// Whether every non-empty range of `ranges` starts 16-byte aligned and holds fewer than 2^32
// 16-byte units (64 GB; the kernels count units in 32 bits). The launchers refuse others.
inline bool l2RangesValid(const L2Range (&ranges)[kL2WarmRanges]) {
    for (const L2Range& r : ranges)
        if (r.data != nullptr && r.bytes >= 16 && (reinterpret_cast<std::size_t>(r.data) % 16 != 0 || r.bytes / 16 > 0xFFFFFFFFull))
            return false;
    return true;
}

}  // namespace gemma::cuda
