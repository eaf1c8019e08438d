// GeGLU elementwise over the fused gate|up GEMM output of a prefill chunk:
//   y[r][j] = gelu_tanh(in[r][j]) · in[r][width + j],  j < width.
// gelu_tanh is the formula of Fp4Matvec.cu's geluTanh, written the same way (fp32, tanhf) so the
// GEMM path and the matvec path apply the same function. One thread handles 4 consecutive columns
// per grid-stride step (16-byte loads and stores when the layout allows). In place (y == in,
// ldOut == ldIn) is safe: column j of a row is read and written by one thread only.
#include "GegluElementwise.h"

#include "CudaCommon.h"

namespace gemma::cuda {
namespace gegluew {

constexpr int kThreads = 256;


template <bool VEC>
__global__ void __launch_bounds__(kThreads) gegluElementwiseKernel(
    const float* in, std::int64_t ldIn, std::uint32_t rows, std::int64_t width,
    std::uint32_t piecesPerRow, float* y, std::int64_t ldOut) {
    const std::int64_t total = static_cast<std::int64_t>(rows) * piecesPerRow;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
         i += stride) {
        const std::uint32_t row = static_cast<std::uint32_t>(i / piecesPerRow);
        const std::int64_t col = (i - static_cast<std::int64_t>(row) * piecesPerRow) * 4;
        const float* gate = in + row * ldIn + col;
        const float* up = gate + width;
        float* out = y + row * ldOut + col;
        if (VEC && col + 4 <= width) {
            const float4 g = *reinterpret_cast<const float4*>(gate);
            const float4 u = *reinterpret_cast<const float4*>(up);
            float4 r;
            r.x = geluTanh(g.x) * u.x;
            r.y = geluTanh(g.y) * u.y;
            r.z = geluTanh(g.z) * u.z;
            r.w = geluTanh(g.w) * u.w;
            *reinterpret_cast<float4*>(out) = r;
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (col + k >= width) break;
                out[k] = geluTanh(gate[k]) * up[k];
            }
        }
    }
}

// Grid-stride launch over `total` pieces, at most one resident wave (oneWaveBlocks).
template <bool VEC, typename... Args>
KernelStatus launch(const DeviceFacts& facts, std::int64_t total, cudaStream_t stream, Args... args) {
    thread_local OccupancyCache cache;
    unsigned blocks = 0;
    const KernelStatus status =
        oneWaveBlocks(gegluElementwiseKernel<VEC>, kThreads, (total + kThreads - 1) / kThreads, facts, cache, blocks);
    if (status != KernelStatus::Ok) return status;
    gegluElementwiseKernel<VEC><<<blocks, kThreads, 0, stream>>>(args...);
    return launchStatus();
}

}  // namespace gegluew

KernelStatus launchGegluElementwise(const GegluElementwiseParams& p, cudaStream_t stream) {
    if (!p.gateUp || !p.y) return KernelStatus::InvalidArgument;
    if (p.rows < 1 || p.width < 1 || p.ldIn < 2 * p.width || p.ldOut < p.width)
        return KernelStatus::InvalidArgument;
    const std::int64_t piecesPerRow = (p.width + 3) / 4;
    if (p.rows > 0x7fffffff || piecesPerRow > 0x7fffffff) return KernelStatus::Unsupported;
    // Overlap rule: in place (same base, same stride) or disjoint.
    const bool inPlace = static_cast<const void*>(p.y) == static_cast<const void*>(p.gateUp);
    if (inPlace && p.ldOut != p.ldIn) return KernelStatus::InvalidArgument;
    if (!inPlace && rangesOverlap(p.gateUp, ((p.rows - 1) * p.ldIn + 2 * p.width) * 4, p.y, ((p.rows - 1) * p.ldOut + p.width) * 4))
        return KernelStatus::InvalidArgument;
    const bool vec = aligned16(p.gateUp) && aligned16(p.y) && p.ldIn % 4 == 0 && p.ldOut % 4 == 0 &&
                     p.width % 4 == 0;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    const std::int64_t total = p.rows * piecesPerRow;
    const auto rows = static_cast<std::uint32_t>(p.rows);
    const auto pieces = static_cast<std::uint32_t>(piecesPerRow);
    if (vec) return gegluew::launch<true>(facts, total, stream, p.gateUp, p.ldIn, rows, p.width, pieces, p.y, p.ldOut);
    return gegluew::launch<false>(facts, total, stream, p.gateUp, p.ldIn, rows, p.width, pieces, p.y, p.ldOut);
}

}  // namespace gemma::cuda
