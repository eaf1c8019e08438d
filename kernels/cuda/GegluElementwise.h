// GeGLU over a fused gate|up GEMM output: y = gelu_tanh(gate) ⊙ up. See GegluElementwise.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct GegluElementwiseParams {
    // gateUp: fp32 [rows][ldIn]; gate in columns [0, width), up in [width, 2·width); ldIn >= 2·width.
    const float* gateUp = nullptr;
    std::int64_t ldIn = 0;
    std::int64_t rows = 0;
    std::int64_t width = 0;  // F, the FFN width
    // y: fp32 [rows][ldOut], columns [0, width) written; ldOut >= width. y may be gateUp itself
    // (in place, then ldOut must equal ldIn); any other overlap is refused.
    float* y = nullptr;
    std::int64_t ldOut = 0;
};

// y[r][j] = gelu_tanh(gateUp[r][j]) · gateUp[r][width + j], fp32, the same gelu_tanh as
// Fp4Matvec.cu's fused GeGLU (0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³)))).
KernelStatus launchGegluElementwise(const GegluElementwiseParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
