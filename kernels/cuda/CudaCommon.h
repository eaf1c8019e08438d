// Device helpers shared by the kernels in kernels/cuda: warp reductions, BF16 storage helpers,
// cp.async wrappers, and the device-property query every launcher sizes its grid from.
// Header-only (everything inline) so that a harness may #include several production .cu files.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

// ---- host: device facts ------------------------------------------------------------------------
struct DeviceFacts {
    int device = 0;
    int smCount = 0;
    int maxSharedPerBlockOptin = 0;  // bytes a block may use after cudaFuncSetAttribute
    int maxSharedPerSm = 0;
    int computeMajor = 0;            // 9 and up: programmatic dependent launch exists
};

// Cached per host thread and device: a launcher calls this on every launch, and the attribute
// queries would otherwise add host time to each one.
inline KernelStatus queryDeviceFacts(DeviceFacts& facts) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return KernelStatus::LaunchFailed;
    thread_local DeviceFacts cached{-1, 0, 0, 0, 0};
    if (cached.device == device) {
        facts = cached;
        return KernelStatus::Ok;
    }
    facts.device = device;
    if (cudaDeviceGetAttribute(&facts.smCount, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    if (cudaDeviceGetAttribute(&facts.maxSharedPerBlockOptin,
                               cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    if (cudaDeviceGetAttribute(&facts.maxSharedPerSm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                               device) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    if (cudaDeviceGetAttribute(&facts.computeMajor, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    cached = facts;
    return KernelStatus::Ok;
}

inline KernelStatus launchStatus() {
    return cudaGetLastError() == cudaSuccess ? KernelStatus::Ok : KernelStatus::LaunchFailed;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// ---- device: programmatic dependent launch (sm_90+; no-ops elsewhere) ---------------------------
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start while the
// previous kernel in the stream still runs; it must call gridDependencyWait() before it reads
// anything that kernel writes (the wait returns at once when there is no such dependency). A
// kernel calls allowDependentsToStart() to let such a successor be scheduled before it finishes
// (the successor still waits for all of its writes).
__device__ __forceinline__ void gridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allowDependentsToStart() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ---- device: reductions ------------------------------------------------------------------------
__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the block; every thread gets the result. `scratch` holds >= 32 floats of shared
// memory. Contains two __syncthreads(): call it from all threads of the block.
__device__ __forceinline__ float blockSum(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = warpSum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += scratch[w];
    return total;
}

// ---- device: BF16 storage (raw uint16 bits, as WeightFormats.h) --------------------------------
__device__ __forceinline__ float bf16LoToFloat(std::uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16HiToFloat(std::uint32_t pair) {
    return __uint_as_float(pair & 0xFFFF0000u);
}

// ---- device: cp.async (sm_80+) -----------------------------------------------------------------
// 16-byte global->shared copy; when `valid` is false the 16 shared bytes are zero-filled and the
// global address is not read.
__device__ __forceinline__ void cpAsync16(void* smem, const void* gmem, bool valid) {
    const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int srcBytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem),
                 "r"(srcBytes)
                 : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- device: streaming loads -------------------------------------------------------------------
// Weights are read exactly once per launch: bypass L1 allocation, keep L2 default.
__device__ __forceinline__ uint4 ldgStream16(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

}  // namespace gemma::cuda
