// One attention head's RMSNorm and half-split RoPE, done by one warp: the piece the q/k/v
// norm + RoPE kernel (NormRopeCache.cu) and the fused attention prologue (AttentionDecode.cu)
// share, so both give the same bits. The math is GEMMA4.md §2.5 and §3 (see NormRopeCache.cu).
// Device-only, header-only (a harness may #include several production .cu files).
#pragma once

#include <kernels/WeightFormats.h>

#include "CudaCommon.h"
#include "KvCache.h"

namespace gemma::cuda {

// y = rmsNorm(x over d dims) · weight (weight null: 1); then, when `rotate`, pairs
// j < rotatedPairs turn by the angle invFreq[j] · pos. Lane l holds pairs j = l + 32t for
// t < ceil(d/64) (lanes past d/2 hold nothing): a[t] = y[j], b[t] = y[j + d/2]. kPairs >= that
// count. The op is a chain of latencies, so it comes in pieces a caller can issue early:
// HeadNormWeights (the norm weight and the frequencies: model constants, which a kernel may read
// before its programmatic dependency wait), loadHeadValues (the head itself), finishHeadNormRope.
// headNormRope does all three with every global read issued before the reduction.
template <int kPairs>
struct HeadNormWeights {
    float wa[kPairs], wb[kPairs], freq[kPairs];
    bool rotate = false;
    int rotatedPairs = 0;
};

__device__ __forceinline__ int headPairsPerLane(int d) { return (d / 2 + 31) / 32; }
__device__ __forceinline__ bool headPairHeld(int t, int d) {
    return t < headPairsPerLane(d) && (threadIdx.x & 31) + 32 * t < d / 2;
}

template <int kPairs>
__device__ __forceinline__ HeadNormWeights<kPairs> loadHeadNormWeights(const float* weight, const float* invFreq, int rotatedPairs,
                                                                       bool rotate, int d) {
    const int lane = threadIdx.x & 31;
    const int half = d / 2;
    HeadNormWeights<kPairs> w;
    w.rotate = rotate;
    w.rotatedPairs = rotatedPairs;
#pragma unroll
    for (int t = 0; t < kPairs; ++t) {
        if (headPairHeld(t, d)) {
            const int j = lane + 32 * t;
            w.wa[t] = weight ? weight[j] : 1.0f;
            w.wb[t] = weight ? weight[j + half] : 1.0f;
            w.freq[t] = rotate && j < rotatedPairs ? invFreq[j] : 0.0f;
        }
    }
    return w;
}

template <int kPairs>
__device__ __forceinline__ void loadHeadValues(const float* src, int d, float (&a)[kPairs], float (&b)[kPairs]) {
    const int lane = threadIdx.x & 31;
    const int half = d / 2;
#pragma unroll
    for (int t = 0; t < kPairs; ++t) {
        if (headPairHeld(t, d)) {
            const int j = lane + 32 * t;
            a[t] = src[j];
            b[t] = src[j + half];
        }
    }
}

// a, b: the head as loadHeadValues left it, normed and rotated in place.
template <int kPairs>
__device__ __forceinline__ void finishHeadNormRope(const HeadNormWeights<kPairs>& w, int pos, int d, float eps, float (&a)[kPairs],
                                                   float (&b)[kPairs]) {
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
#pragma unroll
    for (int t = 0; t < kPairs; ++t) {
        if (headPairHeld(t, d)) {
            ss = fmaf(a[t], a[t], ss);
            ss = fmaf(b[t], b[t], ss);
        }
    }
    ss = warpSum(ss);
    const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
#pragma unroll
    for (int t = 0; t < kPairs; ++t) {
        if (headPairHeld(t, d)) {
            const int j = lane + 32 * t;
            float x0 = a[t] * inv * w.wa[t];
            float x1 = b[t] * inv * w.wb[t];
            if (w.rotate && j < w.rotatedPairs) {
                const float angle = w.freq[t] * static_cast<float>(pos);
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

template <int kPairs>
__device__ __forceinline__ void headNormRope(const float* src, const float* weight, const float* invFreq, int rotatedPairs,
                                             bool rotate, int pos, int d, float eps, float (&a)[kPairs], float (&b)[kPairs]) {
    const HeadNormWeights<kPairs> w = loadHeadNormWeights<kPairs>(weight, invFreq, rotatedPairs, rotate, d);
    loadHeadValues(src, d, a, b);
    finishHeadNormRope(w, pos, d, eps, a, b);
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

// One K/V cache element in the cache's dtype (bf16: round to nearest even).
__device__ __forceinline__ void storeKv(void* cache, KvDtype dtype, std::int64_t index, float v) {
    if (dtype == KvDtype::F32) {
        static_cast<float*>(cache)[index] = v;
    } else {
        static_cast<std::uint16_t*>(cache)[index] = formats::floatToBf16(v);
    }
}

}  // namespace gemma::cuda
