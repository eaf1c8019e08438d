// fp32 activations → BF16 GEMM operands, optionally split hi + lo. See ActivationConvert.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct ActivationConvertParams {
    // x: fp32 [rows][xStride]; columns [0, cols) are read.
    const float* x = nullptr;
    std::int64_t xStride = 0;
    std::int64_t rows = 0;
    std::int64_t cols = 0;
    // hi (required) and lo (optional, null: not written): BF16 bits [rows][outStride]; only
    // columns [0, cols) are written. hi = bf16_rne(x), lo = bf16_rne(x − hi), so that
    // x ≈ hi + lo to 2^-16 relative (x − hi is exact in fp32). Neither may alias x.
    std::uint16_t* hi = nullptr;
    std::uint16_t* lo = nullptr;
    std::int64_t outStride = 0;
    // fp16: FP16 hi/lo of x·multiplier instead of BF16 of x (multiplier a power of two, chosen
    // by the caller to keep x·multiplier inside FP16's range; the GEMM undoes it in alpha).
    // FP16 hi + lo carry x to ~2^-22 relative down to 2^-14 and to 2^-25 absolute below.
    bool fp16 = false;
    float multiplier = 1.0f;
};

// Bit-exact with reference::splitToBf16. 16-byte loads/stores when x, hi, lo are 16-byte
// aligned, xStride % 4 == 0 and outStride % 8 == 0; element-wise otherwise.
KernelStatus launchActivationToBf16(const ActivationConvertParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
