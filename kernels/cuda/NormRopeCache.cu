// Per token row and head: q = RoPE(rmsNorm(q; qNormWeight)); k = RoPE(rmsNorm(k; kNormWeight));
// v = rmsNorm(v) (no weight, no RoPE); K and V are written into the cache at slot
// position % capacity (rounded to the cache dtype), q to qOut (fp32). GEMMA4.md §2.5, §3.
//
// RoPE is half-split (NeoX): dim j pairs with j + d/2, angle = float(invFreq[j] · float(pos)),
//   y[j] = x[j]·cos − x[j+d/2]·sin,  y[j+d/2] = x[j+d/2]·cos + x[j]·sin,  for j < rotatedPairs;
// pairs j >= rotatedPairs pass through (proportional RoPE of full layers rotates 64 of 256).
// Positions come from device memory so that one captured CUDA graph serves every decode step.
//
// Work split: one warp per (row, head task); tasks are the qHeads query heads, then kvHeads K
// heads, then kvHeads V heads. Lane l holds pairs j = l + 32t (t < d/64), so both halves of each
// pair it rotates are in its registers.
//
// Preconditions (checked): headDim even and <= 512 (below 64, lanes past headDim/2 idle); qHeads >= 1; with k: kvHeads >= 1,
// caches non-null, capacity >= 1, kNormWeight non-null; rotatedPairs in [0, headDim/2];
// invFreq non-null when rotatedPairs > 0. A negative position writes nothing to the cache.
// Programmatic launch (sm_90+, when asked): every thread waits for the previous kernel first.
#include "NormRopeCache.h"

#include "CudaCommon.h"
#include "HeadNormRope.h"

namespace gemma::cuda {
namespace qkvdetail {

constexpr int kMaxPairsPerLane = 8;  // headDim 512

// ---- kernel ------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(128) qkvNormRopeKernel(QkvNormRopeParams p) {
    gridDependencyWait();  // every thread, idle ones too: q/k/v come from the matvec (PDL)
    allowDependentsToStart();
    const int tasksPerRow = p.qHeads + (p.k ? 2 * p.kvHeads : 0);
    const std::int64_t task =
        static_cast<std::int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (task >= static_cast<std::int64_t>(tasksPerRow) * p.rows) return;
    const int row = static_cast<int>(task / tasksPerRow);
    int head = static_cast<int>(task % tasksPerRow);
    const int d = p.headDim;

    enum Kind { kQ, kK, kV } kind;
    const float* src;
    const float* weight;
    if (head < p.qHeads) {
        kind = kQ;
        src = p.q + row * p.qStride + static_cast<std::int64_t>(head) * d;
        weight = p.qNormWeight;
    } else if (head < p.qHeads + p.kvHeads) {
        kind = kK;
        head -= p.qHeads;
        src = p.k + row * p.kvStride + static_cast<std::int64_t>(head) * d;
        weight = p.kNormWeight;
    } else {
        kind = kV;
        head -= p.qHeads + p.kvHeads;
        src = p.v + row * p.kvStride + static_cast<std::int64_t>(head) * d;
        weight = nullptr;
    }
    const int pos = p.positions[row];
    float a[kMaxPairsPerLane], b[kMaxPairsPerLane];
    headNormRope(src, weight, p.invFreq, p.rotatedPairs, kind != kV, pos, d, p.eps, a, b);
    if (kind == kQ) {
        float* dst = p.qOut + row * p.qStride + static_cast<std::int64_t>(head) * d;
        storeHead(d, a, b, [&](int j, float v) { dst[j] = v; });
        return;
    }
    if (pos < 0) return;
    const std::int64_t slot = pos % p.capacity;
    const std::int64_t base = row * p.cacheBatchStride + (slot * p.kvHeads + head) * d;
    void* cache = kind == kK ? p.kCache : p.vCache;
    storeHead(d, a, b, [&](int j, float v) { storeKv(cache, p.kvDtype, base + j, v); });
}

}  // namespace qkvdetail

// ---- host launcher ---------------------------------------------------------------------------------
KernelStatus launchQkvNormRope(const QkvNormRopeParams& p, cudaStream_t stream) {
    if (!p.q || !p.qOut || !p.qNormWeight || !p.positions) return KernelStatus::InvalidArgument;
    if (p.qHeads < 1 || p.rows < 1 || p.headDim < 2) return KernelStatus::InvalidArgument;
    if (p.headDim % 2 != 0 || p.headDim > 64 * qkvdetail::kMaxPairsPerLane)
        return KernelStatus::Unsupported;
    if (p.qStride < static_cast<std::int64_t>(p.qHeads) * p.headDim) return KernelStatus::InvalidArgument;
    if (p.rotatedPairs < 0 || p.rotatedPairs > p.headDim / 2) return KernelStatus::InvalidArgument;
    if (p.rotatedPairs > 0 && !p.invFreq) return KernelStatus::InvalidArgument;
    if (p.k) {
        if (!p.v || !p.kNormWeight || !p.kCache || !p.vCache || p.kvHeads < 1 || p.capacity < 1)
            return KernelStatus::InvalidArgument;
        if (p.kvStride < static_cast<std::int64_t>(p.kvHeads) * p.headDim)
            return KernelStatus::InvalidArgument;
        if (p.cacheBatchStride < 0) return KernelStatus::InvalidArgument;
    }
    const std::int64_t tasks =
        static_cast<std::int64_t>(p.qHeads + (p.k ? 2 * p.kvHeads : 0)) * p.rows;
    const std::int64_t blocks = (tasks + 3) / 4;
    return launchStatus(launchKernel(qkvdetail::qkvNormRopeKernel, dim3(static_cast<unsigned>(blocks)), dim3(128), 0,
                                     stream, p.programmaticLaunch, p));
}

}  // namespace gemma::cuda
