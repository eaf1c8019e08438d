// RMSNorm fused with the residual add, the layer scalar and the following norm. See RmsNorm.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

// Per row r (all buffers [rows][stride] fp32, n valid entries per row):
//   if branch:  x = (x + rmsNorm(branch; branchWeight)) · layerScalar   (written back to residual)
//   else:       x = residual · layerScalar            (written back only when layerScalar != 1)
//   if out:     out = rmsNorm(x; outWeight)
// rmsNorm(v; w) = v · (mean(v²) + eps)^(-1/2) · w, w null = unweighted (GEMMA4.md §2.3, no +1).
// Uses, per decoder layer: post_attention_layernorm + add + pre_feedforward_layernorm in one
// launch; post_feedforward_layernorm + add (+ layer_scalar) + next layer's input_layernorm (or the
// final norm) in one launch; a plain norm with branch = null.
struct RmsNormParams {
    const float* branch = nullptr;
    const float* branchWeight = nullptr;
    float* residual = nullptr;  // required
    float layerScalar = 1.0f;
    const float* outWeight = nullptr;
    float* out = nullptr;  // may be null; must not alias residual or branch
    std::int64_t n = 0;
    std::int64_t stride = 0;  // elements between rows, >= n
    int rows = 1;
    float eps = 1e-6f;
    // sm_90+: programmatic dependent launch (may start during the previous kernel; waits for it
    // before it reads x or the branch, or writes anything; the two weights may be read before
    // the wait, so no earlier kernel in the stream may write them). Ignored elsewhere.
    bool programmaticLaunch = false;
};

KernelStatus launchRmsNormResidual(const RmsNormParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
