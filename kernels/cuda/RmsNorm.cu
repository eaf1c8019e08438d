// RMSNorm fused with residual add, layer scalar and the following RMSNorm (see RmsNorm.h for the
// exact function). One block per row; fp32 throughout; sums of squares reduced in fp32 over the
// block.
//
// Register path (rows of n % 4 == 0, 16-byte aligned, n <= 4·1024·kMaxQuads): up to 1024 threads,
// each loads its K float4 pieces of branch, x and (K <= 2) both weights once, up front, and keeps
// them in registers through both reductions (why the weights too: the kernel's body). A decode
// step is one row, so this kernel is pure latency: the first version looped over the row three
// times with a dependent load per iteration (256 threads, 15 iterations, ~21 µs on an H200); all
// loads in flight at once it is a few µs, and the weights among them took the 31b's launches from
// 25.6 to 23.0 µs (+2.3 % decode on an H100, docs/PERFORMANCE.md version 38 step 1).
// Generic path (anything else): the looped version; the row is re-read by the same thread that
// wrote it, so no barrier is needed between the write of x and the second norm's read.
//
// Programmatic launch (sm_90+, when asked): every thread waits for the previous kernel first,
// then lets the next one start.
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
    gridDependencyWait();      // every thread: x and branch come from earlier kernels (PDL)
    allowDependentsToStart();  // a programmatically launched matvec may prefetch its weights now
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

// K float4 pieces per thread, x and branch (and for K <= 2 the weights) loaded before the first reduction.
template <int K>
__global__ void __launch_bounds__(1024) rmsNormResidualRegisterKernel(
    const float* __restrict__ branch, const float* __restrict__ branchWeight, float* residual,
    float layerScalar, const float* __restrict__ outWeight, float* __restrict__ out, std::int64_t n,
    std::int64_t stride, float eps) {
    __shared__ float scratch[32];
    const std::int64_t rowOffset = static_cast<std::int64_t>(blockIdx.x) * stride;
    const int quads = static_cast<int>(n / 4);
    const bool writeX = branch != nullptr || layerScalar != 1.0f;
    // The weights load up front where the registers allow (K <= 2: K = 4 would spill at the 64
    // registers of 1024 threads): written at their use, after a reduction, each would wait for
    // that reduction's barrier (the compiler keeps a global load below a barrier that precedes it
    // in the source: docs/PERFORMANCE.md version 37 step 3). No earlier kernel writes them (the
    // contract in RmsNorm.h), so they load even before the dependency wait, during the previous
    // kernel's tail, as the matvecs' first weights do.
    constexpr bool kWeightsFirst = K <= 2;
    // Weight w's 4 values at quad q (1 when w is null or q is past the row).
    const auto weightAt = [quads](const float* w, int q) {
        return w && q < quads ? __ldg(reinterpret_cast<const float4*>(w + 4 * q)) : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    };
    float4 xv[K], bv[K], bw[kWeightsFirst ? K : 1], ow[kWeightsFirst ? K : 1];
#pragma unroll
    for (int k = 0; k < K && kWeightsFirst; ++k) {
        const int q = threadIdx.x + k * blockDim.x;
        bw[k] = weightAt(branch ? branchWeight : nullptr, q);
        ow[k] = weightAt(out ? outWeight : nullptr, q);
    }
    gridDependencyWait();      // every thread: x and branch come from earlier kernels (PDL)
    allowDependentsToStart();  // a programmatically launched matvec may prefetch its weights now
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int q = threadIdx.x + k * blockDim.x;
        const bool live = q < quads;
        xv[k] = live ? *reinterpret_cast<const float4*>(residual + rowOffset + 4 * q) : zero;
        bv[k] = live && branch ? __ldg(reinterpret_cast<const float4*>(branch + rowOffset + 4 * q)) : zero;
    }
    if (branch) {
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k)
            ss += bv[k].x * bv[k].x + bv[k].y * bv[k].y + bv[k].z * bv[k].z + bv[k].w * bv[k].w;
        const float inv = rsqrtf(blockSum(ss, scratch) / static_cast<float>(n) + eps);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const float4 w = kWeightsFirst ? bw[k] : weightAt(branchWeight, threadIdx.x + k * blockDim.x);
            xv[k].x += bv[k].x * inv * w.x;
            xv[k].y += bv[k].y * inv * w.y;
            xv[k].z += bv[k].z * inv * w.z;
            xv[k].w += bv[k].w * inv * w.w;
        }
    }
    float ss2 = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        xv[k].x *= layerScalar;
        xv[k].y *= layerScalar;
        xv[k].z *= layerScalar;
        xv[k].w *= layerScalar;
        const int q = threadIdx.x + k * blockDim.x;
        if (writeX && q < quads) *reinterpret_cast<float4*>(residual + rowOffset + 4 * q) = xv[k];
        ss2 += xv[k].x * xv[k].x + xv[k].y * xv[k].y + xv[k].z * xv[k].z + xv[k].w * xv[k].w;
    }
    if (!out) return;  // uniform across the block
    const float inv = rsqrtf(blockSum(ss2, scratch) / static_cast<float>(n) + eps);
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int q = threadIdx.x + k * blockDim.x;
        if (q >= quads) continue;
        const float4 w = kWeightsFirst ? ow[k] : weightAt(outWeight, q);
        *reinterpret_cast<float4*>(out + rowOffset + 4 * q) =
            make_float4(xv[k].x * inv * w.x, xv[k].y * inv * w.y, xv[k].z * inv * w.z, xv[k].w * inv * w.w);
    }
}

constexpr int kMaxQuads = 4;  // float4 pieces per thread on the register path: n <= 16384

}  // namespace rmsdetail

// ---- host launcher ---------------------------------------------------------------------------------
KernelStatus launchRmsNormResidual(const RmsNormParams& p, cudaStream_t stream) {
    if (!p.residual || p.n < 1 || p.stride < p.n || p.rows < 1) return KernelStatus::InvalidArgument;
    if (p.out && (p.out == p.residual || p.out == p.branch)) return KernelStatus::InvalidArgument;
    using namespace rmsdetail;
    const auto vectorOk = [&](const void* q) { return q == nullptr || aligned16(q); };
    const std::int64_t quads = p.n / 4;
    // Register path: the fewest pieces per thread that cover the row with at most 1024 threads,
    // then the fewest threads (whole warps) for that count. Both kernels take the same arguments.
    const bool registerPath = p.n % 4 == 0 && p.stride % 4 == 0 && quads <= 1024 * kMaxQuads &&
                              vectorOk(p.branch) && vectorOk(p.branchWeight) && vectorOk(p.residual) &&
                              vectorOk(p.outWeight) && vectorOk(p.out);
    const int k = static_cast<int>((quads + 1023) / 1024);
    const auto kernel = !registerPath ? &rmsNormResidualKernel
                        : k == 1      ? &rmsNormResidualRegisterKernel<1>
                        : k == 2      ? &rmsNormResidualRegisterKernel<2>
                                      : &rmsNormResidualRegisterKernel<kMaxQuads>;
    const int threads = registerPath ? static_cast<int>(((quads + k - 1) / k + 31) / 32 * 32) : 256;
    return launchStatus(launchKernel(kernel, dim3(static_cast<unsigned>(p.rows)), dim3(static_cast<unsigned>(threads)), 0,
                                     stream, p.programmaticLaunch, p.branch, p.branchWeight, p.residual, p.layerScalar,
                                     p.outWeight, p.out, p.n, p.stride, p.eps));
}

}  // namespace gemma::cuda
