// The per-layer-input (PLE) block of one decode step as one launch of one thread-block cluster
// (GEMMA4.md §2.4 steps 1–3, batch 1): the post-FFN residual update, the gate matvec with its
// gelu ⊙ per-layer input, and the projection matvec. See PleBlock.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

// With H = hidden, P = perLayer:
//   r   = (residualIn + rmsNorm(branch; branchWeight)) · layerScalar          [H]
//         (rmsNorm(b; w) = b · rsqrt(mean(b²) + eps) · w, w = 1 when null; the same fp32 operations
//         per element as Fp4MatvecParams::InputNorm with normalizeOutput false)
//   g   = gelu_tanh(W_gate · r) ⊙ perLayerInput                                 [P]
//   out = W_projection · g                                                     [H]
// and the cluster's first block writes r to residualOut (skipped when null).
// Weights are FP4-E2M1 group 128 in the tiled layout (kernels/include/kernels/Fp4Tiled.h): codes
// 16-byte aligned, scales its 32-bit scale words, 16-byte aligned. W_gate is [P][H], W_projection
// [H][P]; rows padded to whole groups as the format pads them.
// `out` may alias `branch` (the CUDA backend's branch buffer is both): every block has read
// branch before the cluster barrier that precedes the first write. residualOut must not overlap
// residualIn, branch or out; perLayerInput must not overlap out.
struct PleBlockParams {
    const float* residualIn = nullptr;
    const float* branch = nullptr;
    const float* branchWeight = nullptr;
    float layerScalar = 1.0f;
    float eps = 1e-6f;
    float* residualOut = nullptr;
    std::int64_t hidden = 0;
    const std::uint8_t* gateCodes = nullptr;
    const std::uint32_t* gateScales = nullptr;
    const std::uint8_t* projectionCodes = nullptr;
    const std::uint32_t* projectionScales = nullptr;
    std::int64_t perLayer = 0;
    const float* perLayerInput = nullptr;
    float* out = nullptr;
    // Blocks of the one cluster: 0 = the largest of 16, 8, 4 and 2 that fits (pleBlockClusterSize);
    // otherwise one of those, refused when it does not fit.
    int clusterSize = 0;
    // sm_90+: programmatic dependent launch. The blocks request their weights before waiting for
    // the kernel before (the weights are constant), and read nothing else before the wait.
    bool programmaticLaunch = false;
};

// The cluster size the launcher uses for these shapes on the current device: 16, 8, 4 or 2
// blocks, each taking whole 16-row tiles of both weights (hidden and perLayer multiples of
// 16·size), the largest whose one cluster is resident and whose shared memory fits; 0 when none
// does (below sm_90, or shapes outside hidden ≤ 8192 and perLayer of 1, 2, 4 or 8 groups of 128).
int pleBlockClusterSize(const PleBlockParams& params);

// One launch of one cluster. InvalidArgument for null or misaligned pointers, aliasing the
// contract forbids, or a clusterSize other than 0, 2, 4, 8 and 16; Unsupported where
// pleBlockClusterSize is 0.
KernelStatus launchPleBlock(const PleBlockParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
