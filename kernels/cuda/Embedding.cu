// Embedding gather: out[r][c] = (e4m3(codes[id][c]) · rowScale[id]) · embedScale, id = tokenIds[r],
// each product rounded to fp32 (the first is WeightFormats' definition of a stored element).
// Token ids are read from device memory so the step can be a CUDA graph. An id outside [0, V)
// cannot be reported from the device: its row is written as NaN (visible, never an out-of-bounds
// read). One block of 256 threads per row, 4 codes per thread per step.
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
__global__ void __launch_bounds__(256) embeddingGatherKernel(
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
    for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x)
        dst[c] = (formats::e4m3ToFloat(src[c]) * scale) * embedScale;
}

}  // namespace embeddetail

// ---- host launcher ---------------------------------------------------------------------------------
KernelStatus launchEmbeddingGather(const EmbeddingParams& p, cudaStream_t stream) {
    if (!p.codes || !p.rowScales || !p.tokenIds || !p.out) return KernelStatus::InvalidArgument;
    if (p.vocab < 1 || p.hidden < 1 || p.rows < 1 || p.outStride < p.hidden)
        return KernelStatus::InvalidArgument;
    return launchStatus(launchKernel(embeddetail::embeddingGatherKernel, dim3(static_cast<unsigned>(p.rows)), dim3(256),
                                     0, stream, p.programmaticLaunch, p.codes, p.rowScales, p.vocab, p.hidden,
                                     p.tokenIds, p.embedScale, p.out, p.outStride));
}

}  // namespace gemma::cuda
