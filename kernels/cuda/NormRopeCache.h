// q/k RMSNorm + half-split RoPE, v RMSNorm, and the K/V cache write. See NormRopeCache.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"
#include "KvCache.h"

namespace gemma::cuda {

struct QkvNormRopeParams {
    // Projection outputs, fp32, one row per token: q [rows][qStride] = qHeads × headDim,
    // k/v [rows][kvStride] = kvHeads × headDim. k == nullptr: a KV-shared layer (q only, no cache
    // write). v == k is allowed (attention_k_eq_v: V is v_norm of the raw K projection).
    const float* q = nullptr;
    float* qOut = nullptr;  // may equal q (in place)
    std::int64_t qStride = 0;
    const float* k = nullptr;
    const float* v = nullptr;
    std::int64_t kvStride = 0;
    const float* qNormWeight = nullptr;  // [headDim]
    const float* kNormWeight = nullptr;  // [headDim]; v_norm is unweighted
    // [headDim/2] inverse frequencies (ReferenceOps ropeInverseFrequencies); only pairs
    // j < rotatedPairs rotate (the others have frequency 0 and are identity).
    const float* invFreq = nullptr;
    int rotatedPairs = 0;
    const int* positions = nullptr;  // device [rows]: absolute position of each token (>= 0)
    void* kCache = nullptr;          // [capacity][kvHeads][headDim] of kvDtype
    void* vCache = nullptr;
    KvDtype kvDtype = KvDtype::BF16;
    std::int64_t capacity = 0;
    std::int64_t cacheBatchStride = 0;  // elements between row r's and r+1's caches; 0 = one shared cache
    int qHeads = 0;
    int kvHeads = 0;
    int headDim = 0;  // a multiple of 64, at most 512
    int rows = 1;
    float eps = 1e-6f;
    // sm_90+: programmatic dependent launch (may start during the previous kernel; waits for it
    // before its first global access). Ignored elsewhere.
    bool programmaticLaunch = false;
};

KernelStatus launchQkvNormRope(const QkvNormRopeParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
