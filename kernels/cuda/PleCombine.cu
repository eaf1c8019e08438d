// PLE combine: out = (projected + identity) · scale, elementwise over [rows][n] fp32.
// Preconditions: non-null buffers, n > 0, rows > 0. One thread per element, grid-stride loop.
// Programmatic launch (sm_90+, when asked): every thread waits for the previous kernel first.
#include "PerLayerInputs.h"

#include "CudaCommon.h"

namespace gemma::cuda {
namespace {

__global__ void pleCombineKernel(const float* __restrict__ projected, const float* __restrict__ identity, float* out,
                                 std::int64_t total, float scale) {
    gridDependencyWait();  // the inputs come from the kernels before (PDL)
    allowDependentsToStart();
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        out[i] = (projected[i] + identity[i]) * scale;
    }
}

}  // namespace

KernelStatus launchPleCombine(const PleCombineParams& p, cudaStream_t stream) {
    if (!p.projected || !p.identity || !p.out || p.n <= 0 || p.rows <= 0) return KernelStatus::InvalidArgument;
    const std::int64_t total = p.n * p.rows;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<std::int64_t>((total + threads - 1) / threads, 4096));
    return launchStatus(launchKernel(pleCombineKernel, dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream,
                                     p.programmaticLaunch, p.projected, p.identity, p.out, total, p.scale));
}

}  // namespace gemma::cuda
