// The two elementwise steps of Per-Layer Embeddings (GEMMA4.md §2.2, §2.4 step 3).
// See PleCombine.cu and PleGate.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

// out[r][i] = (projected[r][i] + identity[r][i]) · scale for i < n; all [rows][n] fp32, contiguous.
// Gemma 4: projected = rmsNorm(per_layer_model_projection(h0)·H^-0.5), identity = the PLE table
// row ×√P, scale = 2^-0.5. out may alias either input.
struct PleCombineParams {
    const float* projected = nullptr;
    const float* identity = nullptr;
    float* out = nullptr;
    std::int64_t n = 0;  // L·P
    int rows = 1;
    float scale = 0.70710678f;
    // sm_90+: programmatic dependent launch (may start during the previous kernel; waits for it
    // before its first global access). Ignored elsewhere.
    bool programmaticLaunch = false;
};
KernelStatus launchPleCombine(const PleCombineParams& params, cudaStream_t stream);

// gate[r][i] = gelu_tanh(gate[r][i]) · perLayerInput[r·inputStride + i] for i < n (in place).
// perLayerInput points at layer l's slice of the combined per-layer inputs.
struct PleGateParams {
    float* gate = nullptr;  // [rows][gateStride]
    std::int64_t gateStride = 0;
    const float* perLayerInput = nullptr;
    std::int64_t inputStride = 0;
    std::int64_t n = 0;  // P
    int rows = 1;
    // sm_90+: programmatic dependent launch (may start during the previous kernel; waits for it
    // before its first global access). Ignored elsewhere.
    bool programmaticLaunch = false;
};
KernelStatus launchPleGate(const PleGateParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
