// Embedding gather: out[r][c] = (e4m3(codes[id][c]) · rowScale[id]) · embedScale, id = tokenIds[r],
// each product rounded to fp32 (the first is WeightFormats' definition of a stored element).
// Token ids are read from device memory so the step can be a CUDA graph. An id outside [0, V)
// cannot be reported from the device: its row is written as NaN (visible, never an out-of-bounds
// read). One block of 256 threads per row.
//
// The row's codes are read 16 at a time per thread, every load of a pass issued before any is
// used, so a row costs one DRAM round trip per pass of 12288 codes: one pass for every preset's
// token row (up to the 31b's 5376) and per-layer-input row (e2b 35 · 256, e4b 42 · 256). One
// byte per thread per step made it a chain of hidden / 256 dependent round trips: 8.7 µs per
// launch at the 12b's 3840, and 12.7 µs per launch on average over the e4b's two rows per step
// (docs/PERFORMANCE.md, version 48's timelines). Where a row is not 16-byte aligned (hidden % 16
// != 0, or the table's base) the byte loop runs instead; every element is the same expression
// either way, so the same bits.
//
// Layouts: codes [V][H] bytes, rowScales [V] fp32, out [rows][outStride] fp32.
// Preconditions (checked): non-null pointers, vocab >= 1, hidden >= 1, outStride >= hidden.
// Programmatic launch (sm_90+, when asked): every thread waits for the previous kernel first.
#include "Embedding.h"

#include <kernels/WeightFormats.h>

#include "CudaCommon.h"

namespace gemma::cuda {
namespace embeddetail {

// ---- kernel ------------------------------------------------------------------------------------------
constexpr int kThreads = 256;
constexpr int kChunksPerThread = 3;  // 16-code chunks per thread per pass: 12288 codes

// One stored element (WeightFormats' definition) times the embedding scale, in this order.
__device__ __forceinline__ float embedded(std::uint8_t code, float scale, float embedScale) {
    return (formats::e4m3ToFloat(code) * scale) * embedScale;
}

__global__ void __launch_bounds__(kThreads) embeddingGatherKernel(
    const std::uint8_t* __restrict__ codes, const float* __restrict__ rowScales, std::int64_t vocab,
    std::int64_t hidden, const int* __restrict__ tokenIds, float embedScale, float* __restrict__ out,
    std::int64_t outStride) {
    gridDependencyWait();  // out may still be read by the kernel before (PDL)
    allowDependentsToStart();
    const int row = blockIdx.x;
    const int id = tokenIds[row];
    float* dst = out + row * outStride;
    if (id < 0 || id >= vocab) {
        for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = __int_as_float(0x7fc00000);
        return;
    }
    const std::uint8_t* src = codes + static_cast<std::int64_t>(id) * hidden;
    const float scale = rowScales[id];
    // Block-uniform: whether this row's codes can be read 16 bytes at a time.
    const bool wideLoads = (reinterpret_cast<std::uintptr_t>(src) & 15u) == 0 && hidden % 16 == 0;
    if (!wideLoads) {
        for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = embedded(src[c], scale, embedScale);
        return;
    }
    const bool wideStores = (reinterpret_cast<std::uintptr_t>(dst) & 15u) == 0;
    const std::int64_t chunks = hidden / 16;
    const uint4* src16 = reinterpret_cast<const uint4*>(src);
    for (std::int64_t base = 0; base < chunks; base += kThreads * kChunksPerThread) {
        uint4 word[kChunksPerThread];
#pragma unroll
        for (int k = 0; k < kChunksPerThread; ++k) {
            const std::int64_t c = base + k * kThreads + threadIdx.x;
            word[k] = c < chunks ? src16[c] : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int k = 0; k < kChunksPerThread; ++k) {
            const std::int64_t c = base + k * kThreads + threadIdx.x;
            if (c >= chunks) continue;
            const std::uint32_t w[4] = {word[k].x, word[k].y, word[k].z, word[k].w};
            float v[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) v[j] = embedded(static_cast<std::uint8_t>(w[j / 4] >> (8 * (j % 4))), scale, embedScale);
            float* d = dst + c * 16;
            if (wideStores) {
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    reinterpret_cast<float4*>(d)[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 16; ++j) d[j] = v[j];
            }
        }
    }
}

}  // namespace embeddetail

// ---- host launcher ---------------------------------------------------------------------------------
KernelStatus launchEmbeddingGather(const EmbeddingParams& p, cudaStream_t stream) {
    if (!p.codes || !p.rowScales || !p.tokenIds || !p.out) return KernelStatus::InvalidArgument;
    if (p.vocab < 1 || p.hidden < 1 || p.rows < 1 || p.outStride < p.hidden)
        return KernelStatus::InvalidArgument;
    return launchStatus(launchKernel(embeddetail::embeddingGatherKernel, dim3(static_cast<unsigned>(p.rows)), dim3(embeddetail::kThreads),
                                     0, stream, p.programmaticLaunch, p.codes, p.rowScales, p.vocab, p.hidden,
                                     p.tokenIds, p.embedScale, p.out, p.outStride));
}

}  // namespace gemma::cuda
