// Shared by the persistent-design probes (measure_weight_stream, measure_persistent_layer;
// docs/PERFORMANCE.md version 25): a shared-memory ring filled by cp.async.bulk and paced by
// mbarriers, the host's CUDA check and the sm_90+ device check. Device helpers exist where the
// probes' kernels have bodies (sm_90+; the host pass declares them).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "CudaCommon.h"

namespace gemma::probe {

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The mbarrier and bulk-copy helpers are CudaCommon.h's (the prefill attention's raw ring uses them too).
using cuda::arrive;
using cuda::bulkCopy;
using cuda::expectBytes;
using cuda::initBarrier;
using cuda::waitParity;
// The GPU's nanosecond clock (comparable across SMs).
__device__ __forceinline__ unsigned long long globalTime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// A ring of `stages` stages, by one thread before the block's barrier: stage s is filled when
// full[s] (one arrival: the producer's, with its bytes) completes and free again when empty[s]
// (`consumers` arrivals) does; the initialization made visible to the copy engine.
__device__ __forceinline__ void initRing(std::uint64_t* full, std::uint64_t* empty, unsigned stages, unsigned consumers) {
    for (unsigned s = 0; s < stages; ++s) {
        initBarrier(&full[s], 1);
        initBarrier(&empty[s], consumers);
    }
    cuda::fenceBarrierInit();
}
#endif

// 0 when device 0 can run the probes (sm_90+), else 77 (skipped) after saying why.
inline int requireBulkCopyDevice(cudaDeviceProp& prop, const char* tool) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device: %s skipped\n", tool);
        return 77;
    }
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        std::printf("cudaGetDeviceProperties failed: %s skipped\n", tool);
        return 77;
    }
    if (prop.major < 9) {
        std::printf("%s is sm_%d%d: the bulk copies need sm_90+; %s skipped\n", prop.name, prop.major, prop.minor, tool);
        return 77;
    }
    return 0;
}

// The median ms of `reps` runs of `one` (a callable returning cudaError_t, timed by an event pair
// each) after one warm-up run; -1 when a run fails.
template <typename Run>
double medianMs(Run&& one, int reps, cudaEvent_t start, cudaEvent_t stop) {
    if (one() != cudaSuccess) return -1.0;
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        cudaEventRecord(start);
        if (one() != cudaSuccess) return -1.0;
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace gemma::probe

// A CUDA runtime call in a probe's main(): on failure, says where and returns 1.
#define PROBE_CHECK(call)                                                                         \
    do {                                                                                          \
        const cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));      \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)
