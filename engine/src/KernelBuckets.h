// Which bucket (PERF.md) each of the CUDA backend's kernels belongs to, by the kernel's plain
// function name (KernelTrace.h kernelBaseName). Plain C++: the table is checked in every build
// (KernelBucketsTest reads kernels/cuda/*.cu and asks for every __global__ function), so a new
// kernel without a bucket fails a test instead of landing silently in the wrong one.
#pragma once

#include <string_view>

#include "gemma/Engine.h"

namespace gemma {

// The bucket of a kernel, or -1 for a name the table does not know. The rules follow PERF.md's
// buckets: the q/k/v norms and RoPE belong to attention (they are fused there in the decode
// step), the residual norms folded into the matvecs belong to the matvec launch that runs them.
inline int kernelBucket(std::string_view name) {
    struct Entry {
        std::string_view name;
        Bucket bucket;
    };
    static constexpr Entry kTable[] = {
        {"fp4MatvecMmaKernel", Bucket::Fp4Matvec},
        {"fp4MatvecKernel", Bucket::Fp4Matvec},
        {"fp4DequantizeKernel", Bucket::Fp4Matvec},  // prefill: the GEMM path's weight expansion
        {"fp4TileKernel", Bucket::Fp4Matvec},        // load time: the tiled weight layout
        {"attentionSplitKernel", Bucket::Attention},
        {"attentionClusterKernel", Bucket::Attention},
        {"attentionMergeKernel", Bucket::Attention},
        {"attentionPrefillKernel", Bucket::Attention},
        {"qkvNormRopeKernel", Bucket::Attention},
        {"fp8LmHeadKernel", Bucket::LmHead},
        {"fp8LmHeadPersistentKernel", Bucket::LmHead},
        {"argmaxKernel", Bucket::Sampling},
        {"topKKernel", Bucket::Sampling},
        {"rmsNormResidualKernel", Bucket::NormElementwise},
        {"rmsNormResidualRegisterKernel", Bucket::NormElementwise},
        {"embeddingGatherKernel", Bucket::NormElementwise},
        {"gegluElementwiseKernel", Bucket::NormElementwise},
        {"pleGateKernel", Bucket::NormElementwise},
        {"pleCombineKernel", Bucket::NormElementwise},
        {"activationToBf16Kernel", Bucket::NormElementwise},
        {"streamReadKernel", Bucket::NormElementwise},  // gemma-bench's ceiling probe, never in a step
    };
    for (const auto& entry : kTable)
        if (entry.name == name) return static_cast<int>(entry.bucket);
    return -1;
}

}  // namespace gemma
