// Greedy sampling on the device: argmax over each row of logits. See Argmax.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct ArgmaxParams {
    const float* logits = nullptr;  // [rows][stride] fp32
    std::int64_t n = 0;             // entries per row (the vocabulary)
    std::int64_t stride = 0;
    int rows = 1;
    int* outIndex = nullptr;        // device [rows]
    float* outValue = nullptr;      // device [rows], optional
    // argmaxWorkspaceBytes() bytes. Its first rows × 4 bytes are counters that must be zero before
    // the first launch (cudaMemset once after allocation); every launch leaves them zero again.
    void* workspace = nullptr;
    std::size_t workspaceBytes = 0;
};

std::size_t argmaxWorkspaceBytes(const ArgmaxParams& params);
KernelStatus launchArgmax(const ArgmaxParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
