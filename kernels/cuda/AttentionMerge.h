// The split-attention merge shared by the decode merge kernel, the fused split kernel
// (AttentionDecode.cu) and the tensor-core pieces that merge in their own launch
// (AttentionPrefill.cu, AttentionPrefillParams::mergeCounters). Device code only.
//
// Partials layout (AttentionDecode.cu's): partO [rows][qHeads][splits][headDim] unnormalised
// Σ exp(s − m)·V per split, partML [rows][qHeads][splits][2] = (m, l) in natural units; an empty
// split has (−inf, 0), and the live splits form a prefix.
#pragma once

#include <cmath>
#include <cstdint>

#include "CudaCommon.h"

namespace gemma::cuda::mergedetail {

// The merge kernel's block (AttentionDecode.cu launches it with this many threads; the pieces'
// own merge uses as many of theirs, so the sums and the bits agree), and the most splits a merge
// takes (its weights' shared memory).
constexpr int kMergeThreads = 128;
constexpr int kMaxSplits = 512;

// Merges dims [dimBegin, dimEnd) of query head h of `row` from its splits' partials into out.
// Every thread of the block calls it (block-wide barriers). Partials are read through L2
// (__ldcg): in the fused form other blocks of the same launch wrote them. Each output element's
// arithmetic depends on its dim and the splits only (not on the thread or the dim range), so the
// fused merge (all dims in one block) and the merge kernel (dims spread over blocks) give the same
// bits.
// `weights` (at least `splits` floats) and `scratch` (32 floats) are shared memory.
// kT: the threads that merge (the merge kernel's block). GUARDED: the block may hold more threads
// than kT (the tensor-core pieces merging in their own launch, AttentionPrefill.cu); those take no
// splits and no dims but join every barrier, and the sums come out in the same order, so both
// give the merge kernel's bits.
template <int kT, bool GUARDED>
__device__ __forceinline__ void mergeHead(const float* __restrict__ partO, const float* __restrict__ partML, int splits,
                                          int qHeads, int headDim, int h, int row, float* __restrict__ out,
                                          std::int64_t outStride, float* weights, float* scratch, int dimBegin,
                                          int dimEnd) {
    // Latency-bound (a decode step merges a few dozen splits per head): every split's (m, l) is
    // read by its own thread, the maximum is a block reduction, and the O sum keeps four
    // independent accumulators so four partial loads are in flight per thread. (The first
    // version walked the splits serially in every thread: ~8 µs per launch on an H200.)
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const std::int64_t base = (static_cast<std::int64_t>(row) * qHeads + h) * splits;
    // Splits that received keys have m > -inf and form a prefix (pieces are laid out from the band's
    // start); only their O is read. The split count is sized for the longest band, so at a short
    // one most splits are empty: a 12b full layer at position ~160 has 21 of 256 (Nsight Compute:
    // this kernel took 89 µs per full layer when it read all 256, docs/PERFORMANCE.md version 6).
    const bool merging = !GUARDED || static_cast<int>(threadIdx.x) < kT;
    // The non-merging threads start past the end; the stride is the merging threads' count.
    const unsigned stride = GUARDED ? static_cast<unsigned>(kT) : blockDim.x;
    float mLocal = -INFINITY;
    float live = 0.0f;
    for (int s = merging ? static_cast<int>(threadIdx.x) : splits; s < splits; s += stride) {
        const float m = __ldcg(partML + (base + s) * 2);
        mLocal = fmaxf(mLocal, m);
        live += m > -INFINITY ? 1.0f : 0.0f;
    }
    mLocal = warpMax(mLocal);
    live = warpSum(live);
    if (lane == 0) {
        scratch[warp] = mLocal;
        scratch[16 + warp] = live;
    }
    __syncthreads();
    float mMax = -INFINITY;
    float liveSplits = 0.0f;
    for (int w = 0; w < (kT >> 5); ++w) {
        mMax = fmaxf(mMax, scratch[w]);
        liveSplits += scratch[16 + w];
    }
    const int active = static_cast<int>(liveSplits);
    float lPart = 0.0f;
    for (int s = merging ? static_cast<int>(threadIdx.x) : splits; s < splits; s += stride) {
        // An empty split has m = -inf: exp(-inf) = 0. All splits empty cannot happen (position p
        // itself is always in the band).
        const float w = expf(__ldcg(partML + (base + s) * 2) - mMax);
        weights[s] = w;
        lPart += w * __ldcg(partML + (base + s) * 2 + 1);
    }
    const float l = blockSum(lPart, scratch);  // its barriers also publish `weights`
    const float invL = 1.0f / l;
    const float* o = partO + base * headDim;
    for (int d = merging ? dimBegin + static_cast<int>(threadIdx.x) : dimEnd; d < dimEnd; d += stride) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int s = 0;
        // 16 loads in flight (at depth every split is live: a 12b full layer at 32K merged 256
        // splits at 4 loads a round trip in 89 µs, Nsight Compute, version 7), the same fma order
        // per accumulator as the 4-split steps below.
        for (; s + 16 <= active; s += 16) {
            float v[16];
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = __ldcg(o + static_cast<std::int64_t>(s + k) * headDim + d);
#pragma unroll
            for (int k = 0; k < 16; ++k) acc[k & 3] = fmaf(weights[s + k], v[k], acc[k & 3]);
        }
        for (; s + 4 <= active; s += 4) {
#pragma unroll
            for (int u = 0; u < 4; ++u)
                acc[u] = fmaf(weights[s + u], __ldcg(o + static_cast<std::int64_t>(s + u) * headDim + d), acc[u]);
        }
        for (; s < active; ++s) acc[0] = fmaf(weights[s], __ldcg(o + static_cast<std::int64_t>(s) * headDim + d), acc[0]);
        out[row * outStride + static_cast<std::int64_t>(h) * headDim + d] =
            ((acc[0] + acc[1]) + (acc[2] + acc[3])) * invL;
    }
    __syncthreads();  // weights and scratch are reused by the next head
}

}  // namespace gemma::cuda::mergedetail
