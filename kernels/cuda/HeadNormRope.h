// One attention head's RMSNorm and half-split RoPE, done by one warp: the piece the q/k/v
// norm + RoPE kernel (NormRopeCache.cu) and the fused attention prologues (AttentionDecode.cu,
// AttentionPrefill.cu) share, so all give the same bits. The math is GEMMA4.md §2.5 and §3 (see NormRopeCache.cu).
// Device-only, header-only (a harness may #include several production .cu files).
// "The same bits" rests on the compiler contracting the multiply-adds below alike in every caller
// (run-time head dim in NormRopeCache.cu, compile-time in the attention kernels): a refactor of
// this function once broke it at head dims 32 and 64, and spelling the roundings out with
// __fmul_rn / __fmaf_rn fixed it but cost 0.3 % of the 12b's decode step (docs/PERFORMANCE.md
// version 30 step 2). Any edit here must pass test_attention's fused checks at every head dim.
#pragma once

#include <kernels/WeightFormats.h>

#include "CudaCommon.h"
#include "KvCache.h"

namespace gemma::cuda {

// y = rmsNorm(x over d dims) · weight (weight null: 1); then, when `rotate`, pairs
// j < rotatedPairs turn by the angle invFreq[j] · pos. Lane l holds pairs j = l + 32t for
// t < ceil(d/64) (lanes past d/2 hold nothing): a[t] = y[j], b[t] = y[j + d/2]. kPairs >= that
// count. Every global read is issued before the reduction: the op is a chain of latencies.
template <int kPairs>
__device__ __forceinline__ void headNormRope(const float* src, const float* weight, const float* invFreq, int rotatedPairs,
                                             bool rotate, int pos, int d, float eps, float (&a)[kPairs], float (&b)[kPairs]) {
    const int lane = threadIdx.x & 31;
    const int half = d / 2;
    const int pairsPerLane = (half + 31) / 32;
    float wa[kPairs], wb[kPairs], freq[kPairs];
    float ss = 0.0f;
#pragma unroll
    for (int t = 0; t < kPairs; ++t) {
        if (t < pairsPerLane && lane + 32 * t < half) {
            const int j = lane + 32 * t;
            a[t] = src[j];
            b[t] = src[j + half];
            wa[t] = weight ? weight[j] : 1.0f;
            wb[t] = weight ? weight[j + half] : 1.0f;
            freq[t] = rotate && j < rotatedPairs ? invFreq[j] : 0.0f;
            ss = fmaf(a[t], a[t], ss);
            ss = fmaf(b[t], b[t], ss);
        }
    }
    ss = warpSum(ss);
    const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
#pragma unroll
    for (int t = 0; t < kPairs; ++t) {
        if (t < pairsPerLane && lane + 32 * t < half) {
            const int j = lane + 32 * t;
            float x0 = a[t] * inv * wa[t];
            float x1 = b[t] * inv * wb[t];
            if (rotate && j < rotatedPairs) {
                const float angle = freq[t] * static_cast<float>(pos);
                float s, c;
                sincosf(angle, &s, &c);
                const float y0 = x0 * c - x1 * s;
                const float y1 = x1 * c + x0 * s;
                x0 = y0;
                x1 = y1;
            }
            a[t] = x0;
            b[t] = x1;
        }
    }
}

// Stores a head held as headNormRope leaves it: element j of the head at dst[j] through store(j, value).
template <int kPairs, typename Store>
__device__ __forceinline__ void storeHead(int d, const float (&a)[kPairs], const float (&b)[kPairs], Store&& store) {
    const int lane = threadIdx.x & 31;
    const int half = d / 2;
    const int pairsPerLane = (half + 31) / 32;
#pragma unroll
    for (int t = 0; t < kPairs; ++t) {
        if (t < pairsPerLane && lane + 32 * t < half) {
            store(lane + 32 * t, a[t]);
            store(lane + 32 * t + half, b[t]);
        }
    }
}

// One K/V cache element in the cache's dtype (bf16, fp16: round to nearest even).
__device__ __forceinline__ void storeKv(void* cache, KvDtype dtype, std::int64_t index, float v) {
    if (dtype == KvDtype::F32) static_cast<float*>(cache)[index] = v;
    else if (dtype == KvDtype::F16) static_cast<__half*>(cache)[index] = floatToKv<__half>(v);
    else static_cast<std::uint16_t*>(cache)[index] = floatToKv<std::uint16_t>(v);
}

}  // namespace gemma::cuda
