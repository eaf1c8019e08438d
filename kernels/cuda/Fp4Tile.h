// FP4 weights from the row layout into the tiled device layout (kernels/include/kernels/Fp4Tiled.h),
// once per weight when the CUDA backend loads a model. See Fp4Tile.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct Fp4TileParams {
    // Row layout (WeightFormats.h): codes [out][fp4RowBytes(in)] (16-byte aligned base), scales
    // [out][fp4GroupsPerRow(in)] bf16 bits.
    const std::uint8_t* codes = nullptr;
    const std::uint16_t* scales = nullptr;
    std::int64_t out = 0;
    std::int64_t in = 0;
    // Tiled layout: fp4tiled::codeBytes(out, in) bytes (16-byte aligned) and
    // fp4tiled::scaleWords(out, in) words. Must not overlap the inputs.
    std::uint8_t* tiledCodes = nullptr;
    std::uint32_t* tiledScales = nullptr;
};

// Writes every byte and word of the tiled copy (rows past `out`: zeros), the same bits as
// reference::tileFp4. InvalidArgument for null or misaligned pointers, bad sizes or overlap.
KernelStatus launchFp4Tile(const Fp4TileParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
