// The best entries of a row of logits on the device (the sampled decode path). See TopK.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

// One ranked entry; the engine's gemma::RankedLogit has the same layout (the CUDA backend copies
// these straight into it).
struct TopKEntry {
    float logit;
    std::int32_t id;
};

constexpr int kTopKMaxCount = 128;

struct TopKParams {
    const float* logits = nullptr;  // [vocab] fp32
    std::int64_t vocab = 0;
    int count = 0;  // 1 .. kTopKMaxCount entries wanted
    // min(count, vocab) entries, best first: larger logit first, then lower id; NaN ranks (and
    // is reported) as -inf, -0 as +0. Device memory, or host-mapped memory.
    TopKEntry* out = nullptr;
    // topKWorkspaceBytes() bytes, 16-byte aligned. Its first 4 bytes are a counter that must be
    // zero before the first launch (cudaMemset once); every launch leaves it zero again.
    void* workspace = nullptr;
    std::size_t workspaceBytes = 0;
    // sm_90+: programmatic dependent launch (waits for the previous kernel before reading the
    // logits). Ignored elsewhere.
    bool programmaticLaunch = false;
};

std::size_t topKWorkspaceBytes(std::int64_t vocab, int count);
// The dynamic shared memory a launch needs (the launcher raises the kernel's limit to it).
std::size_t topKSharedBytes();
KernelStatus launchTopK(const TopKParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
