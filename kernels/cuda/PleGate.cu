// PLE gate: gate = gelu_tanh(gate) · perLayerInput, elementwise, in place, per row with strides.
// Preconditions: non-null buffers, n > 0, rows > 0, strides >= n.
// Programmatic launch (sm_90+, when asked): every thread waits for the previous kernel first.
#include "PerLayerInputs.h"

#include "CudaCommon.h"

namespace gemma::cuda {
namespace {

__global__ void pleGateKernel(float* gate, std::int64_t gateStride, const float* __restrict__ input, std::int64_t inputStride,
                              std::int64_t n) {
    gridDependencyWait();  // gate comes from the matvec before (PDL)
    allowDependentsToStart();
    const int row = blockIdx.y;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        float* g = gate + row * gateStride + i;
        *g = geluTanh(*g) * input[row * inputStride + i];
    }
}

}  // namespace

KernelStatus launchPleGate(const PleGateParams& p, cudaStream_t stream) {
    if (!p.gate || !p.perLayerInput || p.n <= 0 || p.rows <= 0 || p.gateStride < p.n || p.inputStride < p.n) {
        return KernelStatus::InvalidArgument;
    }
    const int threads = 256;
    const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((p.n + threads - 1) / threads, 1024)), static_cast<unsigned>(p.rows));
    return launchStatus(launchKernel(pleGateKernel, grid, dim3(threads), 0, stream, p.programmaticLaunch, p.gate,
                                     p.gateStride, p.perLayerInput, p.inputStride, p.n));
}

}  // namespace gemma::cuda
