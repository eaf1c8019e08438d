// RMSNorm fused with residual add, layer scalar and the following RMSNorm (see RmsNorm.h for the
// exact function). One block of 256 threads per row; fp32 throughout; sums of squares reduced in
// fp32 over the block. The row is re-read by the same thread that wrote it, so no barrier is
// needed between the write of x and the second norm's read.
//
// Layouts: every buffer [rows][stride] fp32; weights [n] fp32.
// Preconditions (checked): residual non-null, n >= 1, stride >= n, rows >= 1.
#include "RmsNorm.h"

#include "CudaCommon.h"

namespace gemma::cuda {
namespace rmsdetail {

// ---- kernel ------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(256) rmsNormResidualKernel(
    const float* __restrict__ branch, const float* __restrict__ branchWeight, float* residual,
    float layerScalar, const float* __restrict__ outWeight, float* __restrict__ out, std::int64_t n,
    std::int64_t stride, float eps) {
    __shared__ float scratch[32];
    const std::int64_t rowOffset = static_cast<std::int64_t>(blockIdx.x) * stride;
    float* x = residual + rowOffset;
    const bool writeX = branch != nullptr || layerScalar != 1.0f;

    float branchInv = 0.0f;
    if (branch) {
        const float* a = branch + rowOffset;
        float ss = 0.0f;
        for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(a[i], a[i], ss);
        ss = blockSum(ss, scratch);
        branchInv = rsqrtf(ss / static_cast<float>(n) + eps);
    }
    float ss2 = 0.0f;
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = x[i];
        if (branch) {
            const float w = branchWeight ? branchWeight[i] : 1.0f;
            v += branch[rowOffset + i] * branchInv * w;
        }
        v *= layerScalar;
        if (writeX) x[i] = v;
        ss2 = fmaf(v, v, ss2);
    }
    if (!out) return;  // uniform across the block
    ss2 = blockSum(ss2, scratch);
    const float inv = rsqrtf(ss2 / static_cast<float>(n) + eps);
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = writeX ? x[i] : x[i] * layerScalar;
        const float w = outWeight ? outWeight[i] : 1.0f;
        out[rowOffset + i] = v * inv * w;
    }
}

}  // namespace rmsdetail

// ---- host launcher ---------------------------------------------------------------------------------
KernelStatus launchRmsNormResidual(const RmsNormParams& p, cudaStream_t stream) {
    if (!p.residual || p.n < 1 || p.stride < p.n || p.rows < 1) return KernelStatus::InvalidArgument;
    if (p.out && (p.out == p.residual || p.out == p.branch)) return KernelStatus::InvalidArgument;
    rmsdetail::rmsNormResidualKernel<<<static_cast<unsigned>(p.rows), 256, 0, stream>>>(
        p.branch, p.branchWeight, p.residual, p.layerScalar, p.outWeight, p.out, p.n, p.stride,
        p.eps);
    return launchStatus();
}

}  // namespace gemma::cuda
