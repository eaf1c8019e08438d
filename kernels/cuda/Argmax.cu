// Argmax per row: the smallest index holding the largest logit (ties go to the lower index, as
// torch.argmax and std::max_element). NaN entries are ignored (treated as −inf); a row of only
// NaN/−inf yields index 0.
//
// Why on the device: greedy decoding then copies 4 bytes per step instead of the 1 MB logit row,
// and the step stays one CUDA graph. Sampling with top-k copies the row's best entries instead
// (TopK.cu) and draws on the host (engine Sampler::sampleFromBest, one sampler implementation for
// both backends); other sampling settings copy the whole row.
//
// One launch: grid (blocksPerRow, rows); each block reduces a contiguous slice to (value, index),
// writes it to the workspace, and the last block of a row to finish (threadfence + atomic
// counter) reduces the partials, writes the result and resets the counter to zero.
//
// Greedy feedback (ArgmaxParams::position/history): the same last block, after writing the id,
// records it at history[p % historySize] and stores p + 1 to *position (p read there first).
//
// Layouts: logits [rows][stride] fp32; workspace = rows int counters, then rows × blocksPerRow
// (float, int) partials. Preconditions (checked): n >= 1, stride >= n, workspace large enough.
#include "Argmax.h"

#include <cfloat>

#include "CudaCommon.h"

namespace gemma::cuda {
namespace argmaxdetail {

constexpr int kThreads = 256;
// Each thread issues kLoadsPerThread loads before it compares any, so a block's slice of the row
// (just written by the lm_head, in L2) costs one L2 round trip per kPerBlock entries: 128 blocks
// and one round trip over a 262144-entry row. 32 blocks of 8192 (until docs/PERFORMANCE.md
// version 49) took eight round trips of four loads each, ≈ 6.5 µs per decode step on version 48's
// kernel timeline.
constexpr int kLoadsPerThread = 8;
constexpr std::int64_t kPerBlock = kThreads * kLoadsPerThread;  // 2048
constexpr int kMaxBlocksPerRow = 256;

// ---- device helpers ------------------------------------------------------------------------------
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void blockArgmax(float& v, int& i, float* sv, int* si) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, off);
        const int oi = __shfl_xor_sync(0xffffffffu, i, off);
        if (better(ov, oi, v, i)) { v = ov; i = oi; }
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) { sv[warp] = v; si[warp] = i; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w)
            if (better(sv[w], si[w], v, i)) { v = sv[w]; i = si[w]; }
    }
}

// ---- kernel ------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) argmaxKernel(const float* __restrict__ logits,
                                                         std::int64_t n, std::int64_t stride,
                                                         int* counters, float* partV, int* partI,
                                                         int* outIndex, float* outValue, int* position,
                                                         int* history, int historySize) {
    __shared__ float sv[kThreads / 32];
    __shared__ int si[kThreads / 32];
    __shared__ bool isLast;
    const int row = blockIdx.y;
    const int blocks = gridDim.x;
    const std::int64_t per = (n + blocks - 1) / blocks;
    const std::int64_t begin = blockIdx.x * per;
    const std::int64_t end = begin + per < n ? begin + per : n;
    const float* src = logits + row * stride;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    // Longer slices (rows over kMaxBlocksPerRow · kPerBlock entries) take several passes.
    for (std::int64_t base = begin + threadIdx.x; base < end; base += kPerBlock) {
        float v[kLoadsPerThread];
#pragma unroll
        for (int j = 0; j < kLoadsPerThread; ++j) {
            const std::int64_t k = base + static_cast<std::int64_t>(j) * kThreads;
            v[j] = k < end ? src[k] : 0.0f;
        }
        // In increasing k, as one load at a time would; the result does not depend on the order
        // anyway (the largest value, then the smallest index among equals).
#pragma unroll
        for (int j = 0; j < kLoadsPerThread; ++j) {
            const std::int64_t k = base + static_cast<std::int64_t>(j) * kThreads;
            const float value = v[j] != v[j] ? -INFINITY : v[j];
            if (k < end && better(value, static_cast<int>(k), bv, bi)) { bv = value; bi = static_cast<int>(k); }
        }
    }
    blockArgmax(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        partV[row * blocks + blockIdx.x] = bv;
        partI[row * blocks + blockIdx.x] = bi;
        __threadfence();
        isLast = atomicAdd(counters + row, 1) == blocks - 1;
    }
    __syncthreads();
    if (!isLast) return;
    __threadfence();
    bv = -INFINITY;
    bi = 0x7fffffff;
    for (int b = threadIdx.x; b < blocks; b += kThreads) {
        const float v = __ldcg(partV + row * blocks + b);
        const int i = __ldcg(partI + row * blocks + b);
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    blockArgmax(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        if (bi == 0x7fffffff) bi = 0;
        outIndex[row] = bi;
        if (outValue) outValue[row] = bv;
        if (position) {
            const int p = *position;
            history[p % historySize] = bi;
            *position = p + 1;
        }
        counters[row] = 0;
    }
}

inline int blocksPerRow(std::int64_t n) {
    std::int64_t b = (n + kPerBlock - 1) / kPerBlock;
    if (b < 1) b = 1;
    if (b > kMaxBlocksPerRow) b = kMaxBlocksPerRow;
    return static_cast<int>(b);
}

}  // namespace argmaxdetail

// ---- host launcher ---------------------------------------------------------------------------------
std::size_t argmaxWorkspaceBytes(const ArgmaxParams& p) {
    if (p.rows < 1 || p.n < 1) return 0;
    const std::size_t blocks = argmaxdetail::blocksPerRow(p.n);
    return sizeof(int) * p.rows + (sizeof(float) + sizeof(int)) * blocks * p.rows;
}

KernelStatus launchArgmax(const ArgmaxParams& p, cudaStream_t stream) {
    if (!p.logits || !p.outIndex || !p.workspace) return KernelStatus::InvalidArgument;
    if (p.n < 1 || p.n > 0x7ffffffe || p.stride < p.n || p.rows < 1) return KernelStatus::InvalidArgument;
    if (p.workspaceBytes < argmaxWorkspaceBytes(p)) return KernelStatus::InvalidArgument;
    if ((reinterpret_cast<std::uintptr_t>(p.workspace) & 3u) != 0) return KernelStatus::InvalidArgument;
    if ((p.position != nullptr) != (p.history != nullptr)) return KernelStatus::InvalidArgument;
    if (p.position && (p.rows != 1 || p.historySize < 1)) return KernelStatus::InvalidArgument;
    const int blocks = argmaxdetail::blocksPerRow(p.n);
    int* counters = static_cast<int*>(p.workspace);
    float* partV = reinterpret_cast<float*>(counters + p.rows);
    int* partI = reinterpret_cast<int*>(partV + static_cast<std::size_t>(blocks) * p.rows);
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.rows));
    argmaxdetail::argmaxKernel<<<grid, argmaxdetail::kThreads, 0, stream>>>(
        p.logits, p.n, p.stride, counters, partV, partI, p.outIndex, p.outValue, p.position, p.history, p.historySize);
    return launchStatus();
}

}  // namespace gemma::cuda
