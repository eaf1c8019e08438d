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

// Whether every non-empty range of `ranges` starts 16-byte aligned and holds fewer than 2^31
// 16-byte units (32 GB: the kernels count units in 32 bits, and a block's slice end, at most the
// units plus the block count, must not wrap). The launchers refuse others.
inline bool l2RangesValid(const L2Range (&ranges)[kL2WarmRanges]) {
    for (const L2Range& r : ranges)
        if (r.data != nullptr && r.bytes >= 16 && (reinterpret_cast<std::size_t>(r.data) % 16 != 0 || r.bytes / 16 >= (std::size_t{1} << 31)))
            return false;
    return true;
}

// One FP4 linear's two device arrays, as the planner below sees them.
struct WeightArrays {
    const void* codes = nullptr;
    std::size_t codeBytes = 0;
    const void* scales = nullptr;
    std::size_t scaleBytes = 0;
};

// Up to `budget` bytes of `w` into ranges[at] (codes) and ranges[at + 1] (scales): the same leading
// share of both arrays, which in the tiled layout are the same leading tiles (a weight stored
// tile after tile, the matvec's block b reading tile b first), each range shrunk to start aligned
// (alignedL2Range), never past its array. Returns the bytes the two ranges hold (<= budget).
inline std::size_t planWeightShare(const WeightArrays& w, std::size_t budget, L2Range (&ranges)[kL2WarmRanges], int at) {
    const std::size_t total = w.codeBytes + w.scaleBytes;
    if (w.codes == nullptr || total == 0 || budget == 0 || at < 0 || at + 1 >= kL2WarmRanges) return 0;
    const double share = budget >= total ? 1.0 : static_cast<double>(budget) / static_cast<double>(total);
    const auto part = [&](std::size_t bytes) {
        const auto b = static_cast<std::size_t>(share * static_cast<double>(bytes));
        return b < bytes ? b : bytes;
    };
    ranges[at] = alignedL2Range(w.codes, part(w.codeBytes));
    ranges[at + 1] = w.scales != nullptr ? alignedL2Range(w.scales, part(w.scaleBytes)) : L2Range{};
    return ranges[at].bytes + ranges[at + 1].bytes;
}

// A sliding layer's next weights for its attention to ask for (AttentionDecodeParams::warmL2): the
// o projection's first, then what is left of `budget` split evenly between the GeGLU's gate and
// up weights from their starts. Ranges 0-1 o, 2-3 gate, 4-5 up; the others stay empty.
inline void planNextWeights(std::size_t budget, const WeightArrays& o, const WeightArrays& gate, const WeightArrays& up,
                            L2Range (&ranges)[kL2WarmRanges]) {
    for (L2Range& r : ranges) r = {};
    const std::size_t taken = planWeightShare(o, budget, ranges, 0);
    const std::size_t half = (budget - (taken < budget ? taken : budget)) / 2;
    planWeightShare(gate, half, ranges, 2);
    planWeightShare(up, half, ranges, 4);
}

}  // namespace gemma::cuda
