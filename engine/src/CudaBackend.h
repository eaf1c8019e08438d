// The CUDA backend: the forward pass of GEMMA4.md §2 as a sequence of hand-written kernels
// (kernels/cuda) over FP4/FP8 weights uploaded once from the package. Built only when a CUDA
// toolkit is found (GEMMA_HAVE_CUDA).
#pragma once

#include <memory>
#include <string>

#include "Backend.h"
#include "ModelWeights.h"
#include "Package.h"

namespace gemma {

// True when the CUDA runtime sees at least one device (false in builds without CUDA).
bool cudaDeviceAvailable();

// Fails with OutOfMemory when the weights, the KV cache for `allocation` and the workspaces do not
// fit in free device memory, with Unsupported for unquantized packages (the kernels stream FP4).
// From `options`: kvCache, cudaGraph, prefillGemmMinRows, programmaticLaunch, integerMatvec, tiledWeights, fusedAttention, fusedNorms, tensorCoreAttention, persistentLmHead, clusterAttention, fuseFullAttention, tensorCoreSlidingAttention, fusedPiecesNormRope, attentionPrefetch, gemmPrefillChunk, prefillInput, prefillDequantizeAhead, kernelTimeline.
Expected<std::unique_ptr<Backend>> makeCudaBackend(const Package& package, const ModelWeights& weights, int allocation,
                                                  const OpenOptions& options);

}  // namespace gemma
