// FP8-E4M3 row-scaled matvec with the final logit softcap fused (the tied lm_head). See .cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct Fp8LmHeadParams {
    // E[V][H] in FP8-E4M3FN (kernels/include/kernels/WeightFormats.h): codes [V][H] bytes,
    // 16-byte aligned, H % 16 == 0; rowScales [V] fp32.
    const std::uint8_t* codes = nullptr;
    const float* rowScales = nullptr;
    std::int64_t vocab = 0;   // V
    std::int64_t hidden = 0;  // H
    const float* x = nullptr;  // [rows][xStride] fp32, 16-byte aligned, xStride % 4 == 0
    std::int64_t xStride = 0;
    float* logits = nullptr;  // [rows][logitStride] fp32
    std::int64_t logitStride = 0;
    int rows = 1;
    float softcap = 30.0f;  // logits = softcap·tanh(z / softcap); <= 0 disables the cap
    // sm_90+: programmatic dependent launch (may start during the previous kernel; waits for it
    // before its first global access). Ignored elsewhere.
    bool programmaticLaunch = false;
    // One row of logits on a resident grid of 8-row warps instead of the one-shot grid of 4-row
    // warps (the same bits). Faster alone (H200: 231–239 µs against 245–251 for the 12b's
    // lm_head). Inside the decode step only when launched ordinarily: programmatically it took
    // 0.320 ms of the step's kernel timeline against 0.249 for the one-shot grid, ordinarily 0.234
    // (the CUDA backend launches it so); docs/PERFORMANCE.md versions 10 and 15.
    bool persistent = false;
};

KernelStatus launchFp8LmHead(const Fp8LmHeadParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
