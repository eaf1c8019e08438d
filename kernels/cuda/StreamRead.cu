// Streaming read: every thread XOR-folds 16-byte non-caching loads over a grid-stride loop, four
// loads in flight per iteration, and one word per block is written. No arithmetic worth the
// name, so the kernel's time is the memory system's read time for `bytes`.
// Preconditions: data 16-byte aligned, bytes % 16 == 0, sink holds streamReadBlocks() words.
#include "StreamRead.h"

#include "CudaCommon.h"

namespace gemma::cuda {
namespace {

__global__ void __launch_bounds__(512) streamReadKernel(const uint4* __restrict__ data, std::int64_t vectors, std::uint32_t* sink) {
    std::uint32_t fold = 0;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < vectors; i += 4 * stride) {
        const uint4 a = ldgStream16(data + i);
        const uint4 b = ldgStream16(data + i + stride);
        const uint4 c = ldgStream16(data + i + 2 * stride);
        const uint4 d = ldgStream16(data + i + 3 * stride);
        fold ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < vectors; i += stride) {
        const uint4 a = ldgStream16(data + i);
        fold ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    __shared__ std::uint32_t blockFold;
    if (threadIdx.x == 0) blockFold = 0;
    __syncthreads();
    atomicXor(&blockFold, fold);
    __syncthreads();
    if (threadIdx.x == 0) sink[blockIdx.x] = blockFold;
}

}  // namespace

int streamReadBlocks(const StreamReadParams& p) {
    if (p.blocks > 0) return p.blocks;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return 0;
    return facts.smCount * 4;
}

KernelStatus launchStreamRead(const StreamReadParams& p, cudaStream_t stream) {
    if (!p.data || !p.sink || p.bytes <= 0 || p.bytes % 16 != 0 || !aligned16(p.data)) return KernelStatus::InvalidArgument;
    const int blocks = streamReadBlocks(p);
    if (blocks <= 0) return KernelStatus::LaunchFailed;
    streamReadKernel<<<blocks, 512, 0, stream>>>(static_cast<const uint4*>(p.data), p.bytes / 16, p.sink);
    return launchStatus();
}

}  // namespace gemma::cuda
