// The tiled device layout of an FP4-E2M1 group-128 weight (the CUDA backend's copy; the package
// and the CPU backend keep the row layout of WeightFormats.h).
//
// Why: the batch-1 tensor-core matvec (kernels/cuda/Fp4Matvec.cu) has a warp consume a 16-row
// tile one 128-input group at a time ("an item"). In the row layout an item's 1 KB of codes is 16
// pieces of 64 bytes, 16 rows apart, and its 16 bf16 scales sit in 16 rows: every 16-byte load
// instruction of the warp touches 8 rows, every scale load 8 rows for 16 useful bytes. In the
// tiled layout an item is contiguous and in the lanes' read order, so a warp's item is two
// 512-byte loads and one scale word per lane (measured +2 to +18 % per shape on the H200,
// docs/PERFORMANCE.md version 5).
//
// Layout, for W[out][in] with groups = fp4GroupsPerRow(in) and tiles = ceil(out / 16):
// - codes: tiles × groups items of 1024 bytes, item (t, G) at byte (t·groups + G)·1024. Inside
//   an item, the row layout's 16-byte chunk c = 4G + q (bytes [16c, 16c + 16) of a row) of row
//   16t + r sits at byte (r / 8)·512 + ((r % 8)·4 + q)·16: the first 512 bytes are rows 0–7 of the
//   tile, the second rows 8–15, and lane L = 4g + q of a warp reads bytes [16L, 16L + 16) of each.
// - scales: tiles × groups items of 8 words, word (t·groups + G)·8 + g = row 16t + g's bf16 scale
//   of group G in the low half, row 16t + g + 8's in the high half.
// Rows past `out` in the last tile are zero codes and zero scales.
#pragma once

#include <cstdint>

#include "WeightFormats.h"

#if defined(__CUDACC__)
#define GEMMA_FP4_TILED_HD __host__ __device__
#else
#define GEMMA_FP4_TILED_HD
#endif

namespace gemma::formats::fp4tiled {

constexpr int kTileRows = 16;
constexpr int kItemBytes = 1024;
constexpr int kItemScaleWords = 8;

GEMMA_FP4_TILED_HD constexpr std::int64_t tiles(std::int64_t out) { return (out + kTileRows - 1) / kTileRows; }
GEMMA_FP4_TILED_HD constexpr std::int64_t codeBytes(std::int64_t out, std::int64_t in) {
    return tiles(out) * fp4GroupsPerRow(in) * kItemBytes;
}
GEMMA_FP4_TILED_HD constexpr std::int64_t scaleWords(std::int64_t out, std::int64_t in) {
    return tiles(out) * fp4GroupsPerRow(in) * kItemScaleWords;
}

// Byte offset of row `row`'s 16-byte chunk `chunk` (row-layout bytes [16·chunk, 16·chunk + 16)).
GEMMA_FP4_TILED_HD constexpr std::int64_t chunkOffset(std::int64_t row, std::int64_t chunk, std::int64_t groups) {
    const std::int64_t r = row % kTileRows;
    return ((row / kTileRows) * groups + chunk / 4) * kItemBytes + (r / 8) * 512 + ((r % 8) * 4 + chunk % 4) * 16;
}
// The scale word holding row `row`'s scale of `group`, and the shift of its half (0 or 16).
GEMMA_FP4_TILED_HD constexpr std::int64_t scaleWord(std::int64_t row, std::int64_t group, std::int64_t groups) {
    return ((row / kTileRows) * groups + group) * kItemScaleWords + row % 8;
}
GEMMA_FP4_TILED_HD constexpr unsigned scaleShift(std::int64_t row) { return row % kTileRows >= 8 ? 16u : 0u; }

}  // namespace gemma::formats::fp4tiled

#undef GEMMA_FP4_TILED_HD
