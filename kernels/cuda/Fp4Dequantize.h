// FP4-E2M1 group-128 weights → BF16, for the GEMM prefill path (the BF16 copy of a linear is the
// A operand of a cuBLASLt GEMM). See Fp4Dequantize.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct Fp4DequantizeParams {
    // W[out][in] in FP4-E2M1 group 128, in the row layout (kernels/include/kernels/WeightFormats.h):
    // codes  [out][fp4RowBytes(in)] bytes, 16-byte aligned base;
    // scales [out][fp4GroupsPerRow(in)] BF16 bits.
    // Or, with tiled, in the tiled layout (kernels/include/kernels/Fp4Tiled.h):
    // codes  fp4tiled::codeBytes(out, in) bytes, 16-byte aligned base;
    // scales fp4tiled::scaleWords(out, in) 32-bit words (two BF16 scales each), read through
    //        reinterpret_cast<const std::uint32_t*>(scales): the base must be 4-byte aligned.
    const std::uint8_t* codes = nullptr;
    const std::uint16_t* scales = nullptr;
    std::int64_t out = 0;
    std::int64_t in = 0;
    // y: BF16 (or, with fp16, FP16) bits, row-major [out][ldOut]; only columns [0, in) of each
    // row are written. Base 16-byte aligned, ldOut >= in and a multiple of 8 (16-byte stores).
    std::uint16_t* y = nullptr;
    std::int64_t ldOut = 0;
    // fp16: store FP16 instead of BF16. An E2M1 × bf16-scale product has at most 10 significant
    // bits, so FP16 (11) holds it exactly while it is a normal FP16 number; BF16 (8) rounds it.
    // multiplier (a power of two, exact) scales every product first: the engine picks it per
    // weight so the largest product lands near 2^15 and FP16's range covers the rest.
    bool fp16 = false;
    float multiplier = 1.0f;
    int blocks = 0;  // 0: chosen from the device (grid-stride); > 0 forces it (tests)
    // tiled: codes and scales are in the tiled layout (above). y is the same, bit for bit, as for
    // the row layout of the same weight; the padding rows past `out` of the last tile are not read.
    bool tiled = false;
};

// y[o][i] = half_rne(e2m1(code(o, i)) × scale(o, i / 128) × multiplier), half = bf16 or fp16:
// the fp32 product (exact for every normal scale) rounded to nearest, ties to even; the same
// bits as reference::dequantizeFp4ToBf16 / dequantizeFp4ToFp16 for every finite scale.
// InvalidArgument when multiplier is not a power of two, or (tiled) when scales is not 4-byte aligned.
KernelStatus launchFp4DequantizeBf16(const Fp4DequantizeParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
