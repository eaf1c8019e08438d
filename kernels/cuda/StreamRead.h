// The bandwidth ceiling probe of gemma-bench (PERF.md "The ceiling"): a streaming read of a large
// buffer with 16-byte loads. See StreamRead.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct StreamReadParams {
    const void* data = nullptr;       // 16-byte aligned
    std::int64_t bytes = 0;           // a multiple of 16
    std::uint32_t* sink = nullptr;    // [gridSize] words written so the loads cannot be elided
    int blocks = 0;                   // 0: 4 per SM
};

// Reads every byte of `data` once. Count `bytes` read per launch.
KernelStatus launchStreamRead(const StreamReadParams& params, cudaStream_t stream);
int streamReadBlocks(const StreamReadParams& params);

}  // namespace gemma::cuda
