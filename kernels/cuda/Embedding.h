// Embedding gather from the FP8-E4M3 row-scaled table. See Embedding.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct EmbeddingParams {
    const std::uint8_t* codes = nullptr;  // [V][H] E4M3FN (the tied embedding / lm_head table)
    const float* rowScales = nullptr;     // [V]
    std::int64_t vocab = 0;
    std::int64_t hidden = 0;
    const int* tokenIds = nullptr;  // device [rows]
    float embedScale = 1.0f;        // bf16(sqrt(H)) for Gemma 4 (GEMMA4.md §2.1), applied in fp32
    float* out = nullptr;           // [rows][outStride] fp32
    std::int64_t outStride = 0;
    int rows = 1;
    // sm_90+: programmatic dependent launch (may start during the previous kernel; waits for it
    // before its first global access). Ignored elsewhere.
    bool programmaticLaunch = false;
};

KernelStatus launchEmbeddingGather(const EmbeddingParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
