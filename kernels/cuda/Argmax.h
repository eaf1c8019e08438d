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
    // Greedy decode feedback (optional, rows == 1 only): the launch also stores the chosen id in
    // history[*position % historySize] and advances *position by one. With outIndex pointing at
    // the decode step's token input, consecutive decode steps (one CUDA graph each) then chain on
    // the device with no upload between them. `history` may be host-mapped memory: the host reads
    // entry p after an event recorded behind the launch has completed.
    int* position = nullptr;
    int* history = nullptr;
    int historySize = 0;
};

std::size_t argmaxWorkspaceBytes(const ArgmaxParams& params);
KernelStatus launchArgmax(const ArgmaxParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
